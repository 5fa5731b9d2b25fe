package analysis_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/api"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// BenchmarkKeepUp: jobs end at a rate and the background analyser (its
// defaults: 2 workers, a poll every 2 s) analyses each once it has
// settled, on DuckDB and on ClickHouse. One iteration is one ended job of
// a loadgen cluster (the store filled beforehand, outside the timer); the
// analyser's clock releases the b.N jobs that ended first, in the order
// they ended, at the rate: rate=3.5 is 300,000 jobs a day, rate=max all
// at once (what one server can analyse). It reports the jobs analysed a
// second, the backlog (the analyser's taskscope_analysis_backlog, sampled
// every 50 ms: its largest), the latency from a job's release to its
// analysis stored (p50, p99), and the CPU a job took, of this process
// (the analyser, and DuckDB in it) and of the ClickHouse server, and the
// CPU the analyses took on the analyser's threads (an_cpu_ms/job). In
// rate=3.5 and rate=max running jobs are not analysed (Every is a day).
//
// busy is rate=3.5 with the rest of a server's work meanwhile: the
// cluster goes on (its nodes' batches stored as their time comes, in
// real time from the end of the data), its running jobs are analysed
// every minute (Every's default; TASKSCOPE_BENCH_EVERY=D another) when
// new data came, and an operator asks the API over and over
// (loadgen.QueryLoop with Findings: the jobs of a severity or worse
// sorted by it, one job's page, the findings across jobs; a pause of
// 500 ms between rounds). It also reports the running jobs' analyses
// (running_passes, how many reused what the job's last one read:
// incremental, the CPU of one on the analyser's threads:
// running_cpu_ms/pass, and what keeping 2,100 running jobs fresh every
// minute would take at that cost: cores_2100_running), the API's
// latency (api_p50_ms, api_p99_ms) and the cores this process used. Run
// with a fixed count:
//
//	go test -run '^$' -bench BenchmarkKeepUp -benchtime 300x ./internal/analysis/
//
// TASKSCOPE_BENCH_WORKERS=N runs N workers (--analysis-workers).
func BenchmarkKeepUp(b *testing.B) {
	for _, backend := range []string{"duckdb", "clickhouse"} {
		for _, rate := range []float64{3.5, 0} {
			name := "rate=max"
			if rate > 0 {
				name = "rate=" + strconv.FormatFloat(rate, 'f', -1, 64)
			}
			b.Run(backend+"/"+name, func(b *testing.B) { keepUp(b, backend, rate, false) })
		}
		b.Run(backend+"/busy", func(b *testing.B) { keepUp(b, backend, 3.5, true) })
	}
}

func keepUp(b *testing.B, backend string, rate float64, busy bool) {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	var dataEnd atomic.Int64 // the store's clock: the end of the data
	dataEnd.Store(start.UnixMilli())
	// busy: from the run's start on (goOn), the store's time goes on as
	// the machine's from the end of the data.
	var goOn atomic.Int64
	clockNow := func() time.Time {
		t := time.UnixMilli(dataEnd.Load())
		if g := goOn.Load(); g != 0 {
			t = t.Add(time.Since(time.Unix(0, g)))
		}
		return t
	}
	clock := store.Clock{Now: clockNow, StaleAfter: 2 * time.Minute}
	// TASKSCOPE_BENCH_QUERYLOG=FILE: ClickHouse logs its queries, and
	// where its CPU went during the run (not the fill) is written to FILE.
	queryLog := os.Getenv("TASKSCOPE_BENCH_QUERYLOG") != ""
	st, chSrv := benchStore(b, backend, clock, "keepup", queryLog)
	defer st.Close()
	// Fill until b.N jobs have ended (a loadgen cluster of 20 nodes ends
	// about 2 jobs a simulated minute).
	ctx := context.Background()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 15, Seed: 3, Start: start})
	var ended []store.Job
	for secs := 600; ; secs += 600 {
		dataEnd.Store(storetest.Fill(b, st, g, start, secs).UnixMilli())
		page, err := st.Jobs(ctx, store.JobFilter{State: store.StateFinished, Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		if len(page.Jobs) >= b.N+5 || len(page.Jobs) >= 1000 {
			ended = page.Jobs
			break
		}
	}
	if len(ended) < b.N {
		b.Fatalf("%d jobs ended, %d wanted", len(ended), b.N)
	}
	const settle = 5 * time.Second
	sort.Slice(ended, func(i, j int) bool {
		return ended[i].LastSeen < ended[j].LastSeen || ended[i].LastSeen == ended[j].LastSeen && ended[i].JobID < ended[j].JobID
	})
	ended = ended[:b.N]
	due := make([]time.Time, b.N)
	index := map[string]int{}
	for i, j := range ended {
		due[i] = time.UnixMilli(int64(j.LastSeen)).Add(settle)
		index[j.JobID] = i
	}

	// The analyser's clock: the k-th job's due time once k/rate seconds
	// have passed.
	var mu sync.Mutex
	var t0 time.Time
	released := func(k int) time.Time {
		if rate <= 0 {
			return t0
		}
		return t0.Add(time.Duration(float64(k) / rate * float64(time.Second)))
	}
	now := func() time.Time {
		if busy {
			return clockNow()
		}
		mu.Lock()
		defer mu.Unlock()
		if t0.IsZero() {
			return due[0].Add(-time.Second)
		}
		k := b.N - 1
		if rate > 0 {
			k = min(k, int(time.Since(t0).Seconds()*rate))
		}
		return due[k]
	}
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	seen := map[string]bool{}
	runningJobs := map[string]bool{}                                 // analysed running in the run
	workers, _ := strconv.Atoi(os.Getenv("TASKSCOPE_BENCH_WORKERS")) // (0: the default, 2)
	every := 24 * time.Hour
	analysed := st // what the analyser reads
	if busy {
		// The ended jobs are released by hiding the others from the
		// analyser's looks (its clock is the store's).
		every = time.Minute
		if d, err := time.ParseDuration(os.Getenv("TASKSCOPE_BENCH_EVERY")); err == nil {
			every = d
		}
		visible := func(s store.AnalysisState) bool {
			if s.Job.State == store.StateRunning {
				return true
			}
			k, ok := index[s.Job.JobID]
			mu.Lock()
			defer mu.Unlock()
			return ok && !t0.IsZero() && !released(k).After(time.Now())
		}
		switch v := st.(type) {
		case *duckdb.Store:
			analysed = &releasedDuck{v, visible}
		case *clickhouse.Store:
			analysed = &releasedCH{v, visible}
		}
	}
	an := analysis.NewWith(analysed, analysis.Options{Every: every, Window: 24 * time.Hour, Settle: settle, Now: now, Workers: workers,
		Listeners: []analysis.Listener{func(_ context.Context, a *analysis.Analysed) {
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if !a.Ended && !t0.IsZero() {
				runningJobs[a.JobID] = true
			}
			k, ok := index[a.JobID]
			if !ok || !a.Ended || seen[a.JobID] {
				return
			}
			seen[a.JobID] = true
			lat = append(lat, at.Sub(released(k)))
			if len(seen) == b.N {
				close(done)
			}
		}}})
	reg := prometheus.NewRegistry()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- an.Run(runCtx, reg) }()
	// On a store that several servers share (ClickHouse), a server
	// analyses nothing until its Grace has passed (replicas.go: 41 s by
	// default, so that the others have seen it): the run begins once it
	// takes jobs. (Runs before 2026-12-06 22:00 began at once: their 41 s
	// of nothing analysed bounded ClickHouse's jobs/s, not the analysis.)
	testsrv.WaitUntil(b, "the analyser to take jobs", 5*time.Minute, func() bool {
		return gauge(b, reg, "taskscope_analysis_replicas") >= 1
	})

	if chSrv != nil && queryLog {
		chSrv.TruncateLogs(b)
	}
	if busy {
		// The running jobs' first analyses (from scratch) before the
		// run: in it, those of the jobs that start then. (Done once some
		// running job was analysed and nothing is due.)
		testsrv.WaitUntil(b, "the running jobs' first analyses", 10*time.Minute, func() bool {
			return analyserCounts(b, reg).running > 0 && gauge(b, reg, "taskscope_analysis_backlog") == 0
		})
	}
	var apiStats loadgen.QueryStats
	var side sync.WaitGroup
	sideCtx, stopSide := context.WithCancel(ctx)
	defer stopSide()
	cpu0, ch0 := selfCPU(), serverCPU(chSrv)
	m0 := analyserCounts(b, reg)
	b.ResetTimer()
	mu.Lock()
	t0 = time.Now()
	mu.Unlock()
	if busy {
		goOn.Store(t0.UnixNano())
		side.Add(2)
		go func() {
			defer side.Done()
			feed(b, sideCtx, st, g, start, clockNow)
		}()
		mux := http.NewServeMux()
		api.New(st, an, nil, nil).Register(mux)
		srv := httptest.NewServer(mux)
		defer srv.Close()
		go func() {
			defer side.Done()
			loadgen.QueryLoop(sideCtx, loadgen.QueryConfig{URL: srv.URL, Findings: true, Pause: 500 * time.Millisecond, Seed: 1}, &apiStats)
		}()
	}
	maxBacklog := 0.0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case err := <-ran:
			b.Fatalf("the analyser stopped: %v", err)
		case <-tick.C:
			maxBacklog = max(maxBacklog, gauge(b, reg, "taskscope_analysis_backlog"))
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu, ch := selfCPU()-cpu0, serverCPU(chSrv)-ch0
	m := analyserCounts(b, reg).sub(m0)
	stopSide()
	side.Wait()
	stop()
	<-ran
	if chSrv != nil && queryLog {
		lines, err := chSrv.QueryCPU()
		if err != nil {
			b.Fatal(err)
		}
		text := fmt.Sprintf("where ClickHouse's CPU went (%d jobs):\n%s\n", b.N, strings.Join(lines, "\n"))
		if err := os.WriteFile(os.Getenv("TASKSCOPE_BENCH_QUERYLOG"), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(maxBacklog, "backlog_max")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99_ms")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu_ms/job")
	if chSrv != nil {
		b.ReportMetric(float64(ch.Milliseconds())/float64(b.N), "ch_cpu_ms/job")
	}
	if m.ended > 0 {
		b.ReportMetric(m.endedCPU.Seconds()*1000/m.ended, "an_cpu_ms/job")
	}
	if busy {
		b.ReportMetric(m.running, "running_passes")
		mu.Lock()
		b.ReportMetric(float64(len(runningJobs)), "running_jobs")
		mu.Unlock()
		b.ReportMetric(m.incremental, "incremental")
		if m.running > 0 {
			perPass := m.runningCPU.Seconds() / m.running
			b.ReportMetric(perPass*1000, "running_cpu_ms/pass")
			b.ReportMetric(perPass*2100/60, "cores_2100_running")
		}
		all := apiStats.All()
		b.ReportMetric(float64(all.P50.Microseconds())/1000, "api_p50_ms")
		b.ReportMetric(float64(all.P99.Microseconds())/1000, "api_p99_ms")
		b.ReportMetric(float64(all.N), "api_n")
		b.ReportMetric(cpu.Seconds()/elapsed.Seconds(), "cores")
		if chSrv != nil {
			b.ReportMetric(ch.Seconds()/elapsed.Seconds(), "ch_cores")
		}
		for _, l := range apiStats.Summary() {
			b.Logf("API %s", l)
		}
		for ep, e := range apiStats.LastErrors() {
			b.Errorf("API %s: %s", ep, e)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// feed stores the cluster's batches as their time comes by now, and
// writes the summaries after each (a server writes them every second),
// until ctx ends.
func feed(b *testing.B, ctx context.Context, st store.Store, g *loadgen.Generator, start time.Time, now func() time.Time) {
	for ctx.Err() == nil {
		next := start.Add(time.Duration(g.Tick()+15) * time.Second)
		if wait := next.Sub(now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		batches := g.Next()
		app, err := st.Begin(ctx)
		if err != nil {
			b.Error(err)
			return
		}
		for _, bt := range batches {
			if _, err := app.Append(bt); err != nil {
				app.Rollback()
				b.Error(err)
				return
			}
		}
		if err := app.Commit(); err != nil {
			b.Error(err)
			return
		}
		if err := st.Flush(ctx); err != nil && ctx.Err() == nil {
			b.Error(err)
			return
		}
	}
}

// The stores whose looks for jobs to analyse show only what visible
// says (busy's release of the ended jobs), each with its capabilities.
type releasedDuck struct {
	*duckdb.Store
	visible func(store.AnalysisState) bool
}

func (r *releasedDuck) AnalysisStates(ctx context.Context, since int64, limit int) ([]store.AnalysisState, error) {
	return only(r.Store.AnalysisStates(ctx, since, limit))(r.visible)
}

type releasedCH struct {
	*clickhouse.Store
	visible func(store.AnalysisState) bool
}

func (r *releasedCH) AnalysisStates(ctx context.Context, since int64, limit int) ([]store.AnalysisState, error) {
	return only(r.Store.AnalysisStates(ctx, since, limit))(r.visible)
}

func only(states []store.AnalysisState, err error) func(func(store.AnalysisState) bool) ([]store.AnalysisState, error) {
	return func(keep func(store.AnalysisState) bool) ([]store.AnalysisState, error) {
		out := states[:0]
		for _, s := range states {
			if keep(s) {
				out = append(out, s)
			}
		}
		return out, err
	}
}

// counts are the analyser's counters: analyses ended and running, the
// running ones that were incremental, and the CPU of each kind.
type counts struct {
	ended, running, incremental float64
	endedCPU, runningCPU        time.Duration
}

func (c counts) sub(o counts) counts {
	return counts{c.ended - o.ended, c.running - o.running, c.incremental - o.incremental,
		c.endedCPU - o.endedCPU, c.runningCPU - o.runningCPU}
}

func analyserCounts(tb testing.TB, reg *prometheus.Registry) counts {
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var c counts
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "taskscope_analysis_jobs_total":
				if l["result"] == "ok" && l["state"] == "ended" {
					c.ended += v
				} else if l["result"] == "ok" {
					c.running += v
				}
			case "taskscope_analysis_incremental_total":
				c.incremental += v
			case "taskscope_analysis_cpu_seconds_total":
				d := time.Duration(v * float64(time.Second))
				if l["state"] == "ended" {
					c.endedCPU += d
				} else {
					c.runningCPU += d
				}
			}
		}
	}
	return c
}

// gauge is the value of a gauge of reg without labels.
func gauge(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// selfCPU is the CPU this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchStore opens the benchmarks' store on backend ("duckdb", or
// "clickhouse": a server of its own, with its query log if queryLog, and
// database db) with clock; chSrv is the ClickHouse server (nil for DuckDB).
func benchStore(b *testing.B, backend string, clock store.Clock, db string, queryLog bool) (st store.Store, chSrv *chtest.Server) {
	switch backend {
	case "duckdb":
		d, err := duckdb.Open(duckdb.Options{Dir: b.TempDir(), Clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		return d, nil
	case "clickhouse":
		srv := chtest.StartWith(b, chtest.Options{QueryLog: queryLog})
		c, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: srv.URL() + "?database=" + db, InsertEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		c.SetClock(clock)
		return c, srv
	}
	b.Fatalf("no store %q", backend)
	return nil, nil
}

// serverCPU is the CPU the ClickHouse server srv has used (0 for none).
func serverCPU(srv *chtest.Server) time.Duration {
	if srv == nil {
		return 0
	}
	return srv.CPU()
}
