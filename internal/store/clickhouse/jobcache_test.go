package clickhouse

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestJobsAddedUpHeld: the jobs' flush adds a job up from the attempts'
// rows it read before and those its replica stored since (jobcache.go),
// reading it again only when another replica stored meanwhile, or after a
// commit that failed; a job it meets first, of rows its replica alone
// stored, it adds up from those after a narrow look (notOwnOnly); the
// job's figures are those its attempts' rows in ClickHouse add up to, at
// every step.
func TestJobsAddedUpHeld(t *testing.T) {
	srv := chtest.Start(t)
	rs := replicas(t, srv, "held", 2)
	a, b := rs[0], rs[1]
	ctx := context.Background()
	const job = "job_1700000000000_0001"
	g1 := &storetest.Gen{Agent: "node1-held", Host: "node1"}
	g2 := &storetest.Gen{Agent: "node2-held", Host: "node2"}
	g3 := &storetest.Gen{Agent: "node3-held", Host: "node3"}
	spec := func(n int, mem int64) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: "attempt_1700000000000_0001_m_00000" + string(rune('0'+n)) + "_0", JobID: job,
			Type: "map", Start: storetest.T0.Add(time.Duration(n) * time.Second), MemoryMB: mem, JobName: "held", User: "u",
			Queue: "q", Procs: []storetest.ProcSpec{{PID: int32(100 + n), Role: wire.RoleTaskJVM, CPUPerS: 300 + int64(n)*100,
				RSS: int64(n) << 20}}}
	}
	at1, at2, at3 := spec(1, 1024), spec(2, 2048), spec(3, 512)
	// check: a's row of the job is what its attempts' rows add up to, and
	// how its last flush took the job (checkJob).
	check := func(step string, want string, wantAttempts int) {
		t.Helper()
		checkJob(t, a, job, step, want, wantAttempts)
	}
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 0, 5, false))
	check("first", "own", 1)
	// (An attempt is described in its first batch: at2's agent is
	// another.)
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 5, 10, false), g3.Batch([]*storetest.AttemptSpec{at2}, 0, 5, false))
	check("a's second commit", "held", 2)
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 10, 15, false), g3.Batch([]*storetest.AttemptSpec{at2}, 5, 10, false))
	check("a's third commit", "held", 2)
	// Another replica stores an attempt of the job, then a stores more of
	// its own (its row of the job then of a higher version than b's): a
	// reads the job, with no narrow look first (replicas storing at once
	// share their jobs).
	storetest.Ingest(t, b, g2.Batch([]*storetest.AttemptSpec{at3}, 0, 5, false))
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 15, 20, false), g3.Batch([]*storetest.AttemptSpec{at2}, 10, 15, false))
	check("after b stored", "read", 3)
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 20, 25, true), g3.Batch([]*storetest.AttemptSpec{at2}, 15, 20, true))
	check("a's attempts ended", "held", 3)
	// A commit that fails: the job is read again at the next flush.
	failed := errors.New("held: failed on purpose")
	a.wmu.Lock()
	a.beforeInsert = func() error { return failed }
	a.wmu.Unlock()
	app, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	more := spec(4, 256)
	g4 := &storetest.Gen{Agent: "node4-held", Host: "node4"}
	if _, err := app.Append(g4.Batch([]*storetest.AttemptSpec{more}, 0, 5, false)); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); !errors.Is(err, failed) {
		t.Fatalf("the commit that fails: %v", err)
	}
	a.waitWrites() // (the failed commit ended in the fold: the next does not build on it)
	a.wmu.Lock()
	a.beforeInsert = nil
	a.wmu.Unlock()
	storetest.Ingest(t, a, g4.Batch([]*storetest.AttemptSpec{more}, 0, 5, false))
	check("after a failed commit", "looked, read", 4)
	// A new job, one of whose attempts' rows in ClickHouse is of a later
	// version than the one a stored (as a commit's that failed after its
	// attempts' insert): read, not added up from a's own.
	const job2 = "job_1700000000000_0002"
	at6 := spec(6, 1024)
	at6.ID, at6.JobID = "attempt_1700000000000_0002_m_000006_0", job2
	g6 := &storetest.Gen{Agent: "node6-held", Host: "node6"}
	storetest.Commit(t, a, g6.Batch([]*storetest.AttemptSpec{at6}, 0, 5, false))
	later := strings.Join(attemptCols, ", ")
	later = strings.Replace(later, "version", "version + 1", 1)
	later = strings.Replace(later, "cpu_ms", "cpu_ms + 1000", 1)
	if err := a.Client().Exec(ctx, "INSERT INTO held.attempts ("+strings.Join(attemptCols, ", ")+") SELECT "+later+
		" FROM held.attempts FINAL WHERE attempt_id = "+Quote(at6.ID), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkJob(t, a, job2, "a later version than a's own", "looked, read", 1)
	// A replica opened on the store (a restart) storing an attempt of the
	// job: the others' rows are not its own, so it reads them.
	c := replicas(t, srv, "held", 1)[0]
	at5 := spec(5, 128)
	g5 := &storetest.Gen{Agent: "node5-held", Host: "node5"}
	storetest.Ingest(t, c, g5.Batch([]*storetest.AttemptSpec{at5}, 0, 5, false))
	checkJob(t, c, job, "a restart's first flush", "looked, read", 5)
}

// checkJob checks that s's row of job is what its attempts' rows add up
// to, of wantAttempts attempts, and that s's last flush read the job from
// ClickHouse ("read"), or looked it up narrow only ("own"), or both
// ("looked, read"), or neither ("held").
func checkJob(t *testing.T, s *Store, job, step, wantHow string, wantAttempts int) {
	t.Helper()
	ctx := context.Background()
	how := "held"
	switch {
	case s.jobsRead > 0 && s.jobsLooked > 0:
		how = "looked, read"
	case s.jobsRead > 0:
		how = "read"
	case s.jobsLooked > 0:
		how = "own"
	}
	s.jobsRead, s.jobsLooked = 0, 0
	if how != wantHow {
		t.Errorf("%s: the flush's job was %s, want %s", step, how, wantHow)
	}
	rows, err := s.readJobAttempts(ctx, []string{job}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.jobsRead = 0
	var want store.JobTotals
	for _, st := range rows[job] {
		want.AddAttempt(&st.Meta, st.Host, &st.Sum)
	}
	page, err := s.Jobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(page.Jobs, func(j store.Job) bool { return j.JobID == job })
	if i < 0 {
		t.Fatalf("%s: no job %s among %d", step, job, len(page.Jobs))
	}
	got := page.Jobs[i]
	if got.Attempts != wantAttempts || got.Attempts != want.Attempts || got.Running != want.Running ||
		got.CPUMs != want.CPUMs || got.PeakRSS != want.PeakRSS || got.Hosts != len(want.Hosts) ||
		got.MemGBHours != want.MemGBHours() || got.UsedGBHours != want.UsedGBHours() {
		t.Errorf("%s: the job's row says %d attempts (%d running), %d ms, peak %d, %d hosts, %g/%g GB-hours; its attempts' rows %d (%d), %d ms, peak %d, %d hosts, %g/%g (want %d attempts)",
			step, got.Attempts, got.Running, got.CPUMs, got.PeakRSS, got.Hosts, got.MemGBHours, got.UsedGBHours,
			want.Attempts, want.Running, want.CPUMs, want.PeakRSS, len(want.Hosts), want.MemGBHours(), want.UsedGBHours(),
			wantAttempts)
	}
}
