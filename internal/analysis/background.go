package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/store"
)

// The background analyser (Run): every job analysed when it ends, every
// running job again at most every Options.Every while new data comes, and
// the reports stored (stored.go). It finds what to analyse by asking the
// store, every Poll, for the jobs whose data it stored lately, in the
// order the data arrived (not the time it says: an agent that sends its
// spool after an outage, or a job's last batches that come hours after
// its end, are analysed as they come), with the stamps of their stored
// analyses (store.FindingStore.AnalysisStates), and comparing the two
// (due): nothing it has to do is kept only in its memory, so a job it
// could not queue, or whose analysis failed, or whose replica died, is
// found again at the next poll. Its queue is bounded, ended jobs
// first; workers are Options.Workers. On a store that several servers
// share (store.Replicas), each job is analysed by one of them (replicas.go).

// Options configure an Analyzer.
type Options struct {
	// Settings are what the findings depend on beyond the data.
	Settings Settings
	// Build is taskscope's version: with Revision, the version stored
	// with every analysis ("dev" if empty).
	Build string
	// Every is how often a running job is analysed again at most, when
	// new data came for it (default 1 minute). Negative: no background
	// analysis at all (Run returns at once).
	Every time.Duration
	// Settle is how long after its last data a finished job is analysed
	// (default 5 s): an attempt's last records (an exit status) can come
	// a batch after its end.
	Settle time.Duration
	// Poll is how often the store is asked which jobs changed (default
	// 2 s).
	Poll time.Duration
	// Window is how far back a poll looks for jobs whose data the store
	// wrote, by the store's clock when it wrote it (default 10 minutes:
	// longer than an attempt takes to be called lost, so that a job that
	// ends by going silent is seen to end); the first poll looks back
	// Lookback (default 6 hours: the jobs that ended while no server
	// ran).
	Window, Lookback time.Duration
	// Workers is how many jobs are analysed at once (default 2); Queue
	// how many jobs wait at most (default 10,000; the others are found
	// again at the next poll).
	Workers, Queue int
	// Batch is how many jobs a worker analyses at once at most (default
	// 64): their passes read together, one read of each kind for them
	// all (each read costs a store a few milliseconds however little it
	// reads), and store their analyses together. Ended jobs are taken
	// before any running one, and together only with ended ones: up to
	// Batch, and no more than a share of those waiting for each worker
	// free to take them (so that each waits for fewer others).
	Batch int
	// MaxIncremental is how many running jobs' reads are kept between
	// their analyses, to read again only what changed (default 5,000).
	MaxIncremental int
	// MaxLiveSamples bounds the samples of running attempts' gauges kept
	// between their analyses, to read only those that came since (live.go;
	// default 2,000,000: some 50 MB).
	MaxLiveSamples int
	// Refresh is how long at most a running job's stored analysis stays
	// as it was when what it finds is the same (default 10 minutes): a
	// running job's analysis is stored again at once when its worst
	// severity or its findings' heuristics, severities, task types or
	// attempts change (what the jobs list, the overview and the findings
	// search select by), else its numbers and texts (a peak that grew a
	// few MB, a minute more of run time) are stored again at most every
	// Refresh. Its page, and the listeners (alerts), have every analysis.
	Refresh time.Duration
	// Listeners are called after each job's analysis made in the
	// background (stored, or a running job's found the same: Refresh) or
	// for a page and stored, in the worker that made it
	// (they must return quickly: queue their own work; their time is the
	// analysis'). On a shared store, only the replica that analysed the
	// job calls them. Listen adds more.
	Listeners []Listener
	// Replicas time the split of work between servers that share a
	// store (zero: ReplicaTiming's defaults).
	Replicas ReplicaTiming
	// Replica names this server among them (default: host, pid and a
	// random number).
	Replica string
	Log     *slog.Logger
	// Now is the analyser's clock (default time.Now).
	Now func() time.Time
}

// Listener is told of each job's analysis (Options.Listeners).
type Listener func(ctx context.Context, a *Analysed)

// Analysed is a job's analysis as listeners are told of it.
type Analysed struct {
	JobID, Name, User, Queue string
	// State is the job's as it was analysed (store.StateRunning or
	// StateFinished); Ended that it had finished.
	State string
	Ended bool
	// Report is the analysis: its findings, worst first.
	Report *Report
	// Hosts are the hosts of the attempts the findings name, by attempt.
	Hosts map[string]string
}

func (o *Options) defaults() {
	if o.Build == "" {
		o.Build = "dev"
	}
	if o.Every == 0 {
		o.Every = time.Minute
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Minute
	}
	if o.Lookback <= 0 {
		o.Lookback = 6 * time.Hour
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Queue <= 0 {
		o.Queue = 10_000
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	if o.MaxIncremental <= 0 {
		o.MaxIncremental = 5_000
	}
	if o.MaxLiveSamples <= 0 {
		o.MaxLiveSamples = 2_000_000
	}
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Replicas.defaults()
}

// maxStates bounds what one poll reads of the store.
const maxStates = 100_000

// job is a job to analyse: its summary as the poll saw it.
type job struct {
	store.Job
	ended bool
	found time.Time // when the poll found it due
	last  time.Time // when its last data was there (arrived)
}

// queue is the jobs waiting, ended ones first, each once; bounded.
type queue struct {
	mu             sync.Mutex
	ended, running []job
	in             map[string]bool // queued or being analysed
	// gen counts the polls; finished has the poll under way when each
	// job's analysis ended: a poll that read the store before that does
	// not queue the job again (it read it before its analysis was stored).
	gen             uint64
	finished        map[string]uint64
	max             int
	takers          int           // workers in take
	ready           chan struct{} // a token while jobs wait
	dueNotQueued    int           // at the last poll: due, this replica's, not queued (full, or in its Grace)
	oldestEndedWait time.Time     // found time of the oldest ended job waiting
}

func newQueue(max int) *queue {
	return &queue{in: map[string]bool{}, max: max, ready: make(chan struct{}, 1), finished: map[string]uint64{}}
}

// poll starts a poll: it returns its number.
func (q *queue) poll() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	for id, g := range q.finished {
		if g+1 < q.gen {
			delete(q.finished, id) // a poll that started after it read it stored
		}
	}
	return q.gen
}

// add queues j, found due by poll gen, unless it is queued or analysed
// now, or its analysis ended after the poll began; full if the queue is.
// The workers take it after wake (a poll queues all it found due first:
// a worker that took the first of them alone would analyse the running
// ones one by one, not together).
func (q *queue) add(j job, gen uint64) (queued, full bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if g, ok := q.finished[j.JobID]; q.in[j.JobID] || ok && g >= gen {
		return false, false
	}
	if len(q.ended)+len(q.running) >= q.max {
		return false, true
	}
	q.in[j.JobID] = true
	if j.ended {
		q.ended = append(q.ended, j)
	} else {
		q.running = append(q.running, j)
	}
	return true, false
}

// wake tells the workers of the jobs queued.
func (q *queue) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ended)+len(q.running) > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
}

// take returns the next jobs, waiting for one: the ended ones first, up
// to batch of them but no more than a share of those waiting for each
// worker that waits for jobs (an ended job waits for the others of its
// batch: workers that are free share a poll's ended jobs); else up to
// batch running ones.
func (q *queue) take(ctx context.Context, batch int) ([]job, bool) {
	batch = max(batch, 1)
	q.mu.Lock()
	q.takers++
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.takers--
		q.mu.Unlock()
	}()
	for {
		q.mu.Lock()
		var js []job
		switch {
		case len(q.ended) > 0:
			n := min(len(q.ended), batch, (len(q.ended)+q.takers-1)/q.takers)
			js, q.ended = append([]job(nil), q.ended[:n]...), q.ended[n:]
		case len(q.running) > 0:
			n := min(len(q.running), batch)
			js, q.running = append([]job(nil), q.running[:n]...), q.running[n:]
		}
		ok := len(js) > 0
		if ok && len(q.ended)+len(q.running) > 0 {
			select {
			case q.ready <- struct{}{}:
			default:
			}
		}
		q.mu.Unlock()
		if ok {
			return js, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-q.ready:
		}
	}
}

// done forgets a job taken.
func (q *queue) done(id string) {
	q.mu.Lock()
	delete(q.in, id)
	q.finished[id] = q.gen
	q.mu.Unlock()
}

// lengths are the jobs waiting, ended and running.
func (q *queue) lengths() (ended, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ended), len(q.running)
}

// background is the state of Run.
type background struct {
	a       *Analyzer
	q       *queue
	m       *metrics
	coord   *coordinator
	retry   map[string]retryAt // jobs whose analysis failed: not before
	retryMu sync.Mutex
	running atomic.Int64 // analyses under way
	// stamps are the stored analyses' stamps plan read (nil: none
	// stored), of the jobs the store gave none of; only poll's goroutine
	// uses them.
	stamps map[string]*store.AnalysisStamp
}

type retryAt struct {
	at    time.Time
	delay time.Duration
}

// Run analyses jobs in the background until ctx ends (Options.Every
// negative: it returns at once), its metrics registered in reg (nil: not
// exported). It returns the first error that stops it (the metrics'
// registration), nil when ctx ends.
func (a *Analyzer) Run(ctx context.Context, reg prometheus.Registerer) error {
	if a.opt.Every < 0 {
		return nil
	}
	b := &background{a: a, q: newQueue(a.opt.Queue), retry: map[string]retryAt{}, stamps: map[string]*store.AnalysisStamp{}}
	var err error
	if b.m, err = newMetrics(reg, b); err != nil {
		return err
	}
	b.coord = newCoordinator(a.st, a.opt.Replica, a.opt.Replicas, a.opt.Log)
	a.mu.Lock()
	a.bg = b
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.bg = nil
		a.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	for i := 0; i < a.opt.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.work(wctx)
		}()
	}
	cdone := make(chan struct{})
	go func() {
		defer close(cdone)
		b.coord.run(wctx)
	}()
	b.poll(ctx)
	stopWorkers()
	wg.Wait()
	<-cdone
	// Every analysis has ended: the others may take this one's jobs.
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.coord.leave(lctx)
	return nil
}

// poll asks the store what to analyse every Poll, until ctx ends.
func (b *background) poll(ctx context.Context) {
	a := b.a
	since := a.opt.Now().Add(-a.opt.Lookback)
	t := time.NewTicker(a.opt.Poll)
	defer t.Stop()
	logged := time.Time{}
	for {
		gen := b.q.poll()
		states, err := a.st.AnalysisStates(ctx, since.UnixMilli(), maxStates)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			b.m.pollErrors.Inc()
			if time.Since(logged) > time.Minute {
				logged = time.Now()
				a.opt.Log.Error("cannot list the jobs to analyse", "err", err)
			}
		} else {
			if len(states) == maxStates {
				a.opt.Log.Warn("more jobs seen than one poll reads", "max", maxStates, "since", since)
			}
			a.late.note(states, len(states) < maxStates)
			b.plan(ctx, states, gen)
			since = a.opt.Now().Add(-a.opt.Window)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxStampReads bounds the stored analyses a poll reads (plan), and
// maxStamps those kept.
const maxStampReads, maxStamps = 100, 10_000

// plan queues the jobs of states that are due and this replica's. A
// finished job whose data came late (stored Settle or more after the
// time it says) and that the store gave no stored analysis of (a store
// need not give those evaluated before the poll's since) has its stored
// analysis read (stamp): one analysed at its end long ago settles from
// its new data's storing (quiet), where one never analysed is due at
// once.
func (b *background) plan(ctx context.Context, states []store.AnalysisState, gen uint64) {
	a := b.a
	now := a.opt.Now()
	notQueued, dueEnded, dueRunning, reads := 0, 0, 0, 0
	var oldest time.Time
	for _, s := range states {
		if s.Stored != nil {
			delete(b.stamps, s.Job.JobID) // (an analysis since: the store gives it)
		} else if j := &s.Job; j.State == store.StateFinished &&
			time.UnixMilli(int64(s.Changed)).Sub(time.UnixMilli(int64(j.LastSeen))) >= a.opt.Settle &&
			now.Sub(time.UnixMilli(int64(j.LastSeen))) >= a.opt.Settle {
			st, err := b.stamp(ctx, j.JobID, &reads)
			if err != nil {
				continue // (found again at the next poll)
			}
			s.Stored = st
		}
		due, ended := a.due(s, now)
		if !due || b.retrying(s.Job.JobID, time.Now()) {
			continue
		}
		mine := b.coord.mine(s.Job.JobID)
		if !mine && !b.coord.waiting(s.Job.JobID) {
			continue
		}
		last := arrived(s)
		if ended {
			dueEnded++
			if oldest.IsZero() || last.Before(oldest) {
				oldest = last
			}
		} else {
			dueRunning++
		}
		if !mine {
			notQueued++ // (this replica's once its Grace ends)
			continue
		}
		if _, full := b.q.add(job{Job: s.Job, ended: ended, found: now, last: last}, gen); full {
			notQueued++
		}
	}
	b.q.wake()
	b.q.mu.Lock()
	b.q.dueNotQueued, b.q.oldestEndedWait = notQueued, oldest
	b.q.mu.Unlock()
	b.m.due.WithLabelValues("ended").Set(float64(dueEnded))
	b.m.due.WithLabelValues("running").Set(float64(dueRunning))
}

// stamp is the stamp of a job's stored analysis, as read before
// (stamps) or read now while reads, counted, are fewer than
// maxStampReads; nil if none is stored, or if it was not read (the job
// is taken as never analysed: the others are read at the next polls).
func (b *background) stamp(ctx context.Context, id string, reads *int) (*store.AnalysisStamp, error) {
	if st, ok := b.stamps[id]; ok {
		return st, nil
	}
	if *reads >= maxStampReads {
		return nil, nil
	}
	*reads++
	var st *store.AnalysisStamp
	an, err := b.a.st.Analysis(ctx, id)
	switch {
	case err == nil:
		st = &an.AnalysisStamp
	case !errors.Is(err, store.ErrNotFound):
		b.m.pollErrors.Inc()
		return nil, err
	}
	if len(b.stamps) >= maxStamps {
		clear(b.stamps)
	}
	b.stamps[id] = st
	return st, nil
}

// due reports whether the job of s is to be analysed now, and whether it
// has ended (by its summary: the analysis reads the job again, and stores
// what it read). A finished job is, Settle after its last data (quiet),
// unless an analysis of it as it is now (its mark) was stored after its
// end; a running one when it has run Every and, Every after its last
// analysis, new data came (or another version or settings made it).
func (a *Analyzer) due(s store.AnalysisState, now time.Time) (due, ended bool) {
	j, st := &s.Job, s.Stored
	if st != nil && st.LastSeen > j.LastSeen {
		// Made of newer data than this summary says: the summary lags
		// (a store may write its jobs' summaries after their attempts').
		return false, j.State == store.StateFinished
	}
	if j.State == store.StateFinished {
		if now.Sub(a.quiet(s)) < a.opt.Settle {
			return false, true
		}
		return st == nil || !st.Ended || st.Mark != Mark(j), true
	}
	if last, ok := a.lastPass(j.JobID); ok && (st == nil || last.Evaluated > st.Evaluated) {
		st = &last // analysed since, and not stored (found the same)
	}
	if st == nil {
		return now.Sub(time.UnixMilli(int64(j.Start))) >= a.opt.Every, false
	}
	if st.Mark == Mark(j) && st.Version == a.version && st.Settings == a.settings {
		return false, false
	}
	return now.Sub(time.UnixMilli(int64(st.Evaluated))) >= a.opt.Every, false
}

// quiet is when the job of s went quiet, what Settle counts from: its
// last data; for a job analysed after its end that data came for since
// (late: an agent's spool, sent after an outage, may take several
// batches), the last time the store wrote it.
func (a *Analyzer) quiet(s store.AnalysisState) time.Time {
	if s.Stored != nil && s.Stored.Ended {
		return arrived(s)
	}
	return time.UnixMilli(int64(s.Job.LastSeen))
}

// arrived is when the last data of the job of s was there: the later of
// the time it says and the time it was stored.
func arrived(s store.AnalysisState) time.Time {
	return time.UnixMilli(int64(max(s.Job.LastSeen, s.Changed)))
}

// retrying reports whether a job's last analysis failed too recently to
// try it again.
func (b *background) retrying(id string, now time.Time) bool {
	b.retryMu.Lock()
	defer b.retryMu.Unlock()
	r, ok := b.retry[id]
	return ok && now.Before(r.at)
}

// failed records that a job's analysis failed: it is tried again after a
// delay that doubles, up to 10 minutes (of this server's clock: the
// analyser's, the data's, may stand still).
func (b *background) failed(id string, now time.Time) {
	b.retryMu.Lock()
	defer b.retryMu.Unlock()
	r := b.retry[id]
	r.delay = min(max(2*r.delay, 5*time.Second), 10*time.Minute)
	r.at = now.Add(r.delay)
	if len(b.retry) >= 10_000 {
		for k, v := range b.retry {
			if now.After(v.at) {
				delete(b.retry, k)
			}
		}
	}
	if len(b.retry) < 10_000 {
		b.retry[id] = r
	}
}

// work analyses queued jobs until ctx ends, on a thread of its own: the
// thread's CPU is the analyses' (but what a store does on threads of its
// own, and ClickHouse's). It takes ended jobs, or else running ones, up
// to Options.Batch at once (queue.take): their passes read together
// (passes).
func (b *background) work(ctx context.Context) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a := b.a
	logged := time.Time{}
	for {
		taken, ok := b.q.take(ctx, a.opt.Batch)
		if !ok {
			return
		}
		// Those this replica may start now, under the first one's lease
		// (the earliest: each of the others' ends later).
		var js []job
		var actx context.Context
		var cancel context.CancelFunc
		for _, j := range taken {
			c, stop, ok := b.coord.start(ctx, j.JobID)
			if !ok {
				// No longer this replica's, or it may not start now: the
				// next poll says again.
				b.q.done(j.JobID)
				continue
			}
			if actx == nil {
				actx, cancel = c, stop
			} else {
				stop()
			}
			js = append(js, j)
		}
		if len(js) == 0 {
			continue
		}
		b.running.Add(int64(len(js)))
		cpu0, measured := threadCPU()
		errs, readCPU := a.analyse(actx, js, b)
		if cpu1, ok := threadCPU(); ok && measured {
			b.m.cpu.WithLabelValues(stateLabel(js[0].ended)).Add((cpu1 - cpu0 + readCPU).Seconds())
		}
		b.running.Add(-int64(len(js)))
		cancel()
		for i, j := range js {
			b.q.done(j.JobID)
			if err := errs[i]; err != nil && ctx.Err() == nil {
				b.failed(j.JobID, time.Now())
				b.m.analysed.WithLabelValues(stateLabel(j.ended), "error").Inc()
				if time.Since(logged) > time.Minute {
					logged = time.Now()
					a.opt.Log.Error("cannot analyse a job", "job", j.JobID, "err", err)
				}
			}
		}
	}
}

func stateLabel(ended bool) string {
	if ended {
		return "ended"
	}
	return "running"
}

// analyse makes, stores and tells the reports of queued jobs (their
// passes together), reusing what the last analysis of each read of its
// ended attempts (a running job's); it returns each job's error, and the
// CPU their reads took on threads of their own (Report.readCPU).
func (a *Analyzer) analyse(ctx context.Context, js []job, b *background) (errs []error, readCPU time.Duration) {
	start := time.Now()
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.JobID
	}
	outs := a.passes(ctx, ids, func() {
		// (Jobs analysed together: their time divided among them.)
		each := time.Since(start).Seconds() / float64(len(js))
		for _, j := range js {
			b.m.seconds.WithLabelValues(stateLabel(j.ended)).Observe(each)
		}
	})
	errs = make([]error, len(js))
	for i, o := range outs {
		if o.err != nil {
			errs[i] = o.err
			continue
		}
		r := o.r
		readCPU += r.readCPU
		if o.reused {
			b.m.incremental.Inc()
		}
		b.m.analysed.WithLabelValues(stateLabel(r.State == store.StateFinished), "ok").Inc()
		if r.State == store.StateFinished { // (queued as ended, or found ended: its summary lagged)
			b.m.latency.Observe(math.Max(0, a.opt.Now().Sub(js[i].last).Seconds()))
		}
	}
	return errs, readCPU
}

// pass makes and stores a job's report, reusing what its last pass read
// of its ended attempts (a running job's); made is called once the
// report is made, before it is stored. reused says that the last
// pass's reads were there to reuse.
//
// A running job's report is stored when what it finds changed (found),
// or Refresh after the one stored last, or when its last pass here was
// long ago; else the listeners alone are told of it.
func (a *Analyzer) pass(ctx context.Context, jobID string, made func()) (r *Report, reused bool, err error) {
	o := a.passes(ctx, []string{jobID}, made)[0]
	return o.r, o.reused, o.err
}

// passOut is what a pass over one job gave (pass).
type passOut struct {
	r      *Report
	reused bool
	err    error
}

// passes are the passes over jobs, each as pass makes it, their reads
// together (reportsOf) and their analyses stored together (keepAll).
func (a *Analyzer) passes(ctx context.Context, ids []string, made func()) []passOut {
	ins := make([]reportIn, len(ids))
	lasts := make([]incremental, len(ids))
	had := make([]bool, len(ids))
	for i, id := range ids {
		lasts[i], had[i] = a.takeIncremental(id)
		ins[i] = reportIn{jobID: id, prev: lasts[i].k, hist: lasts[i].history, live: true}
	}
	reps := a.reportsOf(ctx, ins, false)
	made()
	out := make([]passOut, len(ids))
	var put []*Report
	var puts []int // (the index of each of put)
	entries := make([]incremental, len(ids))
	for i, id := range ids {
		o, last := reps[i], lasts[i]
		if o.err != nil {
			out[i].err = o.err
			continue
		}
		r := o.r
		out[i] = passOut{r: r, reused: last.k != nil}
		if r.State == store.StateFinished {
			a.dropIncremental(id)
			put, puts = append(put, r), append(puts, i)
			continue
		}
		now := a.opt.Now()
		e := incremental{k: o.k, history: o.hist, at: now, found: found(r), storedAt: last.storedAt,
			pass: store.AnalysisStamp{Evaluated: r.Evaluated, Version: a.version, Settings: a.settings, Mark: Mark(&r.job),
				LastSeen: r.job.LastSeen}}
		// (Only after a pass of its own lately: a job that another
		// replica analysed meanwhile may have their analysis stored.)
		lately := now.Sub(last.at) <= 2*max(a.opt.Every, time.Minute)
		if had[i] && lately && last.found == e.found && now.Sub(last.storedAt) < a.opt.Refresh {
			a.keepIncremental(id, e)
			a.tell(ctx, r)
			continue
		}
		e.storedAt = now
		entries[i] = e
		put, puts = append(put, r), append(puts, i)
	}
	errs := a.keepAll(ctx, put)
	for k, i := range puts {
		r := put[k]
		if r.State == store.StateFinished {
			if errs[k] != nil {
				out[i] = passOut{err: errs[k]}
			}
			continue
		}
		e := entries[i]
		if errs[k] != nil {
			e.found, e.pass, e.storedAt = "", store.AnalysisStamp{}, lasts[i].storedAt // stored again at the next pass, due by the stored one
			out[i] = passOut{err: errs[k]}
		}
		a.keepIncremental(ids[i], e)
	}
	return out
}

// found is what a running job's report finds that its stored analysis
// is selected by: its job's description, its worst severity, and each
// finding's heuristic, severity, task type, attempts and whether it
// names neighbours (not its numbers and texts).
func found(r *Report) string {
	var b strings.Builder
	j := &r.job
	fmt.Fprintf(&b, "%q %q %q %d %d\n", j.Name, j.User, j.Queue, j.Start, r.Worst)
	for i := range r.Findings {
		f := &r.Findings[i]
		fmt.Fprintf(&b, "%s %d %q %t %q\n", f.Heuristic, f.Severity, f.TaskType, namesNeighbours(f), f.AttemptIDs)
	}
	return b.String()
}

// keep stores a report and tells the listeners of it.
func (a *Analyzer) keep(ctx context.Context, r *Report) error {
	return a.keepAll(ctx, []*Report{r})[0]
}

// keepAll stores reports (together: store.PutAnalyses) and tells the
// listeners of each stored; it returns each one's error.
func (a *Analyzer) keepAll(ctx context.Context, rs []*Report) []error {
	errs := make([]error, len(rs))
	var ss []*store.Analysis
	var at []int
	for i, r := range rs {
		s, err := a.toStored(r)
		if err != nil {
			errs[i] = err
			continue
		}
		ss, at = append(ss, s), append(at, i)
	}
	for k, err := range store.PutAnalyses(ctx, a.st, ss) {
		errs[at[k]] = err
	}
	for i, r := range rs {
		if errs[i] == nil {
			a.stored(ctx, r)
		}
	}
	return errs
}

// stored counts a report's findings and tells the listeners of it, once
// it is stored.
func (a *Analyzer) stored(ctx context.Context, r *Report) {
	a.mu.Lock()
	b := a.bg
	a.mu.Unlock()
	if b != nil && r.State == store.StateFinished {
		for _, f := range r.Findings {
			b.m.findings.WithLabelValues(f.Heuristic, f.Severity.String()).Inc()
		}
	}
	a.tell(ctx, r)
}

// tell tells the listeners of a report.
func (a *Analyzer) tell(ctx context.Context, r *Report) {
	a.mu.Lock()
	ls := a.opt.Listeners
	a.mu.Unlock()
	if len(ls) == 0 {
		return
	}
	j := &r.job
	ev := &Analysed{JobID: r.JobID, Name: j.Name, User: j.User, Queue: j.Queue, State: r.State,
		Ended: r.State == store.StateFinished, Report: r, Hosts: map[string]string{}}
	for _, f := range r.Findings {
		for _, id := range f.AttemptIDs {
			if h, ok := r.hosts[id]; ok {
				ev.Hosts[id] = h
			}
		}
	}
	for _, l := range ls {
		l(ctx, ev)
	}
}

// Listen adds a listener to those of Options.Listeners (the server adds
// its alerts' and its automatic profiles').
func (a *Analyzer) Listen(l Listener) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.opt.Listeners = append(a.opt.Listeners[:len(a.opt.Listeners):len(a.opt.Listeners)], l)
}

// What is kept of running jobs between their analyses, at most
// MaxIncremental jobs (the one not analysed the longest goes first): the
// reads (kept), the earlier runs of its recurring job (history.go), what
// the report found that its stored analysis is
// selected by (found) and when that was stored, and the stamp of the
// last analysis, stored or not (the background's due takes it when it
// is newer than the stored one).
type incremental struct {
	k        kept
	history  *keptHistory
	at       time.Time
	found    string
	storedAt time.Time
	pass     store.AnalysisStamp
}

func (a *Analyzer) takeIncremental(id string) (incremental, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.incr[id]
	return e, ok
}

// lastPass is the stamp of the last analysis of a running job made here,
// if it is kept.
func (a *Analyzer) lastPass(id string) (store.AnalysisStamp, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.incr[id]
	return e.pass, ok && e.pass.Evaluated > 0
}

func (a *Analyzer) keepIncremental(id string, e incremental) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.incr[id]; !ok && len(a.incr) >= a.opt.MaxIncremental {
		var oldest string
		var at time.Time
		for id, e := range a.incr {
			if oldest == "" || e.at.Before(at) {
				oldest, at = id, e.at
			}
		}
		delete(a.incr, oldest)
	}
	a.incr[id] = e
}

func (a *Analyzer) dropIncremental(id string) {
	a.mu.Lock()
	delete(a.incr, id)
	a.mu.Unlock()
	a.live.dropJob(id, a.opt.Now())
}

// metrics are the analyser's own (bounded label sets: states, results,
// the heuristics and severities).
type metrics struct {
	analysed    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	cpu         *prometheus.CounterVec
	incremental prometheus.Counter
	latency     prometheus.Histogram
	findings    *prometheus.CounterVec
	due         *prometheus.GaugeVec
	pollErrors  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, b *background) (*metrics, error) {
	m := &metrics{
		analysed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_analysis_jobs_total",
			Help: "Jobs analysed in the background, by the state they were analysed in (ended, running) and result (ok, error)."},
			[]string{"state", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskscope_analysis_seconds",
			Help:    "Time a job's analysis took (wall), by the state it was analysed in (jobs analysed together share their time).",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 10)}, []string{"state"}),
		cpu: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_analysis_cpu_seconds_total",
			Help: "CPU the background analyses took on their workers' threads and their reads' (not a store's own threads), by the state they were analysed in."},
			[]string{"state"}),
		incremental: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskscope_analysis_incremental_total",
			Help: "Analyses of running jobs that took again what the job's last analysis read of its ended attempts."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskscope_analysis_latency_seconds",
			Help:    "Time from a job's last data (its end; for data that came late, when it was stored) to its analysis stored.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		findings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_analysis_findings_total",
			Help: "Findings of the jobs analysed at their end, by heuristic and severity."}, []string{"heuristic", "severity"}),
		due: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskscope_analysis_due",
			Help: "Jobs this server had to analyse at its last look (ended, running), queued or not."}, []string{"state"}),
		pollErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskscope_analysis_poll_errors_total",
			Help: "Looks at the store for jobs to analyse that failed."}),
	}
	for _, s := range []string{"ended", "running"} {
		for _, r := range []string{"ok", "error"} {
			m.analysed.WithLabelValues(s, r)
		}
		m.due.WithLabelValues(s)
		m.cpu.WithLabelValues(s)
	}
	if reg == nil {
		return m, nil
	}
	backlog := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_analysis_backlog",
		Help: "Jobs due for analysis and not analysed yet: queued, being analysed, or found due and not queued (the queue full, or no replica takes jobs yet: this one's once its grace after starting ends)."},
		func() float64 {
			e, r := b.q.lengths()
			b.q.mu.Lock()
			n := b.q.dueNotQueued
			b.q.mu.Unlock()
			return float64(e + r + n + int(b.running.Load()))
		})
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_analysis_queue",
		Help: "Jobs waiting in the analyser's queue."}, func() float64 { e, r := b.q.lengths(); return float64(e + r) })
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_analysis_oldest_due_seconds",
		Help: "Age of the last data (or of its storing, if later) of the ended job that waits longest for its analysis (0: none waits)."},
		func() float64 {
			b.q.mu.Lock()
			o := b.q.oldestEndedWait
			b.q.mu.Unlock()
			if o.IsZero() {
				return 0
			}
			return b.a.opt.Now().Sub(o).Seconds()
		})
	for _, c := range append([]prometheus.Collector{m.analysed, m.seconds, m.cpu, m.incremental, m.latency, m.findings, m.due, m.pollErrors, backlog, queued,
		oldest, b.coordCollector()}, b.a.liveCollectors()...) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return nil, fmt.Errorf("cannot register the analyser's metrics: %w", err)
		}
	}
	return m, nil
}

// owns reports whether a job is this server's to store the analysis of:
// always but on a shared store, where it is the job's replica's.
func (a *Analyzer) owns(id string) bool {
	a.mu.Lock()
	b := a.bg
	a.mu.Unlock()
	return b == nil || b.coord.mine(id)
}
