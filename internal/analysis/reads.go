package analysis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// What a report reads beyond the job's summaries: the time series and
// process lists of some attempts. A heuristic names what it will read (its
// plan) before any runs; the report reads all of it at once, together when
// the store can (store.SeriesBatcher, store.ProcessLister: a store without
// an index on series keys scans a time range per read, whatever the
// series), and the heuristics then find it read. What each computes is
// what it would compute reading one by one.

// reads are a report's reads, done and to do.
type reads struct {
	series      map[string]*store.SeriesResult // by seriesID; nil: not found
	owner       map[string]string              // the attempt each series read is of, by seriesID
	prev        kept                           // an earlier report's reads that still hold (reusable)
	procs       map[string][]store.Process     // by attempt; read (possibly empty) when present
	heapMax     map[string]int64               // by attempt
	hosts       map[string]hostRead            // the attempts on a host, by host
	events      []store.Event                  // the job's events, when eventsRead
	eventsRead  bool
	history     []Run // the earlier runs of the job's recurring job, when historyRead
	historyRead bool
	prevHistory *keptHistory // the last pass's, when it holds (takeHistory)
	historySeen uint64       // the background's last look before the report began
}

// hostRead is what was read of a host: its attempts within [from, to).
type hostRead struct {
	from, to int64
	atts     []store.Attempt
}

// plan is what the heuristics will read beyond the job's summaries; each
// heuristic adds what it needs (heuristic.reads).
type plan struct {
	series  []store.SeriesQuery
	procs   []string            // process lists, by attempt
	hosts   map[string][2]int64 // other attempts on a host within [from, to)
	events  bool                // the job's events
	history bool                // the earlier runs of its recurring job
}

// host asks for the attempts on host within [from, to) (the windows asked
// of one host are read as one).
func (p *plan) host(host string, from, to int64) {
	if p.hosts == nil {
		p.hosts = map[string][2]int64{}
	}
	if w, ok := p.hosts[host]; ok {
		from, to = min(from, w[0]), max(to, w[1])
	}
	p.hosts[host] = [2]int64{from, to}
}

// readErr is a read's error as the report takes it: a series or attempt
// that is not there is absent, anything else fails the report.
func (j *Job) readErr(err error) bool {
	if err == nil {
		return false
	}
	if !errors.Is(err, store.ErrNotFound) {
		j.fail(err)
	}
	return true
}

func seriesID(q store.SeriesQuery) string {
	return fmt.Sprintf("%s|%s|%s|%d|%s|%d|%d|%d", q.Scope, q.JobID, q.AttemptID, q.Process, strings.Join(q.Metrics, ","),
		q.From, q.To, q.Step)
}

// unread returns the items of xs that done holds no read of, each once
// (by its id).
func unread[T, V any](xs []T, id func(T) string, done map[string]V) []T {
	var todo []T
	seen := map[string]bool{}
	for _, x := range xs {
		k := id(x)
		if _, ok := done[k]; !ok && !seen[k] {
			seen[k] = true
			todo = append(todo, x)
		}
	}
	return todo
}

// readSeries reads the queries not read yet.
func (j *Job) readSeries(qs []store.SeriesQuery) {
	j.applySeries(fetchSeries(j.ctx, j.st, j.seriesTodo(qs)))
}

// seriesTodo returns the queries of qs that are neither read nor taken
// from the last report (those it takes), each once.
func (j *Job) seriesTodo(qs []store.SeriesQuery) []store.SeriesQuery {
	todo := unread(qs, seriesID, j.reads.series)
	left := todo[:0]
	for _, q := range todo {
		id := seriesID(q)
		if q.AttemptID != "" {
			j.reads.owner[id] = q.AttemptID
		}
		if r, ok := j.reads.prev.series(j.reads.owner[id], id); ok {
			j.reads.series[id] = r
			continue
		}
		left = append(left, q)
	}
	return left
}

// seriesRead is what fetchSeries read: the queries and their results
// (nil: not found), or the error that failed it.
type seriesRead struct {
	qs  []store.SeriesQuery
	rs  []*store.SeriesResult
	err error
}

// fetchSeries reads queries of the store (together when it can), and
// nothing else: it may run beside the jobs' other reads.
func fetchSeries(ctx context.Context, st store.Store, todo []store.SeriesQuery) seriesRead {
	out := seriesRead{qs: todo, rs: make([]*store.SeriesResult, len(todo))}
	if len(todo) == 0 {
		return out
	}
	if len(todo) > 1 {
		if rs, err := store.ReadSeriesMany(ctx, st, todo); err == nil && len(rs) == len(todo) {
			out.rs = rs
			return out
		}
	}
	for i, q := range todo {
		r, err := st.Series(ctx, q)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			out.err = err
			return out
		}
		out.rs[i] = r
	}
	return out
}

// applySeries records what fetchSeries read (a failed read fails the
// report, and records nothing).
func (j *Job) applySeries(r seriesRead) {
	if r.err != nil {
		j.fail(r.err)
		return
	}
	for i, q := range r.qs {
		j.reads.series[seriesID(q)] = r.rs[i]
	}
}

// series returns a query's result, read ahead or now.
func (j *Job) series(q store.SeriesQuery) (*store.SeriesResult, error) {
	j.readSeries([]store.SeriesQuery{q})
	if r := j.reads.series[seriesID(q)]; r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("no series for %s", seriesID(q))
}

// readProcesses reads the process lists of attempts not read yet.
func (j *Job) readProcesses(ids []string) {
	j.applyProcesses(fetchProcesses(j.ctx, j.st, j.processesTodo(ids)))
}

// processesTodo returns the attempts of ids whose process lists are
// neither read nor taken from the last report (those it takes), each
// once.
func (j *Job) processesTodo(ids []string) []string {
	todo := unread(ids, func(id string) string { return id }, j.reads.procs)
	left := todo[:0]
	for _, id := range todo {
		if k := j.reads.prev[id]; k != nil && k.hasProcs {
			j.reads.procs[id] = k.procs
			continue
		}
		left = append(left, id)
	}
	return left
}

// procsRead is what fetchProcesses read: the lists of the attempts found
// (an attempt not found is absent), or the error that failed it.
type procsRead struct {
	lists map[string][]store.Process
	err   error
}

// fetchProcesses reads the process lists of attempts (together when the
// store can), and nothing else.
func fetchProcesses(ctx context.Context, st store.Store, todo []string) procsRead {
	out := procsRead{lists: map[string][]store.Process{}}
	if len(todo) == 0 {
		return out
	}
	// (Even one list: Attempt reads the attempt's task and events too.)
	if m, err := store.ReadAttemptProcesses(ctx, st, todo); err == nil {
		for _, id := range todo {
			out.lists[id] = m[id]
		}
		return out
	}
	for _, id := range todo {
		d, err := st.Attempt(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // not read: processes says so
		}
		if err != nil {
			out.err = err
			return out
		}
		out.lists[id] = d.ProcessList
	}
	return out
}

// applyProcesses records what fetchProcesses read.
func (j *Job) applyProcesses(r procsRead) {
	if r.err != nil {
		j.fail(r.err)
		return
	}
	for id, ps := range r.lists {
		j.reads.procs[id] = ps
	}
}

// hostAttempts returns the attempts on host that overlap [from, to), read
// ahead (with the other windows asked of the host) or now.
func (j *Job) hostAttempts(host string, from, to int64) ([]store.Attempt, error) {
	h, ok := j.reads.hosts[host]
	if !ok || from < h.from || to > h.to {
		atts, err := j.st.HostAttempts(j.ctx, host, from, to)
		if err != nil {
			j.fail(err)
			return nil, fmt.Errorf("attempts on %s: %w", host, err)
		}
		h = hostRead{from: from, to: to, atts: atts}
		j.keepHost(host, h)
	}
	var out []store.Attempt
	for _, a := range h.atts {
		if af, at := span(a); af < to && at > from {
			out = append(out, a)
		}
	}
	return out, nil
}

func (j *Job) keepHost(host string, h hostRead) {
	if j.reads.hosts == nil {
		j.reads.hosts = map[string]hostRead{}
	}
	j.reads.hosts[host] = h
}

// events returns the job's events, read ahead or now.
func (j *Job) events() ([]store.Event, error) {
	if !j.reads.eventsRead {
		evs, err := fetchEvents(j.ctx, j.st, []string{j.JobID})
		if err != nil {
			j.fail(err)
			return nil, fmt.Errorf("events of %s: %w", j.JobID, err)
		}
		j.reads.events, j.reads.eventsRead = append([]store.Event{}, evs[j.JobID]...), true
	}
	return j.reads.events, nil
}

// maxJobEvents bounds the events read of a job.
const maxJobEvents = 10_000

// fetchEvents reads the events of jobs that the heuristics look at
// (eventKinds), by job: not the others (a job's processes' starts and
// exits, thousands for a job that forks many), which were read, and
// read again at each pass of a running job, for nothing.
func fetchEvents(ctx context.Context, st store.Store, jobIDs []string) (map[string][]store.Event, error) {
	return store.ReadJobEvents(ctx, st, jobIDs, eventKinds, maxJobEvents)
}

// processes returns an attempt's processes as Attempt lists them.
func (j *Job) processes(id string) ([]store.Process, error) {
	j.readProcesses([]string{id})
	ps, ok := j.reads.procs[id]
	if !ok {
		return nil, fmt.Errorf("no processes for %s", id)
	}
	return ps, nil
}

// plan is what the heuristics will read, as each names it.
func (j *Job) plan() *plan {
	p := &plan{}
	for _, h := range heuristics {
		if h.reads != nil && !j.skip[h.name] {
			h.reads(j, p)
		}
	}
	return p
}

// readsAtOnce bounds the reads of one round of reports that run at once.
const readsAtOnce = 4

// ahead is what one job's report reads ahead (todo: named by its plan,
// less what it read or took from its last report) and, once read, what
// each read gave.
type ahead struct {
	p                    *plan
	procTodo             []string
	seriesTodo           []store.SeriesQuery
	hosts                []string
	readEvents, readRuns bool

	procs      procsRead
	series     seriesRead
	hostReads  []hostRead
	hostErrs   []error
	evs        []store.Event
	evErr      error
	history    []Run
	historyErr error
}

// ahead is what the job's report will read: its plan, less what it read
// or takes from its last report.
func (j *Job) ahead() *ahead {
	p := j.plan()
	x := &ahead{p: p}
	j.attempt("") // (its index, made before the reads run)
	x.procTodo = j.processesTodo(p.procs)
	x.seriesTodo = j.seriesTodo(p.series)
	if !j.private { // (neighbourLoad looks at none)
		for h := range p.hosts {
			if _, ok := j.reads.hosts[h]; !ok {
				x.hosts = append(x.hosts, h)
			}
		}
		sort.Strings(x.hosts)
	}
	if p.history && !j.reads.historyRead && j.reads.prevHistory != nil {
		j.history() // (the last pass's, which still holds: nothing to read)
	}
	x.readEvents, x.readRuns = p.events && !j.reads.eventsRead, p.history && !j.reads.historyRead
	x.hostReads, x.hostErrs = make([]hostRead, len(x.hosts)), make([]error, len(x.hosts))
	return x
}

// readAhead reads what the jobs' plans name (their reports are made at
// once: the background's passes over running jobs), each kind of read
// of all the jobs together: their process lists in one read, then the
// series of the JVMs whose heap maximum heapMax reads; their series in
// one; their hosts' attempts in one (each host's in the window all the
// jobs ask of it); their events in one; the earlier runs of each
// recurring job. The
// independent reads run at once (at most readsAtOnce), each to the store
// alone; what they read is recorded after all have ended, job by job in
// the order each job named them, so that each report is the one its
// reads alone, one after another, would make (a store's reads wait for
// each other's answers: a job's dozen of them one after another were
// most of the time its analysis took on ClickHouse; and each read costs
// a store a few milliseconds however little it reads, which a round of
// passes over tens of running jobs pays once, not once a job). A read
// that fails fails the reports of every job it read for.
func readAhead(jobs []*Job) {
	if len(jobs) == 0 {
		return
	}
	ctx, st := jobs[0].ctx, jobs[0].st
	xs := make([]*ahead, len(jobs))
	var (
		procIDs   []string
		series    []store.SeriesQuery
		owners    []string // the job of each of series
		windows   = map[string][2]int64{}
		hosts     []string
		eventJobs []string
	)
	for i, j := range jobs {
		x := j.ahead()
		xs[i] = x
		procIDs = append(procIDs, x.procTodo...)
		series = append(series, x.seriesTodo...)
		for range x.seriesTodo {
			owners = append(owners, j.JobID)
		}
		for _, h := range x.hosts {
			w := x.p.hosts[h]
			if v, had := windows[h]; had {
				w = [2]int64{min(w[0], v[0]), max(w[1], v[1])}
			} else {
				hosts = append(hosts, h)
			}
			windows[h] = w
		}
		if x.readEvents {
			eventJobs = append(eventJobs, j.JobID)
		}
	}
	sort.Strings(hosts)
	var (
		procs     procsRead
		seriesOut seriesRead
		hostReads = make([]hostRead, len(hosts))
		hostErrs  = make([]error, len(hosts))
		evs       map[string][]store.Event
		evErr     error
	)
	var reads []func()
	if len(procIDs) > 0 {
		reads = append(reads, func() { procs = fetchProcesses(ctx, st, procIDs) })
	}
	if len(series) > 0 {
		reads = append(reads, func() { seriesOut = fetchSeriesLive(ctx, st, jobs[0].live, series, owners, jobs[0].now()) })
	}
	if len(hosts) > 0 {
		reads = append(reads, func() {
			ws := make([]store.HostWindow, len(hosts))
			for i, h := range hosts {
				w := windows[h]
				ws[i] = store.HostWindow{Host: h, From: w[0], To: w[1]}
				hostReads[i] = hostRead{from: w[0], to: w[1]}
			}
			atts, err := store.ReadHostsAttempts(ctx, st, ws)
			for i := range hosts {
				if err != nil {
					hostErrs[i] = err
				} else {
					hostReads[i].atts = atts[i]
				}
			}
		})
	}
	if len(eventJobs) > 0 {
		reads = append(reads, func() { evs, evErr = fetchEvents(ctx, st, eventJobs) })
	}
	for i, j := range jobs {
		if x := xs[i]; x.readRuns {
			reads = append(reads, func() { x.history, x.historyErr = earlierRuns(ctx, st, j.runs, j.JobDetail, baselineRuns) })
		}
	}
	atOnce(reads, readsAtOnce, &jobs[0].readCPU)
	hostAt := map[string]int{}
	for i, h := range hosts {
		hostAt[h] = i
	}
	at := 0 // the first of each job's series in seriesOut
	for i, j := range jobs {
		x := xs[i]
		if len(x.procTodo) > 0 {
			mine := procsRead{lists: map[string][]store.Process{}, err: procs.err}
			for _, id := range x.procTodo {
				if l, ok := procs.lists[id]; ok {
					mine.lists[id] = l
				}
			}
			j.applyProcesses(mine)
		}
		if n := len(x.seriesTodo); n > 0 {
			if seriesOut.err != nil {
				j.applySeries(seriesRead{err: seriesOut.err})
			} else {
				j.applySeries(seriesRead{qs: seriesOut.qs[at : at+n], rs: seriesOut.rs[at : at+n]})
			}
			at += n
		}
		for _, h := range x.hosts {
			k := hostAt[h]
			if hostErrs[k] != nil {
				j.fail(hostErrs[k])
				continue
			}
			j.keepHost(h, hostReads[k])
		}
		if x.readEvents {
			if evErr != nil {
				j.fail(evErr)
			} else {
				j.reads.events, j.reads.eventsRead = append([]store.Event{}, evs[j.JobID]...), true
			}
		}
		if x.readRuns {
			if x.historyErr != nil {
				j.fail(x.historyErr)
			} else {
				j.reads.history, j.reads.historyRead = x.history, true
			}
		}
	}
	// The heap maxima of the JVMs of attempts that do not say theirs:
	// from their process lists, read above; all the jobs' at once.
	heap := make([][]store.SeriesQuery, len(jobs))
	var all []store.SeriesQuery
	owners = owners[:0]
	for i, j := range jobs {
		var qs []store.SeriesQuery
		for _, id := range xs[i].p.procs {
			if a, ok := j.attempt(id); ok && a.XmxBytes <= 0 {
				for _, q := range j.heapMaxQueries(a) {
					j.reads.owner[seriesID(q)] = id
					qs = append(qs, q)
				}
			}
		}
		heap[i] = j.seriesTodo(qs)
		all = append(all, heap[i]...)
		for range heap[i] {
			owners = append(owners, j.JobID)
		}
	}
	if len(all) == 0 {
		return
	}
	r := fetchSeriesLive(ctx, st, jobs[0].live, all, owners, jobs[0].now())
	at = 0
	for i, j := range jobs {
		n := len(heap[i])
		if n == 0 {
			continue
		}
		if r.err != nil {
			j.applySeries(seriesRead{err: r.err})
		} else {
			j.applySeries(seriesRead{qs: r.qs[at : at+n], rs: r.rs[at : at+n]})
		}
		at += n
	}
}

// atOnce runs fs, at most n at a time, and returns when all have ended
// (one alone runs in this goroutine). Each of the others runs on a thread
// of its own while it runs, whose CPU (ns) it adds to cpu: the analysis'
// CPU, measured on its worker's thread, includes it.
func atOnce(fs []func(), n int, cpu *atomic.Int64) {
	if len(fs) == 1 {
		fs[0]()
		return
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, f := range fs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0, ok0 := threadCPU()
			f()
			if c1, ok1 := threadCPU(); ok0 && ok1 {
				cpu.Add(int64(c1 - c0))
			}
		}()
	}
	wg.Wait()
}

// attempt finds one of the job's attempts.
func (j *Job) attempt(id string) (store.Attempt, bool) {
	if j.byID == nil {
		j.byID = map[string]int{}
		for i, a := range j.AttemptList {
			j.byID[a.AttemptID] = i
		}
	}
	i, ok := j.byID[id]
	if !ok {
		return store.Attempt{}, false
	}
	return j.AttemptList[i], true
}

// kept is what a report read of the attempts that had ended, by attempt: a
// later report of the job takes it again for each attempt whose summary is
// still the same (no data came for it since) and that ended settle before,
// and reads only the rest. A running job's findings are made again every
// few seconds; most of what they read is of its ended attempts.
type kept map[string]*attemptReads

// series is the read of series id of attempt att, if kept.
func (k kept) series(att, id string) (*store.SeriesResult, bool) {
	if a := k[att]; a != nil {
		r, ok := a.series[id]
		return r, ok
	}
	return nil, false
}

// settle is how long after its end an attempt's reads are kept: records
// that come after an attempt's end without changing its summary (a last
// process's exit, say) come within a batch or two.
const settle = time.Minute

// attemptReads is what a report read of one ended attempt.
type attemptReads struct {
	summary  store.Attempt // as it was then
	procs    []store.Process
	hasProcs bool
	series   map[string]*store.SeriesResult // by seriesID
}

// reusable is what of prev still holds for the attempts of atts at now:
// that of the attempts whose summaries are unchanged and that ended settle
// before now.
func reusable(prev kept, atts []store.Attempt, now time.Time) kept {
	out := kept{}
	for _, a := range atts {
		if k := prev[a.AttemptID]; k != nil && k.summary == a && int64(a.End) <= now.Add(-settle).UnixMilli() {
			out[a.AttemptID] = k
		}
	}
	return out
}

// kept returns what the report used of the job's ended attempts, read or
// taken from the last report (what it did not ask for again is dropped).
// Failed reads are not kept: they are tried again.
func (j *Job) kept() kept {
	out := kept{}
	entry := func(id string) *attemptReads {
		if k := out[id]; k != nil {
			return k
		}
		a, ok := j.attempt(id)
		if !ok || a.End <= 0 {
			return nil
		}
		k := &attemptReads{summary: a}
		out[id] = k
		return k
	}
	for id, ps := range j.reads.procs {
		if k := entry(id); k != nil {
			k.procs, k.hasProcs = ps, true
		}
	}
	for id, s := range j.reads.series {
		if s == nil {
			continue
		}
		if k := entry(j.reads.owner[id]); k != nil {
			if k.series == nil {
				k.series = map[string]*store.SeriesResult{}
			}
			k.series[id] = s
		}
	}
	return out
}

// What each heuristic reads beyond the summaries (heuristic.reads).

func growthReads(j *Job, p *plan) {
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		for _, a := range growthAttempts(byType[typ]) {
			p.series = append(p.series, growthQuery(a))
			if a.XmxBytes <= 0 {
				p.procs = append(p.procs, a.AttemptID) // heapMax
			}
		}
	}
}

func heapReads(j *Job, p *plan) {
	for _, a := range j.AttemptList {
		if isTask(a) && a.PeakHeap > 0 && a.XmxBytes <= 0 {
			p.procs = append(p.procs, a.AttemptID) // heapMax
		}
	}
}

func shortLivedReads(j *Job, p *plan) {
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		for _, a := range shortLivedAttempts(byType[typ]) {
			p.series = append(p.series, shortLivedQuery(a))
		}
	}
}

func streamingReads(j *Job, p *plan) {
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		for _, a := range streamingAttempts(byType[typ]) {
			p.procs = append(p.procs, a.AttemptID)
		}
	}
}

func lostReads(_ *Job, p *plan) { p.events = true }

func neighbourReads(j *Job, p *plan) {
	for _, a := range neighbourCandidates(j) {
		from, to := span(a)
		p.host(a.Host, from, to)
	}
}
