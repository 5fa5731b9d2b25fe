package server

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

// BenchmarkStoresIngest sends the same pre-encoded loadgen batches (nodes
// -bench.nodes, 8 attempts each, a batch per node every 5 s, minutes
// -bench.minutes) over HTTP on loopback, as fast as they are taken (one
// connection per node, each node's batches in order), to a server on each
// store in turn: the embedded one (DuckDB), ClickHouse on one server, and
// ClickHouse on 2 shards (one ZooKeeper, one replica each). With -count N
// the three alternate. It reports samples/s, the CPU a sample took (the
// test process with its server and sender, and the ClickHouse servers'),
// and the bytes a sample takes on disk (the store's Usage at the end: the
// DuckDB file, or the ClickHouse parts, before any compaction).
//
//	go test -run '^$' -bench StoresIngest -benchtime 1x -count 2 -timeout 60m ./internal/server/ -bench.nodes=50 -bench.minutes=10
func BenchmarkStoresIngest(b *testing.B) {
	start := time.Now().Add(-time.Duration(*benchMinutes+60) * time.Minute)
	cfg := loadgen.Config{Nodes: *benchNodes, Slots: 8, BatchTicks: 5, Seed: 3, Start: start,
		Duration: time.Duration(*benchMinutes) * time.Minute, Concurrency: *benchNodes}
	bodies := prepareBodies(b, cfg)
	b.Run("duckdb", func(b *testing.B) {
		st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		ingestInto(b, st, cfg, bodies, nil)
	})
	b.Run("clickhouse", func(b *testing.B) {
		srv := chtest.Start(b)
		st, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: srv.URL() + "?database=bench"})
		if err != nil {
			b.Fatal(err)
		}
		ingestInto(b, st, cfg, bodies, []int{srv.Pid()})
	})
	b.Run("clickhouse-2-shards", func(b *testing.B) {
		cl := chtest.StartCluster(b, "bench", 2, 1)
		st, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: cl.Shards[0][0].URL() + "?database=bench", Cluster: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ingestInto(b, st, cfg, bodies, []int{cl.Shards[0][0].Pid(), cl.Shards[1][0].Pid()})
	})
}

// ingestInto runs a server on st, sends the bodies, and reports.
func ingestInto(b *testing.B, st store.Store, cfg loadgen.Config, bodies string, pids []int) {
	defer st.Close()
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	cfg.URL = srv.URL()
	cfg.Client = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	others := func() (d time.Duration) {
		for _, pid := range pids {
			d += processCPU(b, pid)
		}
		return d
	}
	cpu0, other0 := cpuTime(), others()
	b.ResetTimer()
	t0 := time.Now()
	res, err := loadgen.SendFile(context.Background(), cfg, bodies)
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu, other := cpuTime()-cpu0, others()-other0
	if err != nil {
		b.Fatal(err)
	}
	if res.Rejected > 0 {
		b.Fatalf("%d batches rejected", res.Rejected)
	}
	if err := st.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	u, err := st.Usage(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if u.Samples != res.Samples {
		b.Errorf("%d samples stored of %d sent", u.Samples, res.Samples)
	}
	rate := float64(res.Samples) / elapsed.Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(float64((cpu+other).Nanoseconds())/float64(res.Samples), "cpu-ns/sample")
	b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "B/sample")
	b.Logf("%d samples in %s: %.0f samples/s; CPU of the test process %.0f%%, of the ClickHouse servers %.0f%% of 2 cores; %.2f B/sample on disk",
		res.Samples, elapsed.Round(time.Millisecond), rate, 100*cpu.Seconds()/elapsed.Seconds()/2,
		100*other.Seconds()/elapsed.Seconds()/2, float64(u.Bytes)/float64(u.Samples))
}
