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

// TestJobsAddedUpHeld: the jobs' flush adds a job up from the attempts'
// rows it read before and those its replica stored since (jobcache.go),
// reading it again only when another replica stored meanwhile, or after a
// commit that failed; the job's figures are those its attempts' rows in
// ClickHouse add up to, at every step.
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
	// a read the job from ClickHouse (or not) at its last flush.
	check := func(step string, wantRead bool, wantAttempts int) {
		t.Helper()
		rows, err := a.readJobAttempts(ctx, []string{job})
		if err != nil {
			t.Fatal(err)
		}
		var want store.JobTotals
		for _, st := range rows[job] {
			want.AddAttempt(&st.Meta, st.Host, &st.Sum)
		}
		page, err := a.Jobs(ctx, store.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 1 {
			t.Fatalf("%s: %d jobs", step, len(page.Jobs))
		}
		got := page.Jobs[0]
		if got.Attempts != wantAttempts || got.Attempts != want.Attempts || got.Running != want.Running ||
			got.CPUMs != want.CPUMs || got.PeakRSS != want.PeakRSS || got.Hosts != len(want.Hosts) ||
			got.MemGBHours != want.MemGBHours() || got.UsedGBHours != want.UsedGBHours() {
			t.Errorf("%s: the job's row says %d attempts (%d running), %d ms, peak %d, %d hosts, %g/%g GB-hours; its attempts' rows %d (%d), %d ms, peak %d, %d hosts, %g/%g (want %d attempts)",
				step, got.Attempts, got.Running, got.CPUMs, got.PeakRSS, got.Hosts, got.MemGBHours, got.UsedGBHours,
				want.Attempts, want.Running, want.CPUMs, want.PeakRSS, len(want.Hosts), want.MemGBHours(), want.UsedGBHours(),
				wantAttempts)
		}
		if read := a.jobsRead > 1; read != wantRead { // (its own check read it once)
			t.Errorf("%s: the flush read the job from ClickHouse: %v, want %v", step, read, wantRead)
		}
		a.jobsRead = 0
	}
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 0, 5, false))
	check("first", true, 1)
	// (An attempt is described in its first batch: at2's agent is
	// another.)
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 5, 10, false), g3.Batch([]*storetest.AttemptSpec{at2}, 0, 5, false))
	check("a's second commit", false, 2)
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 10, 15, false), g3.Batch([]*storetest.AttemptSpec{at2}, 5, 10, false))
	check("a's third commit", false, 2)
	// Another replica stores an attempt of the job, then a stores more of
	// its own (its row of the job then of a higher version than b's).
	storetest.Ingest(t, b, g2.Batch([]*storetest.AttemptSpec{at3}, 0, 5, false))
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 15, 20, false), g3.Batch([]*storetest.AttemptSpec{at2}, 10, 15, false))
	check("after b stored", true, 3)
	storetest.Ingest(t, a, g1.Batch([]*storetest.AttemptSpec{at1}, 20, 25, true), g3.Batch([]*storetest.AttemptSpec{at2}, 15, 20, true))
	check("a's attempts ended", false, 3)
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
	check("after a failed commit", true, 4)
}
