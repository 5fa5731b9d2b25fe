package analysis

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestLiveGaugesAsWhole: the gauges the background's passes read through
// the live cache (the samples kept, and only those that came since read)
// are, at every pass, what reading each series whole gives, bucket for
// bucket: the memory growth's RSS and heap, the short-lived processes'
// count, each JVM's heap maximum, of the attempts of the running jobs and
// of those that just ended, on a loadgen cluster (the embedded store
// compacting as a server does) whose batches arrive in several orders
// (rounds as made, agents shuffled within a round, two rounds a commit,
// a round over two commits; and as made with compaction writing attempts
// whole, not as residuals of their processes), with batches that come late (samples of a
// running attempt at times before what was read: read from the start
// again), attempts that end, the analyser restarted (nothing kept), the
// store restarted (what is kept holds) and the cache too small for all
// (series evicted).
func TestLiveGaugesAsWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a loadgen cluster: not in -short runs (make check); make test runs it")
	}
	for _, order := range []string{"as made", "shuffled", "two a commit", "split", "plain attempts"} {
		t.Run(order, func(t *testing.T) { liveAsWhole(t, order) })
	}
}

func liveAsWhole(t *testing.T, order string) {
	ctx := context.Background()
	var clock atomic.Int64
	// (plain attempts: as made, compaction writing attempts' chunks
	// whole, not as residuals of their processes.)
	opt := duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: func() time.Time { return time.UnixMilli(clock.Load()) }},
		PlainAttempts: order == "plain attempts"}
	st, err := duckdb.Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 6, Slots: 8, BatchTicks: 15, Seed: 11, Start: start})
	rng := rand.New(rand.NewPCG(3, uint64(len(order))))
	var held []*wire.Batch // (split: the second half of a round, in the next commit)
	fill := func(end int) {
		clock.Store(storetest.FillRounds(t, st, start, func() ([]*wire.Batch, time.Time) {
			if g.Tick() >= end {
				if held != nil {
					bs := held
					held = nil
					return bs, time.UnixMilli(clock.Load())
				}
				return nil, time.Time{}
			}
			bs := append(held, g.Next()...)
			held = nil
			switch order {
			case "shuffled":
				rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
			case "two a commit":
				if g.Tick() < end {
					bs = append(bs, g.Next()...)
				}
			case "split":
				bs, held = bs[:len(bs)/2], append([]*wire.Batch(nil), bs[len(bs)/2:]...)
			}
			now := start.Add(time.Duration(g.Tick()) * time.Second)
			clock.Store(now.UnixMilli())
			return bs, now
		}).UnixMilli())
	}
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	live := newLiveCache(2_000_000)
	var r LiveReads // (of the caches before the restart, then of all)
	count := func() {
		r.First, r.Incremental, r.Again = r.First+live.first.Load(), r.Incremental+live.incremental.Load(), r.Again+live.again.Load()
		r.Whole, r.Evicted = r.Whole+live.whole.Load(), r.Evicted+live.evicted.Load()
	}
	secs := 8 * 60
	fill(secs)
	var compared, buckets, lates int
	for step := 0; step < 9; step++ {
		switch step {
		case 4:
			count()
			live = newLiveCache(2_000_000) // (the analyser restarted)
		case 6:
			// The store restarted (what is kept stays good).
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if st, err = duckdb.Open(opt); err != nil {
				t.Fatal(err)
			}
		case 8:
			live.max = 2_000 // (room for a few series only)
		}
		qs, owners := liveQueries(t, st, now())
		if step == 2 || step == 5 {
			// A late batch: samples of running attempts at times before
			// the last pass read to, the largest RSS of their lives.
			lates += lateSamples(t, st, qs, now())
			qs, owners = liveQueries(t, st, now())
		}
		got := fetchSeriesLive(ctx, st, live, qs, owners, now())
		want := fetchSeries(ctx, st, qs)
		if got.err != nil || want.err != nil {
			t.Fatal(got.err, want.err)
		}
		for i, q := range qs {
			g, w := got.rs[i], want.rs[i]
			if (g == nil) != (w == nil) {
				t.Fatalf("step %d, %s: live %v, whole %v", step, seriesID(q), g != nil, w != nil)
			}
			if w == nil {
				continue
			}
			if d := seriesDiff(g, w); d != "" {
				t.Errorf("step %d, %s: %s", step, seriesID(q), d)
			}
			compared++
			buckets += len(w.Times)
		}
		secs += 60 + step*7
		fill(secs)
	}
	count()
	t.Logf("%s: %d series compared (%d buckets), %d late samples; reads %+v", order, compared, buckets, lates, r)
	if compared < 100 || r.Incremental < int64(compared/2) || r.First == 0 || r.Evicted == 0 || lates == 0 || r.Again == 0 {
		t.Fatalf("%d series compared, %d late samples, reads %+v: the comparison does not cover incremental reads, late samples and evictions",
			compared, lates, r)
	}
}

// liveQueries are the gauges a pass reads of the attempts of the jobs
// running at now or ended within 2 minutes: each one's growth, short-lived
// count and JVMs' heap maxima (growthQuery, shortLivedQuery,
// heapMaxQueries), with the job of each.
func liveQueries(t *testing.T, st store.Store, now time.Time) (qs []store.SeriesQuery, owners []string) {
	t.Helper()
	ctx := context.Background()
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, jb := range page.Jobs {
		if jb.State != store.StateRunning && time.UnixMilli(int64(jb.LastSeen)).Before(now.Add(-2*time.Minute)) {
			continue
		}
		d, err := st.Job(ctx, jb.JobID)
		if err != nil {
			t.Fatal(err)
		}
		j := &Job{JobDetail: d, st: st, ctx: ctx, reads: reads{series: map[string]*store.SeriesResult{}, owner: map[string]string{},
			procs: map[string][]store.Process{}, heapMax: map[string]int64{}}}
		for _, a := range d.AttemptList {
			if a.DurationMs < 1000 {
				continue
			}
			qs = append(qs, growthQuery(a), shortLivedQuery(a))
			qs = append(qs, j.heapMaxQueries(a)...)
		}
		if j.err != nil {
			t.Fatal(j.err)
		}
		for len(owners) < len(qs) {
			owners = append(owners, jb.JobID)
		}
	}
	return qs, owners
}

// lateSamples stores, for up to 3 running attempts among qs' growth
// queries, a batch from an agent of its own with a sample 2 minutes
// before the attempt's last (a time its series was read to), and returns
// how many it stored.
func lateSamples(t *testing.T, st store.Store, qs []store.SeriesQuery, now time.Time) int {
	t.Helper()
	app, err := st.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range qs {
		if n == 3 || q.Scope != store.ScopeAttempt || len(q.Metrics) != 2 || q.To-q.From < 4*60_000 || q.To < now.UnixMilli()-10_000 {
			continue
		}
		ts := q.To - 120_000
		n++
		b := storetest.LateRSS(t, "late-"+q.AttemptID, uint64(now.UnixMilli()), q.AttemptID, q.JobID, q.From, ts, 64<<30)
		if _, err := app.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

// seriesDiff says how a differs from b ("" if in nothing: NaN equals NaN).
func seriesDiff(a, b *store.SeriesResult) string {
	if a.Step != b.Step || a.From != b.From || a.To != b.To || len(a.Times) != len(b.Times) || len(a.Series) != len(b.Series) {
		return "not the same buckets"
	}
	for i := range a.Times {
		if a.Times[i] != b.Times[i] {
			return "not the same times"
		}
	}
	for m := range a.Series {
		x, y := a.Series[m], b.Series[m]
		if x.Metric != y.Metric || x.Unit != y.Unit || len(x.Values) != len(y.Values) {
			return "not the same metrics"
		}
		for i := range x.Values {
			u, v := float64(x.Values[i]), float64(y.Values[i])
			if u != v && !(math.IsNaN(u) && math.IsNaN(v)) {
				return x.Metric + ": not the same values"
			}
		}
	}
	return ""
}
