package analysis_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// BenchmarkRunningPass: the background analyser's passes over running
// jobs, alone. A loadgen cluster (BenchmarkKeepUp's: 20 nodes, 8 slots,
// a batch every 15 s) runs 20 minutes and each of its running jobs has
// had a pass; one iteration is a minute more of its batches (stored
// outside the timer) and then one pass over each job running then, as
// the analyser makes them every minute (Options.Every): Options.Batch
// jobs' passes together (Passes). It reports, a
// pass: the wall time (ms/pass), the CPU of the calling thread
// (thread_cpu_ms/pass: the analysis, and what the embedded store does on
// it), of this whole process (cpu_ms/pass) and of the ClickHouse server
// (ch_cpu_ms/pass), the allocations (allocs/pass), how many passes
// reused the job's last one (incremental), how many took the earlier runs
// of their recurring job again (history_kept); and, for scale, a pass over
// the same jobs from scratch (full_cpu_ms/pass: a new analyser's, as of
// a job it has not seen) and what keeping 2,100 running jobs fresh every
// minute takes (cores_2100_running, at cpu_ms/pass plus ch_cpu_ms/pass).
//
//	go test -run '^$' -bench BenchmarkRunningPass -benchtime 5x ./internal/analysis/
//
// TASKSCOPE_BENCH_PASSPROFILE=FILE writes a CPU profile of each
// iteration's passes alone to FILE.0, FILE.1, ... (go tool pprof merges
// them: pass it them all).
func BenchmarkRunningPass(b *testing.B) {
	for _, backend := range []string{"duckdb", "clickhouse"} {
		b.Run(backend, func(b *testing.B) { runningPass(b, backend) })
	}
}

func runningPass(b *testing.B, backend string) {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	var dataEnd atomic.Int64
	dataEnd.Store(start.UnixMilli())
	clockNow := func() time.Time { return time.UnixMilli(dataEnd.Load()) }
	clock := store.Clock{Now: clockNow, StaleAfter: 2 * time.Minute}
	// TASKSCOPE_BENCH_QUERYLOG=FILE: ClickHouse logs its queries, and
	// where its CPU went from the first timed passes on is written to
	// FILE (with -benchtime 1x, the passes' alone).
	queryLog := os.Getenv("TASKSCOPE_BENCH_QUERYLOG")
	st, chSrv := benchStore(b, backend, clock, "passes", queryLog != "")
	defer st.Close()
	ctx := context.Background()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 15, Seed: 3, Start: start})
	secs := 20 * 60
	fill := func() {
		dataEnd.Store(storetest.FillAt(b, st, g, start, secs, func(t time.Time) { dataEnd.Store(t.UnixMilli()) }).UnixMilli())
	}
	running := func() []store.Job {
		page, err := st.Jobs(ctx, store.JobFilter{State: store.StateRunning, Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		return page.Jobs
	}
	fill()
	opt := analysis.Options{Now: clockNow}
	// TASKSCOPE_BENCH_BATCH=N: the passes N jobs together (default
	// Options.Batch's, 64; 1: one by one).
	batch := 64
	if v := os.Getenv("TASKSCOPE_BENCH_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TASKSCOPE_BENCH_BATCH=%q: want a number of jobs", v)
		}
		batch = n
	}
	opt.Batch = batch
	an := analysis.NewWith(st, opt)
	if err := an.Look(ctx); err != nil {
		b.Fatal(err)
	}
	for _, j := range running() {
		if _, _, err := an.Pass(ctx, j.JobID); err != nil {
			b.Fatal(err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var passes, incremental, full int
	var wall, thread, self, ch, fullCPU time.Duration
	var allocs uint64
	var ms runtime.MemStats
	profile := os.Getenv("TASKSCOPE_BENCH_PASSPROFILE")
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		secs += 60
		fill()
		jobs := running()
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.JobID
		}
		// The background's look at the jobs written lately (every 2 s,
		// for all jobs: not a pass's).
		if err := an.Look(ctx); err != nil {
			b.Fatal(err)
		}
		if n == 0 && chSrv != nil && queryLog != "" {
			chSrv.TruncateLogs(b)
		}
		runtime.ReadMemStats(&ms)
		m0 := ms.Mallocs
		var prof *os.File
		if profile != "" {
			var err error
			if prof, err = os.Create(fmt.Sprintf("%s.%d", profile, n)); err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(prof); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0, c0, s0, h0 := time.Now(), threadCPUOf(), selfCPU(), serverCPU(chSrv)
		for i := 0; i < len(ids); i += batch {
			_, incs, errs := an.Passes(ctx, ids[i:min(len(ids), i+batch)])
			for k, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
				passes++
				if incs[k] {
					incremental++
				}
			}
		}
		wall += time.Since(t0)
		thread += threadCPUOf() - c0
		self += selfCPU() - s0
		ch += serverCPU(chSrv) - h0
		b.StopTimer()
		if prof != nil {
			pprof.StopCPUProfile()
			if err := prof.Close(); err != nil {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - m0
		// The same jobs from scratch, for scale.
		scratch := analysis.NewWith(st, opt)
		f0, fh0 := selfCPU(), serverCPU(chSrv)
		for _, j := range jobs {
			if _, _, err := scratch.Pass(ctx, j.JobID); err != nil {
				b.Fatal(err)
			}
			full++
		}
		fullCPU += selfCPU() - f0 + serverCPU(chSrv) - fh0
		b.StartTimer()
	}
	b.StopTimer()
	if chSrv != nil && queryLog != "" {
		lines, err := chSrv.QueryCPU()
		if err != nil {
			b.Fatal(err)
		}
		text := fmt.Sprintf("where ClickHouse's CPU went (%d passes):\n%s\n", passes, strings.Join(lines, "\n"))
		if err := os.WriteFile(queryLog, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if passes == 0 {
		b.Fatal("no running job")
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(passes) }
	b.ReportMetric(per(wall), "ms/pass")
	b.ReportMetric(per(thread), "thread_cpu_ms/pass")
	b.ReportMetric(per(self), "cpu_ms/pass")
	if chSrv != nil {
		b.ReportMetric(per(ch), "ch_cpu_ms/pass")
	}
	b.ReportMetric(float64(allocs)/float64(passes), "allocs/pass")
	b.ReportMetric(float64(passes)/float64(b.N), "passes/op")
	b.ReportMetric(float64(incremental)/float64(passes), "incremental")
	b.ReportMetric(float64(an.ReusedHistories())/float64(passes), "history_kept")
	b.ReportMetric(float64(fullCPU.Microseconds())/1000/float64(full), "full_cpu_ms/pass")
	lr := an.LiveReads()
	b.ReportMetric(float64(lr.Incremental)/float64(max(1, lr.First+lr.Incremental+lr.Again+lr.Whole)), "gauges_incremental")
	b.ReportMetric((per(self)+per(ch))/1000*2100/60, "cores_2100_running")
	b.ReportMetric(0, "ns/op")
}

// threadCPUOf is the CPU the calling thread has used (the benchmark
// locks its goroutine to it).
func threadCPUOf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
