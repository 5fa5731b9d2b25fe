package analysis

import (
	"errors"
	"fmt"
	"sort"
	"strings"
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
	todo := unread(qs, seriesID, j.reads.series)
	if len(todo) == 0 {
		return
	}
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
	todo = left
	if len(todo) == 0 {
		return
	}
	if len(todo) > 1 {
		if rs, err := store.ReadSeriesMany(j.ctx, j.st, todo); err == nil && len(rs) == len(todo) {
			for i, q := range todo {
				j.reads.series[seriesID(q)] = rs[i]
			}
			return
		}
	}
	for _, q := range todo {
		r, err := j.st.Series(j.ctx, q)
		if j.readErr(err) {
			r = nil
		}
		j.reads.series[seriesID(q)] = r
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
	todo := unread(ids, func(id string) string { return id }, j.reads.procs)
	left := todo[:0]
	for _, id := range todo {
		if k := j.reads.prev[id]; k != nil && k.hasProcs {
			j.reads.procs[id] = k.procs
			continue
		}
		left = append(left, id)
	}
	todo = left
	if len(todo) == 0 {
		return
	}
	// (Even one list: Attempt reads the attempt's task and events too.)
	if m, err := store.ReadAttemptProcesses(j.ctx, j.st, todo); err == nil {
		for _, id := range todo {
			j.reads.procs[id] = m[id]
		}
		return
	}
	for _, id := range todo {
		d, err := j.st.Attempt(j.ctx, id)
		if j.readErr(err) {
			continue // not read: processes says so
		}
		j.reads.procs[id] = d.ProcessList
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
		if j.reads.hosts == nil {
			j.reads.hosts = map[string]hostRead{}
		}
		j.reads.hosts[host] = h
	}
	var out []store.Attempt
	for _, a := range h.atts {
		if af, at := span(a); af < to && at > from {
			out = append(out, a)
		}
	}
	return out, nil
}

// events returns the job's events, read ahead or now.
func (j *Job) events() ([]store.Event, error) {
	if !j.reads.eventsRead {
		evs, err := j.st.Events(j.ctx, store.EventFilter{JobID: j.JobID, Limit: 10000})
		if err != nil {
			j.fail(err)
			return nil, fmt.Errorf("events of %s: %w", j.JobID, err)
		}
		j.reads.events, j.reads.eventsRead = evs, true
	}
	return j.reads.events, nil
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

// readAhead reads what the plan names: the process lists first, then the
// series, with those of the JVMs whose heap maximum heapMax reads; the
// hosts' attempts and the job's events.
func (j *Job) readAhead() {
	p := j.plan()
	series := p.series
	j.readProcesses(p.procs)
	for _, id := range p.procs {
		if a, ok := j.attempt(id); ok && a.XmxBytes <= 0 {
			for _, q := range j.heapMaxQueries(a) {
				j.reads.owner[seriesID(q)] = id
				series = append(series, q)
			}
		}
	}
	j.readSeries(series)
	hosts := make([]string, 0, len(p.hosts))
	for h := range p.hosts {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		if j.private {
			break // (neighbourLoad looks at none)
		}
		w := p.hosts[h]
		j.hostAttempts(h, w[0], w[1])
	}
	if p.events {
		j.events()
	}
	if p.history {
		j.history()
	}
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
