package analysis

import (
	"sync"

	"github.com/taskscope/taskscope/internal/store"
)

// A running job's earlier runs (its recurring job's runs that ended
// before it started: earlierRuns) are read again at each of its passes
// only when they may have changed. They change only when a job written
// since of the same recurring job (its user, queue and normalized name)
// has finished before the job started: late data of an old run, or a run
// found ended by its silence soon after this one started. The
// background's looks at the store (every Poll) see every job written
// lately; lateLog keeps, for each look, the earliest end among the
// finished jobs of each recurring job it saw newly written, and a pass
// takes the runs its last pass read again (keptHistory) while no look
// since saw one of its recurring job that ended before the job started.
// (Any finished job did, at first: a job that started a minute after
// others ended read its runs again at each pass.) Without looks (no
// background: a page's report), they are read every time.

// maxLooks is how many looks lateLog keeps (at a look every 2 s, some
// 30 minutes): earlier runs read longer ago are read again (runs that
// retention dropped leave them so).
const maxLooks = 1000

// lateSkew is how far back from the latest write a look saw before a
// write still counts as new (writers' clocks, commits seen late).
const lateSkew = 60_000

// lateLog is what the looks saw of the finished jobs written lately.
type lateLog struct {
	mu      sync.Mutex
	looks   uint64 // looks so far
	ends    []lateEnd
	lastMax int64 // the latest write the look before saw
}

// lateEnd is what a look saw of the finished jobs newly written: the
// earliest end of those of each recurring job (runKey: only they can be
// an earlier run of its runs), or, for a look cut at its limit, that any
// may have been (all).
type lateEnd struct {
	look uint64
	ends map[string]int64
	all  bool
}

// runKey names a recurring job: its runs' user, queue and normalized name
// (earlierRuns selects them so).
func runKey(user, queue, name string) string {
	return user + "\x00" + queue + "\x00" + NormalizeName(name)
}

// note records a look at states; complete says it saw every job written
// since its start (not cut at its limit).
func (l *lateLog) note(states []store.AnalysisState, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.looks++
	last := l.lastMax
	var ends map[string]int64
	for _, s := range states {
		c := int64(s.Changed)
		last = max(last, c)
		if j := &s.Job; j.State == store.StateFinished && c >= l.lastMax-lateSkew {
			e := int64(j.End)
			if e <= 0 {
				e = int64(j.LastSeen)
			}
			if ends == nil {
				ends = map[string]int64{}
			}
			k := runKey(j.User, j.Queue, j.Name)
			if v, ok := ends[k]; !ok || e < v {
				ends[k] = e
			}
		}
	}
	l.lastMax = last
	if len(ends) > 0 || !complete {
		l.ends = append(l.ends, lateEnd{look: l.looks, ends: ends, all: !complete})
	}
	i := 0
	for i < len(l.ends) && l.ends[i].look+maxLooks < l.looks {
		i++
	}
	l.ends = l.ends[i:]
}

// now is the number of the last look (0: none yet).
func (l *lateLog) now() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.looks
}

// unchanged reports whether the earlier runs of a job of recurring job
// key (runKey) that started at start, read after look since, hold: no
// look after it saw a finished job of key written that ended before
// start (nor was cut at its limit).
func (l *lateLog) unchanged(since uint64, start int64, key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if since == 0 || since+maxLooks < l.looks {
		return false
	}
	for _, e := range l.ends {
		if e.look <= since {
			continue
		}
		if end, ok := e.ends[key]; e.all || ok && end <= start {
			return false
		}
	}
	return true
}

// keptHistory is a running job's earlier runs as a pass read them, after
// look since.
type keptHistory struct {
	runs              []Run
	since             uint64
	name, user, queue string
	start             store.Time
}

// takeHistory is what of h holds for job d: its runs, if they are of
// the job as it is (its name, user, queue and start) and unchanged since.
func (a *Analyzer) takeHistory(h *keptHistory, d *store.Job) *keptHistory {
	if h == nil || h.name != d.Name || h.user != d.User || h.queue != d.Queue || h.start != d.Start ||
		!a.late.unchanged(h.since, int64(d.Start), runKey(d.User, d.Queue, d.Name)) {
		return nil
	}
	return h
}
