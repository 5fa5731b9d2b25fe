package server

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/wire"
)

var (
	benchNodes   = flag.Int("bench.nodes", 200, "BenchmarkHTTPIngest: simulated nodes")
	benchMinutes = flag.Int("bench.minutes", 90, "BenchmarkHTTPIngest: simulated minutes of data to send")
	benchQueries = flag.Int("bench.queriers", 2, "BenchmarkHTTPIngest: query loops running beside the load")
)

// BenchmarkHTTPIngest sends pre-encoded loadgen batches (200 nodes, 8
// attempts each, 5 ticks of 1 s per batch, zstd as the agent sends them)
// over HTTP on loopback to a real server (handler, pipeline, DuckDB store
// in a temporary directory, maintenance every 30 s), as fast as it takes
// them, with one connection per node, each node's batches in order; beside it, query
// loops ask what the UI asks (jobs, a job, an attempt, its series, a
// process's series, the job's series and findings). It reports the
// sustained rate (samples acknowledged per second over the whole run, and
// the slowest 10 s window), the CPU the process used per sample, the query
// latencies, and the database's bytes per sample at the end.
//
//	go test -run '^$' -bench HTTPIngest -benchtime 1x -timeout 30m ./internal/server/
//
// The batches are encoded before the run into a file in the benchmark's
// temporary directory (a gigabyte at the default 90 minutes) and streamed
// from it, not held in memory (docs/storage.md has what a run needs).
//
// The sub-benchmark store-only writes the same batches straight into a store
// (pipeline, no HTTP, no queries): the baseline.
func BenchmarkHTTPIngest(b *testing.B) {
	start := time.Now().Add(-time.Duration(*benchMinutes+60) * time.Minute)
	cfg := loadgen.Config{Nodes: *benchNodes, Slots: 8, BatchTicks: 5, Seed: 3, Start: start,
		Duration: time.Duration(*benchMinutes) * time.Minute, Concurrency: *benchNodes}
	bodies := prepareBodies(b, cfg)
	for _, mode := range []struct {
		name     string
		http     bool
		queriers int
	}{{"store-only", false, 0}, {"http", true, 0}, {"http+queries", true, *benchQueries}} {
		b.Run(mode.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runIngest(b, cfg, bodies, mode.http, mode.queriers)
			}
		})
	}
}

// prepareBodies encodes cfg's batches into a file of b's temporary
// directory.
func prepareBodies(b *testing.B, cfg loadgen.Config) string {
	t0 := time.Now()
	p, err := loadgen.PrepareFile(cfg, filepath.Join(b.TempDir(), "bodies"))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("prepared %d batches, %d samples, %.1f MB (%.2f B/sample on the wire) in %s", p.Batches, p.Samples,
		float64(p.Bytes)/1e6, float64(p.Bytes)/float64(p.Samples), time.Since(t0).Round(time.Millisecond))
	return p.Path
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runIngest(b *testing.B, cfg loadgen.Config, bodies string, overHTTP bool, queriers int) {
	dir := b.TempDir()
	st, err := duckdb.Open(duckdb.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var acked atomic.Int64
	cfg.URL, cfg.Acked = srv.URL(), &acked
	cfg.Client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	// The rate, every 10 s.
	var windows []float64
	var wmu sync.Mutex
	wctx, stopWatch := context.WithCancel(ctx)
	go func() {
		last := int64(0)
		tk := time.NewTicker(10 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tk.C:
				n := acked.Load()
				wmu.Lock()
				windows = append(windows, float64(n-last)/10)
				wmu.Unlock()
				last = n
			}
		}
	}()
	stats := &loadgen.QueryStats{}
	qctx, stopQueries := context.WithCancel(ctx)
	var qwg sync.WaitGroup
	for q := 0; q < queriers; q++ {
		qwg.Add(1)
		go func() {
			defer qwg.Done()
			loadgen.QueryLoop(qctx, loadgen.QueryConfig{URL: srv.URL(), Seed: uint64(q + 1)}, stats)
		}()
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	t0 := time.Now()
	var res loadgen.Result
	if overHTTP {
		res, err = loadgen.SendFile(ctx, cfg, bodies)
		if err != nil {
			b.Fatal(err)
		}
	} else {
		res = storeOnly(b, srv, bodies, cfg)
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	stopQueries()
	qwg.Wait()
	stopWatch()
	rate := float64(res.Samples) / elapsed.Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(res.Samples), "cpu-ns/sample")
	wmu.Lock()
	slowest := 0.0
	var ws []string
	for i, w := range windows {
		if i == 0 || w < slowest {
			slowest = w
		}
		ws = append(ws, fmt.Sprintf("%.0f", w))
	}
	wmu.Unlock()
	if len(windows) > 1 {
		b.ReportMetric(slowest, "slowest-10s-samples/s")
	}
	u, _ := st.Usage(context.Background())
	b.Logf("%d samples in %s: %.0f samples/s (10 s windows: %s), CPU %s (%.0f%% of 2 cores), retries %d, rejected %d",
		res.Samples, elapsed.Round(time.Millisecond), rate, strings.Join(ws, " "), cpu.Round(time.Millisecond),
		100*cpu.Seconds()/elapsed.Seconds()/2, res.Retries, res.Rejected)
	if u.Samples > 0 {
		b.Logf("database %d B for %d stored samples: %.2f B/sample (maintenance as it ran, no final compaction)", u.Bytes, u.Samples,
			float64(u.Bytes)/float64(u.Samples))
	}
	for _, l := range stats.Summary() {
		b.Logf("query %s", l)
	}
	for ep, e := range stats.LastErrors() {
		b.Logf("query %s: last error %s", ep, e)
	}
	if res.Rejected > 0 {
		b.Fatalf("%d batches rejected", res.Rejected)
	}
}

// storeOnly pushes the bodies' batches through the server's pipeline,
// without HTTP, with 200 writers, each agent's batches through one of them,
// in order. The batches are decoded before the clock starts, a part of the
// run at a time (2 simulated minutes, 0.45 M samples), each part written
// before the next is decoded; the rate and the CPU per sample count the
// decoding, as they did when the whole run was decoded first. (Decoded at
// once, 10 minutes of batches held 2.6 GB, and 90 minutes most of 24 GB;
// the collector's scans of that heap halved the rate.)
func storeOnly(b *testing.B, srv *Server, bodies string, cfg loadgen.Config) loadgen.Result {
	b.StopTimer()
	br, err := loadgen.OpenBodies(bodies)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	zr, _ := zstd.NewReader(nil)
	defer zr.Close()
	part := cfg.Nodes * int(2*time.Minute/cmp.Or(cfg.Interval, time.Second)) / cmp.Or(cfg.BatchTicks, 5)
	owner := map[string]int{}
	t0 := time.Now()
	var samples atomic.Int64
	for done := false; !done; {
		queues := make([][]*wire.Batch, 200)
		for range part {
			bd, err := br.Next()
			if errors.Is(err, io.EOF) {
				done = true
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			data, err := zr.DecodeAll(bd.Data, nil)
			if err != nil {
				b.Fatal(err)
			}
			bt, err := wire.Unmarshal(data, wire.DefaultLimits)
			if err != nil {
				b.Fatal(err)
			}
			w, ok := owner[bt.AgentID]
			if !ok {
				w = len(owner) % len(queues)
				owner[bt.AgentID] = w
			}
			queues[w] = append(queues[w], bt)
		}
		b.StartTimer()
		var wg sync.WaitGroup
		for _, q := range queues {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, bt := range q {
					for srv.pipeline.Submit(context.Background(), bt).Err != nil {
						time.Sleep(20 * time.Millisecond) // refused (full): back off, as an agent does
					}
					samples.Add(int64(bt.SampleCount()))
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
	}
	b.StartTimer()
	return loadgen.Result{Samples: samples.Load(), Elapsed: time.Since(t0)}
}
