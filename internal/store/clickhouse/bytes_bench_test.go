package clickhouse

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
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
// server taking them) on a clock that follows the data, Maintain every
// simulated 10 minutes (it merges the chunks of the slots that ended, as
// the server's every 30 s), then, at the end, the last slots merged and
// every table merged (OPTIMIZE FINAL: where ClickHouse's background
// merges end). It reports the parts' bytes per process sample
// (everything the store keeps: chunks of processes and attempts,
// attempts, processes, indexes, jobs, events, the ledger) after the
// merges, and logs them before and by table; and the CPU of the commits
// and of the Maintains (this process's and ClickHouse's, each measured
// around the calls: ClickHouse's background merges count in the phase
// they run in), the merges' as a share of the commits'. With
// -bench.merge=false, Maintain is not called: the chunks are left as
// the commits wrote them (the store before it merged them).
//
//	go test -run '^$' -bench StoredBytes -benchtime 1x -timeout 3h ./internal/store/clickhouse/ -bench.minutes=360
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

var (
	benchMerge = flag.Bool("bench.merge", true, "BenchmarkStoredBytes: call Maintain (merge the chunks)")
	// -bench.format2: the merges write format 2, as stores before
	// 2026-12-07 did.
	benchFormat2 = flag.Bool("bench.format2", false, "BenchmarkStoredBytes: merged chunks in format 2")
)

// selfCPU is the CPU this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func storedBytes(b *testing.B, next loadgen.Rounds) {
	ctx := context.Background()
	for range b.N {
		srv := chtest.Start(b)
		var now atomic.Int64
		clock := storetest.Clock
		clock.Now = func() time.Time { return time.UnixMilli(now.Load()) }
		s, err := Open(ctx, Options{URL: srv.URL() + "?database=bytes", Clock: clock, InsertEvery: -1,
			legacyChunks: *benchFormat2})
		if err != nil {
			b.Fatal(err)
		}
		// CPU of this process and of ClickHouse, around the commits and
		// around Maintain.
		var ingest, merge [2]time.Duration
		phase := func(d *[2]time.Duration, f func()) {
			self, ch := selfCPU(), srv.CPU()
			f()
			d[0] += selfCPU() - self
			d[1] += srv.CPU() - ch
		}
		maintain := func(t time.Time) {
			phase(&merge, func() {
				if err := s.Maintain(ctx, t); err != nil {
					b.Fatal(err)
				}
			})
		}
		var samples int64
		var pending []*wire.Batch
		var minute, merged time.Time
		for {
			batches, t := next()
			if batches == nil || !minute.IsZero() && t.Sub(minute) >= time.Minute {
				if len(pending) > 0 {
					phase(&ingest, func() { storetest.Ingest(b, s, pending...) })
				}
				if batches == nil {
					break
				}
				pending, minute = pending[:0], t
				now.Store(t.UnixMilli())
				if *benchMerge && t.Sub(merged) >= 10*time.Minute {
					maintain(t)
					merged = t
				}
			}
			if minute.IsZero() {
				minute = t
				now.Store(t.UnixMilli())
			}
			for _, bt := range batches {
				samples += int64(bt.SampleCount())
			}
			pending = append(pending, batches...)
		}
		if *benchMerge {
			// The last slots, once they are over.
			now.Add(2 * (slotMs + slotGrace))
			maintain(time.UnixMilli(now.Load()))
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
		rows, err = s.query(ctx, "SELECT level, count(), sum(n), sum(length(data)) FROM "+s.read("series_chunks")+
			" GROUP BY level ORDER BY level")
		if err != nil {
			b.Fatal(err)
		}
		var levels []string
		for rows.Next() {
			l, n, sn, size := rows.UInt8(), rows.UInt64(), rows.UInt64(), rows.UInt64()
			levels = append(levels, fmt.Sprintf("level %d: %d chunks of %.1f samples, %.1f B", l, n, float64(sn)/float64(n),
				float64(size)/float64(n)))
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		b.Logf("series_chunks by level: %s", strings.Join(levels, "; "))
		b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "bytes/sample")
		perSample := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(u.Samples) }
		b.ReportMetric(perSample(ingest[0]+ingest[1]), "commit-µs/sample")
		b.ReportMetric(perSample(merge[0]+merge[1]), "maintain-µs/sample")
		b.Logf("CPU: commits %s (taskscope %s, ClickHouse %s), Maintain %s (taskscope %s, ClickHouse %s): %.1f %% of the commits'",
			(ingest[0] + ingest[1]).Round(time.Millisecond), ingest[0].Round(time.Millisecond), ingest[1].Round(time.Millisecond),
			(merge[0] + merge[1]).Round(time.Millisecond), merge[0].Round(time.Millisecond), merge[1].Round(time.Millisecond),
			100*float64(merge[0]+merge[1])/float64(ingest[0]+ingest[1]))
		b.Logf("%d process samples, %d attempt samples, %d attempts, %d jobs; %.2f B/sample before the merges, %.2f after; by table: %s",
			u.Samples, u.AttemptSamples, u.Attempts, u.Jobs, float64(before.Bytes)/float64(before.Samples),
			float64(u.Bytes)/float64(u.Samples), strings.Join(by, ", "))
		s.Close()
	}
}
