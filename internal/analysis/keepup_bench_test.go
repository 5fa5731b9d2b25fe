package analysis_test

import (
	"context"
	"fmt"
	"net/http"
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
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
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
// (the analyser, and DuckDB in it) and of the ClickHouse server. Running
// jobs are not analysed here (Every is a day). Run with a fixed count:
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
			b.Run(backend+"/"+name, func(b *testing.B) { keepUp(b, backend, rate) })
		}
	}
}

func keepUp(b *testing.B, backend string, rate float64) {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	var dataEnd atomic.Int64 // the store's clock: the end of the data
	dataEnd.Store(start.UnixMilli())
	clock := store.Clock{Now: func() time.Time { return time.UnixMilli(dataEnd.Load()) }, StaleAfter: 2 * time.Minute}
	var st store.Store
	chPid := 0
	var chSrv *chtest.Server
	// TASKSCOPE_BENCH_QUERYLOG=FILE: ClickHouse logs its queries, and
	// where its CPU went during the run (not the fill) is written to FILE.
	queryLog := os.Getenv("TASKSCOPE_BENCH_QUERYLOG") != ""
	switch backend {
	case "duckdb":
		d, err := duckdb.Open(duckdb.Options{Dir: b.TempDir(), Clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		st = d
	case "clickhouse":
		srv := chtest.StartWith(b, chtest.Options{QueryLog: queryLog})
		chPid = srv.Pid()
		chSrv = srv
		c, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: srv.URL() + "?database=keepup", InsertEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		c.SetClock(clock)
		st = c
	}
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
	workers, _ := strconv.Atoi(os.Getenv("TASKSCOPE_BENCH_WORKERS")) // (0: the default, 2)
	an := analysis.NewWith(st, analysis.Options{Every: 24 * time.Hour, Window: 24 * time.Hour, Settle: settle, Now: now, Workers: workers,
		Listeners: []analysis.Listener{func(_ context.Context, a *analysis.Analysed) {
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
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

	if chSrv != nil && queryLog {
		for _, q := range []string{"SYSTEM FLUSH LOGS", "TRUNCATE TABLE system.query_log", "TRUNCATE TABLE system.part_log"} {
			resp, err := http.Post(chSrv.URL(), "text/plain", strings.NewReader(q))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	cpu0, ch0 := selfCPU(), procCPU(chPid)
	b.ResetTimer()
	mu.Lock()
	t0 = time.Now()
	mu.Unlock()
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
	cpu, ch := selfCPU()-cpu0, procCPU(chPid)-ch0
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
	if chPid != 0 {
		b.ReportMetric(float64(ch.Milliseconds())/float64(b.N), "ch_cpu_ms/job")
	}
	b.ReportMetric(0, "ns/op")
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

// procCPU is the CPU process pid has used (0 for none), from
// /proc/PID/stat (utime and stime, in clock ticks of 1/100 s).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}
