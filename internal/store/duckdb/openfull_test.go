package duckdb

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
)

// TestOpenFailsAfterReplay: an Open that fails after DuckDB replayed the
// WAL (a server started on a full disk after a crash: it cannot write its
// schema) closes the instance, and DuckDB's checkpoint at shutdown wrote
// the indexes as they were before the WAL, without the rows it brought back
// (duckdb/duckdb#23788, fixed after 1.5): with room again, processes and
// memberships were not found through their indexes (since schema 7 they are
// rows of proc_log, without an index: this checks that the rows the WAL
// brought back are there), and the API showed attempts without processes
// (TestServerDiskFull, 1 run in 5). The store disables that checkpoint: Close checkpoints itself, and what an instance
// closed otherwise holds stays in the WAL. Here Open fails on a schema
// version, the first thing it checks after writing its schema.
func TestOpenFailsAfterReplay(t *testing.T) {
	live := t.TempDir()
	st, err := Open(Options{Dir: live})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 10, Slots: 3, BatchTicks: 5, Seed: 5,
		Start: time.Now().Add(-3 * time.Hour).Truncate(time.Second)})
	procs := map[string]map[uint64]bool{} // attempt -> its processes
	for r := range 40 {
		app, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range g.Next() {
			b.AgentID, b.Seq = "agent-"+b.Host, uint64(r+1)
			for _, m := range b.Members {
				if procs[m.AttemptID] == nil {
					procs[m.AttemptID] = map[uint64]bool{}
				}
				procs[m.AttemptID][m.Process] = true
			}
			if _, err := app.Append(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		if r == 15 {
			if err := st.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE meta SET value = 'other' WHERE key = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	// The files as a crash leaves them: the WAL holds 24 rounds.
	dir := t.TempDir()
	for _, name := range []string{"taskscope.duckdb", "taskscope.duckdb.wal"} {
		b, err := os.ReadFile(filepath.Join(live, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := Open(Options{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("opened a store of another schema version")
	} else if !strings.Contains(err.Error(), "schema version") {
		t.Fatal(err)
	}
	// What the files hold now, read without writing: every attempt's
	// memberships and processes.
	db, err := sql.Open("duckdb", filepath.Join(dir, "taskscope.duckdb")+"?access_mode=read_only")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	missing, missingProcs := 0, 0
	for id, keys := range procs {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM proc_log WHERE member AND attempt_key = ?`,
			keyValue(store.AttemptKey(id))).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			missing++
		}
		for k := range keys {
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM proc_log WHERE pid IS NOT NULL AND proc_key = ?`,
				keyValue(k)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				missingProcs++
			}
		}
	}
	if missing+missingProcs > 0 {
		t.Errorf("after an Open that failed, %d of %d attempts' memberships and %d processes are not found",
			missing, len(procs), missingProcs)
	}
}
