// Package ingest receives agents' batches: the HTTP endpoint (auth, limits,
// decoding, validation) and the pipeline that writes them to the store with
// group commit, answering each request only once its batch is durable.
package ingest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// ErrBusy means the pipeline's queue is full: the client should retry later.
var ErrBusy = errors.New("ingest queue full")

// ErrStopped means the pipeline is shutting down.
var ErrStopped = errors.New("ingest stopped")

// Result is what happened to a batch (Submit), or to the batches of a
// request (SubmitMany: stored together, or none of them).
type Result struct {
	Duplicate  bool // every batch was stored before (nothing was stored)
	Duplicates int  // batches that were stored before
	Err        error
}

// request is a request's batches: appended in order into one commit.
type request struct {
	bs []*wire.Batch
	ps []*store.Prepared // prepared by the store (store.PrepareBatch), or nil
	n  int64             // samples
	// series are the batches' process and attempt series (the chunks a
	// commit appends: store.Gathering's Enough).
	series int
	done   chan Result
	at     time.Time // when it was queued
}

// Pipeline is the single writer: it takes queued batches, appends as many as
// are waiting (up to a bound) in one store transaction, commits, and answers.
type Pipeline struct {
	st              store.Store
	q               chan *request
	maxGroup        int
	maxGroupSamples int
	queueSamples    int64
	queued          atomic.Int64
	log             *slog.Logger
	onCommit        func()
	onStored        func(b *wire.Batch)
	onError         func(err error, batches int)
	stop            chan struct{}

	// gatherGap and gatherMax are PipelineOptions'; arriving counts the
	// requests on their way to the queue (Arriving).
	gatherGap, gatherMax time.Duration
	arriving             atomic.Int64

	// acks are the groups whose commits started (store.CommitStart), in
	// order, for the answerer; slots bound the groups between their
	// commit's start and their answer.
	acks  chan *started
	slots chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	commitDur prometheus.Histogram
	batches   *prometheus.CounterVec
	samples   prometheus.Counter
	groupSize prometheus.Histogram
}

// PipelineOptions configure a Pipeline.
type PipelineOptions struct {
	QueueLen int // batches waiting; beyond it Submit returns ErrBusy (default 4096)
	// QueueSamples bounds the samples waiting (default 2 million): beyond it
	// Submit returns ErrBusy, so that memory stays bounded.
	QueueSamples int
	// MaxGroup bounds the batches of a transaction (default 4096, the
	// queue's): a store that commits once a second (store.CommitPacer)
	// takes at most that many batches a second (at 2048, 3,000 nodes
	// with a batch in flight each waited two commits).
	MaxGroup int
	// MaxGroupSamples ends a group early (default 400 000 samples).
	MaxGroupSamples int
	Log             *slog.Logger
	Registry        prometheus.Registerer
	OnCommit        func() // called after each commit that stored something
	// OnStored, if set, is called with each batch a commit stored (not
	// the duplicates), before OnCommit; it must not keep the batch.
	OnStored func(b *wire.Batch)
	// OnError, if set, is called with each failed commit and the number of
	// batches it refused, and the batches' failures are logged at debug
	// level only: the caller says that the store cannot write (a full
	// disk fails every batch of every agent, again at each retry).
	OnError func(err error, batches int)
	// GatherGap and GatherMax: when a batch comes to an idle pipeline and
	// the store, which paces its commits (store.CommitPacer), wants one
	// at once, the commit waits while batches keep coming: until no
	// request came for GatherGap (default 50 ms) and none is on its way
	// (Arriving), for GatherMax at most (default 500 ms; <0: it never
	// waits), or until its group is full.
	// A wave (every agent's first batch as the server starts, their
	// spools after a restart) then goes into one commit, instead of
	// waiting the store's pace behind a commit of its first batch alone.
	// The group after it gathers too when the store wants it at once as
	// well (the ClickHouse store does, after an idle period): the rest
	// of a wave that came with a gap, or came back answered before the
	// store's next second.
	GatherGap, GatherMax time.Duration
}

// NewPipeline starts the writer.
func NewPipeline(st store.Store, o PipelineOptions) *Pipeline {
	if o.QueueLen <= 0 {
		o.QueueLen = 4096
	}
	if o.QueueSamples <= 0 {
		o.QueueSamples = 2_000_000
	}
	if o.MaxGroup <= 0 {
		o.MaxGroup = 4096
	}
	if o.MaxGroupSamples <= 0 {
		o.MaxGroupSamples = 400_000
	}
	if o.GatherGap <= 0 {
		o.GatherGap = 50 * time.Millisecond
	}
	if o.GatherMax == 0 {
		o.GatherMax = 500 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{gatherGap: o.GatherGap, gatherMax: o.GatherMax, st: st, q: make(chan *request, o.QueueLen), acks: make(chan *started, maxStarted), slots: make(chan struct{}, maxStarted), maxGroup: o.MaxGroup, maxGroupSamples: o.MaxGroupSamples, queueSamples: int64(o.QueueSamples), log: o.Log, onCommit: o.OnCommit, onStored: o.OnStored, onError: o.OnError, stop: make(chan struct{}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskscope_ingest_commit_seconds",
			Help: "Time to append and commit one group of batches.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_ingest_batches_total",
			Help: "Batches by outcome: stored, duplicate, failed."}, []string{"outcome"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskscope_ingest_samples_total",
			Help: "Process samples stored."}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskscope_ingest_group_batches",
			Help: "Batches per store transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
	}
	if o.Registry != nil {
		o.Registry.MustRegister(p.commitDur, p.batches, p.samples, p.groupSize,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_ingest_queue_batches",
				Help: "Batches waiting for the writer."}, func() float64 { return float64(len(p.q)) }))
	}
	p.wg.Add(2)
	go p.run()
	go p.answer()
	return p
}

// maxStarted bounds the groups whose commits started and that are not
// answered yet: one whose inserts are under way, and the next, folded
// meanwhile (a store.PipelinedAppender's).
const maxStarted = 2

// started is a group whose commit started: wait says when it is durable.
type started struct {
	group   []*request
	dups    []bool
	wait    func() error
	start   time.Time
	started time.Time // when its commit had started (CommitStart returned)
	// arriving is the requests on their way when the writer began it
	// (Arriving; traceGroup).
	arriving int64
}

// Submit prepares a validated batch for the store, when it prepares batches
// (store.BatchPreparer: on the caller's goroutine, so that requests prepare
// their batches in parallel), queues it and waits until it is durable (or
// failed). It never blocks on a full queue: it returns ErrBusy.
func (p *Pipeline) Submit(ctx context.Context, b *wire.Batch) Result {
	return p.SubmitMany(ctx, []*wire.Batch{b})
}

// SubmitMany is Submit of several batches (a list an agent sent), appended
// in order into one commit: all are stored, or none. Each agent's batches
// among them must come in the order of their sequences (a batch behind a
// later one of its agent is a duplicate).
func (p *Pipeline) SubmitMany(ctx context.Context, bs []*wire.Batch) Result {
	select {
	case <-p.stop:
		return Result{Err: ErrStopped}
	default:
	}
	var n int64
	series := 0
	for _, b := range bs {
		n += int64(b.SampleCount())
		series += len(b.ProcSeries) + len(b.AttemptSeries)
	}
	if p.queued.Add(n) > p.queueSamples && p.queued.Load() != n {
		p.queued.Add(-n)
		return Result{Err: ErrBusy}
	}
	r := &request{bs: bs, n: n, series: series, done: make(chan Result, 1), at: time.Now()}
	if ps := store.PrepareBatch(p.st, bs[0]); ps != nil {
		r.ps = make([]*store.Prepared, len(bs))
		r.ps[0] = ps
		for i := 1; i < len(bs); i++ {
			r.ps[i] = store.PrepareBatch(p.st, bs[i])
		}
	}
	select {
	case p.q <- r:
	default:
		p.queued.Add(-r.n)
		return Result{Err: ErrBusy}
	}
	select {
	case res := <-r.done:
		return res
	case <-ctx.Done():
		// The batch may still be stored; the client's retry is a duplicate.
		return Result{Err: ctx.Err()}
	}
}

// Close stops accepting batches, writes those queued, and returns.
func (p *Pipeline) Close() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}

func (p *Pipeline) run() {
	defer p.wg.Done()
	defer close(p.acks)
	wave := false // the last group gathered after an idle period
	for begun := false; ; begun = true {
		first, waited := p.take()
		// (The first request found the queue empty at the start, even if
		// it came before this goroutine ran.)
		waited = waited || !begun
		if first == nil {
			// Drain what is queued, then stop.
			for {
				select {
				case r := <-p.q:
					p.write([]*request{r})
					p.queued.Add(-r.n)
				default:
					return
				}
			}
		}
		var g group
		g.add(first)
		// After a group that gathered after an idle period, the next
		// one gathers too if the store wants it at once (the rest of a
		// wave: store.NextCommit); not the one after it (under a load
		// that keeps the queue full, gathering would only delay).
		idle := p.pace(waited || wave)
		wave = idle && waited
		if idle {
			t := time.Now()
			p.gather(&g, p.gatherGap, p.gatherMax)
			p.log.Debug("commit gathered", "batches", g.batches, "took", time.Since(t), "arriving", p.arriving.Load())
		} else if gt := store.CommitGather(p.st); gt.Gap > 0 && p.gatherMax >= 0 && p.arriving.Load() > 0 {
			// (A request alone, none on its way: at once.) What queued
			// while the last commit ran goes in first: when it is enough
			// for the store, the batches wait for the writer, not the
			// writer for them (with 1,000 agents in flight, gathering
			// kept it idle up to Max before each commit).
			p.drain(&g)
			if gt.Enough <= 0 || g.series < gt.Enough {
				p.gather(&g, gt.Gap, gt.Max)
			}
		}
		p.drain(&g)
		p.write(g.rs)
		p.queued.Add(-g.n)
	}
}

// group is the requests the writer takes into one commit.
type group struct {
	rs      []*request
	n       int64 // samples
	batches int
	series  int
}

func (g *group) add(r *request) {
	g.rs = append(g.rs, r)
	g.n += r.n
	g.batches += len(r.bs)
	g.series += r.series
}

// drain adds to g what is queued, until g is full.
func (p *Pipeline) drain(g *group) {
	for !p.full(g) {
		select {
		case r := <-p.q:
			g.add(r)
		default:
			return
		}
	}
}

// full says whether g may take no more requests.
func (p *Pipeline) full(g *group) bool {
	return g.batches >= p.maxGroup || g.n >= int64(p.maxGroupSamples)
}

// take is the next request, and whether the writer waited for it (the
// queue was empty); nil once the pipeline stops.
func (p *Pipeline) take() (r *request, waited bool) {
	select {
	case r = <-p.q:
		return r, false
	default:
	}
	select {
	case r = <-p.q:
		return r, true
	case <-p.stop:
		return nil, true
	}
}

// pace waits, with the queue open, until the store wants a commit
// (store.NextCommit): the batches that arrive meanwhile go into the
// commit. The time is asked again every paceCheck (a store may move it),
// and the wait ends when the pipeline stops. It says whether the store
// wanted a commit already when the group's first request came to an
// empty queue (waited; or came after a group that gathered so): after an
// idle period, the group gathers instead.
func (p *Pipeline) pace(waited bool) (idle bool) {
	next := store.NextCommit(p.st)
	if next.IsZero() {
		return false
	}
	if waited && !time.Now().Before(next) {
		return true
	}
	for {
		wait := time.Until(next)
		if wait <= 0 {
			return false
		}
		t := time.NewTimer(min(wait, paceCheck))
		select {
		case <-t.C:
		case <-p.stop:
			t.Stop()
			return false
		}
		next = store.NextCommit(p.st)
	}
}

// gather takes the requests that keep coming into g after an idle period
// (pace): a commit at once would hold the next one back for the store's
// whole pace, so a wave (every agent's first batch as a server starts,
// their spools after a restart) would wait that pace behind a commit of
// its first request alone, then meet every new agent and attempt at once.
// It ends once no request came for gap and none is on its way
// (Arriving: a thousand requests decoded at once come nearly together at
// the end, after a pause), after most, once g is full, or when the
// pipeline stops. (A store that gathers before each commit,
// store.CommitGatherer, says its own gap and most.)
func (p *Pipeline) gather(g *group, gapAfter, most time.Duration) {
	if most < 0 {
		return
	}
	end := time.NewTimer(most)
	defer end.Stop()
	gap := time.NewTimer(gapAfter)
	defer gap.Stop()
	for !p.full(g) {
		select {
		case r := <-p.q:
			g.add(r)
			gap.Reset(gapAfter)
		case <-gap.C:
			if p.arriving.Load() <= 0 {
				return
			}
			gap.Reset(gapAfter)
		case <-end.C:
			return
		case <-p.stop:
			return
		}
	}
}

// Arriving says that a request is on its way to the pipeline (its body
// read, decoded and checked before it is submitted), until the returned
// func is called (at its Submit, or when it fails; more calls do
// nothing): the gathering after an idle period waits for it.
func (p *Pipeline) Arriving() (arrived func()) {
	p.arriving.Add(1)
	var once sync.Once
	return func() { once.Do(func() { p.arriving.Add(-1) }) }
}

const paceCheck = 50 * time.Millisecond

// write appends a group in one transaction and starts its commit; the
// answerer answers its requests once it is durable (answer), while the
// writer takes the next group. If any batch fails the transaction before
// its commit is under way, the group is rolled back and each request's
// batches are written alone, so that one bad batch cannot fail the
// others' requests; unless the store cannot write at all (its disk is
// full, or it cannot be reached): then every batch would fail again, and
// all are answered with the error. A commit that fails once under way
// (a store.PipelinedAppender's inserts) fails its whole group: the store
// failed, not a batch.
func (p *Pipeline) write(group []*request) {
	start := time.Now()
	arriving := p.arriving.Load()
	p.slots <- struct{}{}
	dups, wait, err := p.commit(group)
	if err != nil {
		<-p.slots
		if len(group) > 1 && !errors.Is(err, store.ErrDiskFull) && !errors.Is(err, store.ErrUnavailable) {
			for _, r := range group {
				p.write([]*request{r})
			}
			return
		}
		p.done(&started{group: group, start: start, arriving: arriving}, err)
		return
	}
	p.acks <- &started{group: group, dups: dups, wait: wait, start: start, started: time.Now(), arriving: arriving}
}

// answer answers the groups whose commits started, in order, each once
// it is durable (or failed).
func (p *Pipeline) answer() {
	defer p.wg.Done()
	for g := range p.acks {
		err := g.wait()
		<-p.slots
		p.done(g, err)
	}
}

// done counts a group's commit and answers its requests: its dups say
// which batches were duplicates (when err is nil).
func (p *Pipeline) done(g *started, err error) {
	group, start, res := g.group, g.start, g.dups
	batches := 0
	for _, r := range group {
		batches += len(r.bs)
	}
	p.commitDur.Observe(time.Since(start).Seconds())
	if err == nil && p.log.Enabled(context.Background(), slog.LevelDebug) {
		p.traceGroup(g, batches)
	}
	p.groupSize.Observe(float64(batches))
	if err != nil && p.onError != nil {
		p.onError(err, batches)
	}
	if err == nil && p.onStored != nil {
		i := 0
		for _, r := range group {
			for _, b := range r.bs {
				if !res[i] {
					p.onStored(b)
				}
				i++
			}
		}
	}
	if err == nil && p.onCommit != nil && slices.Contains(res, false) {
		p.onCommit()
	}
	level := slog.LevelError
	if p.onError != nil {
		level = slog.LevelDebug
	}
	i := 0
	for _, r := range group {
		out := Result{Err: err}
		for _, b := range r.bs {
			switch {
			case err != nil:
				p.batches.WithLabelValues("failed").Inc()
				p.log.Log(context.Background(), level, "cannot store batch", "agent", b.AgentID, "seq", b.Seq, "err", err)
			case res[i]:
				p.batches.WithLabelValues("duplicate").Inc()
				out.Duplicates++
			default:
				p.batches.WithLabelValues("stored").Inc()
				p.samples.Add(float64(b.SampleCount()))
			}
			i++
		}
		out.Duplicate = err == nil && out.Duplicates == len(r.bs)
		r.done <- out
	}
}

// traceGroup logs at debug level ("commit answered") when a group's
// requests were queued, when the writer began its commit (start), the
// requests then on their way (arriving: read or decoded, not queued yet),
// when the commit had started (its inserts under way) and now, when they
// are answered.
func (p *Pipeline) traceGroup(g *started, batches int) {
	group, start := g.group, g.start
	first, last := group[0].at, group[0].at
	for _, r := range group {
		if r.at.Before(first) {
			first = r.at
		}
		if r.at.After(last) {
			last = r.at
		}
	}
	now := time.Now()
	p.log.Debug("commit answered", "began", start.Format("15:04:05.000"), "batches", batches, "requests", len(group),
		"first_queued", start.Sub(first), "last_queued", start.Sub(last), "arriving", g.arriving, "start", g.started.Sub(start),
		"answered", now.Sub(start), "longest", now.Sub(first))
}

// commit appends a group in one transaction and starts its commit
// (store.CommitStart): wait says when it is durable.
func (p *Pipeline) commit(group []*request) (dups []bool, wait func() error, err error) {
	ctx := context.Background()
	app, err := p.st.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	var all []*wire.Batch
	for _, r := range group {
		all = append(all, r.bs...)
	}
	if err := store.PreloadBatches(app, all); err != nil {
		app.Rollback()
		return nil, nil, err
	}
	for _, r := range group {
		for i, b := range r.bs {
			var p *store.Prepared
			if r.ps != nil {
				p = r.ps[i]
			}
			d, err := store.AppendBatch(app, b, p)
			if err != nil {
				app.Rollback()
				return nil, nil, err
			}
			dups = append(dups, d)
		}
	}
	if wait, err = store.CommitStart(app); err != nil {
		return nil, nil, err
	}
	return dups, wait, nil
}
