package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestCommitFindsAttemptsOffTheIndex: a commit reads an attempt it does
// not hold where the index says it is, and, in a store made before the
// index rows went in first (indexFirst), one the index has no row of (a
// commit that failed half way wrote its row but not its index's) by a
// read of its job's keys and days: both go on from their rows, as commits
// with nothing lost make them, rather than starting again.
func TestCommitFindsAttemptsOffTheIndex(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	open := func(db string) *Store {
		s, err := Open(ctx, Options{URL: srv.URL() + "?database=" + db, Clock: storetest.Clock, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		if !s.indexFirst {
			t.Fatalf("%s: a store made now is not marked index_first", db)
		}
		s.indexFirst = false // (as a store made before)
		return s
	}
	g := &storetest.Gen{Agent: "node1-off", Host: "node1"}
	atts := []*storetest.AttemptSpec{
		{ID: "attempt_1800000000000_0003_m_000001_0", JobID: "job_1800000000000_0003", Type: "map", Start: storetest.T0,
			Procs: []storetest.ProcSpec{{PID: 1000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}},
		{ID: "attempt_1800000000000_0004_m_000002_0", JobID: "job_1800000000000_0004", Type: "map", Start: storetest.T0,
			Procs: []storetest.ProcSpec{{PID: 1001, Role: wire.RoleTaskJVM, CPUPerS: 300, RSS: 1 << 27}}},
	}
	bs := []*wire.Batch{g.Batch(atts, 0, 5, false), g.Batch(atts, 5, 10, false)}
	// (The second describes the attempts again: the job it names is where
	// an attempt off the index is looked for.)
	bs[1].Attempts = bs[0].Attempts

	ref := open("off_ref")
	defer ref.Close()
	for _, b := range bs {
		storetest.Ingest(t, ref, b)
	}

	s := open("off")
	storetest.Ingest(t, s, bs[0])
	// The second attempt's index row is gone; a new store holds nothing.
	if err := s.c.Exec(ctx, "ALTER TABLE "+s.schema.Local("attempt_index")+" DELETE WHERE attempt_id = "+Quote(atts[1].ID), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open("off")
	defer s.Close()
	// (A mutation: done in the background.)
	testsrv.WaitUntil(t, "the index row deleted", 30*time.Second, func() bool {
		n, err := s.uint64s(ctx, "SELECT count() FROM "+s.read("attempt_index")+" WHERE attempt_id = "+Quote(atts[1].ID))
		if err != nil {
			t.Fatal(err)
		}
		return n[0] == 0
	})
	storetest.Ingest(t, s, bs[1])
	version := func(s *Store, id string) uint64 {
		v, err := s.uint64s(ctx, "SELECT max(version) FROM "+s.read("attempts")+" WHERE attempt_id = "+Quote(id))
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	for _, a := range atts {
		got, err := s.Attempt(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Attempt(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		// (Taken for new, its row would start again at version 1.)
		if v, w := version(s, a.ID), version(ref, a.ID); v != w {
			t.Errorf("%s: row version %d, want %d", a.ID, v, w)
		}
		if got.CPUMs != want.CPUMs || got.Start != want.Start || got.LastSeen != want.LastSeen || got.PeakRSS != want.PeakRSS {
			t.Errorf("%s: CPU %d ms, from %d to %d, peak RSS %d; stored with nothing lost: %d, %d to %d, %d", a.ID,
				got.CPUMs, got.Start, got.LastSeen, got.PeakRSS, want.CPUMs, want.Start, want.LastSeen, want.PeakRSS)
		}
	}
}

// TestJobsFlushReadsTheirDays: a job's figures are added up from its
// attempts in the days from its row's on (jobsFrom), and an attempt of an
// earlier day that comes late (an agent's spool) is counted too, by this
// replica and by one opened again on the store.
func TestJobsFlushReadsTheirDays(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	open := func() *Store {
		s, err := Open(ctx, Options{URL: srv.URL() + "?database=jobdays", Clock: storetest.Clock, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const job = "job_1800000000000_0005"
	s := open()
	attempts := func() uint64 {
		t.Helper()
		n, err := s.uint64s(ctx, "SELECT toUInt64(attempts) FROM "+s.read("jobs")+" FINAL WHERE job_id = "+Quote(job))
		if err != nil || len(n) != 1 {
			t.Fatalf("job's row: %v, %v", n, err)
		}
		return n[0]
	}
	for i, days := range []int{0, -2, 1, -3} {
		if i == 3 {
			// A replica that holds nothing of the job.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open()
		}
		g := &storetest.Gen{Agent: fmt.Sprintf("node%d-days", i), Host: fmt.Sprintf("node%d", i)}
		a := &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1800000000000_0005_m_%06d_0", i), JobID: job, Type: "map",
			Start: storetest.T0.Add(time.Duration(days) * 24 * time.Hour), Procs: []storetest.ProcSpec{{PID: 1000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}}
		storetest.Ingest(t, s, g.Batch([]*storetest.AttemptSpec{a}, 0, 5, false))
		if n := attempts(); n != uint64(i+1) {
			t.Fatalf("after an attempt %d days from the first: the job counts %d attempts, want %d", days, n, i+1)
		}
	}
	s.Close()
}

// TestIndexBeforeAttempts: a commit inserts its attempts' index rows
// before their rows, so a commit whose index insert fails stores no
// attempt row (a store made now looks for the attempts it meets in the
// index alone); the commit sent again stores them, and a store opened
// again on the tables reads them back from their index.
func TestIndexBeforeAttempts(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	open := func() *Store {
		s, err := Open(ctx, Options{URL: srv.URL() + "?database=indexfirst", Clock: storetest.Clock, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	g := &storetest.Gen{Agent: "node1-first", Host: "node1"}
	a := &storetest.AttemptSpec{ID: "attempt_1800000000000_0007_m_000001_0", JobID: "job_1800000000000_0007", Type: "map",
		Start: storetest.T0, Procs: []storetest.ProcSpec{{PID: 1000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}}
	b0, b1 := g.Batch([]*storetest.AttemptSpec{a}, 0, 5, false), g.Batch([]*storetest.AttemptSpec{a}, 5, 10, false)
	rows := func(table string) uint64 {
		t.Helper()
		n, err := s.uint64s(ctx, "SELECT count() FROM "+s.read(table)+" WHERE attempt_id = "+Quote(a.ID))
		if err != nil {
			t.Fatal(err)
		}
		return n[0]
	}
	// The index cannot take rows (once the commit has read it).
	s.beforeInsert = func() error {
		return s.c.Exec(ctx, "DETACH TABLE "+s.schema.Local("attempt_index"), nil)
	}
	app, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Append(b0); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err == nil {
		t.Fatal("a commit whose index insert failed succeeded")
	}
	s.waitWrites()
	s.beforeInsert = nil
	if n := rows("attempts"); n != 0 {
		t.Fatalf("a commit whose index insert failed stored %d rows of its attempt", n)
	}
	if err := s.c.Exec(ctx, "ATTACH TABLE "+s.schema.Local("attempt_index"), nil); err != nil {
		t.Fatal(err)
	}
	storetest.Ingest(t, s, b0)
	if n, m := rows("attempts"), rows("attempt_index"); n == 0 || m == 0 {
		t.Fatalf("sent again: %d rows of the attempt, %d index rows", n, m)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	storetest.Ingest(t, s, b1)
	got, err := s.Attempt(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.uint64s(ctx, "SELECT max(version) FROM "+s.read("attempts")+" WHERE attempt_id = "+Quote(a.ID)); err != nil || v[0] != 2 {
		t.Fatalf("the attempt's row version %v (%v), want 2: read back from its index, not started again", v, err)
	}
	if int64(got.LastSeen) < storetest.T0.Add(9*time.Second).UnixMilli() {
		t.Errorf("the attempt last seen %d, want its second batch's", got.LastSeen)
	}
}
