package analysis_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// BenchmarkBigJobFindings: the findings of a finished job of 10,000
// attempts on 50 hosts (storetest.BigJob: the web UI's TestBigJob's) in
// the embedded store, as a job's page asks for them
// (GET .../findings: Analyzer.Findings) the first time, the job not
// analysed yet: alone, and beside N reads of the job's series asked at
// the same time (its page asks for its charts' series beside the
// findings: the job's life at 600 points, its seven metrics). It
// reports the findings' wall time (ms/findings), the process's CPU
// until the findings and the reads are all answered (cpu_ms/findings:
// DuckDB's threads too) and, beside reads, how long each read took
// (ms/series_read). series-read: one of those reads alone. stored: the
// findings once stored (the background analyser's, or an earlier
// page's), as every later page gets them.
//
//	go test -run '^$' -bench BigJobFindings -benchtime 3x ./internal/analysis/
//
// TASKSCOPE_BENCH_FINDINGSPROFILE=FILE writes a CPU profile of the
// timed findings of the first sub-benchmark to FILE.
func BenchmarkBigJobFindings(b *testing.B) {
	st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const jobID = "job_1700000000000_0777"
	t0 := time.Now()
	storetest.BigJob(b, st, jobID, 10000, 50, time.Now().Add(-30*time.Minute))
	b.Logf("10,000 attempts stored in %s", time.Since(t0).Round(time.Millisecond))
	j, err := store.ReadJobSummary(ctx, st, jobID)
	if err != nil {
		b.Fatal(err)
	}
	if j.State != store.StateFinished || j.Attempts != 10000 {
		b.Fatalf("the job is %s with %d attempts", j.State, j.Attempts)
	}
	from, to := int64(j.Start), max(int64(j.End), int64(j.LastSeen))+1
	q := store.SeriesQuery{Scope: store.ScopeJob, JobID: jobID, Metrics: []string{"cpu_percent", "rss_bytes",
		"pss_bytes", "heap_used_bytes", "attempts", "read_bytes_per_s", "write_bytes_per_s"},
		From: from, To: to, Step: max(1000, (to-from)/600)}
	profile := os.Getenv("TASKSCOPE_BENCH_FINDINGSPROFILE")
	for _, readers := range []int{0, 4} {
		name := "alone"
		if readers > 0 {
			name = fmt.Sprintf("beside-%d-series-reads", readers)
		}
		b.Run(name, func(b *testing.B) {
			var wall, cpu time.Duration
			var reads atomic.Int64
			var readTime atomic.Int64
			for i := 0; i < b.N; i++ {
				// (Nothing cached; a build of its own: what an earlier
				// iteration stored is not current.)
				a := analysis.NewWith(st, analysis.Options{Build: fmt.Sprintf("bench-%s-%d", name, i)})
				if profile != "" && i == 0 && readers == 0 {
					f, err := os.Create(profile)
					if err != nil {
						b.Fatal(err)
					}
					if err := pprof.StartCPUProfile(f); err != nil {
						b.Fatal(err)
					}
					defer func() { pprof.StopCPUProfile(); f.Close() }()
				}
				c0, s := selfCPU(), time.Now()
				var wg sync.WaitGroup
				for r := 0; r < readers; r++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s := time.Now()
						if _, err := st.Series(ctx, q); err != nil {
							b.Error(err)
							return
						}
						readTime.Add(int64(time.Since(s)))
						reads.Add(1)
					}()
				}
				r, err := a.Findings(ctx, jobID)
				wall += time.Since(s)
				wg.Wait()
				cpu += selfCPU() - c0
				if err != nil {
					b.Fatal(err)
				}
				if rep := r.(*analysis.Report); len(rep.Findings) == 0 {
					b.Fatal("no findings")
				}
			}
			b.ReportMetric(float64(wall.Microseconds())/1000/float64(b.N), "ms/findings")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu_ms/findings")
			if n := reads.Load(); n > 0 {
				b.ReportMetric(float64(readTime.Load())/1e6/float64(n), "ms/series_read")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("series-read", func(b *testing.B) { // (one of the page's, alone)
		for i := 0; i < b.N; i++ {
			if _, err := st.Series(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stored", func(b *testing.B) {
		a := analysis.New(st)
		a.SetClock(time.Now)
		if _, err := a.Findings(ctx, jobID); err != nil { // (made and stored)
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			a := analysis.New(st) // (not its cache: the store's)
			if _, err := a.Findings(ctx, jobID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
