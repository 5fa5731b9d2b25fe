package analysis_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// BenchmarkReport analyses every job of a store holding 30 minutes of
// loadgen's cluster (20 nodes, 8 slots): what GET .../findings costs the
// first time (scratch), and made again past its TTL with nothing new
// (again: what was read of ended attempts is taken again).
//
//	go test -run '^$' -bench Report -benchtime 5x ./internal/analysis/
func BenchmarkReport(b *testing.B) {
	st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	start := time.Now().Add(-40 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 5, Seed: 5, Start: start})
	storetest.Fill(b, st, g, start, 30*60)
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 50})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scratch", func(b *testing.B) {
		a := analysis.New(st)
		for n := 0; n < b.N; n++ {
			for _, j := range page.Jobs {
				if _, err := a.Report(ctx, j.JobID); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*len(page.Jobs)), "ms/report")
	})
	b.Run("again", func(b *testing.B) {
		a := analysis.New(st)
		now := time.Now()
		a.SetClock(func() time.Time { return now })
		for _, j := range page.Jobs {
			if _, err := a.Findings(ctx, j.JobID); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for n := 0; n < b.N; n++ {
			now = now.Add(time.Minute)
			for _, j := range page.Jobs {
				if _, err := a.Findings(ctx, j.JobID); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*len(page.Jobs)), "ms/report")
	})
}
