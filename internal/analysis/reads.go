package analysis

import (
	"fmt"
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
	series  map[string]*store.SeriesResult // by seriesID; nil: failed or not found
	owner   map[string]string              // the attempt each series read is of, by seriesID
	prev    kept                           // an earlier report's reads that still hold (reusable)
	procs   map[string][]store.Process     // by attempt; read (possibly empty) when present
	heapMax map[string]int64               // by attempt
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
	if b, ok := j.st.(store.SeriesBatcher); ok && len(todo) > 1 {
		if rs, err := b.SeriesMany(j.ctx, todo); err == nil && len(rs) == len(todo) {
			for i, q := range todo {
				j.reads.series[seriesID(q)] = rs[i]
			}
			return
		}
	}
	for _, q := range todo {
		r, err := j.st.Series(j.ctx, q)
		if err != nil {
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
	if l, ok := j.st.(store.ProcessLister); ok && len(todo) > 1 {
		if m, err := l.AttemptProcesses(j.ctx, todo); err == nil {
			for _, id := range todo {
				j.reads.procs[id] = m[id]
			}
			return
		}
	}
	for _, id := range todo {
		d, err := j.st.Attempt(j.ctx, id)
		if err != nil {
			continue // not read: processes says so
		}
		j.reads.procs[id] = d.ProcessList
	}
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

// plan is what the heuristics that read more than the summaries will read.
func (j *Job) plan() (series []store.SeriesQuery, procs []string) {
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		for _, a := range growthAttempts(byType[typ]) {
			series = append(series, growthQuery(a))
			if a.XmxBytes <= 0 {
				procs = append(procs, a.AttemptID)
			}
		}
		for _, a := range shortLivedAttempts(byType[typ]) {
			series = append(series, shortLivedQuery(a))
		}
		for _, a := range streamingAttempts(byType[typ]) {
			procs = append(procs, a.AttemptID)
		}
		for _, a := range byType[typ] {
			if a.PeakHeap > 0 && a.XmxBytes <= 0 {
				procs = append(procs, a.AttemptID) // heap_headroom's heapMax
			}
		}
	}
	return series, procs
}

// readAhead reads what the plan names: the process lists first, then the
// series, with those of the JVMs whose heap maximum heapMax reads.
func (j *Job) readAhead() {
	series, procs := j.plan()
	j.readProcesses(procs)
	for _, id := range procs {
		if a, ok := j.attempt(id); ok && a.XmxBytes <= 0 {
			for _, q := range j.heapMaxQueries(a) {
				j.reads.owner[seriesID(q)] = id
				series = append(series, q)
			}
		}
	}
	j.readSeries(series)
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
