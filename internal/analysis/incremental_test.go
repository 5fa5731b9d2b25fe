package analysis_test

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// The background analyser's passes over a job reuse what its last pass
// read and found (Pass; Passes, of many jobs together, their reads
// together), and find what a pass from scratch finds, at
// every step of a cluster's life: attempts start, run, end and are
// called lost, jobs end, and a late batch changes an ended attempt of a
// finished job. On both stores.
func TestIncrementalPassesAsFull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a loadgen cluster on both stores: not in -short runs (make check); make test runs it")
	}
	for _, backend := range []string{"duckdb", "clickhouse"} {
		t.Run(backend, func(t *testing.T) {
			clock := new(atomic.Int64)
			st := openClocked(t, backend, clock)
			steps := 8
			if backend == "clickhouse" {
				steps = 5 // (each read of a job is some 100 ms)
			}
			passesAsFull(t, st, clock, steps)
		})
	}
}

// openClocked opens a store of backend ("duckdb", or "clickhouse": a
// server of its own) whose clock is clock (unix ms), closed at the test's
// end.
func openClocked(t *testing.T, backend string, clock *atomic.Int64) store.Store {
	t.Helper()
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	var st store.Store
	switch backend {
	case "duckdb":
		d, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: now}})
		if err != nil {
			t.Fatal(err)
		}
		st = d
	case "clickhouse":
		srv := chtest.Start(t)
		c, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: srv.URL() + "?database=analysis", InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		c.SetClock(store.Clock{Now: now})
		st = c
	default:
		t.Fatalf("no store %q", backend)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// passesAsFull compares the passes over the jobs of a loadgen cluster
// with reports from scratch at each of steps steps, 90 s of data apart.
func passesAsFull(t *testing.T, st store.Store, clock *atomic.Int64, steps int) {
	ctx := context.Background()
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 8, Slots: 8, BatchTicks: 15, Seed: 5, Start: start})
	fill := func(secs int) {
		clock.Store(storetest.FillAt(t, st, g, start, secs, func(t time.Time) { clock.Store(t.UnixMilli()) }).UnixMilli())
	}
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	inc := analysis.NewWith(st, analysis.Options{Now: now})
	secs := 12 * 60
	fill(secs)
	var passes, incremental, compared, running, late, together int
	lateRunning, lateFinished := steps/2, steps/2+1
	for step := 0; step < steps; step++ {
		if step == lateRunning || step == lateFinished {
			// A late batch: an attempt that ended a while ago, of a
			// running job or of a finished one, gets more data, and its
			// summary changes.
			state := store.StateRunning
			if step == lateFinished {
				state = store.StateFinished
			}
			if lateBatch(t, st, inc, state, now()) {
				late++
			}
		}
		if err := inc.Look(ctx); err != nil { // (the background's look at the jobs written lately)
			t.Fatal(err)
		}
		page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range page.Jobs {
			if j.State == store.StateRunning {
				running++
			} else if time.UnixMilli(int64(j.LastSeen)).Before(now().Add(-3*time.Minute)) && step != lateFinished {
				continue // ended a while ago: the analyser does not look at it again
			}
			ids = append(ids, j.JobID)
		}
		// The passes of one step in two together, as the background
		// makes those of the running jobs; the others' one by one.
		var got []*analysis.Report
		var incs []bool
		if step%2 == 0 {
			var errs []error
			got, incs, errs = inc.Passes(ctx, ids)
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			together += len(ids)
		} else {
			for _, id := range ids {
				r, inc1, err := inc.Pass(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				got, incs = append(got, r), append(incs, inc1)
			}
		}
		for i, id := range ids {
			passes++
			if incs[i] {
				incremental++
			}
			full := analysis.NewWith(st, analysis.Options{Now: now})
			want, err := full.Report(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			compared++
			if g, w := canonical(got[i]), canonical(want); g != w {
				t.Errorf("step %d, %s (%s): incremental pass\n%s\nfrom scratch\n%s", step, id, got[i].State, g, w)
			}
		}
		secs += 90
		fill(secs)
	}
	t.Logf("%d passes (%d incremental, %d of running jobs, %d together, %d that took their earlier runs again), %d late batches", passes,
		incremental, running, together, inc.ReusedHistories(), late)
	// (On a store that reads samples, the passes read the gauges of
	// running attempts through the live cache: only what came since.)
	if _, ok := st.(store.PointsReader); ok {
		if lr := inc.LiveReads(); lr.Incremental == 0 {
			t.Fatalf("gauges read %+v: none read incrementally", lr)
		} else {
			t.Logf("gauges read %+v", lr)
		}
	}
	if incremental == 0 || running == 0 || passes < 30 || late != 2 || inc.ReusedHistories() == 0 || together == 0 || together == passes {
		t.Fatalf("%d passes, %d incremental, %d of running jobs, %d together, %d late batches: the comparison does not cover incremental passes, together and alone",
			passes, incremental, running, together, late)
	}
}

// lateBatch stores a late batch for an attempt of a job in state that
// ended more than a minute before now (what a pass keeps of it), and
// says whether there was one. A finished job's is one of the earlier
// runs of a running job's recurring job, if there is one (what its
// passes keep).
func lateBatch(t *testing.T, st store.Store, a *analysis.Analyzer, state string, now time.Time) bool {
	t.Helper()
	ctx := context.Background()
	page, err := st.Jobs(ctx, store.JobFilter{State: state, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if state == store.StateFinished {
		running, err := st.Jobs(ctx, store.JobFilter{State: store.StateRunning, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range running.Jobs {
			h, err := a.History(ctx, r.JobID, 20)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(h.Runs); n > 1 {
				page.Jobs = append([]store.Job{{JobID: h.Runs[n-2].JobID}}, page.Jobs...) // the latest before it
				break
			}
		}
	}
	for _, j := range page.Jobs {
		d, err := st.Job(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range d.AttemptList {
			if x.End > 0 && time.UnixMilli(int64(x.End)).Before(now.Add(-90*time.Second)) {
				ingest(t, st, att{x.AttemptID, x.JobID, x.Type, x.Host, time.UnixMilli(int64(x.End)), 3, 900, 0, 64 << 30, 0, 0})
				return true
			}
		}
	}
	return false
}

// TestEndedPassesTogetherAsAlone: the passes over ended jobs taken
// together, as the background takes them (their reads together, their
// analyses stored in one call), make and store what their passes one by
// one do. On both stores.
func TestEndedPassesTogetherAsAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a loadgen cluster on both stores: not in -short runs (make check); make test runs it")
	}
	for _, backend := range []string{"duckdb", "clickhouse"} {
		t.Run(backend, func(t *testing.T) {
			clock := new(atomic.Int64)
			now := func() time.Time { return time.UnixMilli(clock.Load()) }
			st := openClocked(t, backend, clock)
			ctx := context.Background()
			start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
			g := loadgen.NewGenerator(loadgen.Config{Nodes: 8, Slots: 8, BatchTicks: 15, Seed: 7, Start: start})
			clock.Store(storetest.FillAt(t, st, g, start, 15*60, func(t time.Time) { clock.Store(t.UnixMilli()) }).UnixMilli())
			clock.Add((3 * time.Minute).Milliseconds()) // (those that ran have ended: their attempts lost)
			page, err := st.Jobs(ctx, store.JobFilter{State: store.StateFinished, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, j := range page.Jobs {
				ids = append(ids, j.JobID)
			}
			if len(ids) < 10 {
				t.Fatalf("%d finished jobs: too few to compare", len(ids))
			}
			stored := func() map[string]store.Analysis {
				out := map[string]store.Analysis{}
				for _, id := range ids {
					s, err := st.Analysis(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					out[id] = *s
				}
				return out
			}
			together, _, errs := analysis.NewWith(st, analysis.Options{Now: now}).Passes(ctx, ids)
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			before := stored()
			clock.Add(1) // (the analyses one by one replace those made together)
			alone := analysis.NewWith(st, analysis.Options{Now: now})
			var findings int
			for i, id := range ids {
				r, _, err := alone.Pass(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := canonical(together[i]), canonical(r); g != w {
					t.Errorf("%s: together\n%s\nalone\n%s", id, g, w)
				}
				if together[i].State != store.StateFinished {
					t.Errorf("%s analysed as %s", id, together[i].State)
				}
				findings += len(r.Findings)
			}
			after := stored()
			for _, id := range ids {
				b, a := before[id], after[id]
				if a.Evaluated != b.Evaluated+1 {
					t.Errorf("%s: stored at %d, then at %d: not replaced", id, b.Evaluated, a.Evaluated)
				}
				b.Evaluated, a.Evaluated = 0, 0
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s: stored together\n%+v\nalone\n%+v", id, b, a)
				}
			}
			t.Logf("%d ended jobs, %d findings", len(ids), findings)
			if findings == 0 {
				t.Error("no findings: the comparison does not cover them")
			}
		})
	}
}
