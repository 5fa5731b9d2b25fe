package duckdb

import (
	"context"
	"flag"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

var (
	benchHours   = flag.Float64("bench.hours", 6, "BenchmarkSteadyState: simulated hours")
	benchNodes   = flag.Int("bench.nodes", 100, "BenchmarkSteadyState: simulated nodes")
	benchThreads = flag.Int("bench.threads", 0, "BenchmarkCommitSize: DuckDB's threads (Options.Threads; 0: the store's default, 1; -1: DuckDB's, one a core)")
	// -bench.residuals=false: the stores of SteadyState, Compact,
	// AttemptSeries and JobSeries write attempts as their own samples
	// (Options.PlainAttempts), not as residuals (the default).
	benchResiduals = flag.Bool("bench.residuals", true, "stores write attempts as residuals of their processes (false: Options.PlainAttempts)")
)

// BenchmarkIngest appends realistic batches from loadgen (200 nodes, 8
// attempts each, 10 ticks of 1 s per batch), one transaction per round of
// 200 batches as the ingest pipeline groups them, and runs maintenance every
// 30 rounds (5 minutes of data). It reports samples/s.
//
//	go test -run '^$' -bench 'Ingest$' -benchtime 300x ./internal/store/duckdb/
func BenchmarkIngest(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	start := time.Now().Add(-24 * time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 200, Slots: 8, BatchTicks: 10, Seed: 1, Start: start})
	const pre = 30
	rounds := make([][]*wire.Batch, 0, pre)
	refill := func() {
		rounds = rounds[:0]
		for j := 0; j < pre; j++ {
			rounds = append(rounds, g.Next())
		}
	}
	refill()
	ctx := context.Background()
	samples := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%pre == 0 && i > 0 {
			b.StopTimer()
			refill()
			b.StartTimer()
			// Maintenance runs beside ingest in the server: it is timed too.
			now := start.Add(time.Duration(i*10) * time.Second)
			if err := s.Maintain(ctx, now); err != nil {
				b.Fatal(err)
			}
		}
		app, err := s.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, bt := range rounds[i%pre] {
			if _, err := app.Append(bt); err != nil {
				b.Fatal(err)
			}
			samples += bt.SampleCount()
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkSteadyState measures the bytes per sample on disk: loadgen's
// cluster (100 nodes, 8 attempts each, a batch per node every 5 s) over 6
// simulated hours, with maintenance every 30 simulated seconds as the server
// runs it (compaction when the fresh table is 10 minutes old), then a last
// maintenance. It reports the database file's bytes per process sample
// (everything included: chunks of processes and attempts, the logs of
// processes, memberships, attempts and events, summaries, indexes, free
// blocks), and the growth between the middle and the end (what each more
// sample costs, without what the file starts with). The sub-benchmark
// replay does the same with a real agent's recording (testdata of package
// loadgen) replayed on the nodes.
//
//	go test -run '^$' -bench SteadyState -benchtime 1x -timeout 60m ./internal/store/duckdb/
func BenchmarkSteadyState(b *testing.B) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	b.Run("loadgen", func(b *testing.B) {
		steady(b, start, loadgen.GeneratorRounds(*benchNodes, *benchHours, start))
	})
	b.Run("replay", func(b *testing.B) {
		rec, err := loadgen.ReadRecordingFile("../../loadgen/testdata/agent-sim.rec.zst")
		if err != nil {
			b.Skip(err)
		}
		steady(b, start, loadgen.ReplayRounds(rec, *benchNodes, *benchHours, start))
	})
}

func steady(b *testing.B, start time.Time, next loadgen.Rounds) {
	for n := 0; n < b.N; n++ {
		dir := b.TempDir()
		s, err := Open(Options{Dir: dir, Retention: 14 * 24 * time.Hour, RollupRetention: 180 * 24 * time.Hour,
			PlainAttempts: !*benchResiduals})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		var samples int64
		var lastMaint time.Time = start
		var mid struct {
			bytes, samples int64
			done           bool
		}
		var now time.Time
		total := 0
		for {
			batches, t := next()
			if batches == nil {
				break
			}
			total += len(batches)
			now = t
			app, err := s.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, bt := range batches {
				if _, err := app.Append(bt); err != nil {
					b.Fatal(err)
				}
				samples += int64(bt.SampleCount())
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
			if now.Sub(lastMaint) >= 30*time.Second {
				lastMaint = now
				if err := s.Maintain(ctx, now); err != nil {
					b.Fatal(err)
				}
				if !mid.done && now.Sub(start) >= time.Duration(*benchHours*float64(time.Hour))/2 {
					u, _ := s.Usage(ctx)
					mid.bytes, mid.samples, mid.done = u.Bytes, samples, true
				}
			}
		}
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		before, _ := s.Usage(ctx)
		if err := s.Maintain(ctx, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
		u, err := s.Usage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "bytes/sample")
		if mid.samples > 0 {
			b.ReportMetric(float64(before.Bytes-mid.bytes)/float64(samples-mid.samples), "growth-bytes/sample")
		}
		sp, _ := s.Space(ctx)
		b.Logf("%d batches, %d process samples (%d stored), %d attempt samples, %.1f simulated hours; file before the last maintenance %d B, after %d B\n%s",
			total, samples, u.Samples, u.AttemptSamples, now.Sub(start).Hours(), before.Bytes, u.Bytes, sp)
		if u.Samples != samples {
			b.Errorf("stored %d samples, sent %d", u.Samples, samples)
		}
		s.Close()
	}
}

// BenchmarkCompact times one compaction of 150 s of loadgen's data (200
// nodes, a batch per node every 5 s, as BenchmarkHTTPIngestSustained's
// server compacts at its rate): reading the fresh chunks in series order,
// decoding, encoding each series' samples as merged chunks and appending
// them. It reports ns per process sample compacted, and the process's
// CPU (DuckDB's threads too: what the machine's load moves less).
//
//	go test -run '^$' -bench 'Compact$' -count 6 ./internal/store/duckdb/
func BenchmarkCompact(b *testing.B) {
	start := time.Now().Add(-24 * time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 200, Slots: 8, BatchTicks: 5, Seed: 1, Start: start})
	rounds := make([][]*wire.Batch, 30)
	samples := 0
	for i := range rounds {
		rounds[i] = g.Next()
		for _, bt := range rounds[i] {
			samples += bt.SampleCount()
		}
	}
	ctx := context.Background()
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := Open(Options{Dir: b.TempDir(), PlainAttempts: !*benchResiduals})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rounds {
			storetest.Ingest(b, s, r...)
		}
		b.StartTimer()
		cpu0 := processCPU()
		if err := s.Compact(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += processCPU() - cpu0
		b.StopTimer()
		s.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*samples), "ns/sample")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*samples), "cpu-ns/sample")
}

// BenchmarkCommitSize commits loadgen's batches (200 nodes, 8 attempts
// each, 5 ticks of 1 s a batch: about 27 chunks a batch) into one store in
// groups of each size, as the ingest pipeline gathers them, and reports
// the CPU of the process a sample and a chunk row, and what the WAL and
// the file took. A commit that appends at least a row group of chunks
// (rowGroupSize rows: about 152 batches) takes DuckDB's bulk path: its row
// groups are written compressed to the file and only their pointers to
// the WAL (LocalStorage::Flush, DuckDB 1.5); a smaller one appends its rows
// to the table in memory and writes them whole to the WAL. No maintenance
// runs: the commits alone.
//
//	go test -run '^$' -bench CommitSize -benchtime 60x ./internal/store/duckdb/
func BenchmarkCommitSize(b *testing.B) {
	for _, n := range []int{1, 25, 75, 140, 160, 300, 600} {
		b.Run(fmt.Sprintf("batches=%d", n), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), Threads: *benchThreads})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			g := loadgen.NewGenerator(loadgen.Config{Nodes: 200, Slots: 8, BatchTicks: 5, Seed: 1,
				Start: time.Now().Add(-24 * time.Hour)})
			var next []*wire.Batch
			ctx := context.Background()
			var cpu time.Duration
			samples, rows, wal0 := 0, 0, s.walBytes()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for len(next) < n {
					next = append(next, g.Next()...)
				}
				group := next[:n]
				b.StartTimer()
				cpu0 := processCPU()
				app, err := s.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for _, bt := range group {
					p := s.Prepare(bt)
					if _, err := app.(*tx).AppendPrepared(p); err != nil {
						b.Fatal(err)
					}
					samples += bt.SampleCount()
					rows += len(p.ProcChunks) + len(p.AttChunks) + len(p.ExtChunks)
				}
				if err := app.Commit(); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - cpu0
				next = next[n:]
			}
			b.StopTimer()
			sp, err := s.Space(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(samples), "cpu-ns/sample")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(rows), "cpu-ns/row")
			b.ReportMetric(float64(rows)/float64(b.N), "rows/commit")
			b.ReportMetric(float64(s.walBytes()-wal0)/float64(rows), "wal-B/row")
			b.ReportMetric(float64(sp.UsedBlocks*sp.BlockSize)/float64(rows), "file-B/row")
		})
	}
}

// processCPU is the CPU the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
