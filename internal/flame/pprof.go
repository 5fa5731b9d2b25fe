package flame

import (
	"io"

	"github.com/google/pprof/profile"

	"github.com/taskscope/taskscope/internal/wire"
)

// PProf is p as a pprof profile (github.com/google/pprof/profile): four
// sample types, cpu, wait and queued (waiting for a CPU), in nanoseconds,
// and samples (dumps that showed the stack); a sample per stack, its locations the frames innermost
// first under two of the thread's (its name and, outermost, its group in
// brackets), as in the flame graphs; labels thread, thread_group and
// state. go tool pprof -sample_index=wait shows the waiting.
func PProf(p *wire.Profile) *profile.Profile {
	out := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}, {Type: "wait", Unit: "nanoseconds"},
			{Type: "queued", Unit: "nanoseconds"}, {Type: "samples", Unit: "count"}},
		DefaultSampleType: "cpu",
		PeriodType:        &profile.ValueType{Type: "wall", Unit: "nanoseconds"},
		Period:            p.IntervalMs * 1_000_000,
		TimeNanos:         p.StartMs * 1_000_000,
		DurationNanos:     (p.EndMs - p.StartMs) * 1_000_000,
		Comments:          []string{"taskscope profile " + p.ID + " of " + p.AttemptID},
	}
	locs := map[string]*profile.Location{}
	loc := func(name string) *profile.Location {
		if l := locs[name]; l != nil {
			return l
		}
		fn := &profile.Function{ID: uint64(len(out.Function) + 1), Name: name, SystemName: name}
		out.Function = append(out.Function, fn)
		l := &profile.Location{ID: uint64(len(out.Location) + 1), Line: []profile.Line{{Function: fn}}}
		out.Location = append(out.Location, l)
		locs[name] = l
		return l
	}
	for i := range p.Stacks {
		s := &p.Stacks[i]
		thread := p.Strings[s.Thread]
		group := Group(thread)
		smp := &profile.Sample{Value: []int64{s.CPUNs, s.WaitNs, s.QueuedNs, int64(s.Samples)},
			Label: map[string][]string{"thread": {thread}, "thread_group": {group}, "state": {s.State}}}
		for j := len(s.Frames) - 1; j >= 0; j-- {
			smp.Location = append(smp.Location, loc(p.Strings[s.Frames[j]]))
		}
		smp.Location = append(smp.Location, loc(thread), loc("["+group+"]"))
		out.Sample = append(out.Sample, smp)
	}
	return out
}

// WritePProf writes p as a gzipped pprof profile.
func WritePProf(w io.Writer, p *wire.Profile) error { return PProf(p).Write(w) }
