package store

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

// mergeAttemptBefore is MergeAttempt as it was written by hand before the
// fields' declarations (AttemptFields) made it: the reference the merge
// by the declarations is checked against.
func mergeAttemptBefore(dst, src *wire.Attempt) {
	first, last, ended := dst.FirstMs, dst.LastMs, dst.Ended
	keep := *dst
	*dst = *src
	if first > 0 && (dst.FirstMs == 0 || first < dst.FirstMs) {
		dst.FirstMs = first
	}
	dst.LastMs = max(last, dst.LastMs)
	dst.Ended = ended || dst.Ended
	for _, f := range []struct{ d, k *string }{{&dst.JobID, &keep.JobID}, {&dst.AppID, &keep.AppID},
		{&dst.ContainerID, &keep.ContainerID}, {&dst.Type, &keep.Type}, {&dst.JobName, &keep.JobName},
		{&dst.User, &keep.User}, {&dst.Queue, &keep.Queue}, {&dst.JavaOpts, &keep.JavaOpts}} {
		if *f.d == "" {
			*f.d = *f.k
		}
	}
	if keep.JobID != "" {
		dst.JobID = keep.JobID
	}
	if dst.Framework == "" || dst.Framework == "unknown" {
		if keep.Framework != "" {
			dst.Framework = keep.Framework
		}
	}
	if dst.MemoryMB == 0 {
		dst.MemoryMB = keep.MemoryMB
	}
	if dst.XmxBytes == 0 {
		dst.XmxBytes = keep.XmxBytes
	}
	dst.Streaming = dst.Streaming || keep.Streaming
	for _, p := range [...]struct{ d, k *wire.ExitStatus }{{&dst.JVMExit, &keep.JVMExit}, {&dst.RootExit, &keep.RootExit},
		{&dst.FileExit, &keep.FileExit}, {&dst.NMExit, &keep.NMExit}, {&dst.TaskLog, &keep.TaskLog}} {
		if !p.d.Seen() {
			*p.d = *p.k
		}
	}
	if dst.ExitDiagnostics == "" {
		dst.ExitDiagnostics = keep.ExitDiagnostics
	}
	dst.OOMKills = max(dst.OOMKills, keep.OOMKills)
}

// randomAttempt is a description of attempt id whose every field may be
// said or not, from few values (so that descriptions agree and differ).
func randomAttempt(r *rand.Rand, id string) wire.Attempt {
	str := func(vals ...string) string { return vals[r.IntN(len(vals))] }
	num := func() int64 { return []int64{0, 0, 1000, 2000, 3000}[r.IntN(5)] }
	exit := func() wire.ExitStatus {
		return wire.ExitStatus{Status: int32(r.IntN(3)) - 1, Ms: num()}
	}
	return wire.Attempt{AttemptID: id, JobID: str("", "job_1_1", "job_1_2"), AppID: str("", "app_1"),
		ContainerID: str("", "c1", "c2"), Type: str("", "map", "reduce"), Framework: str("", "unknown", "mapreduce", "tez"),
		FirstMs: num(), LastMs: num(), Ended: r.IntN(4) == 0, JobName: str("", "a", "b"), User: str("", "u"), Queue: str("", "q", "r"),
		MemoryMB: num(), JavaOpts: str("", "-Xmx1g"), XmxBytes: num(), Streaming: r.IntN(4) == 0, JVMExit: exit(), RootExit: exit(),
		FileExit: exit(), NMExit: exit(), TaskLog: exit(), ExitDiagnostics: str("", "killed"), OOMKills: uint32(r.IntN(3))}
}

// FuzzMergeAttemptAsBefore: merging by the fields' declarations gives, for
// any sequence of descriptions, what the merge written by hand gave.
func FuzzMergeAttemptAsBefore(f *testing.F) {
	for seed := range 20 {
		f.Add(uint64(seed), uint8(6))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		r := rand.New(rand.NewPCG(seed, 7))
		var a, b wire.Attempt
		for i := 0; i < int(n%16); i++ {
			d := randomAttempt(r, "attempt_1_1_m_000001_0")
			e := d
			MergeAttempt(&a, &d)
			mergeAttemptBefore(&b, &e)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("after %d descriptions:\n by declarations %+v\n by hand         %+v", i+1, a, b)
			}
		}
	})
}

// TestAttemptFieldsDeclared: every field of a description (wire.Attempt)
// and of a summary (AttemptSummary) is stored, by one declaration.
func TestAttemptFieldsDeclared(t *testing.T) {
	var r AttemptRow
	refs := map[any]string{}
	for _, f := range AttemptFields {
		if f.Derived {
			continue
		}
		p := f.Ref(&r)
		if prev, ok := refs[p]; ok {
			t.Errorf("%s and %s store the same value", prev, f.Name)
		}
		refs[p] = f.Name
	}
	for _, v := range []reflect.Value{reflect.ValueOf(&r.Meta).Elem(), reflect.ValueOf(&r.Sum).Elem()} {
		for i := 0; i < v.NumField(); i++ {
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct { // an ExitStatus: its two fields
				for j := 0; j < fv.NumField(); j++ {
					if _, ok := refs[fv.Field(j).Addr().Interface()]; !ok {
						t.Errorf("%s.%s is not stored", v.Type().Field(i).Name, fv.Type().Field(j).Name)
					}
				}
				continue
			}
			if _, ok := refs[fv.Addr().Interface()]; !ok {
				t.Errorf("%s.%s is not stored", v.Type(), v.Type().Field(i).Name)
			}
		}
	}
}
