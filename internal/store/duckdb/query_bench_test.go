package duckdb

import (
	"context"
	"flag"
	"fmt"
	"hash/maphash"
	"maps"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

var (
	benchJobAttempts = flag.Int("bench.attempts", 10000, "BenchmarkJobDetail: attempts of the job")
	benchBgNodes     = flag.Int("bench.bgnodes", 50, "BenchmarkAttemptSeries: nodes of the cluster around the attempt")
)

// BenchmarkJobDetail times Job (the job with its attempts, what GET
// /api/v1/jobs/{id} answers) of a job of 10,000 map attempts (1 minute
// each, a wrapper and a JVM sampled every second) that ran on 100 nodes.
// The target is 100 ms (the store's part of it; the HTTP benchmark of
// package server has the whole).
//
//	go test -run '^$' -bench JobDetail -benchtime 20x ./internal/store/duckdb/
func BenchmarkJobDetail(b *testing.B) {
	s, job := bigJobStore(b, b.TempDir(), *benchJobAttempts)
	defer s.Close()
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := s.Job(ctx, job)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.AttemptList) != *benchJobAttempts {
			b.Fatalf("%d attempts, want %d", len(d.AttemptList), *benchJobAttempts)
		}
	}
}

// BenchmarkJobSizes times Job for jobs of 500, 1,500, 2,500 and 10,000
// map attempts (1 minute each, a wrapper and a JVM sampled every second)
// that ran one after the other on 100 nodes, with the cluster's other jobs
// before, between and after them. It reports each job's time and the time
// per attempt, which should not depend on the job's size: DuckDB reads an
// ART index for at most index_scan_max_count (2,048) rows, and a job just
// below that count was the slowest per attempt.
//
//	go test -run '^$' -bench JobSizes -benchtime 20x ./internal/store/duckdb/
func BenchmarkJobSizes(b *testing.B) {
	s, jobs := jobSizesStore(b, b.TempDir(), []int{500, 1500, 2500, 10000})
	defer s.Close()
	ctx := context.Background()
	for _, j := range jobs {
		b.Run(fmt.Sprintf("attempts-%d", j.n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				d, err := s.Job(ctx, j.id)
				if err != nil {
					b.Fatal(err)
				}
				if len(d.AttemptList) != j.n {
					b.Fatalf("%d attempts, want %d", len(d.AttemptList), j.n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(j.n), "us/attempt")
		})
	}
}

type sizedJob struct {
	id string
	n  int
}

// jobSizesStore makes a store in dir holding jobs of these sizes, run one
// after the other with 5 minutes of the cluster's other jobs around each.
func jobSizesStore(tb testing.TB, dir string, sizes []int) (*Store, []sizedJob) {
	s, err := Open(Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 100, Slots: 8, BatchTicks: 5, Seed: 7, Start: start})
	t0 := time.Now()
	storetest.Fill(tb, s, g, start, 300)
	var jobs []sizedJob
	for _, n := range sizes {
		id, end := g.AddJob(n, 60)
		storetest.Fill(tb, s, g, start, end+300)
		jobs = append(jobs, sizedJob{id, n})
	}
	u, _ := s.Usage(context.Background())
	tb.Logf("%d attempts (jobs of %v among them) stored in %s", u.Attempts, sizes, time.Since(t0).Round(time.Millisecond))
	return s, jobs
}

// bigJobStore makes a store in dir holding a job of n attempts.
func bigJobStore(tb testing.TB, dir string, n int) (*Store, string) {
	s, err := Open(Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 100, Slots: 8, BatchTicks: 5, Seed: 5, Start: start})
	job, end := g.AddJob(n, 60)
	t0 := time.Now()
	storetest.Fill(tb, s, g, start, end+5)
	tb.Logf("job of %d attempts stored in %s", n, time.Since(t0).Round(time.Millisecond))
	return s, job
}

// BenchmarkAttemptSeries times the series of one attempt (a reduce, a
// wrapper and a JVM sampled every second) over the hour it ran, on a
// cluster of 50 nodes running jobs beside it, maintenance as it ran:
// step-1s asks for every second (3,600 buckets), step-15s for what the UI
// asks by default (300 points). The target is 20 ms.
//
//	go test -run '^$' -bench AttemptSeries -benchtime 50x ./internal/store/duckdb/
func BenchmarkAttemptSeries(b *testing.B) {
	s, q := longAttemptStore(b, b.TempDir(), *benchBgNodes)
	defer s.Close()
	ctx := context.Background()
	// cold: each read without the residuals earlier reads made whole
	// (wholes), nor what compaction kept of them, as a first read of data
	// not in memory (older, or after a restart); first: without those
	// earlier reads made, as a first read after compaction.
	kept := s.wholes.snapshot()
	for _, c := range []struct {
		step        int64
		cold, first bool
	}{{1000, false, false}, {15000, false, false}, {1000, true, false}, {1000, false, true}} {
		q := q
		q.Step = c.step
		name := "step-" + time.Duration(c.step*int64(time.Millisecond)).String()
		switch {
		case c.cold:
			name += "-cold"
		case c.first:
			name += "-first"
		}
		b.Run(name, func(b *testing.B) {
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				switch {
				case c.cold:
					s.wholes.clear()
				case c.first:
					s.wholes.restore(kept)
				}
				res, err := s.Series(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Times) != q.Buckets() {
					b.Fatalf("%d buckets", len(res.Times))
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// longAttemptStore makes a store in dir holding an attempt of one hour
// among nodes nodes' work, and the query of its series over that hour.
func longAttemptStore(tb testing.TB, dir string, nodes int) (*Store, store.SeriesQuery) {
	s, err := Open(Options{Dir: dir, PlainAttempts: !*benchResiduals})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: nodes, Slots: 8, BatchTicks: 5, Seed: 6, Start: start})
	// The cluster runs a while before the attempt starts.
	storetest.Fill(tb, s, g, start, 600)
	_, att := g.AddAttempt(3600)
	from := start.Add(time.Duration(g.Tick()) * time.Second).UnixMilli()
	t0 := time.Now()
	storetest.Fill(tb, s, g, start, g.Tick()+3600+5)
	u, _ := s.Usage(context.Background())
	tb.Logf("%d process samples stored in %s", u.Samples, time.Since(t0).Round(time.Millisecond))
	return s, store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: att, Metrics: []string{"cpu_percent", "rss_bytes",
		"read_bytes_per_s"}, From: from, To: from + 3600_000 + 1000}
}

// BenchmarkJobSeries reads the series of the job with the most attempts of
// an hour of a cluster of -bench.bgnodes nodes, over its life at 600
// points, as the job page asks (and asks again at each live update while
// the job runs).
//
//	go test -run '^$' -bench JobSeries -benchtime 20x ./internal/store/duckdb/
func BenchmarkJobSeries(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), PlainAttempts: !*benchResiduals})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: *benchBgNodes, Slots: 8, BatchTicks: 5, Seed: 6, Start: start})
	storetest.Fill(b, s, g, start, 3600)
	page, err := s.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	var j store.Job
	for _, x := range page.Jobs {
		if x.Attempts > j.Attempts {
			j = x
		}
	}
	from, to := int64(j.Start), max(int64(j.End), int64(j.LastSeen))+1
	q := store.SeriesQuery{Scope: store.ScopeJob, JobID: j.JobID, Metrics: []string{"cpu_percent", "rss_bytes",
		"pss_bytes", "heap_used_bytes", "attempts", "read_bytes_per_s", "write_bytes_per_s"},
		From: from, To: to, Step: max(1000, (to-from)/600)}
	b.Logf("job of %d attempts over %s", j.Attempts, time.Duration(to-from)*time.Millisecond)
	// whole: the job's life at 600 points; tail: a live chart's new
	// buckets (the last 2, at that width).
	tail := q
	tail.From = (to - 2*q.Step) / q.Step * q.Step
	kept := s.wholes.snapshot()
	for _, c := range []struct {
		name        string
		q           store.SeriesQuery
		cold, first bool // as BenchmarkAttemptSeries's
	}{{"whole", q, false, false}, {"tail", tail, false, false}, {"whole-cold", q, true, false}, {"whole-first", q, false, true}} {
		b.Run(c.name, func(b *testing.B) {
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				switch {
				case c.cold:
					s.wholes.clear()
				case c.first:
					s.wholes.restore(kept)
				}
				if _, err := s.Series(ctx, c.q); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// reportCPU reports the process's CPU (DuckDB's threads too: what the
// machine's load moves less) since cpu0, a read.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
}

// wholesKept is a copy of what the wholes keep (snapshot, restore).
type wholesKept struct {
	seed maphash.Seed
	m    map[wholeKey]wholeEntry
	atts map[uint64]struct{}
}

// snapshot is a copy of what the wholes keep (restore puts it back).
func (w *wholes) snapshot() wholesKept {
	w.mu.Lock()
	defer w.mu.Unlock()
	return wholesKept{w.seed, maps.Clone(w.m), maps.Clone(w.atts)}
}

// restore makes the wholes kept those of a snapshot.
func (w *wholes) restore(k wholesKept) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seed, w.m, w.bytes, w.atts = k.seed, maps.Clone(k.m), 0, maps.Clone(k.atts)
	for _, e := range k.m {
		w.bytes += e.size
	}
}
