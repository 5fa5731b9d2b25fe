package server

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

var benchMaintain = flag.Duration("bench.maintain", 5*time.Second,
	"BenchmarkHTTPIngestSustained: how often the server runs maintenance")

// BenchmarkHTTPIngestSustained is BenchmarkHTTPIngest's http and
// http+queries runs with maintenance every 5 s of wall time instead of 30:
// the batches replay simulated time some 40 times faster than it passes, so
// at 30 s a run of a minute compacts once or never, while a server taking
// this rate for real compacts every 10 minutes of data, which here arrive
// every few seconds. Every Maintain compacts (the data is older than
// CompactAge), so this counts compaction and checkpoints at about the pace
// the rate calls for.
//
//	go test -run '^$' -bench HTTPIngestSustained -benchtime 1x -timeout 30m ./internal/server/ -bench.minutes=40
func BenchmarkHTTPIngestSustained(b *testing.B) {
	start := time.Now().Add(-time.Duration(*benchMinutes+60) * time.Minute)
	cfg := loadgen.Config{Nodes: *benchNodes, Slots: 8, BatchTicks: 5, Seed: 3, Start: start,
		Duration: time.Duration(*benchMinutes) * time.Minute, Concurrency: *benchNodes}
	bodies := prepareBodies(b, cfg)
	for _, queriers := range []int{0, *benchQueries} {
		name := "http"
		if queriers > 0 {
			name = "http+queries"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sustained(b, cfg, bodies, queriers)
			}
		})
	}
}

func sustained(b *testing.B, cfg loadgen.Config, bodies string, queriers int) {
	st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: *benchMaintain,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	cfg.URL = srv.URL()
	cfg.Client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	stats := &loadgen.QueryStats{}
	qctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for q := 0; q < queriers; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loadgen.QueryLoop(qctx, loadgen.QueryConfig{URL: srv.URL(), Seed: uint64(q + 1)}, stats)
		}()
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	t0 := time.Now()
	res, err := loadgen.SendFile(context.Background(), cfg, bodies)
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	stop()
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	rate := float64(res.Samples) / elapsed.Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(res.Samples), "cpu-ns/sample")
	u, _ := st.Usage(context.Background())
	b.Logf("%d samples in %s: %.0f samples/s, CPU %.0f%% of 2 cores, maintenance every %s; database %.2f B/sample",
		res.Samples, elapsed.Round(time.Millisecond), rate, 100*cpu.Seconds()/elapsed.Seconds()/2, *benchMaintain,
		float64(u.Bytes)/float64(max(u.Samples, 1)))
	for _, l := range stats.Summary() {
		b.Logf("query %s", l)
	}
	if res.Rejected > 0 {
		b.Fatalf("%d batches rejected", res.Rejected)
	}
}
