package clickhouse

import (
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
var attemptSelect = func() string {
	var names []string
	for i := range store.AttemptFields {
		if f := &store.AttemptFields[i]; !f.Derived {
			names = append(names, f.Name)
		}
	}
	return "SELECT " + strings.Join(names, ", ") + ", version, day, writer_agent, writer_seq FROM "
}()

func scanAttempt(r *Rows) *attState {
	st := &attState{}
	for i := range store.AttemptFields {
		f := &store.AttemptFields[i]
		if f.Derived {
			continue
		}
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
	st.B.version, day, st.Writer, st.WriterSeq = r.UInt64(), r.UInt16(), r.Shared(), r.UInt64()
	st.Born = int64(day) * 86_400_000
	st.B.stored = true
	return st
}

// attemptRow writes an attempt's row (attemptCols), and its index row
// when it has none yet or its job changed.
func (w *writeSet) attemptRow(st *attState) {
	id, m := st.Meta.AttemptID, &st.Meta
	day := DayOf(st.Born)
	r := &w.atts
	r.Row()
	r.UInt16(day)
	r.UInt64(jobKey(m.JobID))
	r.UInt64(store.AttemptKey(id))
	r.UInt64(st.B.version)
	r.String(st.Writer)
	r.UInt64(st.WriterSeq)
	for i := range store.AttemptFields {
		switch v := store.AttemptFields[i].Value(&st.AttemptRow).(type) {
		case string:
			r.String(v)
		case int64:
			r.Int64(v)
		case int32:
			r.Int32(v)
		case uint32:
			r.UInt32(v)
		case bool:
			r.Bool(v)
		case float64:
			r.Float64(v)
		}
	}
	// The index says under which job the attempt's rows are: written with
	// its first row, and again when its job changes (an attempt stored
	// before its description named the job): the index is what a read by
	// attempt (loadAttempts, Attempt) finds its job's rows by.
	if !st.B.stored || st.B.indexed != jobKey(m.JobID) {
		st.B.stored, st.B.indexed = true, jobKey(m.JobID)
		x := &w.attIndex
		x.Row()
		x.UInt16(day)
		x.UInt64(store.AttemptKey(id))
		x.String(id)
		x.UInt64(jobKey(m.JobID))
	}
}
