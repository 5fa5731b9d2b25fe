package duckdb

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestLateSampleBeforeCompaction: a sample of a running attempt that
// came late (at a time before what was read), stored just before a
// compaction, is in SeriesPoints' count and read back, before the
// compaction and after it. At a time the attempt had no sample at, the
// count is one more on both sides of it, and the sample is read with its
// value. At a time it had a sample at, both samples are counted (the late
// one stays a chunk of its own after the compaction: the attempt's other
// chunks were merged before) and the read gives the time once, so that
// a reader's counts do not add up and it reads the series from its since
// again (store.SeriesPoints.Start holds). Until 2026-12-08 a chunk whose
// times were within an earlier chunk's span was read as if it held only
// duplicates of that chunk's: the late sample at a new time was counted
// and never read, before the compaction and after it.
func TestLateSampleBeforeCompaction(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	st, err := Open(Options{Dir: t.TempDir(), Clock: store.Clock{Now: func() time.Time { return time.UnixMilli(clock.Load()) }}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 15, Seed: 5, Start: start})
	storetest.FillAt(t, st, g, start, 4*60, func(now time.Time) { clock.Store(now.UnixMilli()) })
	to := clock.Load() + 1

	// The running attempt with the most samples.
	var q store.PointsQuery
	var first *store.SeriesPoints
	for _, a := range storetest.Attempts(t, st) {
		if a.State != store.StateRunning {
			continue
		}
		c := store.PointsQuery{SeriesQuery: store.SeriesQuery{Scope: store.ScopeAttempt, JobID: a.JobID, AttemptID: a.AttemptID,
			Metrics: []string{"rss_bytes"}, From: int64(a.Start), To: to}, Since: int64(a.Start)}
		sps, err := st.SeriesPoints(ctx, []store.PointsQuery{c})
		if err != nil {
			t.Fatal(err)
		}
		if sp := sps[0]; sp != nil && (first == nil || sp.Len() > first.Len()) {
			q, first = c, sp
		}
	}
	if first == nil || first.Len() < 20 {
		t.Fatalf("no running attempt with 20 samples: %+v", first)
	}
	read := func(step string) *store.SeriesPoints {
		t.Helper()
		sps, err := st.SeriesPoints(ctx, []store.PointsQuery{q})
		if err != nil {
			t.Fatal(err)
		}
		sp := sps[0]
		if sp == nil || !sp.Start() {
			t.Fatalf("%s: read %+v: fewer samples counted than read", step, sp)
		}
		return sp
	}
	seq := uint64(1)
	late := func(ts, rss int64) {
		t.Helper()
		app, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(storetest.LateRSS(t, "late", seq, q.AttemptID, q.JobID, q.Since, ts, rss)); err != nil {
			t.Fatal(err)
		}
		seq++
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// check reads the series before a compaction and after it: count
	// (before, after) and samples read, and the value at ts (0: any).
	check := func(step string, ts int64, counts [2]int64, n int, rss int64) {
		t.Helper()
		for i, when := range []string{"before a compaction", "after it"} {
			if i == 1 {
				if err := st.Compact(ctx); err != nil {
					t.Fatal(err)
				}
			}
			sp := read(step + ", " + when)
			if sp.Stored != counts[i] || sp.Len() != n {
				t.Errorf("%s, %s: %d samples counted, %d read; want %d and %d", step, when, sp.Stored, sp.Len(), counts[i], n)
			}
			k, ok := slices.BinarySearch(sp.Points.Times, ts)
			if !ok {
				t.Errorf("%s, %s: no sample at %d", step, when, ts)
			} else if want := rss / sp.Cols[0].Div; rss != 0 && sp.Points.Cols[0][k] != want {
				t.Errorf("%s, %s: %d stored at %d, want %d", step, when, sp.Points.Cols[0][k], ts, want)
			}
		}
	}
	// (The counts before: read again after a compaction, one a time.)
	if err := st.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	base := read("before the late samples")
	times := base.Points.Times

	// At a time the attempt had no sample at.
	ts := times[len(times)/2] + 1
	if slices.Contains(times, ts) {
		t.Fatalf("a sample at %d already", ts)
	}
	late(ts, 3<<30)
	check("a late sample at a new time", ts, [2]int64{base.Stored + 1, base.Stored + 1}, base.Len()+1, 3<<30)

	// At a time it had a sample at.
	ts = times[len(times)/3]
	late(ts, 5<<30)
	check("a late sample at a time it had", ts, [2]int64{base.Stored + 2, base.Stored + 2}, base.Len()+1, 0)
}
