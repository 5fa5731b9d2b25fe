package taskstats

import (
	"strings"
	"testing"
)

func FuzzParseStats(f *testing.F) {
	f.Add(statsStruct(14, sizeV14, Record{PID: 1, TID: 2, Comm: "java"}))
	f.Add(statsStruct(12, minLen, Record{TID: 3}))
	f.Add([]byte{12, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := ParseStats(b, &r); err != nil {
			return
		}
		if len(b) < minLen || b[0]|b[1] == 0 {
			t.Fatalf("parsed %d bytes", len(b))
		}
		if len(r.Comm) > 32 || strings.IndexByte(r.Comm, 0) >= 0 {
			t.Fatalf("comm %q", r.Comm)
		}
		if r.PID == 0 && r.TID != 0 {
			t.Fatalf("pid 0 for thread %d", r.TID)
		}
		// Laid out again, the record parses to itself.
		var again Record
		if err := ParseStats(statsStruct(12, minLen, r), &again); err != nil || again != r {
			t.Fatalf("laid out again: %+v, %v; want %+v", again, err, r)
		}
	})
}

func FuzzParseMessage(f *testing.F) {
	f.Add(message(f, Record{PID: 4243, TID: 4301, Comm: "GC Thread#0"}, Record{PID: 4243, TID: 4243, Comm: "java"}))
	f.Add(nest(typeAggrPID, attr(typePID, []byte{1, 0, 0, 0})))
	f.Add([]byte{8, 0, 4, 0, 1, 2, 3, 4, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := ParseMessage(b, func(r *Record) {
			n++
			if len(r.Comm) > 32 || strings.IndexByte(r.Comm, 0) >= 0 {
				t.Fatalf("comm %q", r.Comm)
			}
		})
		// Every record needs a stats struct inside an aggregate.
		if n > len(b)/(minLen+8) {
			t.Fatalf("%d records from %d bytes (err %v)", n, len(b), err)
		}
	})
}

func FuzzParseNetlink(f *testing.F) {
	f.Add(nlmsg(27, message(f, Record{PID: 4243, TID: 4243, Comm: "java"})))
	f.Add(append(nlmsg(27, nil), nlmsg(2, []byte{1, 2, 3, 4})...))
	f.Add([]byte{16, 0, 0, 0, 27, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := parseNetlink(b, 27, func(r *Record) { n++ })
		if n > len(b)/(minLen+8) {
			t.Fatalf("%d records from %d bytes (err %v)", n, len(b), err)
		}
	})
}
