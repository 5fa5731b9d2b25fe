package clickhouse

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestRetentionByLastDay: Maintain drops a table's partition once its
// last day is past the retention: a day's partition of attempts, and a
// month's of attempt_index only when every day of it is past (its rows
// of a day still kept stay, and those of a day past with them), as an
// attempt_index made by an older version, by day, is dropped day by day.
func TestRetentionByLastDay(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	days := []string{"2026-09-05", "2026-10-10", "2026-10-25"}
	for _, tc := range []struct {
		db       string
		oldIndex bool // attempt_index made as before: by day, marks of 1024
		// The days of attempt_index rows left after Maintain.
		index []string
	}{
		{db: "keepnew", index: []string{"2026-10-10", "2026-10-25"}},
		{db: "keepold", oldIndex: true, index: []string{"2026-10-25"}},
	} {
		t.Run(tc.db, func(t *testing.T) {
			c, err := NewClient(srv.URL()+"?database="+tc.db, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.oldIndex {
				for _, q := range []string{"CREATE DATABASE " + tc.db,
					"CREATE TABLE " + tc.db + ".attempt_index (day Date, attempt_key UInt64, attempt_id String, job_key UInt64) " +
						"ENGINE = ReplacingMergeTree() PARTITION BY day ORDER BY (attempt_key, attempt_id) SETTINGS index_granularity = 1024"} {
					if err := c.WithDatabase("default").Exec(ctx, q, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			s, err := Open(ctx, Options{URL: srv.URL() + "?database=" + tc.db, Clock: storetest.Clock, InsertEvery: -1,
				RollupRetention: 30 * 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, d := range days {
				for _, table := range []string{"attempts", "attempt_index"} {
					if err := s.c.Exec(ctx, "INSERT INTO "+s.schema.Write(table)+" (day, attempt_id) VALUES ("+Quote(d)+", "+
						Quote("attempt_"+d)+")", nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := s.Maintain(ctx, now); err != nil {
				t.Fatal(err)
			}
			left := func(table string) []string {
				t.Helper()
				rows, err := s.query(ctx, "SELECT toString(day) FROM "+s.read(table)+" ORDER BY day")
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for rows.Next() {
					out = append(out, rows.String())
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				return out
			}
			// 30 days before the 20th of November: the 21st of October.
			if got, want := left("attempts"), []string{"2026-10-25"}; !slices.Equal(got, want) {
				t.Errorf("attempts' days left = %v, want %v", got, want)
			}
			if got := left("attempt_index"); !slices.Equal(got, tc.index) {
				t.Errorf("attempt_index's days left = %v, want %v", got, tc.index)
			}
			rows, err := s.c.WithDatabase("system").Query(ctx, "SELECT partition_key FROM system.tables WHERE database = "+
				Quote(tc.db)+" AND name = 'attempt_index'", nil)
			if err != nil {
				t.Fatal(err)
			}
			key := rows.String()
			if want := map[bool]string{false: "toStartOfMonth(day)", true: "day"}[tc.oldIndex]; !strings.EqualFold(key, want) {
				t.Errorf("attempt_index partitioned by %q, want %q", key, want)
			}
		})
	}
}

// TestMaintainForgetsHeldRows: a jobs' flush between Maintain's drop of
// the jobs' cache and its drop of partitions reads, and holds, attempts'
// rows about to go; the job, written again after Maintain, is what its
// attempts' rows left add up to, not the rows held.
func TestMaintainForgetsHeldRows(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=maintain_held", Clock: storetest.Clock, InsertEvery: -1,
		JobsEvery: -1, RollupRetention: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const job = "job_1700000000000_0001"
	spec := func(n int, start time.Time) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: "attempt_1700000000000_0001_m_00000" + string(rune('0'+n)) + "_0", JobID: job,
			Type: "map", Start: start, MemoryMB: 1024, JobName: "maintain-held", User: "u", Queue: "q",
			Procs: []storetest.ProcSpec{{PID: int32(100 + n), Role: wire.RoleTaskJVM, CPUPerS: 400, RSS: 1 << 20}}}
	}
	// An attempt of 40 days ago, past the retention, and one of now.
	old, cur := spec(1, storetest.T0.Add(-40*24*time.Hour)), spec(2, storetest.T0)
	g1 := &storetest.Gen{Agent: "node1-maintain", Host: "node1"}
	g2 := &storetest.Gen{Agent: "node2-maintain", Host: "node2"}
	storetest.Ingest(t, s, g1.Batch([]*storetest.AttemptSpec{old}, 0, 5, true), g2.Batch([]*storetest.AttemptSpec{cur}, 0, 5, false))
	storetest.Commit(t, s, g2.Batch([]*storetest.AttemptSpec{cur}, 5, 10, false))
	flushed := 0
	s.maintainDropping = func() {
		flushed++
		if err := s.Flush(ctx); err != nil {
			t.Errorf("the flush during Maintain: %v", err)
		}
		s.jobsRead, s.jobsLooked = 0, 0
	}
	if err := s.Maintain(ctx, storetest.T0); err != nil {
		t.Fatal(err)
	}
	if flushed != 1 {
		t.Fatalf("Maintain dropped no partition (%d flushes during it)", flushed)
	}
	storetest.Ingest(t, s, g2.Batch([]*storetest.AttemptSpec{cur}, 10, 15, false))
	checkJob(t, s, job, "the flush after Maintain", "own", 1)
}
