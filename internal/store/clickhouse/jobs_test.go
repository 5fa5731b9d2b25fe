package clickhouse

import (
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
)

// TestJobAttemptFields: a job's figures added up from the fields the
// jobs' flush reads (jobAttemptFields) are those of the whole rows, for
// rows with every field set (each a value of its own), ended or not.
func TestJobAttemptFields(t *testing.T) {
	for _, ended := range []bool{false, true} {
		var full, job store.JobTotals
		for a := range 3 {
			row := &store.AttemptRow{}
			for i := range store.AttemptFields {
				f := &store.AttemptFields[i]
				if f.Derived {
					continue
				}
				v := int64(1000*a + 10*i + 7)
				switch p := f.Ref(row).(type) {
				case *string:
					*p = f.Name + "-" + string(rune('a'+a))
				case *int64:
					*p = v
				case *int32:
					*p = int32(v)
				case *uint32:
					*p = uint32(v)
				case *bool:
					*p = ended
				case *float64:
					*p = float64(v) / 3
				}
			}
			row.Meta.JobID = "job_1_1"
			full.AddAttempt(&row.Meta, row.Host, &row.Sum)
			narrow := &store.AttemptRow{}
			for _, i := range jobAttemptFields {
				f := &store.AttemptFields[i]
				reflect.ValueOf(f.Ref(narrow)).Elem().Set(reflect.ValueOf(f.Ref(row)).Elem())
			}
			job.AddAttempt(&narrow.Meta, narrow.Host, &narrow.Sum)
		}
		if !reflect.DeepEqual(full, job) {
			t.Errorf("ended=%v: from the whole rows\n%+v\nfrom the job's fields\n%+v", ended, full, job)
		}
	}
}
