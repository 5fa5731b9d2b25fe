package clickhouse

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestCommitsPacedFromTheirStart: the next commit is due InsertEvery
// after the last one that inserted began (Begin, when the pipeline took
// its batches), not after its fold ended: a batch that came just after a
// commit began waits InsertEvery and one commit, not also the fold of the
// commit before (issue 25's acknowledgement p99). A commit of duplicates
// only does not move it. After an idle period (2 × InsertEvery since the
// commit before), the commit after the first may begin at once: the rest
// of a wave (nextCommit).
func TestCommitsPacedFromTheirStart(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	const every = time.Hour
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=pace", Clock: storetest.Clock, InsertEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &storetest.Gen{Agent: "node1-pace", Host: "node1"}
	att := []*storetest.AttemptSpec{{ID: "attempt_1800000000000_0001_m_000001_0", JobID: "job_1800000000000_0001", Type: "map",
		Start: storetest.T0, Procs: []storetest.ProcSpec{{PID: 1000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}}}
	b1, b2 := g.Batch(att, 0, 5, false), g.Batch(att, 5, 10, false)
	commit := func(b *wire.Batch) *tx {
		app, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(b); err != nil {
			t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		return app.(*tx)
	}
	// The store's first commit: after an idle period, the next may
	// begin at once.
	first := commit(b1)
	if got := s.NextCommit(); !got.Equal(first.began) {
		t.Fatalf("next commit after the first of a wave at %s, want at once, %s", got.Format(time.StampMicro),
			first.began.Format(time.StampMicro))
	}
	second := commit(b2)
	if got, want := s.NextCommit(), second.began.Add(every); !got.Equal(want) {
		t.Fatalf("next commit at %s, want the commit's start + InsertEvery, %s", got.Format(time.StampMicro), want.Format(time.StampMicro))
	}
	// The same batch again: a duplicate, nothing inserted, no wait.
	dup := commit(b2)
	if dup.began.Before(second.began) || !s.NextCommit().Equal(second.began.Add(every)) {
		t.Errorf("a commit of duplicates moved the next commit to %s", s.NextCommit().Format(time.StampMicro))
	}
}

// TestPipelinedCommits: a commit folds its batches while the one before
// it inserts (store.PipelinedAppender), building on its states: an
// agent's row the commit before has not inserted yet is not taken for
// another server's (its batches and counts are kept). When a commit's
// inserts fail, the commits started after it fail too, and both are
// stored whole when their batches come again: nothing is lost, nothing
// counted twice.
func TestPipelinedCommits(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=pipelined", Clock: storetest.Clock, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &storetest.Gen{Agent: "node1-pipe", Host: "node1"}
	att := []*storetest.AttemptSpec{{ID: "attempt_1800000000000_0002_m_000001_0", JobID: "job_1800000000000_0002", Type: "map",
		Start: storetest.T0, Procs: []storetest.ProcSpec{{PID: 1000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}}}
	var bs []*wire.Batch
	samples := int64(0)
	for i := range 5 {
		b := g.Batch(att, 5*i, 5*i+5, false)
		bs = append(bs, b)
		samples += int64(b.SampleCount())
	}
	storetest.Commit(t, s, bs[0])

	gate := make(chan error)
	s.wmu.Lock()
	s.beforeInsert = func() error { return <-gate }
	s.wmu.Unlock()
	start := func(b *wire.Batch) func() error {
		t.Helper()
		app, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if dup, err := app.Append(b); err != nil || dup {
			t.Fatalf("append seq %d: dup %v, %v", b.Seq, dup, err)
		}
		wait, err := app.(store.PipelinedAppender).CommitStart()
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}
	agent := func() (seq, batches uint64) {
		t.Helper()
		rows, err := s.query(ctx, "SELECT seq, batches FROM "+s.read("agents")+" FINAL WHERE agent_id = "+Quote(g.Agent))
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatalf("no row of agent %s: %v", g.Agent, rows.Err())
		}
		seq, batches = rows.UInt64(), rows.UInt64()
		return seq, batches
	}

	// Seq 2's inserts are held while seq 3 is folded on its states.
	w2 := start(bs[1])
	w3 := start(bs[2])
	if seq, _ := agent(); seq != bs[0].Seq {
		t.Fatalf("agent's row at seq %d before the held inserts, want %d", seq, bs[0].Seq)
	}
	gate <- nil
	gate <- nil
	if err := w2(); err != nil {
		t.Fatal(err)
	}
	if err := w3(); err != nil {
		t.Fatal(err)
	}
	if seq, n := agent(); seq != bs[2].Seq || n != 3 {
		t.Fatalf("agent's row: seq %d, %d batches; want %d, 3", seq, n, bs[2].Seq)
	}

	// Seq 4's inserts fail: seq 5, folded meanwhile, fails too.
	w4 := start(bs[3])
	w5 := start(bs[4])
	errHeld := errors.New("inserts failed on purpose")
	gate <- errHeld
	if err := w4(); !errors.Is(err, errHeld) {
		t.Fatalf("the failed commit: %v", err)
	}
	if err := w5(); !errors.Is(err, errHeld) {
		t.Fatalf("the commit after the failed one: %v, want it failed with it", err)
	}
	// (A commit started before the failed ones are dropped from the fold
	// would build on them, and fail with them.)
	s.waitWrites()
	s.wmu.Lock()
	s.beforeInsert = nil
	s.wmu.Unlock()
	if seq, _ := agent(); seq != bs[2].Seq {
		t.Fatalf("agent's row at seq %d after the failed commits, want %d", seq, bs[2].Seq)
	}
	// The agent sends them again: stored, not duplicates.
	if dups := storetest.Commit(t, s, bs[3], bs[4]); dups[0] || dups[1] {
		t.Fatalf("batches of failed commits taken for duplicates: %v", dups)
	}
	if seq, n := agent(); seq != bs[4].Seq || n != 5 {
		t.Fatalf("agent's row: seq %d, %d batches; want %d, 5", seq, n, bs[4].Seq)
	}
	u, err := s.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.Samples != samples {
		t.Errorf("%d samples stored of %d", u.Samples, samples)
	}
	// The attempt as commits one after another make it.
	ref, err := Open(ctx, Options{URL: srv.URL() + "?database=pipelined_ref", Clock: storetest.Clock, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, b := range bs {
		storetest.Ingest(t, ref, b)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Attempt(ctx, att[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Attempt(ctx, att[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CPUMs != want.CPUMs || got.LastSeen != want.LastSeen || got.PeakRSS != want.PeakRSS || len(got.ProcessList) != len(want.ProcessList) {
		t.Errorf("attempt: CPU %d ms, last seen %d, peak RSS %d, %d processes; commits one after another: %d, %d, %d, %d",
			got.CPUMs, got.LastSeen, got.PeakRSS, len(got.ProcessList), want.CPUMs, want.LastSeen, want.PeakRSS, len(want.ProcessList))
	}
}
