package duckdb

import (
	"context"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/wire"
)

// BenchmarkIngest appends realistic batches from loadgen (200 nodes, 8
// attempts each, 10 ticks of 1 s per batch), one transaction per round of
// 200 batches as the ingest pipeline groups them, and runs maintenance every
// 30 rounds (5 minutes of data), as the server does. It reports samples/s
// and, at the end, the database file's bytes per process sample (chunks,
// attempt series, processes, memberships, events, indexes: everything).
//
//	go test -run '^$' -bench Ingest -benchtime 300x ./internal/store/duckdb/
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
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.Checkpoint(ctx); err != nil {
		b.Fatal(err)
	}
	u, err := s.Usage(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "bytes/sample")
	if sp, err := s.Space(ctx); err == nil {
		b.Logf("%d samples, %d attempt samples\n%s", u.Samples, u.AttemptSamples, sp)
	}
}
