package analysis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

// wasteful is a job of 4 maps of 100 s, one of which failed once (its
// retry succeeded) and one of which got a speculative copy that was killed
// after 50 s; and a reduce killed after 20 s and run again (20 s).
func wasteful(n int, user, queue string) *store.JobDetail {
	m := task{typ: "map", d: 100, cpu: 0.5, rssMB: 512, memMB: 1024}
	d := job(n, "etl", cat(same(4, m),
		[]task{{typ: "map", host: "h1", d: 100, cpu: 0.5, rssMB: 512, memMB: 1024, outcome: store.OutcomeFailed},
			{typ: "map", host: "h2", s: 50, d: 50, cpu: 0.5, rssMB: 512, memMB: 1024, outcome: store.OutcomeKilled, spec: true},
			{typ: "reduce", host: "h3", s: 100, d: 20, cpu: 0.5, rssMB: 512, memMB: 2048, outcome: store.OutcomeKilled},
			{typ: "reduce", host: "h3", s: 120, d: 20, cpu: 0.5, rssMB: 512, memMB: 2048}})...)
	d.AttemptList[5].RetryOf = d.AttemptList[1].AttemptID
	d.AttemptList[7].RetryOf = d.AttemptList[6].AttemptID
	for i := range d.AttemptList {
		d.AttemptList[i].User, d.AttemptList[i].Queue = user, queue
	}
	d.User, d.Queue = user, queue
	return d
}

// TestWaste: what failed, killed and speculative attempts cost, and what
// the others were given beyond what they used.
func TestWaste(t *testing.T) {
	d := wasteful(1, "alice", "etl")
	c := analysis.JobCost(d.AttemptList)
	h := 1.0 / 36 // 100 s in hours
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"cpu hours", c.CPUHours, 5*h + h/2 + 2*h/5},
		{"used cpu hours", c.UsedCPUHours, (5*h + h/2 + 2*h/5) / 2},
		{"memory GB-hours", c.MemGBHours, 5*h + h/2 + 4*h/5},
		{"used memory GB-hours", c.UsedMemGBHours, (5*h + h/2 + 2*h/5) / 2},
		{"failed", c.Failed.CPUHours, h},
		{"failed GB-h", c.Failed.MemGBHours, h},
		{"killed", c.Killed.CPUHours, h / 5},
		{"killed GB-h", c.Killed.MemGBHours, 2 * h / 5},
		{"speculative", c.Speculative.CPUHours, h / 2},
		{"over-allocated cpu", c.OverAllocated.CPUHours, 4*h/2 + h/10},
		{"over-allocated memory", c.OverAllocated.MemGBHours, 4*h/2 + 2*h/5 - h/10},
		{"wasted share", c.WastedShare, (h + h + h/5 + 2*h/5 + h/2 + h/2) / (5*h + h/2 + 2*h/5 + 5*h + h/2 + 4*h/5) * 100},
	} {
		if !near(x.got, x.want, 1e-9) {
			t.Errorf("%s: %v, want %v", x.name, x.got, x.want)
		}
	}
	if c.Failed.Attempts != 1 || c.Killed.Attempts != 1 || c.Speculative.Attempts != 1 || c.Attempts != 8 {
		t.Errorf("attempts: %d failed, %d killed, %d speculative", c.Failed.Attempts, c.Killed.Attempts, c.Speculative.Attempts)
	}
	r := report(t, newFake(d), d.JobID)
	f := finding(r, "waste")
	if f == nil || f.Severity != analysis.Moderate || len(f.AttemptIDs) != 3 || !near(number(f, "wasted_share"), c.WastedShare, 1e-9) {
		t.Fatalf("waste finding %+v, want moderate (%.1f %%: 15 to 30) of 3 attempts", f, c.WastedShare)
	}
	if !strings.Contains(f.Message, "1 failed (0.0278 core-h, 0.0278 GB-h)") || !strings.Contains(f.Message, "speculative execution (0.0139 core-h") {
		t.Errorf("waste message: %s", f.Message)
	}
	// A job whose attempts all succeeded wastes nothing.
	ok := job(2, "etl", same(4, task{typ: "map", d: 100, cpu: 0.5})...)
	if f := finding(report(t, newFake(ok), ok.JobID), "waste"); f != nil {
		t.Errorf("waste of a job without failures: %+v", f)
	}
	// The speculative copy that won: the original it beat is the waste.
	d.AttemptList[5].Outcome, d.AttemptList[1].Outcome = store.OutcomeSucceeded, store.OutcomeKilled
	if c := analysis.JobCost(d.AttemptList); !near(c.Speculative.CPUHours, h, 1e-9) || c.Killed.Attempts != 1 {
		t.Errorf("the beaten original: speculative %v core-h, killed %d", c.Speculative.CPUHours, c.Killed.Attempts)
	}
	// Killed after its work (a container stopped by its framework, exit
	// 143), nothing ran again: not waste.
	d.AttemptList[7].RetryOf = ""
	if c := analysis.JobCost(d.AttemptList); c.Killed.Attempts != 0 {
		t.Errorf("a killed attempt that nothing repeated counted as waste: %+v", c.Killed)
	}
}

// TestWasteBy: by user, queue, job and day, the most wasted first.
func TestWasteBy(t *testing.T) {
	fs := newFake(wasteful(1, "alice", "etl"), wasteful(2, "alice", "adhoc"), wasteful(3, "bob", "etl"),
		job(4, "fine", same(4, task{typ: "map", d: 100, cpu: 0.5})...))
	fs.jobs["job_1700000000000_0004"].User = "carol"
	for i := range fs.jobs["job_1700000000000_0004"].AttemptList {
		fs.jobs["job_1700000000000_0004"].AttemptList[i].User = "carol"
	}
	a := analysis.New(fs)
	r, err := a.WasteBy(context.Background(), store.JobFilter{}, "user")
	if err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 4 || len(r.Groups) != 3 || r.Groups[0].Key != "alice" || r.Groups[0].Jobs != 2 || r.Groups[2].Key != "carol" ||
		r.Groups[2].Failed.Attempts != 0 || r.Groups[0].Failed.Attempts != 2 {
		t.Errorf("by user: %+v", r.Groups)
	}
	if !near(r.Total.Failed.CPUHours, 3.0/36, 1e-9) {
		t.Errorf("total failed %v core-h", r.Total.Failed.CPUHours)
	}
	r, err = a.WasteBy(context.Background(), store.JobFilter{Queue: "etl"}, "queue")
	if err != nil || len(r.Groups) != 1 || r.Groups[0].Key != "etl" || r.Groups[0].Jobs != 2 {
		t.Errorf("queue etl: %+v %v", r, err)
	}
	r, err = a.WasteBy(context.Background(), store.JobFilter{}, "day")
	if err != nil || len(r.Groups) != 1 || r.Groups[0].Key != "2026-12-01" || r.Groups[0].Jobs != 4 {
		t.Errorf("by day: %+v %v", r, err)
	}
	if _, err := a.WasteBy(context.Background(), store.JobFilter{}, "color"); err == nil {
		t.Error("waste by color accepted")
	}
	fs2 := newFake(wasteful(9, "x", "y"))
	fs2.failOn = "job"
	if _, err := analysis.New(fs2).WasteBy(context.Background(), store.JobFilter{}, "job"); err == nil {
		t.Error("a store error gave a waste report")
	}
}

// TestWasteCountsCores: an attempt's allocated CPU is its container's
// virtual cores over its life (store.Attempt.VCores), one core where they
// are not known; what it used is its CPU whatever it was given.
func TestWasteCountsCores(t *testing.T) {
	d := wasteful(1, "alice", "etl")
	before := analysis.JobCost(d.AttemptList)
	h := 1.0 / 36 // 100 s in hours
	failed, kept := -1, -1
	for i, a := range d.AttemptList {
		switch {
		case a.Outcome == store.OutcomeFailed:
			failed = i
		case a.Outcome == store.OutcomeSucceeded && a.Type == "map" && kept < 0:
			kept = i
		}
		d.AttemptList[i].VCores = 1 // said: one
	}
	d.AttemptList[failed].VCores = 4 // the failed map: 4 cores for 100 s
	c := analysis.JobCost(d.AttemptList)
	if !near(c.CPUHours, before.CPUHours+3*h, 1e-9) || !near(c.Failed.CPUHours, 4*h, 1e-9) ||
		!near(c.UsedCPUHours, before.UsedCPUHours, 1e-9) || !near(c.OverAllocated.CPUHours, before.OverAllocated.CPUHours, 1e-9) {
		t.Errorf("with a 4-core failed map: %.4f core-h allocated (%.4f before), %.4f failed, %.4f used (%.4f before)",
			c.CPUHours, before.CPUHours, c.Failed.CPUHours, c.UsedCPUHours, before.UsedCPUHours)
	}
	d.AttemptList[kept].VCores = 2 // a map that succeeded, given 2 cores, used half of one
	c = analysis.JobCost(d.AttemptList)
	if !near(c.OverAllocated.CPUHours, before.OverAllocated.CPUHours+h, 1e-9) {
		t.Errorf("a 2-core map that used half a core: %.4f core-h over-allocated, want %.4f", c.OverAllocated.CPUHours,
			before.OverAllocated.CPUHours+h)
	}
}
