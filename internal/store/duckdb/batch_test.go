package duckdb

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// Attempt reads its processes' chunks in one scan; each process's summary
// is the one a read of that process's chunks alone gives (its life, with
// the lookback on both sides), over fresh and compacted chunks.
func TestAttemptProcessesReadOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now().Add(-40 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 12, Start: start})
	storetest.Fill(t, s, g, start, 40*60)
	n := 0
	for _, a := range storetest.Attempts(t, s) {
		ad, err := s.Attempt(ctx, a.AttemptID)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ad.ProcessList {
			from, to := int64(0), int64(1<<62)
			if p.Start > 0 {
				from = int64(p.Start) - lookback
			}
			if p.End > 0 {
				to = int64(p.End) + lookback
			}
			pts, _, err := s.points(ctx, store.KindProcess, uint64(p.Key), from, to, allAttemptColumns)
			if err != nil {
				t.Fatal(err)
			}
			want := p
			store.ProcessSummary(pts, &want)
			if !reflect.DeepEqual(p, want) {
				t.Errorf("%s process %d:\n read together %+v\n read alone    %+v", a.AttemptID, p.PID, p, want)
			}
			n++
		}
	}
	if n < 50 {
		t.Fatalf("%d processes compared: want more", n)
	}
}

// attemptsProcesses reads the processes of many attempts in one scan; each
// attempt's list is the one attemptProcesses reads from its own range,
// whether the attempts' rows were taken in by a summary write or not, and
// after a restart (which logs descriptions again).
func TestAttemptsProcessesSameAsOne(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now().Add(-40 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 13, Start: start})
	storetest.Fill(t, s, g, start, 20*60)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir, SummaryEvery: time.Hour}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Fill(t, s, g, start, 40*60)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Commits the summaries have not taken in: rows past the attempts'
	// gen_last.
	for r := range 6 {
		app, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range g.Next() {
			b.AgentID, b.Seq = "late-"+b.Host, uint64(r+1)
			if _, err := app.Append(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	compare := func(when string) {
		var ids []string
		for _, a := range storetest.Attempts(t, s) {
			ids = append(ids, a.AttemptID)
		}
		ids = append(ids, "attempt_0_0000_m_000000_0") // not known: absent
		many, err := s.attemptsProcesses(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, id := range ids[:len(ids)-1] {
			r, err := s.attemptRange(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			one, err := s.attemptProcesses(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(many[id], one) {
				t.Errorf("%s, %s:\n together %+v\n alone    %+v", when, id, many[id], one)
			}
			n += len(one)
		}
		if _, ok := many[ids[len(ids)-1]]; ok {
			t.Errorf("%s: an unknown attempt has a list", when)
		}
		if len(ids) < 20 || n < 50 {
			t.Fatalf("%s: %d attempts, %d processes compared: want more", when, len(ids), n)
		}
	}
	compare("before a summary write")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	compare("after")
}

// attemptProcesses is attemptsProcesses of one attempt, reading its own
// range of proc_log (attemptRange.where): the oracle of the one-scan read.
func (s *Store) attemptProcesses(ctx context.Context, r attemptRange) ([]store.Process, error) {
	rows, err := s.handle().QueryContext(ctx, r.where("")+` ORDER BY gen`, r.args()...)
	if err != nil {
		return nil, fmt.Errorf("cannot list processes: %w", err)
	}
	views := map[uint64]*procView{}
	var order []uint64
	if err := readProcViews(rows, views, &order); err != nil {
		return nil, err
	}
	return s.processesOf(ctx, views, order)
}

// An attempt's processes read again take their summaries from the last
// read with the samples since added (procAggs): the same as read from the
// start, while the cluster runs on, across compactions, for running
// attempts and ended ones.
func TestProcessSummariesAddUp(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	start := time.Now().Add(-30 * time.Minute)
	var clock atomic.Int64
	s, err := Open(Options{Dir: t.TempDir(), CompactAge: 2 * time.Minute, Clock: store.Clock{Now: func() time.Time { return time.UnixMilli(clock.Load()) }}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 13, Start: start})
	var ids []string
	reads := 0
	for step := 1; step <= 6; step++ {
		clock.Store(storetest.Fill(t, s, g, start, step*4*60).UnixMilli())
		for _, a := range storetest.Attempts(t, s) {
			if !slices.Contains(ids, a.AttemptID) {
				ids = append(ids, a.AttemptID)
			}
		}
		// The attempts read with the summaries the last step's reads made,
		// then from the start.
		kept := map[string]*store.AttemptDetail{}
		for _, id := range ids {
			if kept[id], err = s.Attempt(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		s.procAggs.mu.Lock()
		s.procAggs.m = nil
		s.procAggs.mu.Unlock()
		for _, id := range ids {
			whole, err := s.Attempt(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(kept[id].ProcessList, whole.ProcessList) {
				t.Fatalf("step %d, %s: from kept summaries %+v\n from the start %+v", step, id, kept[id].ProcessList, whole.ProcessList)
			}
		}
		reads += len(ids)
	}
	t.Logf("%d attempts read twice; %d process summaries taken from an earlier read", reads, s.procAggs.hits)
	if s.procAggs.hits == 0 {
		t.Fatal("no summary was taken from an earlier read")
	}
}

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
