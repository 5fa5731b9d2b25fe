package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestJobAttemptFields: a job's figures added up from the fields the
// jobs' flush reads (jobAttemptFields) are those of the whole rows, for
// rows with every field set (each a value of its own), ended or not.
func TestJobAttemptFields(t *testing.T) {
	for _, ended := range []bool{false, true} {
		var full, job store.JobTotals
		for a := range 3 {
			row := &store.AttemptRow{}
			for i := range store.AttemptFields {
				f := &store.AttemptFields[i]
				if f.Derived {
					continue
				}
				v := int64(1000*a + 10*i + 7)
				switch p := f.Ref(row).(type) {
				case *string:
					*p = f.Name + "-" + string(rune('a'+a))
				case *int64:
					*p = v
				case *int32:
					*p = int32(v)
				case *uint32:
					*p = uint32(v)
				case *bool:
					*p = ended
				case *float64:
					*p = float64(v) / 3
				}
			}
			row.Meta.JobID = "job_1_1"
			full.AddAttempt(&row.Meta, row.Host, &row.Sum)
			narrow := &store.AttemptRow{}
			for _, i := range jobAttemptFields {
				f := &store.AttemptFields[i]
				reflect.ValueOf(f.Ref(narrow)).Elem().Set(reflect.ValueOf(f.Ref(row)).Elem())
			}
			job.AddAttempt(&narrow.Meta, narrow.Host, &narrow.Sum)
		}
		if !reflect.DeepEqual(full, job) {
			t.Errorf("ended=%v: from the whole rows\n%+v\nfrom the job's fields\n%+v", ended, full, job)
		}
	}
}

// TestFlushDuePaces: the server's periodic flush (FlushDue) writes a job
// whose attempts changed at once when it was not written in the last
// JobsEvery, and else once JobsEvery has passed, saying meanwhile that it
// waits; Flush writes it at once whenever it was written.
func TestFlushDuePaces(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=paced", Clock: storetest.Clock, InsertEvery: -1,
		JobsEvery: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &storetest.Gen{Agent: "node1-paced", Host: "node1"}
	at := &storetest.AttemptSpec{ID: "attempt_1700000000000_0001_m_000000_0", JobID: "job_1700000000000_0001", Type: "map",
		Start: storetest.T0.Add(-5 * time.Minute), MemoryMB: 1024, JobName: "paced", User: "u", Queue: "q",
		Procs: []storetest.ProcSpec{{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
	cpu := func() int64 {
		t.Helper()
		page, err := s.Jobs(ctx, store.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 1 {
			return -1
		}
		return page.Jobs[0].CPUMs
	}
	due := func(wantWaiting bool) {
		t.Helper()
		// (A commit is answered once its inserts are done, before the
		// fold has taken its jobs as written: Flush waits for that, the
		// server's periodic FlushDue does not. Under load the test's
		// FlushDue came first and found no job to write.)
		s.waitWrites()
		waiting, err := s.FlushDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waiting != wantWaiting {
			t.Fatalf("FlushDue: waiting %v, want %v", waiting, wantWaiting)
		}
	}
	storetest.Commit(t, s, g.Batch([]*storetest.AttemptSpec{at}, 0, 5, false))
	due(false) // never written: at once
	first := cpu()
	if first <= 0 {
		t.Fatalf("the job's CPU after the first flush: %d", first)
	}
	storetest.Commit(t, s, g.Batch([]*storetest.AttemptSpec{at}, 5, 10, false))
	due(true) // written just now: it waits
	if got := cpu(); got != first {
		t.Fatalf("the job's CPU %d after a flush that let it wait, want %d", got, first)
	}
	testsrv.WaitUntil(t, "the job written once JobsEvery passed", 30*time.Second, func() bool {
		waiting, err := s.FlushDue(ctx)
		return err == nil && !waiting
	})
	second := cpu()
	if second <= first {
		t.Fatalf("the job's CPU %d after it was due, want more than %d", second, first)
	}
	storetest.Commit(t, s, g.Batch([]*storetest.AttemptSpec{at}, 10, 15, false))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cpu(); got <= second {
		t.Fatalf("the job's CPU %d after Flush, want more than %d", got, second)
	}
}

// TestFlushDueInsertsPaced: the periodic flush inserts jobs at most every
// JobsInsertEvery: a job never written, due just after another was
// inserted, waits (FlushDue says so) and is inserted once that has
// passed; Flush inserts it at once.
func TestFlushDueInsertsPaced(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=inserts_paced", Clock: storetest.Clock, InsertEvery: -1,
		JobsEvery: -1, JobsInsertEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spec := func(n int) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1700000000000_%04d_m_000000_0", n),
			JobID: fmt.Sprintf("job_1700000000000_%04d", n), Type: "map", Start: storetest.T0.Add(-5 * time.Minute),
			MemoryMB: 1024, JobName: "ipaced", User: "u", Queue: "q",
			Procs: []storetest.ProcSpec{{PID: int32(100 + n), Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
	}
	// (An attempt is described in its agent's first batch: an agent each.)
	batch := func(n int) *wire.Batch {
		g := &storetest.Gen{Agent: fmt.Sprintf("node%d-ipaced", n), Host: fmt.Sprintf("node%d", n)}
		return g.Batch([]*storetest.AttemptSpec{spec(n)}, 0, 5, false)
	}
	jobs := func() int {
		t.Helper()
		page, err := s.Jobs(ctx, store.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Jobs)
	}
	due := func(wantWaiting bool, wantJobs int) {
		t.Helper()
		s.waitWrites() // (TestFlushDuePaces)
		waiting, err := s.FlushDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if waiting != wantWaiting {
			t.Fatalf("FlushDue: waiting %v, want %v", waiting, wantWaiting)
		}
		if n := jobs(); n != wantJobs {
			t.Fatalf("after FlushDue: %d jobs, want %d", n, wantJobs)
		}
	}
	storetest.Commit(t, s, batch(1))
	due(false, 1) // nothing inserted before: at once
	storetest.Commit(t, s, batch(2))
	due(true, 1) // inserted just now: job 2 waits
	due(true, 1)
	s.wmu.Lock()
	s.jobsInserted = s.jobsInserted.Add(-time.Hour) // (JobsInsertEvery passed)
	s.wmu.Unlock()
	due(false, 2)
	storetest.Commit(t, s, batch(3))
	due(true, 2)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := jobs(); n != 3 {
		t.Fatalf("after Flush: %d jobs, want 3", n)
	}
}

// TestFlushLetsCommitsGoOn: the jobs' flush reads and inserts without the
// writer's lock: while a flush is held before its reads, a commit begins,
// stores its batch and ends in the fold (it used to wait for the flush's
// reads and inserts: 0.9 s for 68 new jobs at load 12). What the commit
// stored meanwhile is not lost to the job: the next flush adds it up
// from the rows held and the commit's own, which the flush held did not
// take.
func TestFlushLetsCommitsGoOn(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=flush_goes_on", Clock: storetest.Clock, InsertEvery: -1,
		JobsEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const job = "job_1700000000000_0001"
	g := &storetest.Gen{Agent: "node1-goes-on", Host: "node1"}
	at := []*storetest.AttemptSpec{{ID: "attempt_1700000000000_0001_m_000000_0", JobID: job, Type: "map",
		Start: storetest.T0.Add(-5 * time.Minute), MemoryMB: 1024, JobName: "goes-on", User: "u", Queue: "q",
		Procs: []storetest.ProcSpec{{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}}
	// The job held (its first flush), then changed.
	storetest.Commit(t, s, g.Batch(at, 0, 5, false))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.Commit(t, s, g.Batch(at, 5, 10, false))
	held, release := make(chan struct{}), make(chan struct{})
	defer close(release) // (before Close: the flush held ends)
	s.flushHeld = func() {
		close(held)
		<-release
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	<-held
	s.flushHeld = nil
	committed := make(chan error, 1)
	go func() {
		app, err := s.Begin(ctx)
		if err == nil {
			if _, err = app.Append(g.Batch(at, 10, 15, false)); err == nil {
				err = app.Commit()
			}
		}
		if err == nil {
			s.waitWrites() // (ended in the fold too)
		}
		committed <- err
	}()
	testsrv.WaitUntil(t, "a commit stored and ended while a flush is held", 30*time.Second, func() bool {
		select {
		case err := <-committed:
			if err != nil {
				t.Fatalf("the commit during the flush: %v", err)
			}
			return true
		default:
			return false
		}
	})
	release <- struct{}{} // (the flush goes on; the deferred close then finds none waiting)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	s.jobsRead, s.jobsLooked = 0, 0
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkJob(t, s, job, "the flush after a commit during a flush", "held", 1)
}
