package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// replicas opens n stores on the same database of one server: what n
// taskscope servers behind a load balancer are.
func replicas(t *testing.T, srv *chtest.Server, db string, n int) []*Store {
	t.Helper()
	var out []*Store
	for i := 0; i < n; i++ {
		s, err := Open(context.Background(), Options{URL: srv.URL() + "?database=" + db, Clock: storetest.Clock, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// replicasOfAttempt opens two replicas of database db on srv (replicas),
// its chunks' merges stopped: rows written twice must still be there to
// be counted (a background merge, any time, sooner on a loaded machine,
// would count them merged already). It makes one attempt of job n with
// one process (pid), and three batches of it, 5 s each, of one agent.
func replicasOfAttempt(t *testing.T, srv *chtest.Server, db string, n int, pid int32) ([]*Store, *storetest.AttemptSpec, [3]*wire.Batch) {
	t.Helper()
	rs := replicas(t, srv, db, 2)
	if err := rs[0].Client().Exec(context.Background(), "SYSTEM STOP MERGES "+db+".series_chunks", nil); err != nil {
		t.Fatal(err)
	}
	g := &storetest.Gen{Agent: "node1-" + db, Host: "node1"}
	at := &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1700000000000_%04d_m_000000_0", n),
		JobID: fmt.Sprintf("job_1700000000000_%04d", n), Type: "map",
		Start: storetest.T0, MemoryMB: 1024, JobName: db, User: "u", Queue: "q",
		Procs: []storetest.ProcSpec{{PID: pid, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
	ats := []*storetest.AttemptSpec{at}
	return rs, at, [3]*wire.Batch{g.Batch(ats, 0, 5, false), g.Batch(ats, 5, 10, false), g.Batch(ats, 10, 15, false)}
}

// TestReplicasExactlyOnce: a batch stored through one replica and retried
// to another is a duplicate there; the same batch stored by two replicas
// at once (neither knowing the other's) is kept once: its rows are the
// same both times, and the tables keep a row once.
func TestReplicasExactlyOnce(t *testing.T) {
	srv := chtest.Start(t)
	rs, at, bs := replicasOfAttempt(t, srv, "eo", 1, 101)
	a, b := rs[0], rs[1]
	b1, b2, b3 := bs[0], bs[1], bs[2]
	if d := storetest.Ingest(t, a, b1); d[0] {
		t.Fatal("b1 through a: a duplicate")
	}
	// The agent's answer was lost: it retries b1 through b, then sends b2.
	if d := storetest.Ingest(t, b, b1, b2); !d[0] || d[1] {
		t.Fatalf("b1 again and b2 through b: duplicates %v, want [true false]", d)
	}
	// b3 through both at once: each begins before the other commits.
	var wg sync.WaitGroup
	for _, s := range rs {
		app, err := s.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if dup, err := app.Append(b3); err != nil || dup {
			t.Fatalf("b3: dup %v, %v", dup, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := app.Commit(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, s := range rs {
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range rs {
		u, err := s.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if u.Samples != 15 || u.AttemptSamples != 15 {
			t.Errorf("replica %d: %d process samples, %d attempt samples; 15 and 15 were sent", i, u.Samples, u.AttemptSamples)
		}
		d, err := s.Attempt(context.Background(), at.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.CPUMs != 7500 || d.ProcessList[0].Samples != 15 {
			t.Errorf("replica %d: cpu %d, samples %d; want 7500 and 15", i, d.CPUMs, d.ProcessList[0].Samples)
		}
	}
	// Physically: the rows written twice go when the parts merge.
	c := a.Client()
	raw := count(t, c, "SELECT count() FROM eo.series_chunks")
	if err := c.Exec(context.Background(), "SYSTEM START MERGES eo.series_chunks", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(context.Background(), "OPTIMIZE TABLE eo.series_chunks FINAL", nil); err != nil {
		t.Fatal(err)
	}
	merged := count(t, c, "SELECT count() FROM eo.series_chunks")
	// 3 batches of 4 series: a process, an attempt, and a metric of each
	// with no column of its own.
	if merged != 12 || raw != 16 {
		t.Errorf("%d chunk rows after the merge, %d before; want 12 and 16 (b3's 4 twice)", merged, raw)
	}
	t.Logf("chunk rows: %d written (b3 by both replicas), %d after the merge", raw, merged)
}

// TestReplicasRecheck: a batch that another replica stored after this one
// took it (its agent's sequence moved since) is dropped at the commit's
// recheck, which reads the agents' sequences, then that agent's row: it
// is not written twice, and the agent's next batch is stored on the row
// the other replica wrote.
func TestReplicasRecheck(t *testing.T) {
	srv := chtest.Start(t)
	rs, _, bs := replicasOfAttempt(t, srv, "rc", 2, 102)
	a, b := rs[0], rs[1]
	c := a.Client()
	b1, b2, b3 := bs[0], bs[1], bs[2]
	storetest.Ingest(t, a, b1)
	// a takes b2 (the agent at b1 as it knows it); b stores b2 meanwhile.
	app, err := a.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if dup, err := app.Append(b2); err != nil || dup {
		t.Fatalf("b2 through a: dup %v, %v", dup, err)
	}
	if d := storetest.Ingest(t, b, b2); d[0] {
		t.Fatal("b2 through b: a duplicate")
	}
	before := count(t, c, "SELECT count() FROM rc.series_chunks")
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT count() FROM rc.series_chunks"); n != before {
		t.Errorf("%d chunk rows after a's commit of b2, %d before: b2 written again", n, before)
	}
	if d := storetest.Ingest(t, a, b3); d[0] {
		t.Fatal("b3 through a: a duplicate")
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, s := range rs {
		u, err := s.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if u.Samples != 15 {
			t.Errorf("replica %d: %d process samples; 15 were sent", i, u.Samples)
		}
		seq, err := s.AgentSeq(context.Background(), b3.AgentID)
		if err != nil || seq != b3.Seq {
			t.Errorf("replica %d: the agent's sequence %d (%v), want %d", i, seq, err, b3.Seq)
		}
	}
	rows, err := c.Query(context.Background(), "SELECT batches FROM rc.agents FINAL WHERE agent_id = "+Quote(b3.AgentID), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := rows.UInt64(); n != 3 {
		t.Errorf("the agent's row counts %d batches, want 3 (%v)", n, rows.Err())
	}
}

// TestRecheckWhileFolding: a commit folds its batches while their agents
// are read again (FoldTx.StartRecheck: the read no longer comes before
// the fold), and when the read finds an agent moved (another replica
// stored its batch since), the fold made meanwhile, on the attempt's
// state before that batch, is dropped and done again on the state read
// back: both replicas answer what one embedded store answers of the same
// batches, and the agent's row counts each batch once.
func TestRecheckWhileFolding(t *testing.T) {
	srv := chtest.Start(t)
	rs, _, bs := replicasOfAttempt(t, srv, "rwf", 3, 103)
	a, b := rs[0], rs[1]
	ref, err := duckdb.Open(duckdb.Options{Clock: storetest.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	folded := make(chan struct{}, 1)
	a.afterFold = func() { folded <- struct{}{} }
	a.seqsHeld = func() {
		select {
		case <-folded:
		case <-time.After(time.Minute):
			t.Error("the agents' sequences were read again before the commit folded its batches")
		}
	}
	// b1 through a, b2 through b (a's state of the attempt is b1's), b3
	// through a: folded on b1's state while the read finds b2 stored.
	for _, step := range []struct {
		s *Store
		b *wire.Batch
	}{{a, bs[0]}, {b, bs[1]}, {a, bs[2]}} {
		if d := storetest.Ingest(t, step.s, step.b); d[0] {
			t.Fatalf("batch %d: a duplicate", step.b.Seq)
		}
		storetest.Ingest(t, ref, step.b)
	}
	want := storetest.Attempts(t, ref)
	for i, s := range rs {
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := storetest.Attempts(t, s)
		if len(got) != 1 || len(want) != 1 || !reflect.DeepEqual(got[0], want[0]) {
			t.Errorf("replica %d:\n clickhouse %+v\n embedded   %+v", i, got, want)
		}
		u, err := s.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if u.Samples != 15 {
			t.Errorf("replica %d: %d process samples; 15 were sent", i, u.Samples)
		}
	}
	rows, err := a.Client().Query(context.Background(), "SELECT batches, samples FROM rwf.agents FINAL WHERE agent_id = "+
		Quote(bs[2].AgentID), nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := uint64(bs[0].SampleCount() + bs[1].SampleCount() + bs[2].SampleCount())
	if n, m := rows.UInt64(), rows.UInt64(); n != 3 || m != sent {
		t.Errorf("the agent's row counts %d batches and %d samples, want 3 and %d (%v)", n, m, sent, rows.Err())
	}
}

// TestReplicasRotate: an agent's batches go to two replicas in turn (a
// round-robin balancer), each replica's copy of the attempts is stale at
// every other batch: what they answer is what one embedded store answers
// of the same batches.
func TestReplicasRotate(t *testing.T) {
	srv := chtest.Start(t)
	rs := replicas(t, srv, "rot", 2)
	ref, err := duckdb.Open(duckdb.Options{Clock: storetest.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	start := storetest.T0.Add(-10 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 3, BatchTicks: 5, Seed: 5, Start: start})
	for r := 0; r < 12; r++ {
		for i, bt := range g.Next() {
			storetest.Ingest(t, rs[(r+i)%2], bt)
			storetest.Ingest(t, ref, bt)
		}
	}
	for _, s := range rs {
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := storetest.Attempts(t, ref)
	for i, s := range rs {
		got := storetest.Attempts(t, s)
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("replica %d: %d attempts, the embedded store %d", i, len(got), len(want))
		}
		byID := map[string]store.Attempt{}
		for _, a := range got {
			byID[a.AttemptID] = a
		}
		for _, w := range want {
			if g := byID[w.AttemptID]; !reflect.DeepEqual(g, w) {
				t.Errorf("replica %d, %s:\n clickhouse %+v\n embedded   %+v", i, w.AttemptID, g, w)
			}
		}
	}
}

// TestReplicasJobNamedLate: an attempt (not named the Hadoop way) whose
// series and processes came before its description, stored through one
// replica, then given more samples through another, which reads it back
// by the attempts' index (its job's key, then its rows under that job):
// both replicas answer what one embedded store answers of the same
// batches.
func TestReplicasJobNamedLate(t *testing.T) {
	srv := chtest.Start(t)
	rs := replicas(t, srv, "late", 2)
	ref, err := duckdb.Open(duckdb.Options{Clock: storetest.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	g := &storetest.Gen{Agent: "node1-late", Host: "node1"}
	at := &storetest.AttemptSpec{ID: "executor-7", Type: "executor", Start: storetest.T0.Add(-5 * time.Minute),
		MemoryMB: 1024, JobName: "late", User: "u", Queue: "q",
		Procs: []storetest.ProcSpec{{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
	at.JobID = "job_1700000000000_0007"
	b1 := g.Batch([]*storetest.AttemptSpec{at}, 0, 5, false)
	d := b1.Attempts[0]
	b1.Attempts = nil // its series and processes, not yet its description
	named := *at
	b2 := g.Batch([]*storetest.AttemptSpec{&named}, 5, 10, false)
	d.LastMs = named.Start.Add(10 * time.Second).UnixMilli()
	b2.Attempts = append(b2.Attempts, d) // its description, with its job
	b3 := g.Batch([]*storetest.AttemptSpec{&named}, 10, 15, false)
	for _, step := range []struct {
		s store.Store
		b *wire.Batch
	}{{rs[0], b1}, {rs[0], b2}, {rs[1], b3}} {
		storetest.Ingest(t, step.s, step.b)
		storetest.Ingest(t, ref, step.b)
	}
	want := storetest.Attempts(t, ref)
	if len(want) != 1 || want[0].JobID != named.JobID || want[0].Processes != 1 {
		t.Fatalf("the embedded store holds %+v", want)
	}
	wantDetail, err := ref.Attempt(context.Background(), at.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range rs {
		got := storetest.Attempts(t, s)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("replica %d:\n clickhouse %+v\n embedded   %+v", i, got, want)
		}
		a, err := s.Attempt(context.Background(), at.ID)
		if err != nil {
			t.Fatal(err)
		}
		if a.CPUMs != want[0].CPUMs || a.JobID != named.JobID {
			t.Errorf("replica %d: Attempt: job %q, cpu_ms %d; want %q, %d", i, a.JobID, a.CPUMs, named.JobID, want[0].CPUMs)
		}
		if len(a.ProcessList) != len(wantDetail.ProcessList) || len(a.ProcessList) != 1 ||
			a.ProcessList[0].Key != wantDetail.ProcessList[0].Key || a.ProcessList[0].CPUMs != wantDetail.ProcessList[0].CPUMs {
			t.Errorf("replica %d: processes %+v; the embedded store's %+v", i, a.ProcessList, wantDetail.ProcessList)
		}
	}
}

// TestChangesDuringOwnInsert: a Changes read while a commit of this
// replica has inserted its agents' rows but not yet counted their
// sequences does not take that commit for another replica's (it waits
// for the count). Before, it moved, and the jobs' flush, which reads it,
// dropped its cache and read every job it wrote again.
func TestChangesDuringOwnInsert(t *testing.T) {
	srv := chtest.Start(t)
	a := replicas(t, srv, "chgown", 1)[0]
	ctx := context.Background()
	g := &storetest.Gen{Agent: "node1-chgown", Host: "node1"}
	at := &storetest.AttemptSpec{ID: "attempt_1700000000000_0001_m_000000_0", JobID: "job_1700000000000_0001", Type: "map",
		Start: storetest.T0, MemoryMB: 1024, JobName: "chgown", User: "u", Queue: "q",
		Procs: []storetest.ProcSpec{{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
	storetest.Ingest(t, a, g.Batch([]*storetest.AttemptSpec{at}, 0, 5, false))
	before, err := a.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		v   uint64
		err error
	}
	got := make(chan result, 1)
	waiting := make(chan struct{}, 1)
	a.changesWait = func() { waiting <- struct{}{} }
	a.agentsInserted = func() {
		go func() {
			v, err := a.Changes(ctx)
			got <- result{v, err}
		}()
		// Until the read either answered or waits for the count.
		select {
		case r := <-got:
			got <- r
		case <-waiting:
		}
	}
	storetest.Ingest(t, a, g.Batch([]*storetest.AttemptSpec{at}, 5, 10, false))
	a.agentsInserted = nil
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.v != before {
		t.Errorf("Changes read during this replica's agents' insert: %d, before it %d (want the same: no other replica stored)", r.v, before)
	}
	if after, err := a.Changes(ctx); err != nil || after != before {
		t.Errorf("Changes after the commit: %d, %v; want %d", after, err, before)
	}
}

// TestChangesOthersOnly: Changes moves when another replica stores a
// batch, not when this one does (its server knows of its own commits),
// nor when a batch sent again is a duplicate, nor when the agents' rows
// merge.
func TestChangesOthersOnly(t *testing.T) {
	srv := chtest.Start(t)
	rs := replicas(t, srv, "chg", 2)
	a, b := rs[0], rs[1]
	changes := func() (uint64, uint64) {
		t.Helper()
		va, err := a.Changes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.Changes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return va, vb
	}
	g := &storetest.Gen{Agent: "node1-chg", Host: "node1"}
	g2 := &storetest.Gen{Agent: "node2-chg", Host: "node2"}
	at := &storetest.AttemptSpec{ID: "attempt_1700000000000_0001_m_000000_0", JobID: "job_1700000000000_0001", Type: "map",
		Start: storetest.T0, MemoryMB: 1024, JobName: "chg", User: "u", Queue: "q",
		Procs: []storetest.ProcSpec{{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
	batch := func(g *storetest.Gen, from, to int) *wire.Batch {
		return g.Batch([]*storetest.AttemptSpec{at}, from, to, false)
	}
	a0, b0 := changes()
	b1, b2 := batch(g, 0, 5), batch(g, 5, 10)
	storetest.Ingest(t, a, b1)
	a1, b1v := changes()
	if a1 != a0 || b1v == b0 {
		t.Fatalf("a stored a batch: a's Changes %d -> %d (want the same), b's %d -> %d (want moved)", a0, a1, b0, b1v)
	}
	// b1 again through b (the agent's answer lost): a duplicate.
	if d := storetest.Ingest(t, b, b1); !d[0] {
		t.Fatal("b1 again through b: not a duplicate")
	}
	if a2, b2v := changes(); a2 != a1 || b2v != b1v {
		t.Fatalf("a duplicate moved Changes: a %d -> %d, b %d -> %d", a1, a2, b1v, b2v)
	}
	// b stores the agent's next batch, and another agent's.
	storetest.Ingest(t, b, b2)
	storetest.Ingest(t, b, batch(g2, 0, 5))
	a3, b3 := changes()
	if a3 == a1 || b3 != b1v {
		t.Fatalf("b stored 2 batches: a's Changes %d -> %d (want moved), b's %d -> %d (want the same)", a1, a3, b1v, b3)
	}
	// a stores the agent's batch after b's, then the rows merge.
	storetest.Ingest(t, a, batch(g, 10, 15))
	if err := a.Client().Exec(context.Background(), "OPTIMIZE TABLE chg.agents FINAL", nil); err != nil {
		t.Fatal(err)
	}
	if a4, b4 := changes(); a4 != a3 || b4 == b3 {
		t.Fatalf("a stored a batch: a's Changes %d -> %d (want the same), b's %d -> %d (want moved)", a3, a4, b3, b4)
	}
}
