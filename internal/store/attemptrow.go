package store

import "github.com/taskscope/taskscope/internal/wire"

// An attempt's stored row, declared once (the way prometheus'
// tsdb/record declares each record): AttemptFields name each field, its
// kind, where its value is in an AttemptRow, and how a description's value
// of it merges into the one so far. Both backends derive from them their
// tables' columns (DDL), their insert and select lists, their scans and
// their migrations (a column a table lacks is added); MergeAttempt merges
// by them. A field added to an attempt is a row here (and its place in
// wire.Attempt or AttemptSummary); each backend's test of its live tables
// (TestAttemptColumns) checks them against these.

// FieldKind is the kind of a stored field's values.
type FieldKind int

// The kinds of stored fields.
const (
	FieldString FieldKind = iota
	FieldInt64
	FieldInt32
	FieldUInt32
	FieldBool
	FieldFloat64
)

// MergeRule is how a description's value of a field merges into the
// attempt's so far (MergeAttempt).
type MergeRule int

// The merge rules. A field whose value the new description leaves zero
// keeps the one so far under every rule but MergeWith.
const (
	// MergeLater: the later description's value (the default).
	MergeLater MergeRule = iota
	// MergeFirst: the first said stays (an attempt's job never changes).
	MergeFirst
	// MergeMin: the smallest said (its first sighting).
	MergeMin
	// MergeMax: the largest said (its last sighting; counts that only
	// grow).
	MergeMax
	// MergeOr: once true, true (ended, Streaming).
	MergeOr
	// MergeWith: the later description's value when it says the field
	// With names (an exit status goes with its _ms: seen, it replaces the
	// one before; not seen, it erases nothing).
	MergeWith
	// MergeNone: not a description's field: the summary's (MergeSummary)
	// or the row's.
	MergeNone
)

// AttemptRow is what is stored of an attempt: its description as merged,
// the host it runs on, its summary, and the count of its member
// processes.
type AttemptRow struct {
	Meta   wire.Attempt
	Host   string
	Sum    AttemptSummary
	NProcs uint32
}

// AttemptField is one stored field of an attempt.
type AttemptField struct {
	Name string // its column's
	Kind FieldKind
	// Key is the attempt's id: its row's key. Required: never empty in a
	// stored row (NOT NULL where a backend says it).
	Key, Required bool
	// Opt: its zero says nothing (a time not seen, a name not said): NULL
	// where a backend has NULLs, and read back as zero. With a With, it is
	// NULL when the field With names is zero.
	Opt bool
	// Few: few distinct values (hosts, types, users: ClickHouse's
	// LowCardinality). Repeats: values that repeat from attempt to attempt
	// (a job's, a host's): a read shares one string among the rows.
	Few, Repeats bool
	// Desc: a field of a description as an agent sends it (wire.Attempt),
	// merged by Merge into the one so far; the embedded store logs each
	// description as sent (attempt_log) with these.
	Desc  bool
	Merge MergeRule
	With  string // MergeWith, Opt: the field whose being said decides
	// Weak (MergeLater): a value that replaces nothing but the zero (a
	// framework "unknown").
	Weak string
	// Derived: made of the others when written (first_ms, last_ms:
	// AttemptSpan, which queries select and order by), not read back.
	Derived bool
	// Ref is its value in a row: a *string, *int64, *int32, *uint32, *bool
	// or *float64 (a derived field's: a pointer to a copy).
	Ref func(r *AttemptRow) any
	// meta is a description field's place in a wire.Attempt (Ref's in
	// Meta).
	meta func(m *wire.Attempt) any
}

// AttemptFields are the stored fields of an attempt, in the order of
// their columns.
var AttemptFields = []AttemptField{
	desc("attempt_id", FieldString, func(m *wire.Attempt) any { return &m.AttemptID }, key()),
	desc("job_id", FieldString, func(m *wire.Attempt) any { return &m.JobID }, required(), repeats(), merge(MergeFirst)),
	row("host", FieldString, func(r *AttemptRow) any { return &r.Host }, opt(), few()),
	desc("container_id", FieldString, func(m *wire.Attempt) any { return &m.ContainerID }, opt()),
	desc("app_id", FieldString, func(m *wire.Attempt) any { return &m.AppID }, opt(), repeats()),
	desc("type", FieldString, func(m *wire.Attempt) any { return &m.Type }, opt(), few()),
	desc("framework", FieldString, func(m *wire.Attempt) any { return &m.Framework }, opt(), few(), weak("unknown")),
	desc("meta_first_ms", FieldInt64, func(m *wire.Attempt) any { return &m.FirstMs }, opt(), merge(MergeMin)),
	desc("meta_last_ms", FieldInt64, func(m *wire.Attempt) any { return &m.LastMs }, opt(), merge(MergeMax)),
	row("first_ms", FieldInt64, func(r *AttemptRow) any { f, _ := AttemptSpan(&r.Meta, &r.Sum); return &f }, opt(), derived()),
	row("last_ms", FieldInt64, func(r *AttemptRow) any { _, l := AttemptSpan(&r.Meta, &r.Sum); return &l }, opt(), derived()),
	desc("ended", FieldBool, func(m *wire.Attempt) any { return &m.Ended }, merge(MergeOr)),
	desc("job_name", FieldString, func(m *wire.Attempt) any { return &m.JobName }, opt(), repeats()),
	desc("user_name", FieldString, func(m *wire.Attempt) any { return &m.User }, opt(), few()),
	desc("queue", FieldString, func(m *wire.Attempt) any { return &m.Queue }, opt(), few()),
	desc("memory_mb", FieldInt64, func(m *wire.Attempt) any { return &m.MemoryMB }, opt()),
	desc("vcores", FieldInt64, func(m *wire.Attempt) any { return &m.VCores }, opt()),
	desc("java_opts", FieldString, func(m *wire.Attempt) any { return &m.JavaOpts }, opt(), repeats()),
	desc("xmx_bytes", FieldInt64, func(m *wire.Attempt) any { return &m.XmxBytes }, opt()),
	desc("streaming", FieldBool, func(m *wire.Attempt) any { return &m.Streaming }, merge(MergeOr)),
	sum("cpu_ms", FieldInt64, func(s *AttemptSummary) any { return &s.CPUMs }),
	sum("peak_rss", FieldInt64, func(s *AttemptSummary) any { return &s.PeakRSS }),
	sum("peak_pss", FieldInt64, func(s *AttemptSummary) any { return &s.PeakPSS }),
	sum("peak_vms", FieldInt64, func(s *AttemptSummary) any { return &s.PeakVMS }),
	sum("peak_heap", FieldInt64, func(s *AttemptSummary) any { return &s.PeakHeap }),
	sum("read_bytes", FieldInt64, func(s *AttemptSummary) any { return &s.ReadBytes }),
	sum("write_bytes", FieldInt64, func(s *AttemptSummary) any { return &s.WriteBytes }),
	sum("gc_time_ms", FieldInt64, func(s *AttemptSummary) any { return &s.GCTimeMs }),
	sum("sched_wait_ms", FieldInt64, func(s *AttemptSummary) any { return &s.SchedWaitMs }),
	sum("rss_byte_ms", FieldFloat64, func(s *AttemptSummary) any { return &s.RSSByteMs }),
	sum("sum_first_ms", FieldInt64, func(s *AttemptSummary) any { return &s.FirstMs }, opt()),
	sum("sum_last_ms", FieldInt64, func(s *AttemptSummary) any { return &s.LastMs }, opt()),
	sum("first_rss", FieldInt64, func(s *AttemptSummary) any { return &s.FirstRSS }),
	sum("last_rss", FieldInt64, func(s *AttemptSummary) any { return &s.LastRSS }),
	row("processes", FieldUInt32, func(r *AttemptRow) any { return &r.NProcs }),
	exitStatus("exit_jvm", func(m *wire.Attempt) *wire.ExitStatus { return &m.JVMExit }),
	exitMs("exit_jvm_ms", func(m *wire.Attempt) *wire.ExitStatus { return &m.JVMExit }),
	exitStatus("exit_root", func(m *wire.Attempt) *wire.ExitStatus { return &m.RootExit }),
	exitMs("exit_root_ms", func(m *wire.Attempt) *wire.ExitStatus { return &m.RootExit }),
	exitStatus("exit_file", func(m *wire.Attempt) *wire.ExitStatus { return &m.FileExit }),
	exitMs("exit_file_ms", func(m *wire.Attempt) *wire.ExitStatus { return &m.FileExit }),
	exitStatus("exit_nm", func(m *wire.Attempt) *wire.ExitStatus { return &m.NMExit }),
	exitMs("exit_nm_ms", func(m *wire.Attempt) *wire.ExitStatus { return &m.NMExit }),
	desc("exit_diag", FieldString, func(m *wire.Attempt) any { return &m.ExitDiagnostics }, opt()),
	desc("oom_kills", FieldUInt32, func(m *wire.Attempt) any { return &m.OOMKills }, merge(MergeMax)),
	exitStatus("exit_log", func(m *wire.Attempt) *wire.ExitStatus { return &m.TaskLog }),
	exitMs("exit_log_ms", func(m *wire.Attempt) *wire.ExitStatus { return &m.TaskLog }),
	// Its CPU is an estimate (a reaper's cutime split by a guess) and may
	// be off by this much: only grows.
	desc("cpu_doubt_ms", FieldInt64, func(m *wire.Attempt) any { return &m.CPUDoubtMs }, opt(), merge(MergeMax)),
}

// The declarations' parts.

type fieldOpt func(f *AttemptField)

func key() fieldOpt                               { return func(f *AttemptField) { f.Key, f.Required = true, true } }
func required() fieldOpt                          { return func(f *AttemptField) { f.Required = true } }
func opt() fieldOpt                               { return func(f *AttemptField) { f.Opt = true } }
func few() fieldOpt                               { return func(f *AttemptField) { f.Few, f.Repeats = true, true } }
func repeats() fieldOpt                           { return func(f *AttemptField) { f.Repeats = true } }
func merge(r MergeRule) fieldOpt                  { return func(f *AttemptField) { f.Merge = r } }
func weak(v string) fieldOpt                      { return func(f *AttemptField) { f.Weak = v } }
func derived() fieldOpt                           { return func(f *AttemptField) { f.Derived = true } }
func with(name string) fieldOpt                   { return func(f *AttemptField) { f.With = name } }
func field(name string, k FieldKind) AttemptField { return AttemptField{Name: name, Kind: k} }

func apply(f AttemptField, opts []fieldOpt) AttemptField {
	for _, o := range opts {
		o(&f)
	}
	return f
}

// desc is a field of a description (wire.Attempt).
func desc(name string, k FieldKind, at func(m *wire.Attempt) any, opts ...fieldOpt) AttemptField {
	f := field(name, k)
	f.Desc, f.meta = true, at
	f.Ref = func(r *AttemptRow) any { return at(&r.Meta) }
	return apply(f, opts)
}

// sum is a field of the summary (AttemptSummary).
func sum(name string, k FieldKind, at func(s *AttemptSummary) any, opts ...fieldOpt) AttemptField {
	f := field(name, k)
	f.Merge = MergeNone
	f.Ref = func(r *AttemptRow) any { return at(&r.Sum) }
	return apply(f, opts)
}

// row is a field of the row beside its description and summary.
func row(name string, k FieldKind, at func(r *AttemptRow) any, opts ...fieldOpt) AttemptField {
	f := field(name, k)
	f.Merge, f.Ref = MergeNone, at
	return apply(f, opts)
}

// exitStatus and exitMs are the two fields of an exit status: its status,
// NULL and kept while its _ms says it was not seen, and its time.
func exitStatus(name string, at func(m *wire.Attempt) *wire.ExitStatus) AttemptField {
	return desc(name, FieldInt32, func(m *wire.Attempt) any { return &at(m).Status }, opt(), merge(MergeWith), with(name+"_ms"))
}

func exitMs(name string, at func(m *wire.Attempt) *wire.ExitStatus) AttemptField {
	return desc(name, FieldInt64, func(m *wire.Attempt) any { return &at(m).Ms }, opt())
}

// AttemptFieldOf is the field of name (nil if none).
func AttemptFieldOf(name string) *AttemptField {
	for i := range AttemptFields {
		if AttemptFields[i].Name == name {
			return &AttemptFields[i]
		}
	}
	return nil
}

// Said reports whether a row says the field: its value is not zero.
func (f *AttemptField) Said(r *AttemptRow) bool { return !isZero(f.Ref(r)) }

// Null reports whether a backend with NULLs stores the field of r as NULL:
// an Opt field whose value (or whose With field's) is zero.
func (f *AttemptField) Null(r *AttemptRow) bool {
	if !f.Opt {
		return false
	}
	if f.With != "" {
		return !withOf(f).Said(r)
	}
	return !f.Said(r)
}

// Value is the field's value in r (a string, int64, int32, uint32, bool or
// float64).
func (f *AttemptField) Value(r *AttemptRow) any {
	switch p := f.Ref(r).(type) {
	case *string:
		return *p
	case *int64:
		return *p
	case *int32:
		return *p
	case *uint32:
		return *p
	case *bool:
		return *p
	case *float64:
		return *p
	}
	panic("store: field " + f.Name + " of no kind")
}

func isZero(p any) bool {
	switch p := p.(type) {
	case *string:
		return *p == ""
	case *int64:
		return *p == 0
	case *int32:
		return *p == 0
	case *uint32:
		return *p == 0
	case *bool:
		return !*p
	case *float64:
		return *p == 0
	}
	return true
}

// withs are the fields With names, by the field naming them.
var withs = map[string]*AttemptField{}

func withOf(f *AttemptField) *AttemptField { return withs[f.Name] }

// descs are the description fields, for MergeAttempt.
var descs []*AttemptField

func init() {
	seen := map[string]bool{}
	for i := range AttemptFields {
		f := &AttemptFields[i]
		if seen[f.Name] {
			panic("store: attempt field " + f.Name + " declared twice")
		}
		seen[f.Name] = true
		if f.Desc {
			descs = append(descs, f)
		}
	}
	for i := range AttemptFields {
		if f := &AttemptFields[i]; f.With != "" {
			w := AttemptFieldOf(f.With)
			if w == nil || !w.Desc {
				panic("store: attempt field " + f.Name + " goes with " + f.With + ", no description field")
			}
			withs[f.Name] = w
		}
	}
}

// mergeField merges a description's value of f (src) into dst's, by f's
// rule.
func mergeField(f *AttemptField, dst, src *wire.Attempt) {
	d, s := f.meta(dst), f.meta(src)
	if f.Merge == MergeWith {
		if !isZero(withOf(f).meta(src)) {
			set(d, s)
		}
		return
	}
	if isZero(s) {
		return // a field the description leaves zero erases nothing
	}
	switch f.Merge {
	case MergeLater:
		if f.Weak != "" && *s.(*string) == f.Weak && !isZero(d) {
			return
		}
		set(d, s)
	case MergeFirst:
		if isZero(d) {
			set(d, s)
		}
	case MergeMin:
		if isZero(d) || less(s, d) {
			set(d, s)
		}
	case MergeMax:
		if less(d, s) {
			set(d, s)
		}
	case MergeOr:
		set(d, s) // (s is true)
	}
}

// set copies *s into *d (pointers of one kind).
func set(d, s any) {
	switch d := d.(type) {
	case *string:
		*d = *s.(*string)
	case *int64:
		*d = *s.(*int64)
	case *int32:
		*d = *s.(*int32)
	case *uint32:
		*d = *s.(*uint32)
	case *bool:
		*d = *s.(*bool)
	case *float64:
		*d = *s.(*float64)
	}
}

// less reports whether *a < *b (numbers of one kind).
func less(a, b any) bool {
	switch a := a.(type) {
	case *int64:
		return *a < *b.(*int64)
	case *int32:
		return *a < *b.(*int32)
	case *uint32:
		return *a < *b.(*uint32)
	case *float64:
		return *a < *b.(*float64)
	}
	return false
}
