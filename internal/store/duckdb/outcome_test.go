package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestMigrateSchema8: a data directory of schema 8 (before attempts' exit
// columns) opens: the columns are added, its attempts read as before
// (nothing seen of their end), and new ones take their exits.
func TestMigrateSchema8(t *testing.T) {
	old := "attempt_1700000000000_0009_m_000000_0"
	dir := oldDataDir(t, "8", exitColumnsDDL, []string{"exit_nm"}, old, "job_1700000000000_0009", "", nil)
	openTwice(t, dir, old, func(i int, s *Store, a *store.AttemptDetail) {
		if a.State != store.StateFinished || a.Outcome != "" || a.ExitCode != nil {
			t.Errorf("open %d: the old attempt: %s, outcome %q, exit %v", i, a.State, a.Outcome, a.ExitCode)
		}
		if i == 0 {
			storetest.Ingest(t, s, retryBatch("attempt_1700000000000_0009_m_000000_1", "job_1700000000000_0009", func(a *wire.Attempt, at int64) {
				a.JVMExit = wire.ExitStatus{Status: 1 << 8, Ms: at}
			}))
		}
		j, err := s.Job(context.Background(), "job_1700000000000_0009")
		if err != nil {
			t.Fatal(err)
		}
		if len(j.AttemptList) != 2 || j.AttemptList[1].Outcome != store.OutcomeFailed || j.AttemptList[1].RetryOf != old {
			t.Errorf("open %d: %+v", i, j.AttemptList)
		}
	})
}

// TestMigrateSchema9: a data directory of schema 9 (exit columns, but not
// the task's log) opens: the columns are added, its attempts keep their
// exits, and new ones take the task's log (Hadoop 1: a Child that exited
// 0 after its task failed is failed from its log).
func TestMigrateSchema9(t *testing.T) {
	old := "attempt_1700000000000_0011_m_000000_0"
	dir := oldDataDir(t, "9", taskLogColumnsDDL, []string{"exit_log", "exit_log_ms"}, old, "job_1700000000000_0011",
		"exit_jvm, exit_jvm_ms", []any{9, storetest.T0.Add(time.Second).UnixMilli()})
	openTwice(t, dir, old, func(i int, s *Store, a *store.AttemptDetail) {
		if a.Outcome != store.OutcomeKilled || a.ExitCode == nil || *a.ExitCode != 137 || a.ExitSource != store.ExitSourceTaskJVM {
			t.Errorf("open %d: the old attempt: outcome %q, exit %v from %q", i, a.Outcome, a.ExitCode, a.ExitSource)
		}
		id := "attempt_1700000000000_0011_m_000000_1"
		if i == 0 {
			storetest.Ingest(t, s, retryBatch(id, "job_1700000000000_0011", func(a *wire.Attempt, at int64) {
				a.JVMExit = wire.ExitStatus{Status: 0, Ms: at}
				a.TaskLog = wire.ExitStatus{Status: 1, Ms: at}
			}))
		}
		a, err := s.Attempt(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if a.Outcome != store.OutcomeFailed || a.ExitCode == nil || *a.ExitCode != 1 || a.ExitSource != store.ExitSourceTaskLog {
			t.Errorf("open %d: the new attempt: outcome %q, exit %v from %q", i, a.Outcome, a.ExitCode, a.ExitSource)
		}
	})
}

// openTwice opens the data directory dir twice (the migration, then a
// store already migrated), each time handing check the open store and its
// attempt old; it closes the store after.
func openTwice(t *testing.T, dir, old string, check func(i int, s *Store, a *store.AttemptDetail)) {
	t.Helper()
	for i := 0; i < 2; i++ {
		s, err := Open(testOptions(dir))
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		a, err := s.Attempt(context.Background(), old)
		if err != nil {
			t.Fatal(err)
		}
		check(i, s, a)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// oldDataDir makes a data directory of an older schema: today's without
// the columns of ddl, the version said; it checks that the columns named
// absent are not there, and stores one ended attempt of job (with the
// older schema's columns cols set to vals, if any).
// The tables of attempts as schema 10 made them, before they followed the
// fields package store declares (the older schemas had the same but
// their last exit columns).
const (
	exitColumnsDDL = `exit_jvm INTEGER, exit_jvm_ms BIGINT, exit_root INTEGER, exit_root_ms BIGINT, exit_file INTEGER,
		exit_file_ms BIGINT, exit_nm INTEGER, exit_nm_ms BIGINT, exit_diag VARCHAR, oom_kills UINTEGER, ` + taskLogColumnsDDL
	taskLogColumnsDDL = `exit_log INTEGER, exit_log_ms BIGINT`
	attemptsDDL10     = `CREATE TABLE IF NOT EXISTS attempts (attempt_id VARCHAR PRIMARY KEY, job_id VARCHAR NOT NULL,
		host VARCHAR, container_id VARCHAR, app_id VARCHAR, type VARCHAR, framework VARCHAR, first_ms BIGINT, last_ms BIGINT,
		ended BOOLEAN, job_name VARCHAR, user_name VARCHAR, queue VARCHAR, memory_mb BIGINT, java_opts VARCHAR,
		xmx_bytes BIGINT, streaming BOOLEAN, cpu_ms BIGINT, peak_rss BIGINT, peak_pss BIGINT, peak_vms BIGINT,
		peak_heap BIGINT, read_bytes BIGINT, write_bytes BIGINT, gc_time_ms BIGINT, sched_wait_ms BIGINT,
		rss_byte_ms DOUBLE, processes INTEGER, sample_ms BIGINT, last_rss BIGINT, attempt_key BIGINT,
		gen_first UBIGINT, gen_last UBIGINT, ` + exitColumnsDDL + `)`
	attemptLogDDL10 = `CREATE TABLE IF NOT EXISTS attempt_log (gen UBIGINT, host VARCHAR, attempt_id VARCHAR, job_id VARCHAR,
		app_id VARCHAR, container_id VARCHAR, type VARCHAR, framework VARCHAR, first_ms BIGINT, last_ms BIGINT,
		ended BOOLEAN, job_name VARCHAR, user_name VARCHAR, queue VARCHAR, memory_mb BIGINT, java_opts VARCHAR,
		xmx_bytes BIGINT, streaming BOOLEAN, ` + exitColumnsDDL + `)`
)

func oldDataDir(t *testing.T, version, ddl string, absent []string, attempt, job, cols string, vals []any) string {
	t.Helper()
	dir := t.TempDir()
	c, err := duck.NewConnector(filepath.Join(dir, "taskscope.duckdb"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db := sql.OpenDB(c)
	defer db.Close()
	for _, q := range schema() {
		switch q {
		case attemptsDDL():
			q = attemptsDDL10
		case attemptLogDDL():
			q = attemptLogDDL10
		}
		q = strings.ReplaceAll(q, ", "+ddl, "")
		q = strings.ReplaceAll(q, "'schema_version', '"+schemaVersion+"'", "'schema_version', '"+version+"'")
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM duckdb_columns() WHERE table_name IN ('attempts', 'attempt_log')
		AND column_name IN ('` + strings.Join(absent, "', '") + `')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s has %v (%d, %v)", version, absent, n, err)
	}
	q := `INSERT INTO attempts (attempt_id, job_id, host, first_ms, last_ms, ended, gen_first, gen_last%s)
		VALUES (?, ?, 'node1', ?, ?, true, 1, 1%s)`
	args := []any{attempt, job, storetest.T0.UnixMilli(), storetest.T0.Add(time.Second).UnixMilli()}
	extra, marks := "", ""
	if cols != "" {
		extra, marks = ", "+cols, strings.Repeat(", ?", len(vals))
		args = append(args, vals...)
	}
	if _, err := db.Exec(fmt.Sprintf(q, extra, marks), args...); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO jobs (job_id, first_ms, last_ms, attempts, running, gen_lo, gen_hi)
		VALUES (?, 0, 0, 1, 0, 1, 1)`, job); err != nil {
		t.Fatal(err)
	}
	return dir
}

// retryBatch is a batch of attempt id of job, a map that ran 3 s from
// T0+5s and ended, its description changed by exit (given when it ended).
func retryBatch(id, job string, exit func(a *wire.Attempt, at int64)) *wire.Batch {
	g := &storetest.Gen{Agent: "node1-m", Host: "node1"}
	spec := &storetest.AttemptSpec{ID: id, JobID: job, Type: "map", Start: storetest.T0.Add(5 * time.Second),
		Procs: []storetest.ProcSpec{{PID: 10, Role: wire.RoleTaskJVM, CPUPerS: 10, RSS: 1 << 20}}}
	b := g.Batch([]*storetest.AttemptSpec{spec}, 0, 3, true)
	exit(&b.Attempts[len(b.Attempts)-1], storetest.T0.Add(8*time.Second).UnixMilli())
	return b
}

// TestRecoverExits: exits committed but not yet in the summaries when the
// store crashed are read again from the attempts' log.
func TestRecoverExits(t *testing.T) {
	opt := testOptions(t.TempDir())
	opt.SummaryEvery = time.Hour
	s, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	g := &storetest.Gen{Agent: "node1-x", Host: "node1"}
	spec := &storetest.AttemptSpec{ID: "attempt_1700000000000_0010_m_000000_0", JobID: "job_1700000000000_0010",
		Type: "map", Start: storetest.T0, Procs: []storetest.ProcSpec{{PID: 10, Role: wire.RoleTaskJVM, CPUPerS: 10, RSS: 1 << 20}}}
	commit := func(b *wire.Batch) {
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
	}
	commit(g.Batch([]*storetest.AttemptSpec{spec}, 0, 3, false))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b := g.Batch([]*storetest.AttemptSpec{spec}, 3, 6, true)
	a := &b.Attempts[len(b.Attempts)-1]
	a.RootExit = wire.ExitStatus{Status: 15, Ms: storetest.T0.Add(6 * time.Second).UnixMilli()}
	a.NMExit = wire.ExitStatus{Status: store.YarnKilledExceededPmem, Ms: storetest.T0.Add(7 * time.Second).UnixMilli()}
	a.ExitDiagnostics = "running beyond physical memory limits"
	a.TaskLog = wire.ExitStatus{Status: 0, Ms: storetest.T0.Add(6 * time.Second).UnixMilli()}
	commit(b)
	r, err := Open(testOptions(crashImage(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Attempt(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != store.OutcomeKilledMemory || got.ExitCode == nil || *got.ExitCode != -104 ||
		got.ExitDiagnostics != "running beyond physical memory limits" || got.ExitSource != store.ExitSourceNodeManager {
		t.Errorf("recovered: %q %v %q", got.Outcome, got.ExitCode, got.ExitDiagnostics)
	}
}
