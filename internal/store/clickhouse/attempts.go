package clickhouse

import (
	"slices"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// The attempts table, derived from the fields package store declares
// (store.AttemptFields): its columns are the store's own (attemptOwn: the
// day of its partition, its job's key, its version, the batch that wrote
// it) and the fields'; its DDL, the insert's columns, the read's and its
// scan, and the columns an open adds to a table of an older schema
// (Schema.Migrate) come from them.

// attemptOwn are the store's own columns of attempts.
const attemptOwn = `day Date, job_key UInt64, attempt_key UInt64, version UInt64, writer_agent String, writer_seq UInt64`

// chTypes are the column types of the fields' kinds.
var chTypes = [...]string{store.FieldString: "String", store.FieldInt64: "Int64", store.FieldInt32: "Int32",
	store.FieldUInt32: "UInt32", store.FieldBool: "UInt8", store.FieldFloat64: "Float64"}

// attemptColumns are the columns of attempts: the store's own, then the
// fields'.
func attemptColumns() []column {
	out := cols(attemptOwn)
	for i := range store.AttemptFields {
		f := &store.AttemptFields[i]
		out = append(out, column{name: f.Name, typ: chTypes[f.Kind], lowCard: f.Few})
	}
	return out
}

// attemptCols are the insert's columns, in the order attemptRow writes
// them.
var attemptCols = func() []string {
	var out []string
	for _, c := range attemptColumns() {
		out = append(out, c.name)
	}
	return out
}()

// attemptSelect reads attempts' rows (the latest version of each) in the
// order scanAttempt takes them: the fields (but the derived), then the
// store's own.
var attemptSelect = selectOf(allAttemptFields) + ", writer_agent, writer_seq FROM "

// allAttemptFields are the indexes of the fields a row is read back with
// (store.AttemptFields, but the derived).
var allAttemptFields = func() []int {
	var out []int
	for i := range store.AttemptFields {
		if !store.AttemptFields[i].Derived {
			out = append(out, i)
		}
	}
	return out
}()

// jobAttemptFields are the fields a job's figures are added up from
// (store.JobTotals.AddAttempt: what its attempts say of the job, their
// hosts, types, spans, CPU, peaks and memory): the jobs' flush reads these
// of every attempt of the jobs it writes, each second, not the whole rows
// (their options, exits and diagnostics). TestJobAttemptFields checks
// that they add up to what the whole rows do.
var jobAttemptFields = fieldIndexes("attempt_id", "job_id", "host", "app_id", "type", "framework", "meta_first_ms",
	"meta_last_ms", "ended", "job_name", "user_name", "queue", "memory_mb", "cpu_ms", "peak_rss", "rss_byte_ms",
	"sum_first_ms", "sum_last_ms")

// jobAttemptSelect reads jobAttemptFields of attempts' rows.
var jobAttemptSelect = selectOf(jobAttemptFields) + " FROM "

// fieldIndexes are the indexes of the fields named in store.AttemptFields.
func fieldIndexes(names ...string) []int {
	var out []int
	for _, n := range names {
		i := slices.IndexFunc(store.AttemptFields, func(f store.AttemptField) bool { return f.Name == n })
		if i < 0 {
			panic("clickhouse: no attempt field " + n)
		}
		out = append(out, i)
	}
	return out
}

// selectOf is a SELECT of fields idx of attempts, then the version and
// day of their rows.
func selectOf(idx []int) string {
	var names []string
	for _, i := range idx {
		names = append(names, store.AttemptFields[i].Name)
	}
	return "SELECT " + strings.Join(names, ", ") + ", version, day"
}

func scanAttempt(r *Rows) *attState {
	st := scanFields(r, allAttemptFields)
	st.Writer, st.WriterSeq = r.Shared(), r.UInt64()
	return st
}

// scanFields reads a row of selectOf(idx).
func scanFields(r *Rows, idx []int) *attState {
	st := &attState{}
	for _, i := range idx {
		f := &store.AttemptFields[i]
		switch p := f.Ref(&st.AttemptRow).(type) {
		case *string:
			if f.Repeats {
				// (one string for the rows that repeat it: a job's, a
				// host's)
				*p = r.Shared()
			} else {
				*p = r.String()
			}
		case *int64:
			*p = r.Int64()
		case *int32:
			*p = r.Int32()
		case *uint32:
			*p = r.UInt32()
		case *bool:
			*p = r.Bool()
		case *float64:
			*p = r.Float64()
		}
	}
	var day uint16
	st.B.version, day = r.UInt64(), r.UInt16()
	st.Born = int64(day) * 86_400_000
	st.B.stored = true
	return st
}

// keysOf are the keys of an attempt's id and of its job's (kept with its
// state: hashed again only when its job changes).
func keysOf(st *attState) (attempt, job uint64) {
	b := &st.B
	if !b.keyed || b.keyJob != st.Meta.JobID {
		b.keyed, b.keyJob = true, st.Meta.JobID
		b.attKey, b.jobKey = store.AttemptKey(st.Meta.AttemptID), jobKey(st.Meta.JobID)
	}
	return b.attKey, b.jobKey
}

// attemptRow writes an attempt's row (attemptCols), and its index row
// when it has none yet or its job changed. (The fields through their
// references, not their values: a value boxed in an interface is an
// allocation, and a commit writes thousands of rows of 60 fields.)
func (w *writeSet) attemptRow(st *attState) {
	id := st.Meta.AttemptID
	ak, jk := keysOf(st)
	day := DayOf(st.Born)
	r := &w.atts
	r.Row()
	r.UInt16(day)
	r.UInt64(jk)
	r.UInt64(ak)
	r.UInt64(st.B.version)
	r.String(st.Writer)
	r.UInt64(st.WriterSeq)
	for i := range store.AttemptFields {
		switch v := store.AttemptFields[i].Ref(&st.AttemptRow).(type) {
		case *string:
			r.String(*v)
		case *int64:
			r.Int64(*v)
		case *int32:
			r.Int32(*v)
		case *uint32:
			r.UInt32(*v)
		case *bool:
			r.Bool(*v)
		case *float64:
			r.Float64(*v)
		default:
			panic("clickhouse: attempt field " + store.AttemptFields[i].Name + " of no kind")
		}
	}
	// The index says under which job the attempt's rows are: written with
	// its first row, and again when its job changes (an attempt stored
	// before its description named the job): the index is what a read by
	// attempt (loadAttempts, Attempt) finds its job's rows by.
	if !st.B.stored || st.B.indexed != jk {
		st.B.stored, st.B.indexed = true, jk
		x := &w.attIndex
		x.Row()
		x.UInt16(day)
		x.UInt64(ak)
		x.String(id)
		x.UInt64(jk)
	}
	w.hostRows(st, jk)
}
