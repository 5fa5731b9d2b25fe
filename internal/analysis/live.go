package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/store"
)

// What the background's passes keep of the series they read (live): the
// gauges of running attempts and of their JVMs (memory growth's RSS and
// heap, the short-lived processes' count, the heap maxima) as samples
// (store.SeriesPoints), so that the next pass reads only the samples
// that came since and makes its buckets from them, as the store makes
// them (SeriesPoints.Compute). A pass read each of those series over the
// attempt's whole life, every minute, in buckets that widen with it (a
// 120th of its duration): no bucket of one pass is one of the next.
//
// What a pass computes from them is what a read of the whole series
// computes: the store counts, with each read, the samples it holds of the
// series since the first read (SeriesPoints.Complete); a sample that came
// late, at a time before what was read since (an agent's batch stored
// after a later one of the same attempt), makes the series read whole
// again (counted: again). A series whose first read the store counts
// fewer samples than it read of (none seen so far), a store
// that cannot read samples (store.PointsReader: ClickHouse) or a series
// that is not a gauge are read whole every pass, as before. The samples
// kept are bounded (Options.MaxLiveSamples): the series not read the
// longest go first (counted: evicted), and a series no pass asked for
// within liveIdle goes too. A series asked in one bucket over its whole
// life (the short-lived count, a heap maximum) is kept as one sample of
// its largest values.

// liveIdle is how long a series no pass asks for is kept.
const liveIdle = 10 * time.Minute

// liveSeries is one series kept: its samples since from (its queries'
// From), read up to to.
type liveSeries struct {
	job      string
	from, to int64
	pts      *store.SeriesPoints
	used     time.Time
	// one: the samples are condensed to one (SeriesPoints.Condense): a
	// series asked in one bucket, from its start to its end (the
	// short-lived count, a heap maximum), is kept as its largest values.
	one bool
}

// liveCache is the series kept, by liveKey, and what they saved.
type liveCache struct {
	mu      sync.Mutex
	m       map[string]*liveSeries
	samples int // held in m
	max     int

	// The series reads the passes made of gauges: first (read from the
	// start, then kept), incremental (only what came since), again (read
	// from the start again: samples came late), whole (read whole, not
	// kept: not whole, or the store cannot), evicted (kept series dropped
	// for room).
	first, incremental, again, whole, evicted atomic.Int64
}

func newLiveCache(max int) *liveCache {
	return &liveCache{m: map[string]*liveSeries{}, max: max}
}

// liveKey names a series apart from its window and step.
func liveKey(q *store.SeriesQuery) string {
	return fmt.Sprintf("%s|%s|%d|%s", q.Scope, q.AttemptID, q.Process, strings.Join(q.Metrics, ","))
}

// liveable reports whether q is a series the cache keeps.
func liveable(q *store.SeriesQuery) bool {
	_, _, err := store.PointsMetrics(q)
	return err == nil
}

// take removes the series of key from the cache (a pass uses it alone).
func (c *liveCache) take(key string) *liveSeries {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e != nil {
		delete(c.m, key)
		c.samples -= e.pts.Len()
	}
	return e
}

// put keeps e, making room: the series not used the longest go.
func (c *liveCache) put(key string, e *liveSeries, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		c.samples -= old.pts.Len()
	}
	c.m[key] = e
	c.samples += e.pts.Len()
	if c.samples <= c.max {
		return
	}
	type aged struct {
		key  string
		used time.Time
	}
	all := make([]aged, 0, len(c.m))
	for k, x := range c.m {
		all = append(all, aged{k, x.used})
	}
	slices.SortFunc(all, func(a, b aged) int { return a.used.Compare(b.used) })
	for _, x := range all {
		if c.samples <= c.max*9/10 {
			break
		}
		y := c.m[x.key]
		c.samples -= y.pts.Len()
		delete(c.m, x.key)
		if now.Sub(y.used) < liveIdle {
			c.evicted.Add(1)
		}
	}
}

// dropJob forgets the series of a job (it ended), and those no pass
// asked for within liveIdle.
func (c *liveCache) dropJob(id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.job == id || now.Sub(e.used) >= liveIdle {
			c.samples -= e.pts.Len()
			delete(c.m, k)
		}
	}
}

// held is how many series and samples the cache holds.
func (c *liveCache) held() (series, samples int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.samples
}

// liveRead is one series a pass reads through the cache.
type liveRead struct {
	q     store.SeriesQuery
	key   string
	job   string
	e     *liveSeries // taken from the cache; nil: read from the start
	again bool
}

// read returns the results of qs, of the jobs jobs (one a query), made
// from the samples kept and those read since; ok is false when the store
// cannot read samples (the caller reads them whole). A series the store
// does not have is nil.
func (c *liveCache) read(ctx context.Context, st store.Store, qs []store.SeriesQuery, jobs []string,
	now time.Time) (rs []*store.SeriesResult, ok bool, err error) {
	if _, ok := st.(store.PointsReader); !ok {
		return nil, false, nil
	}
	rs = make([]*store.SeriesResult, len(qs))
	lr := make([]liveRead, len(qs))
	for i := range qs {
		lr[i] = liveRead{q: qs[i], key: liveKey(&qs[i]), job: jobs[i]}
		if e := c.take(lr[i].key); e != nil && e.from == qs[i].From && qs[i].To >= e.to && (!e.one || qs[i].Buckets() == 1) {
			lr[i].e = e
		}
	}
	defer func() {
		if err != nil {
			return
		}
		for i := range lr {
			if e := lr[i].e; e != nil {
				e.used, e.job = now, lr[i].job
				c.put(lr[i].key, e, now)
			}
		}
	}()
	// One read of what came since for the series kept, and of the others
	// from their start; then, from their start, those that samples came
	// late for.
	todo := make([]int, len(qs))
	for i := range todo {
		todo[i] = i
	}
	for round := 0; round < 2 && len(todo) > 0; round++ {
		pqs := make([]store.PointsQuery, len(todo))
		for k, i := range todo {
			q := lr[i].q
			if e := lr[i].e; e != nil {
				q.From = e.to
			}
			pqs[k] = store.PointsQuery{SeriesQuery: q, Since: lr[i].q.From}
		}
		sps, _, err := store.ReadSeriesPoints(ctx, st, pqs)
		if err != nil {
			return nil, true, err
		}
		var late []int
		for k, i := range todo {
			r, sp := &lr[i], sps[k]
			switch {
			case r.e != nil && sp != nil && r.e.pts.Complete(sp):
				r.e.pts.Keep(sp)
				r.e.to = r.q.To
				c.incremental.Add(1)
			case r.e != nil:
				// Samples came late (or the series is gone): from the
				// start.
				r.e, r.again = nil, true
				late = append(late, i)
				c.again.Add(1)
				continue
			case sp == nil:
				continue // (not found)
			case sp.Start():
				r.e = &liveSeries{from: r.q.From, to: r.q.To, pts: sp}
				if !r.again {
					c.first.Add(1)
				}
			default:
				c.whole.Add(1) // (computed from what was read, not kept)
			}
			src := sp
			if r.e != nil {
				src = r.e.pts
			}
			if rs[i], err = src.Compute(&r.q); err != nil {
				return nil, true, err
			}
			if r.e != nil && r.q.Buckets() == 1 {
				metrics, _, _ := store.PointsMetrics(&r.q)
				r.e.one = r.e.pts.Condense(metrics)
			}
		}
		todo = late
	}
	return rs, true, nil
}

// fetchSeriesLive is fetchSeries, the gauges that live keeps read
// through it (owners: the job of each query); live nil reads all whole.
func fetchSeriesLive(ctx context.Context, st store.Store, live *liveCache, todo []store.SeriesQuery, owners []string,
	now time.Time) seriesRead {
	if live == nil {
		return fetchSeries(ctx, st, todo)
	}
	var lq, wq []store.SeriesQuery
	var lj []string
	var li, wi []int
	for i := range todo {
		if liveable(&todo[i]) {
			lq, lj, li = append(lq, todo[i]), append(lj, owners[i]), append(li, i)
		} else {
			wq, wi = append(wq, todo[i]), append(wi, i)
		}
	}
	if len(lq) == 0 {
		return fetchSeries(ctx, st, todo)
	}
	rs, ok, err := live.read(ctx, st, lq, lj, now)
	if err != nil {
		return seriesRead{err: err}
	}
	if !ok {
		live.whole.Add(int64(len(lq)))
		return fetchSeries(ctx, st, todo)
	}
	out := seriesRead{qs: todo, rs: make([]*store.SeriesResult, len(todo))}
	var missing []store.SeriesQuery
	var mi []int
	for k, i := range li {
		if rs[k] == nil {
			// (Not found from its samples: read whole, as Series says
			// what it has of it, if anything.)
			missing, mi = append(missing, todo[i]), append(mi, i)
			continue
		}
		out.rs[i] = rs[k]
	}
	wq, wi = append(wq, missing...), append(wi, mi...)
	w := fetchSeries(ctx, st, wq)
	if w.err != nil {
		return seriesRead{err: w.err}
	}
	for k, i := range wi {
		out.rs[i] = w.rs[k]
	}
	return out
}

// LiveReads counts what the background's passes read of gauges
// (live.go): series read from their start and kept (First), only what
// came since (Incremental), from their start again as samples came late
// (Again), whole and not kept (Whole: the store cannot read samples, or a
// first read was not whole), kept series dropped for room (Evicted); and
// the series and samples kept now.
type LiveReads struct {
	First, Incremental, Again, Whole, Evicted int64
	Series, Samples                           int
}

// LiveReads is what the background's passes read of gauges so far.
func (a *Analyzer) LiveReads() LiveReads {
	c := a.live
	n, s := c.held()
	return LiveReads{First: c.first.Load(), Incremental: c.incremental.Load(), Again: c.again.Load(), Whole: c.whole.Load(),
		Evicted: c.evicted.Load(), Series: n, Samples: s}
}

// liveCollectors export LiveReads.
func (a *Analyzer) liveCollectors() []prometheus.Collector {
	c := a.live
	reads := func(read string, n *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_analysis_gauge_reads_total",
			Help:        "Series of running attempts' gauges the background analysis read: first (from the start, then kept), incremental (only the samples that came since), again (from the start again: samples came late), whole (read whole, not kept).",
			ConstLabels: prometheus.Labels{"read": read}}, func() float64 { return float64(n.Load()) })
	}
	return []prometheus.Collector{reads("first", &c.first), reads("incremental", &c.incremental), reads("again", &c.again),
		reads("whole", &c.whole),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_analysis_gauge_evicted_total",
			Help: "Series of running attempts' gauges the background analysis kept and dropped for room (Options.MaxLiveSamples), read from the start again at their next analysis."},
			func() float64 { return float64(c.evicted.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_analysis_gauge_samples",
			Help: "Samples of running attempts' gauges the background analysis keeps between its passes."},
			func() float64 { _, s := c.held(); return float64(s) }),
	}
}
