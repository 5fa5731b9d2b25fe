package wire

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The schema of docs/wire.proto, with the Go field each protobuf field is
// decoded into. TestSchemaMatchesProtoFile keeps the two in step.
type fieldSpec struct {
	num      int32
	name     string // in wire.proto
	goName   string
	typ      descriptorpb.FieldDescriptorProto_Type
	repeated bool
	msg      string // for messages
	delta    bool   // a delta-encoded sint64 list
}

type msgSpec struct {
	name   string
	goType reflect.Type
	fields []fieldSpec
}

const (
	tString  = descriptorpb.FieldDescriptorProto_TYPE_STRING
	tBytes   = descriptorpb.FieldDescriptorProto_TYPE_BYTES
	tBool    = descriptorpb.FieldDescriptorProto_TYPE_BOOL
	tUint32  = descriptorpb.FieldDescriptorProto_TYPE_UINT32
	tUint64  = descriptorpb.FieldDescriptorProto_TYPE_UINT64
	tSint32  = descriptorpb.FieldDescriptorProto_TYPE_SINT32
	tSint64  = descriptorpb.FieldDescriptorProto_TYPE_SINT64
	tFixed64 = descriptorpb.FieldDescriptorProto_TYPE_FIXED64
	tMessage = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
)

func f(num int32, name, goName string, typ descriptorpb.FieldDescriptorProto_Type) fieldSpec {
	return fieldSpec{num: num, name: name, goName: goName, typ: typ}
}

func list(s fieldSpec) fieldSpec { s.repeated = true; return s }

func sub(num int32, name, goName, msg string, repeated bool) fieldSpec {
	return fieldSpec{num: num, name: name, goName: goName, typ: tMessage, msg: msg, repeated: repeated}
}

func deltas(num int32, name, goName string) fieldSpec {
	return fieldSpec{num: num, name: name, goName: goName, typ: tSint64, repeated: true, delta: true}
}

var schema = []msgSpec{
	{"Batch", reflect.TypeFor[Batch](), []fieldSpec{
		f(1, "version", "Version", tUint32), f(2, "agent_id", "AgentID", tString), f(3, "seq", "Seq", tUint64),
		f(4, "host", "Host", tString), f(5, "sent_ms", "SentMs", tSint64), list(f(6, "metrics", "Metrics", tString)),
		sub(7, "processes", "Processes", "Process", true), sub(8, "attempts", "Attempts", "Attempt", true),
		sub(9, "memberships", "Members", "Membership", true), sub(10, "process_series", "ProcSeries", "Series", true),
		sub(11, "attempt_series", "AttemptSeries", "Series", true), sub(12, "events", "Events", "Event", true),
		sub(13, "stats", "Stats", "AgentStats", false), f(14, "key_start_offset_ms", "KeyStartOffsetMs", tSint64),
		sub(15, "profiles", "Profiles", "Profile", true)}},
	{"Process", reflect.TypeFor[Process](), []fieldSpec{
		f(1, "key", "Key", tFixed64), f(2, "pid", "PID", tSint32), f(3, "ppid", "PPID", tSint32), f(4, "start_ms", "StartMs", tSint64),
		f(5, "cmdline", "Cmdline", tString), f(6, "comm", "Comm", tString), f(7, "role", "Role", tString), f(8, "uid", "UID", tUint32),
		f(9, "user", "User", tString), f(10, "end_ms", "EndMs", tSint64), f(11, "sid", "SID", tSint32)}},
	{"Attempt", reflect.TypeFor[Attempt](), []fieldSpec{
		f(1, "attempt_id", "AttemptID", tString), f(2, "job_id", "JobID", tString), f(3, "container_id", "ContainerID", tString),
		f(4, "type", "Type", tString), f(5, "framework", "Framework", tString), f(6, "first_ms", "FirstMs", tSint64),
		f(7, "last_ms", "LastMs", tSint64), f(8, "ended", "Ended", tBool), f(9, "job_name", "JobName", tString),
		f(10, "user", "User", tString), f(11, "queue", "Queue", tString), f(12, "memory_mb", "MemoryMB", tSint64),
		f(13, "java_opts", "JavaOpts", tString), f(14, "xmx_bytes", "XmxBytes", tSint64), f(15, "streaming", "Streaming", tBool),
		f(16, "app_id", "AppID", tString), sub(17, "task_jvm_exit", "JVMExit", "ExitStatus", false),
		sub(18, "container_root_exit", "RootExit", "ExitStatus", false), sub(19, "exit_code_file", "FileExit", "ExitStatus", false),
		sub(20, "nodemanager_exit", "NMExit", "ExitStatus", false), f(21, "exit_diagnostics", "ExitDiagnostics", tString),
		f(22, "oom_kills", "OOMKills", tUint32), sub(23, "task_log", "TaskLog", "ExitStatus", false),
		f(24, "vcores", "VCores", tSint64), f(25, "cpu_doubt_ms", "CPUDoubtMs", tSint64)}},
	{"ExitStatus", reflect.TypeFor[ExitStatus](), []fieldSpec{f(1, "status", "Status", tSint32), f(2, "ms", "Ms", tSint64)}},
	{"Membership", reflect.TypeFor[Membership](), []fieldSpec{
		f(1, "process", "Process", tFixed64), f(2, "attempt_id", "AttemptID", tString), f(3, "from_ms", "FromMs", tSint64),
		f(4, "to_ms", "ToMs", tSint64), f(5, "cpu_base_ms", "CPUBaseMs", tSint64), f(6, "role", "Role", tString)}},
	{"Series", reflect.TypeFor[Series](), []fieldSpec{
		f(1, "key", "Key", tFixed64), f(2, "attempt_id", "AttemptID", tString), deltas(3, "times", "Times"),
		sub(4, "columns", "Columns", "Column", true)}},
	{"Column", reflect.TypeFor[Column](), []fieldSpec{
		f(1, "metric", "Metric", tUint32), deltas(2, "values", "Values"), f(3, "absent", "Absent", tBytes)}},
	{"Event", reflect.TypeFor[Event](), []fieldSpec{
		f(1, "ms", "Ms", tSint64), f(2, "kind", "Kind", tString), f(3, "process", "Process", tFixed64),
		f(4, "attempt_id", "AttemptID", tString), f(5, "job_id", "JobID", tString), f(6, "message", "Message", tString),
		f(7, "value", "Value", tSint64), f(8, "pid", "PID", tSint32)}},
	{"AgentStats", reflect.TypeFor[AgentStats](), []fieldSpec{
		f(1, "dropped_samples", "DroppedSamples", tUint64), f(2, "dropped_batches", "DroppedBatches", tUint64),
		f(3, "spool_bytes", "SpoolBytes", tUint64), f(4, "ticks", "Ticks", tUint64), f(5, "overruns", "Overruns", tUint64),
		f(6, "read_errors", "ReadErrors", tUint64)}},
	{"Profile", reflect.TypeFor[Profile](), []fieldSpec{
		f(1, "id", "ID", tString), f(2, "attempt_id", "AttemptID", tString), f(3, "process", "Process", tFixed64),
		f(4, "pid", "PID", tSint32), f(5, "start_ms", "StartMs", tSint64), f(6, "end_ms", "EndMs", tSint64),
		f(7, "interval_ms", "IntervalMs", tSint64), f(8, "dumps", "Dumps", tUint32), f(9, "paused_us", "PausedUs", tSint64),
		f(10, "max_pause_us", "MaxPauseUs", tSint64), f(11, "status", "Status", tString), f(12, "error", "Error", tString),
		list(f(13, "strings", "Strings", tString)), sub(14, "stacks", "Stacks", "ProfileStack", true),
		f(15, "dropped_samples", "DroppedSamples", tUint32)}},
	{"ProfileStack", reflect.TypeFor[ProfileStack](), []fieldSpec{
		f(1, "thread", "Thread", tUint32), f(2, "state", "State", tString), list(f(3, "frames", "Frames", tUint32)),
		f(4, "cpu_ns", "CPUNs", tSint64), f(5, "wait_ns", "WaitNs", tSint64), f(6, "samples", "Samples", tUint32),
		f(7, "queued_ns", "QueuedNs", tSint64)}},
	{"BatchList", reflect.TypeFor[BatchList](), []fieldSpec{sub(1, "batches", "Batches", "Batch", true)}},
}

func specOf(name string) *msgSpec {
	for i := range schema {
		if schema[i].name == name {
			return &schema[i]
		}
	}
	panic("no message " + name)
}

const protoPackage = "taskscope.wire.v1"

// fileDescriptor builds docs/wire.proto as a FileDescriptorProto.
func fileDescriptor() *descriptorpb.FileDescriptorProto {
	fd := &descriptorpb.FileDescriptorProto{Name: proto.String("wire.proto"), Package: proto.String(protoPackage), Syntax: proto.String("proto3")}
	for _, m := range schema {
		dp := &descriptorpb.DescriptorProto{Name: proto.String(m.name)}
		for _, fs := range m.fields {
			label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
			if fs.repeated {
				label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
			}
			fp := &descriptorpb.FieldDescriptorProto{Name: proto.String(fs.name), Number: proto.Int32(fs.num), Label: label.Enum(),
				Type: fs.typ.Enum(), JsonName: proto.String(jsonName(fs.name))}
			if fs.msg != "" {
				fp.TypeName = proto.String("." + protoPackage + "." + fs.msg)
			}
			dp.Field = append(dp.Field, fp)
		}
		fd.MessageType = append(fd.MessageType, dp)
	}
	return fd
}

func jsonName(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

func batchDescriptor(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	file, err := protodesc.NewFile(fileDescriptor(), nil)
	if err != nil {
		t.Fatalf("the schema is not a valid protobuf file: %v", err)
	}
	return file.Messages().ByName("Batch")
}

// toDynamic copies a Go value of the schema into a dynamic protobuf message.
func toDynamic(m protoreflect.Message, v reflect.Value) {
	spec := specOf(string(m.Descriptor().Name()))
	for _, fs := range spec.fields {
		fd := m.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(fs.num))
		gv := v.FieldByName(fs.goName)
		switch {
		case fs.typ == tMessage && fs.repeated:
			l := m.Mutable(fd).List()
			for i := 0; i < gv.Len(); i++ {
				e := l.NewElement()
				toDynamic(e.Message(), gv.Index(i))
				l.Append(e)
			}
		case fs.typ == tMessage:
			if !gv.IsZero() {
				toDynamic(m.Mutable(fd).Message(), gv)
			}
		case fs.delta:
			l := m.Mutable(fd).List()
			var prev int64
			for i := 0; i < gv.Len(); i++ {
				x := gv.Index(i).Int()
				l.Append(protoreflect.ValueOfInt64(x - prev))
				prev = x
			}
		case fs.repeated: // strings, or uint32
			l := m.Mutable(fd).List()
			for i := 0; i < gv.Len(); i++ {
				l.Append(scalarValue(fs.typ, gv.Index(i)))
			}
		case gv.IsZero():
		default:
			m.Set(fd, scalarValue(fs.typ, gv))
		}
	}
}

func scalarValue(typ descriptorpb.FieldDescriptorProto_Type, gv reflect.Value) protoreflect.Value {
	switch typ {
	case tString:
		return protoreflect.ValueOfString(gv.String())
	case tBytes:
		return protoreflect.ValueOfBytes(gv.Bytes())
	case tBool:
		return protoreflect.ValueOfBool(gv.Bool())
	case tUint32:
		return protoreflect.ValueOfUint32(uint32(gv.Uint()))
	case tUint64, tFixed64:
		return protoreflect.ValueOfUint64(gv.Uint())
	case tSint32:
		return protoreflect.ValueOfInt32(int32(gv.Int()))
	case tSint64:
		return protoreflect.ValueOfInt64(gv.Int())
	}
	panic(fmt.Sprint("type ", typ))
}

// fromDynamic copies a dynamic protobuf message into a Go value of the schema.
func fromDynamic(m protoreflect.Message, v reflect.Value) {
	spec := specOf(string(m.Descriptor().Name()))
	for _, fs := range spec.fields {
		fd := m.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(fs.num))
		gv := v.FieldByName(fs.goName)
		if !m.Has(fd) {
			continue
		}
		switch {
		case fs.typ == tMessage && fs.repeated:
			l := m.Get(fd).List()
			s := reflect.MakeSlice(gv.Type(), l.Len(), l.Len())
			for i := 0; i < l.Len(); i++ {
				fromDynamic(l.Get(i).Message(), s.Index(i))
			}
			gv.Set(s)
		case fs.typ == tMessage:
			fromDynamic(m.Get(fd).Message(), gv)
		case fs.delta:
			l := m.Get(fd).List()
			s := make([]int64, l.Len())
			var prev int64
			for i := range s {
				prev += l.Get(i).Int()
				s[i] = prev
			}
			gv.Set(reflect.ValueOf(s))
		case fs.repeated && fs.typ == tUint32:
			l := m.Get(fd).List()
			s := make([]uint32, l.Len())
			for i := range s {
				s[i] = uint32(l.Get(i).Uint())
			}
			gv.Set(reflect.ValueOf(s))
		case fs.repeated:
			l := m.Get(fd).List()
			s := make([]string, l.Len())
			for i := range s {
				s[i] = l.Get(i).String()
			}
			gv.Set(reflect.ValueOf(s))
		default:
			pv := m.Get(fd)
			switch fs.typ {
			case tString:
				gv.SetString(pv.String())
			case tBytes:
				gv.SetBytes(append([]byte(nil), pv.Bytes()...))
			case tBool:
				gv.SetBool(pv.Bool())
			case tUint32, tUint64, tFixed64:
				gv.SetUint(pv.Uint())
			case tSint32, tSint64:
				gv.SetInt(pv.Int())
			}
		}
	}
}

// TestSchemaCoversStructs: every Go field is in the schema, once.
func TestSchemaCoversStructs(t *testing.T) {
	for _, m := range schema {
		seen := map[string]bool{}
		nums := map[int32]bool{}
		for _, fs := range m.fields {
			if _, ok := m.goType.FieldByName(fs.goName); !ok {
				t.Errorf("%s.%s: no Go field %s", m.name, fs.name, fs.goName)
			}
			if seen[fs.goName] || nums[fs.num] {
				t.Errorf("%s: %s or %d twice", m.name, fs.goName, fs.num)
			}
			seen[fs.goName], nums[fs.num] = true, true
		}
		for i := 0; i < m.goType.NumField(); i++ {
			if name := m.goType.Field(i).Name; !seen[name] {
				t.Errorf("%s: Go field %s is not in the schema", m.name, name)
			}
		}
	}
}

var protoTypeNames = map[descriptorpb.FieldDescriptorProto_Type]string{tString: "string", tBytes: "bytes", tBool: "bool",
	tUint32: "uint32", tUint64: "uint64", tSint32: "sint32", tSint64: "sint64", tFixed64: "fixed64"}

// TestSchemaMatchesProtoFile: docs/wire.proto declares exactly the schema.
func TestSchemaMatchesProtoFile(t *testing.T) {
	b, err := os.ReadFile("../../docs/wire.proto")
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`//[^\n]*`).ReplaceAllString(string(b), "")
	if !strings.Contains(text, `syntax = "proto3";`) || !strings.Contains(text, "package "+protoPackage+";") {
		t.Error("wire.proto: syntax or package differ")
	}
	msgRe := regexp.MustCompile(`(?s)message (\w+) \{(.*?)\}`)
	fieldRe := regexp.MustCompile(`^\s*(repeated )?(\w+) (\w+) = (\d+);\s*$`)
	got := map[string][]string{}
	for _, m := range msgRe.FindAllStringSubmatch(text, -1) {
		for _, line := range strings.Split(m[2], "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			fm := fieldRe.FindStringSubmatch(line)
			if fm == nil {
				t.Errorf("wire.proto, message %s: cannot read %q", m[1], line)
				continue
			}
			got[m[1]] = append(got[m[1]], fm[1]+fm[2]+" "+fm[3]+" = "+fm[4])
		}
	}
	for _, m := range schema {
		var want []string
		for _, fs := range m.fields {
			typ := protoTypeNames[fs.typ]
			if fs.msg != "" {
				typ = fs.msg
			}
			rep := ""
			if fs.repeated {
				rep = "repeated "
			}
			want = append(want, fmt.Sprintf("%s%s %s = %d", rep, typ, fs.name, fs.num))
		}
		if strings.Join(got[m.name], "\n") != strings.Join(want, "\n") {
			t.Errorf("wire.proto, message %s:\n%s\nwant:\n%s", m.name, strings.Join(got[m.name], "\n"), strings.Join(want, "\n"))
		}
		delete(got, m.name)
	}
	for name := range got {
		t.Errorf("wire.proto has message %s, which the schema has not", name)
	}
}

// TestProtobufDecodesMarshal: protobuf's own decoder, given docs/wire.proto,
// reads what Marshal writes, every field, with nothing left unknown.
func TestProtobufDecodesMarshal(t *testing.T) {
	md := batchDescriptor(t)
	for name, b := range map[string]*Batch{"full": fullBatch(), "realistic": realisticBatch(50, 10), "minimal": minimalBatch()} {
		t.Run(name, func(t *testing.T) {
			dm := dynamicpb.NewMessage(md)
			if err := proto.Unmarshal(Marshal(nil, b), dm); err != nil {
				t.Fatalf("proto.Unmarshal: %v", err)
			}
			var unknown []string
			var walk func(m protoreflect.Message)
			walk = func(m protoreflect.Message) {
				if len(m.GetUnknown()) > 0 {
					unknown = append(unknown, string(m.Descriptor().Name()))
				}
				m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
					if fd.Message() != nil {
						if fd.IsList() {
							for i := 0; i < v.List().Len(); i++ {
								walk(v.List().Get(i).Message())
							}
						} else {
							walk(v.Message())
						}
					}
					return true
				})
			}
			walk(dm)
			if len(unknown) > 0 {
				t.Errorf("fields unknown to wire.proto in %v", unknown)
			}
			var got Batch
			fromDynamic(dm, reflect.ValueOf(&got).Elem())
			if !reflect.DeepEqual(&got, b) {
				t.Errorf("protobuf read:\n%+v\nwant:\n%+v", got, *b)
			}
		})
	}
}

// TestUnmarshalReadsProtobuf: Unmarshal reads what protobuf's own encoder
// writes from the schema, deterministic or not.
func TestUnmarshalReadsProtobuf(t *testing.T) {
	md := batchDescriptor(t)
	for name, b := range map[string]*Batch{"full": fullBatch(), "realistic": realisticBatch(50, 10), "minimal": minimalBatch()} {
		t.Run(name, func(t *testing.T) {
			dm := dynamicpb.NewMessage(md)
			toDynamic(dm, reflect.ValueOf(b).Elem())
			for _, opts := range []proto.MarshalOptions{{}, {Deterministic: true}} {
				data, err := opts.Marshal(dm)
				if err != nil {
					t.Fatal(err)
				}
				got, err := Unmarshal(data, DefaultLimits)
				if err != nil {
					t.Fatalf("Unmarshal of proto.Marshal: %v", err)
				}
				if !reflect.DeepEqual(got, b) {
					t.Errorf("Unmarshal of proto.Marshal:\n%+v\nwant:\n%+v", *got, *b)
				}
			}
		})
	}
}
