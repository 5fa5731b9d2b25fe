package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func TestRoundTrip(t *testing.T) {
	for name, b := range map[string]*Batch{"full": fullBatch(), "minimal": minimalBatch(), "example": exampleBatch(),
		"realistic": realisticBatch(50, 10), "empty": {}} {
		t.Run(name, func(t *testing.T) {
			data := Marshal(nil, b)
			got, err := Unmarshal(data, DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, b) {
				t.Errorf("round trip:\n got %+v\nwant %+v", *got, *b)
			}
			// Marshal appends.
			prefix := []byte("prefix")
			if again := Marshal(prefix, b); !bytes.Equal(again[len(prefix):], data) || string(again[:len(prefix)]) != "prefix" {
				t.Error("Marshal does not append to dst")
			}
		})
	}
}

// The decoded batch does not refer to the bytes it was decoded from: the
// ingest handler reads the next request into them.
func TestUnmarshalKeepsNoReference(t *testing.T) {
	for name, b := range map[string]*Batch{"full": fullBatch(), "realistic": realisticBatch(50, 10)} {
		data := Marshal(nil, b)
		got, err := Unmarshal(data, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		for i := range data {
			data[i] = 0xff
		}
		if !reflect.DeepEqual(got, b) {
			t.Errorf("%s: the batch changed with the bytes it was decoded from", name)
		}
	}
}

// TestRoundTripEdges: extreme values survive, and zero values are not written.
func TestRoundTripEdges(t *testing.T) {
	const maxI, minI = int64(1<<63 - 1), int64(-1 << 63)
	b := &Batch{Version: 1<<32 - 1, Seq: 1<<64 - 1, SentMs: minI,
		Metrics:    []string{"", "m"}, // empty names are kept in place: the indexes count
		Processes:  []Process{{Key: 1<<64 - 1, PID: -1 << 31, PPID: 1<<31 - 1, SID: -1, StartMs: maxI, UID: 1<<32 - 1}},
		ProcSeries: []Series{{Key: 1, Times: []int64{maxI, minI, 0, maxI, -1}, Columns: []Column{{Metric: 1<<32 - 1, Values: []int64{minI, maxI, minI, 0, 1}}}}},
		Events:     []Event{{Ms: -1, PID: -1 << 31, Value: minI}},
		Stats:      AgentStats{DroppedSamples: 1<<64 - 1},
	}
	got, err := Unmarshal(Marshal(nil, b), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, *b)
	}
	// Zero values take no bytes; an empty bitmap is none.
	for _, z := range []*Batch{{}, {Processes: []Process{{}}}, {ProcSeries: []Series{{Columns: []Column{{Absent: []byte{}}}}}}} {
		data := Marshal(nil, z)
		got, err := Unmarshal(data, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if len(z.ProcSeries) == 1 {
			z.ProcSeries[0].Columns[0].Absent = nil
		}
		if !reflect.DeepEqual(got, z) {
			t.Errorf("%+v round trip: got %+v", *z, *got)
		}
	}
	if n := len(Marshal(nil, &Batch{})); n != 0 {
		t.Errorf("empty batch: %d bytes", n)
	}
	if n := len(Marshal(nil, &Batch{Processes: []Process{{}}})); n != 2 {
		t.Errorf("batch of one zero process: %d bytes, want 2 (tag and length)", n)
	}
}

// TestLongMessages: sub-messages longer than 127 and 16383 bytes need 2
// and 3 bytes of length, which Marshal makes room for after the fact.
func TestLongMessages(t *testing.T) {
	for _, n := range []int{0, 1, 120, 127, 128, 300, 16383, 16384, 1 << 20} {
		b := &Batch{Processes: []Process{{Key: 1, PID: 1, Cmdline: strings.Repeat("x", n)}}, Events: []Event{{Ms: 5, Kind: "k"}}}
		got, err := Unmarshal(Marshal(nil, b), Limits{MaxStringBytes: 2 << 20, MaxMetrics: 1, MaxRecords: 10, MaxPoints: 10})
		if err != nil || !reflect.DeepEqual(got, b) {
			t.Errorf("cmdline of %d bytes: %v", n, err)
		}
	}
}

// TestExampleGolden pins the bytes of the worked example (go test -update
// rewrites testdata/example.hex) and checks that docs/wire.md shows them.
func TestExampleGolden(t *testing.T) {
	data := Marshal(nil, exampleBatch())
	dump := annotate(t, data)
	if *update {
		if err := os.WriteFile("testdata/example.txt", []byte(dump), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/example.txt")
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if dump != string(want) {
		t.Errorf("the example encodes differently:\n%s\nwant:\n%s", dump, want)
	}
	doc, err := os.ReadFile("../../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, want) {
		t.Error("docs/wire.md does not show testdata/example.txt")
	}
	if !bytes.Contains(doc, []byte(hex.EncodeToString(data))) {
		t.Error("docs/wire.md does not show the example's hex")
	}
}

// annotate dumps a batch field by field, with the schema's names.
func annotate(t *testing.T, data []byte) string {
	var b strings.Builder
	var walk func(data []byte, msg string, depth int)
	walk = func(data []byte, msg string, depth int) {
		spec := specOf(msg)
		for len(data) > 0 {
			n, typ, l := protowire.ConsumeTag(data)
			if l < 0 {
				t.Fatalf("annotate: bad tag")
			}
			tag := data[:l]
			data = data[l:]
			var fs *fieldSpec
			for i := range spec.fields {
				if spec.fields[i].num == int32(n) {
					fs = &spec.fields[i]
				}
			}
			if fs == nil {
				t.Fatalf("annotate: %s has no field %d", msg, n)
			}
			ind := strings.Repeat("  ", depth)
			switch typ {
			case protowire.VarintType:
				v, l := protowire.ConsumeVarint(data)
				val := fmt.Sprint(v)
				if fs.typ == tSint32 || fs.typ == tSint64 {
					val = fmt.Sprintf("%d (zigzag %d)", protowire.DecodeZigZag(v), v)
				}
				fmt.Fprintf(&b, "%-24s %s%s = %s\n", hex.EncodeToString(tag)+" "+hex.EncodeToString(data[:l]), ind, fs.name, val)
				data = data[l:]
			case protowire.Fixed64Type:
				v, l := protowire.ConsumeFixed64(data)
				fmt.Fprintf(&b, "%-24s %s%s = %#016x\n", hex.EncodeToString(tag)+" "+hex.EncodeToString(data[:l]), ind, fs.name, v)
				data = data[l:]
			case protowire.BytesType:
				v, l := protowire.ConsumeBytes(data)
				head := hex.EncodeToString(tag) + " " + hex.EncodeToString(data[:l-len(v)])
				switch {
				case fs.typ == tMessage:
					fmt.Fprintf(&b, "%-24s %s%s {  (%d bytes)\n", head, ind, fs.name, len(v))
					walk(v, fs.msg, depth+1)
					fmt.Fprintf(&b, "%-24s %s}\n", "", ind)
				case fs.delta:
					var vals, abs []string
					var prev int64
					for rest := v; len(rest) > 0; {
						x, l := protowire.ConsumeVarint(rest)
						rest = rest[l:]
						prev += protowire.DecodeZigZag(x)
						vals = append(vals, fmt.Sprint(protowire.DecodeZigZag(x)))
						abs = append(abs, fmt.Sprint(prev))
					}
					fmt.Fprintf(&b, "%-24s %s%s = packed deltas [%s] = [%s]\n", head+" "+hex.EncodeToString(v), ind, fs.name,
						strings.Join(vals, " "), strings.Join(abs, " "))
				case fs.typ == tBytes:
					fmt.Fprintf(&b, "%-24s %s%s = bytes %x\n", head+" "+hex.EncodeToString(v), ind, fs.name, v)
				default: // a string: its bytes are its UTF-8
					fmt.Fprintf(&b, "%-24s %s%s = %q\n", head, ind, fs.name, v)
				}
				data = data[l:]
			default:
				t.Fatalf("annotate: wire type %d", typ)
			}
		}
	}
	walk(data, "Batch", 0)
	return b.String()
}

// path of sub-message fields from a Batch to each message.
var msgPath = map[string][]protowire.Number{"Batch": nil, "Process": {7}, "Attempt": {8}, "Membership": {9},
	"Series": {10}, "Column": {10, 4}, "Event": {12}, "AgentStats": {13}, "ExitStatus": {8, 17},
	"Profile": {15}, "ProfileStack": {15, 14}}

// wrap nests body in the sub-message fields of path.
func wrap(body []byte, path []protowire.Number) []byte {
	for i := len(path) - 1; i >= 0; i-- {
		body = protowire.AppendBytes(protowire.AppendTag(nil, path[i], protowire.BytesType), body)
	}
	return body
}

func fieldOf(n protowire.Number, typ protowire.Type) []byte {
	b := protowire.AppendTag(nil, n, typ)
	switch typ {
	case protowire.VarintType:
		return protowire.AppendVarint(b, 1)
	case protowire.Fixed64Type:
		return protowire.AppendFixed64(b, 1)
	case protowire.Fixed32Type:
		return protowire.AppendFixed32(b, 1)
	case protowire.BytesType:
		return protowire.AppendString(b, "x")
	case protowire.StartGroupType:
		return protowire.AppendTag(b, n, protowire.EndGroupType)
	}
	panic(typ)
}

// TestWrongWireTypes: a known field of any other wire type than the
// schema's is an error naming the field.
func TestWrongWireTypes(t *testing.T) {
	all := []protowire.Type{protowire.VarintType, protowire.Fixed64Type, protowire.Fixed32Type, protowire.BytesType, protowire.StartGroupType}
	for _, m := range schema {
		if m.name == "BatchList" {
			continue // not within a batch: SplitList's (TestSplitListRejects)
		}
		for _, fs := range m.fields {
			var ok []protowire.Type
			switch {
			case fs.delta, fs.repeated && fs.typ == tUint32:
				ok = []protowire.Type{protowire.BytesType, protowire.VarintType} // packed, or one element
			case fs.typ == tString || fs.typ == tBytes || fs.typ == tMessage:
				ok = []protowire.Type{protowire.BytesType}
			case fs.typ == tFixed64:
				ok = []protowire.Type{protowire.Fixed64Type}
			default:
				ok = []protowire.Type{protowire.VarintType}
			}
			for _, typ := range all {
				data := wrap(fieldOf(protowire.Number(fs.num), typ), msgPath[m.name])
				_, err := Unmarshal(data, DefaultLimits)
				accepted := false
				for _, o := range ok {
					accepted = accepted || o == typ
				}
				if accepted {
					if err != nil && fs.typ != tMessage {
						t.Errorf("%s.%s as wire type %d: %v", m.name, fs.name, typ, err)
					}
					continue
				}
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), fmt.Sprintf("field %d", fs.num)) {
					t.Errorf("%s.%s as wire type %d: %v, want a malformed error naming field %d", m.name, fs.name, typ, err, fs.num)
				}
			}
		}
	}
}

// TestUnknownFields are skipped, of every wire type, at every level.
func TestUnknownFields(t *testing.T) {
	b := fullBatch()
	var extra []byte
	for _, typ := range []protowire.Type{protowire.VarintType, protowire.Fixed64Type, protowire.Fixed32Type, protowire.BytesType, protowire.StartGroupType} {
		extra = append(extra, fieldOf(protowire.Number(100+int(typ)), typ)...)
	}
	// A group with content.
	extra = protowire.AppendTag(extra, 200, protowire.StartGroupType)
	extra = append(extra, fieldOf(1, protowire.VarintType)...)
	extra = protowire.AppendTag(extra, 200, protowire.EndGroupType)
	for name, path := range msgPath {
		data := append(Marshal(nil, b), wrap(extra, path)...)
		got, err := Unmarshal(data, DefaultLimits)
		if err != nil {
			t.Errorf("unknown fields in %s: %v", name, err)
			continue
		}
		// The wrapper adds an empty record where the path is not empty.
		if name == "Batch" && !reflect.DeepEqual(got, b) {
			t.Errorf("unknown fields changed the batch")
		}
	}
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		msg  string
	}{
		{"truncated tag", []byte{0x80}, "unexpected end of data"},
		{"field number 0", []byte{0x00, 0x01}, "invalid field number"},
		{"truncated varint", []byte{0x08, 0x80}, "field 1: unexpected end of data"},
		{"truncated fixed64", []byte{0x39, 1, 2, 3}, "field 7: unexpected end of data"},
		{"truncated fixed32", []byte{0x3d, 1, 2}, "field 7: unexpected end of data"},
		{"length beyond the end", []byte{0x12, 0x05, 'a'}, "field 2: unexpected end of data"},
		{"lone end group", protowire.AppendTag(nil, 20, protowire.EndGroupType), "field 20: end group without start group"},
		{"unterminated group", protowire.AppendTag(nil, 20, protowire.StartGroupType), "field 20: unexpected end of data"},
		{"reserved wire type", []byte{0x0e}, "field 1: reserved wire type"},
		{"varint of 11 bytes", append([]byte{0x08}, bytes.Repeat([]byte{0xff}, 10)...), "field 1: varint longer than 10 bytes"},
		{"version beyond 32 bits", protowire.AppendVarint([]byte{0x08}, 1<<32), "version 4294967296 out of range"},
		{"uid beyond 32 bits", wrap(protowire.AppendVarint([]byte{0x40}, 1<<32), msgPath["Process"]), "uid 4294967296 out of range"},
		{"pid beyond 32 bits", wrap(protowire.AppendVarint([]byte{0x10}, protowire.EncodeZigZag(1<<31)), msgPath["Process"]), "value 2147483648 does not fit 32 bits"},
		{"event pid below 32 bits", wrap(protowire.AppendVarint([]byte{0x40}, protowire.EncodeZigZag(-1<<31-1)), msgPath["Event"]), "does not fit 32 bits"},
		{"metric index beyond 32 bits", wrap(protowire.AppendVarint([]byte{0x08}, 1<<32), msgPath["Column"]), "metric index 4294967296 out of range"},
		{"truncated packed times", wrap([]byte{0x1a, 0x02, 0x02, 0x80}, msgPath["Series"]), "field 3: unexpected end of data"},
		{"truncated sub-message", wrap([]byte{0x2a, 0x05, 'a'}, msgPath["Process"]), "field 5: unexpected end of data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Unmarshal(tc.data, DefaultLimits)
			if err == nil {
				t.Fatalf("no error; got %+v", *b)
			}
			if b != nil {
				t.Error("a batch with the error")
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q, want ErrMalformed with %q", err, tc.msg)
			}
		})
	}
}

// TestTruncation: no prefix of a batch decodes to the whole batch, and
// a cut inside a field is an error.
func TestTruncation(t *testing.T) {
	b := fullBatch()
	data := Marshal(nil, b)
	// Where the top-level fields end: cuts there decode (to less).
	ends := map[int]bool{0: true}
	for rest, off := data, 0; len(rest) > 0; {
		_, _, l := protowire.ConsumeField(rest)
		off += l
		rest = rest[l:]
		ends[off] = true
	}
	for i := 0; i < len(data); i++ {
		got, err := Unmarshal(data[:i], DefaultLimits)
		if ends[i] {
			if err != nil {
				t.Errorf("cut at field boundary %d: %v", i, err)
			} else if reflect.DeepEqual(got, b) {
				t.Errorf("cut at %d decodes to the whole batch", i)
			}
			continue
		}
		if err == nil {
			t.Errorf("cut at %d of %d (inside a field) decoded", i, len(data))
		}
	}
}

func TestLimits(t *testing.T) {
	b := realisticBatch(3, 10) // 3 processes, 3 memberships, 1 attempt, 3 series, 1 event: 11 records
	data := Marshal(nil, b)
	points := 3*10 + 3*25*10 + 3*2 // times, values, absent bytes (pss: 2 bytes per series)
	tests := []struct {
		name string
		lim  Limits
		msg  string
	}{
		{"strings", Limits{MaxStringBytes: 100, MaxMetrics: 256, MaxRecords: 100, MaxPoints: 1 << 20}, "string of 179 bytes exceeds the limit of 100"},
		{"metrics", Limits{MaxStringBytes: 1 << 10, MaxMetrics: 24, MaxRecords: 100, MaxPoints: 1 << 20}, "more than 24 metrics"},
		{"records", Limits{MaxStringBytes: 1 << 10, MaxMetrics: 256, MaxRecords: 10, MaxPoints: 1 << 20}, "more than 10 records"},
		{"points", Limits{MaxStringBytes: 1 << 10, MaxMetrics: 256, MaxRecords: 100, MaxPoints: points - 1}, fmt.Sprintf("more than %d points", points-1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal(data, tc.lim)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v, want %q", err, tc.msg)
			}
		})
	}
	exact := Limits{MaxStringBytes: 179, MaxMetrics: 25, MaxRecords: 11, MaxPoints: points}
	if _, err := Unmarshal(data, exact); err != nil {
		t.Errorf("at the limits exactly: %v", err)
	}
	// Points count however they come: packed, one per field, or in the bitmap.
	one := wrap(append(fieldOf(3, protowire.VarintType), fieldOf(3, protowire.VarintType)...), msgPath["Series"])
	if _, err := Unmarshal(one, Limits{MaxMetrics: 2, MaxRecords: 1, MaxPoints: 1}); err == nil || !strings.Contains(err.Error(), "more than 1 points") {
		t.Errorf("unpacked points over the limit: %v", err)
	}
	abs := wrap(protowire.AppendBytes([]byte{0x1a}, make([]byte, 5)), msgPath["Column"])
	if _, err := Unmarshal(abs, Limits{MaxMetrics: 2, MaxRecords: 1, MaxPoints: 4}); err == nil || !strings.Contains(err.Error(), "more than 4 points") {
		t.Errorf("absent bytes over the limit: %v", err)
	}
	// A huge claimed count of values is refused before anything is allocated.
	huge := wrap(protowire.AppendBytes([]byte{0x12}, make([]byte, 1<<20)), msgPath["Column"])
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Unmarshal(huge, Limits{MaxRecords: 10, MaxPoints: 1000}); err == nil {
		t.Fatal("no error")
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("refusing 1M points allocated %d bytes", n)
	}
}

// TestDeltaForms: the values of a repeated sint64 may come packed in
// several runs or one per field, and the deltas run on across them.
func TestDeltaForms(t *testing.T) {
	var col []byte
	col = protowire.AppendTag(col, 2, protowire.BytesType)
	col = protowire.AppendBytes(col, protowire.AppendVarint(protowire.AppendVarint(nil, protowire.EncodeZigZag(100)), protowire.EncodeZigZag(5)))
	col = protowire.AppendTag(col, 2, protowire.VarintType)
	col = protowire.AppendVarint(col, protowire.EncodeZigZag(-10))
	col = protowire.AppendTag(col, 2, protowire.BytesType)
	col = protowire.AppendBytes(col, protowire.AppendVarint(nil, protowire.EncodeZigZag(1)))
	col = protowire.AppendTag(col, 2, protowire.BytesType)
	col = protowire.AppendBytes(col, nil) // an empty run
	got, err := Unmarshal(wrap(col, msgPath["Column"]), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if v := got.ProcSeries[0].Columns[0].Values; !reflect.DeepEqual(v, []int64{100, 105, 95, 96}) {
		t.Errorf("values %v, want [100 105 95 96]", v)
	}
	// Repeated scalars: the last wins; a second stats message merges.
	var data []byte
	data = append(data, fieldOf(fBatchSeq, protowire.VarintType)...)
	data = protowire.AppendVarint(protowire.AppendTag(data, fBatchSeq, protowire.VarintType), 7)
	data = append(data, wrap(fieldOf(1, protowire.VarintType), msgPath["AgentStats"])...)
	data = append(data, wrap(protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 9), msgPath["AgentStats"])...)
	got, err = Unmarshal(data, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 7 || got.Stats != (AgentStats{DroppedSamples: 1, Ticks: 9}) {
		t.Errorf("seq %d stats %+v", got.Seq, got.Stats)
	}
}

func TestMarshalDoesNotAllocate(t *testing.T) {
	b := realisticBatch(50, 10)
	buf := Marshal(nil, b)
	n := testing.AllocsPerRun(20, func() { buf = Marshal(buf[:0], b) })
	if n != 0 {
		t.Errorf("Marshal into a large enough buffer: %v allocs, want 0", n)
	}
}

// TestReserve: what Limits.Reserve is asked for bounds what Unmarshal
// allocates, for a real batch and for bodies built to make the decoder
// allocate most per byte (empty records, empty columns, one point per
// field); and a refusal stops decoding.
func TestReserve(t *testing.T) {
	repeat := func(field []byte, n int) []byte {
		var out []byte
		for range n {
			out = append(out, field...)
		}
		return out
	}
	emptyColumn := protowire.AppendBytes([]byte{0x22}, nil)                              // columns {}
	series := repeat(protowire.AppendBytes([]byte{0x52}, repeat(emptyColumn, 256)), 400) // process_series { columns{} × 256 } × 400
	onePerField := protowire.AppendBytes([]byte{0x52}, repeat([]byte{0x18, 2}, 1<<18))   // times as 262,144 varint fields
	bodies := map[string][]byte{
		"real":          Marshal(nil, realisticBatch(50, 10)),
		"empty records": repeat([]byte{0x3a, 0}, 200_000), // processes {} × 200,000
		"empty columns": series,
		"one per field": onePerField,
		"strings":       repeat(protowire.AppendBytes([]byte{0x32}, []byte("m")), 200), // metrics "m" × 200
	}
	for name, data := range bodies {
		t.Run(name, func(t *testing.T) {
			var reserved int64
			lim := DefaultLimits
			lim.Reserve = func(n int64) error { reserved += n; return nil }
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Unmarshal(data, lim)
			runtime.ReadMemStats(&after)
			alloc := int64(after.TotalAlloc - before.TotalAlloc)
			t.Logf("%d bytes: %d allocated, %d reserved (%v)", len(data), alloc, reserved, err)
			if alloc > reserved+reserved/32+64<<10 { // the allocator rounds up
				t.Errorf("allocated %d bytes, reserved %d", alloc, reserved)
			}
		})
	}
	stop := errors.New("no more")
	lim := DefaultLimits
	var reserved int64
	lim.Reserve = func(n int64) error {
		if reserved+n > 1<<20 {
			return stop
		}
		reserved += n
		return nil
	}
	if _, err := Unmarshal(bodies["empty records"], lim); !errors.Is(err, stop) {
		t.Errorf("a refused reservation: %v", err)
	}
}

// TestReserveReleased: once a batch is decoded, what was reserved beyond
// what it takes is given back (Limits.Release): a small batch holds less
// than one ReserveStep, and still no less than it keeps alive; and it is
// moved out of the decoder's buffers (compact), so that it holds about
// what it keeps alive, less than decoding allocated.
func TestReserveReleased(t *testing.T) {
	data := Marshal(nil, realisticBatch(5, 10))
	const n = 200 // (batches kept at once: the heap's growth over them)
	var reserved, released int64
	lim := DefaultLimits
	lim.Reserve = func(n int64) error { reserved += n; return nil }
	lim.Release = func(n int64) { released += n }
	bs := make([]*Batch, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range bs {
		b, err := Unmarshal(data, lim)
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(bs)
	alloc, live, held := int64(after.TotalAlloc-before.TotalAlloc)/n, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/n,
		(reserved-released)/n
	t.Logf("%d bytes a batch: %d allocated, %d kept alive, %d reserved, %d given back", len(data), alloc, live, reserved/n, released/n)
	if reserved/n < ReserveStep || held <= 0 || held >= ReserveStep/4 {
		t.Errorf("reserved %d, given back %d: holds %d", reserved/n, released/n, held)
	}
	if live > held+held/32+1<<10 { // the allocator rounds up
		t.Errorf("keeps %d bytes alive, holds %d", live, held)
	}
	if held > live+live/4 {
		t.Errorf("holds %d bytes, keeps %d alive: not compacted", held, live)
	}
	if alloc > 2*held { // (1.2 × here, 1.8 × with -race, whose pools drop a quarter of what they are given; 3.5 × without them)
		t.Errorf("allocated %d bytes a batch, holds %d: the decoder's slabs not used again", alloc, held)
	}
}

// TestDecodedBatchesKept: a batch decoded is not changed by the batches
// decoded after it (the decoder's slabs, used again once a batch is moved
// out of them: compact), whether they are kept or dropped.
func TestDecodedBatchesKept(t *testing.T) {
	var datas [][]byte
	var kept []*Batch
	for i := range 40 {
		b := realisticBatch(1+i%7, 2+i%11)
		b.Seq = uint64(i + 1)
		for j := range b.ProcSeries {
			for k := range b.ProcSeries[j].Columns {
				for v := range b.ProcSeries[j].Columns[k].Values {
					b.ProcSeries[j].Columns[k].Values[v] += int64(i * 1000)
				}
			}
		}
		data := Marshal(nil, b)
		got, err := Unmarshal(data, DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 != 2 { // (some dropped at once)
			datas, kept = append(datas, data), append(kept, got)
		}
		if _, err := Unmarshal(data[:len(data)/2], DefaultLimits); err == nil { // (a broken one among them)
			t.Fatal("half a batch decoded")
		}
	}
	for i, b := range kept {
		if again := Marshal(nil, b); !bytes.Equal(again, datas[i]) {
			t.Errorf("batch %d changed after the batches decoded after it", i)
		}
	}
}

// TestPeekID: agent_id and seq are read from a batch however broken the rest.
func TestPeekID(t *testing.T) {
	data := Marshal(nil, realisticBatch(3, 5))
	want, _ := Unmarshal(data, DefaultLimits)
	for _, c := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"whole", data, true},
		{"cut", data[:len(data)-7], true},
		{"garbage after", append(append([]byte(nil), data[:40]...), 0xff, 0xff, 0xff), true},
		{"no seq", data[:12], false},
		{"nothing", nil, false},
		{"garbage", []byte{0xff, 0xff, 0xff}, false},
	} {
		agent, seq, ok := PeekID(c.data)
		if ok != c.ok || ok && (agent != want.AgentID || seq != want.Seq) {
			t.Errorf("%s: %q %d %v, want %q %d %v", c.name, agent, seq, ok, want.AgentID, want.Seq, c.ok)
		}
	}
}

// FuzzPeekID: never panics; what it finds in a batch that decodes is what
// decoding finds.
func FuzzPeekID(f *testing.F) {
	f.Add(Marshal(nil, realisticBatch(1, 2)))
	f.Add([]byte{0x12, 0x01, 'a', 0x18, 0x05})
	f.Fuzz(func(t *testing.T, data []byte) {
		agent, seq, ok := PeekID(data)
		if b, err := Unmarshal(data, DefaultLimits); err == nil && ok && (b.AgentID != agent || b.Seq != seq) {
			t.Fatalf("PeekID %q %d, Unmarshal %q %d", agent, seq, b.AgentID, b.Seq)
		}
	})
}

// A profile is stored as its own message: MarshalProfile and
// UnmarshalProfile agree, and a profile decodes within its bounds.
func TestProfileRoundTrip(t *testing.T) {
	p := exampleProfile(ProcessKey(exHost, 4243, t0+1500))
	got, err := UnmarshalProfile(MarshalProfile(nil, &p), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, &p) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", *got, p)
	}
	if err := ValidateProfile(got); err != nil {
		t.Error(err)
	}
	lim := DefaultLimits
	lim.MaxPoints = 2
	if _, err := UnmarshalProfile(MarshalProfile(nil, &p), lim); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "more than 2 points") {
		t.Errorf("frames beyond the points: %v", err)
	}
}
