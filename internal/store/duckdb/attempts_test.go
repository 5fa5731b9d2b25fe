package duckdb

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestAttemptColumns: the live tables of attempts, of a new data directory
// and of one of schema 8 migrated, have the columns the fields package
// store declares (store.AttemptFields) with their types, and the store's
// own; a new one in their order.
func TestAttemptColumns(t *testing.T) {
	check := func(t *testing.T, s *Store, ordered bool) {
		t.Helper()
		for _, table := range []string{"attempts", "attempt_log"} {
			names, types, err := s.liveColumns(context.Background(), table)
			if err != nil {
				t.Fatal(err)
			}
			want := wantColumns(table)
			if len(names) != len(want) {
				t.Errorf("%s: columns %v, want %d: %v", table, names, len(want), want)
			}
			for i, n := range names {
				if want[n] != types[i] {
					t.Errorf("%s.%s: %s, the fields declare %q", table, n, types[i], want[n])
				}
			}
			if ordered && !slices.Equal(names, columnOrder(table)) {
				t.Errorf("%s: columns %v, want %v", table, names, columnOrder(table))
			}
		}
	}
	t.Run("new", func(t *testing.T) {
		s, err := Open(testOptions(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s, true)
	})
	t.Run("schema8", func(t *testing.T) {
		dir := oldDataDir(t, "8", exitColumnsDDL, []string{"exit_nm"}, "attempt_1700000000000_0009_m_000000_0",
			"job_1700000000000_0009", "", nil)
		s, err := Open(testOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s, false)
	})
}

// TestMigrateSchema10: an attempt stored by schema 10 (its span as its
// times, its summary's last time as sample_ms) reads as it did once its
// tables take the fields' names, and goes on: a batch after it merges
// into it.
func TestMigrateSchema10(t *testing.T) {
	old := "attempt_1700000000000_0012_m_000000_0"
	t0 := storetest.T0.UnixMilli()
	dir := oldDataDir(t, "10", "nothing", nil, old, "job_1700000000000_0012", "cpu_ms, sample_ms, processes",
		[]any{4000, t0 + 1000, 2})
	s, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Attempt(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	if a.Start != store.Time(t0) || a.End != store.Time(t0+1000) || a.DurationMs != 1000 || a.CPUMs != 4000 || a.Processes != 0 ||
		a.Host != "node1" || a.State != store.StateFinished {
		t.Errorf("the old attempt reads %+v", a.Attempt)
	}
	var first, last, sumLast int64
	if err := s.DB().QueryRow(`SELECT meta_first_ms, meta_last_ms, sum_last_ms FROM attempts WHERE attempt_id = ?`, old).
		Scan(&first, &last, &sumLast); err != nil || first != t0 || last != t0+1000 || sumLast != t0+1000 {
		t.Errorf("its description's and summary's times: %d %d %d, %v", first, last, sumLast, err)
	}
	// A new attempt of its job beside it.
	id := "attempt_1700000000000_0012_m_000000_1"
	storetest.Ingest(t, s, retryBatch(id, "job_1700000000000_0012", func(*wire.Attempt, int64) {}))
	j, err := s.Job(context.Background(), "job_1700000000000_0012")
	if err != nil {
		t.Fatal(err)
	}
	if len(j.AttemptList) != 2 || j.Attempts != 2 || j.AttemptList[0].Processes != 2 || j.AttemptList[1].RetryOf != old ||
		j.LastSeen < store.Time(t0+time.Second.Milliseconds()) {
		t.Errorf("the job after a new attempt: %+v", j)
	}
}
