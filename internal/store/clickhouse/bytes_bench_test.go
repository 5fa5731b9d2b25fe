package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// BenchmarkStoredBytes is the ClickHouse store's own bytes a sample on
// disk, as BenchmarkSteadyState (package duckdb) measures the embedded
// store's: loadgen's cluster (-bench.nodes × 8 attempts, a batch per node
// every 5 s), or the agent's recording of short tasks replayed on the
// nodes, for -bench.minutes, stored through the store (a commit a
// simulated minute, every node's batches: the parts are those of a
// server taking them), then every table merged (OPTIMIZE FINAL: where
// ClickHouse's background merges end). It reports the parts' bytes per
// process sample (everything the store keeps: chunks of processes and
// attempts, attempts, processes, indexes, jobs, events, the ledger) after
// the merges, and logs them before and by table. The store keeps a chunk
// per series per batch (level 0): it compacts nothing itself.
//
//	go test -run '^$' -bench StoredBytes -benchtime 1x -timeout 2h ./internal/store/clickhouse/ -bench.minutes=360
func BenchmarkStoredBytes(b *testing.B) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	hours := float64(*benchMinutes) / 60
	b.Run("loadgen", func(b *testing.B) {
		storedBytes(b, loadgen.GeneratorRounds(*benchNodes, hours, start))
	})
	b.Run("replay", func(b *testing.B) {
		rec, err := loadgen.ReadRecordingFile("../../loadgen/testdata/agent-sim.rec.zst")
		if err != nil {
			b.Fatal(err)
		}
		storedBytes(b, loadgen.ReplayRounds(rec, *benchNodes, hours, start))
	})
}

func storedBytes(b *testing.B, next loadgen.Rounds) {
	ctx := context.Background()
	for range b.N {
		srv := chtest.Start(b)
		s, err := Open(ctx, Options{URL: srv.URL() + "?database=bytes", Clock: storetest.Clock, InsertEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		var samples int64
		var pending []*wire.Batch
		var minute time.Time
		for {
			batches, t := next()
			if batches == nil || !minute.IsZero() && t.Sub(minute) >= time.Minute {
				if len(pending) > 0 {
					storetest.Ingest(b, s, pending...)
				}
				pending, minute = pending[:0], t
			}
			if batches == nil {
				break
			}
			if minute.IsZero() {
				minute = t
			}
			for _, bt := range batches {
				samples += int64(bt.SampleCount())
			}
			pending = append(pending, batches...)
		}
		before, err := s.Usage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		rows, err := s.query(ctx, "SELECT name FROM system.tables WHERE database = "+Quote(s.c.Database()))
		if err != nil {
			b.Fatal(err)
		}
		var names []string
		for rows.Next() {
			names = append(names, rows.String())
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		for _, t := range names {
			if err := s.c.Exec(ctx, "OPTIMIZE TABLE "+s.c.Database()+"."+t+" FINAL", nil); err != nil {
				b.Fatal(err)
			}
		}
		u, err := s.Usage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if u.Samples != samples {
			b.Errorf("stored %d samples, sent %d", u.Samples, samples)
		}
		rows, err = s.query(ctx, "SELECT table, sum(bytes_on_disk), sum(rows) FROM system.parts WHERE database = "+
			Quote(s.c.Database())+" AND active GROUP BY table ORDER BY sum(bytes_on_disk) DESC")
		if err != nil {
			b.Fatal(err)
		}
		var by []string
		for rows.Next() {
			t, bytes, n := rows.String(), rows.UInt64(), rows.UInt64()
			by = append(by, fmt.Sprintf("%s %.2f B (%d rows)", t, float64(bytes)/float64(u.Samples), n))
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "bytes/sample")
		b.Logf("%d process samples, %d attempt samples, %d attempts, %d jobs; %.2f B/sample before the merges, %.2f after; by table: %s",
			u.Samples, u.AttemptSamples, u.Attempts, u.Jobs, float64(before.Bytes)/float64(before.Samples),
			float64(u.Bytes)/float64(u.Samples), strings.Join(by, ", "))
		s.Close()
	}
}
