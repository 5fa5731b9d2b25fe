package duckdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/wire"
)

// BenchmarkIngest appends realistic batches (200 nodes, 8 attempts each, 10
// ticks per batch), one transaction per round of 200 batches, the way the
// ingest pipeline groups them. It reports samples/s and bytes per sample on
// disk after compaction.
func BenchmarkIngest(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 200, Slots: 8, BatchTicks: 10, Seed: 1,
		Start: time.Now().Add(-24 * time.Hour)})
	rounds := make([][]*wire.Batch, 0, 64)
	for i := 0; i < 64; i++ {
		rounds = append(rounds, g.Next())
	}
	b.ResetTimer()
	samples := 0
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if i%len(rounds) == 0 && i > 0 {
			b.StopTimer()
			rounds = rounds[:0]
			for j := 0; j < 64; j++ {
				rounds = append(rounds, g.Next())
			}
			b.StartTimer()
		}
		app, err := s.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, bt := range rounds[i%len(rounds)] {
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
	if os.Getenv("BENCH_SIZE") != "" {
		s.Compact(ctx)
		u, _ := s.Usage(ctx)
		b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "bytes/sample")
	}
}
