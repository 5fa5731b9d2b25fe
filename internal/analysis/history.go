package analysis

import (
	"math"
	"sync"

	"github.com/taskscope/taskscope/internal/store"
)

// A running job's earlier runs (its recurring job's runs that ended
// before it started: earlierRuns) are read again at each of its passes
// only when they may have changed. They change only when a job written
// since has finished before the job started: late data of an old job, or
// a job found ended by its silence soon after this one started. The
// background's looks at the store (every Poll) see every job written
// lately; lateLog keeps, for each look, the earliest end among the
// finished jobs it saw newly written, and a pass takes the runs its last
// pass read again (keptHistory) while no look since saw one that ended
// before the job started. Without looks (no background: a page's
// report), they are read every time.

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

// lateEnd is the earliest end of the finished jobs look saw newly
// written.
type lateEnd struct {
	look uint64
	end  int64
}

// note records a look at states; complete says it saw every job written
// since its start (not cut at its limit).
func (l *lateLog) note(states []store.AnalysisState, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.looks++
	end, last := int64(math.MaxInt64), l.lastMax
	for _, s := range states {
		c := int64(s.Changed)
		last = max(last, c)
		if s.Job.State == store.StateFinished && c >= l.lastMax-lateSkew {
			e := int64(s.Job.End)
			if e <= 0 {
				e = int64(s.Job.LastSeen)
			}
			end = min(end, e)
		}
	}
	if !complete {
		end = math.MinInt64
	}
	l.lastMax = last
	if end != math.MaxInt64 {
		l.ends = append(l.ends, lateEnd{l.looks, end})
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

// unchanged reports whether the earlier runs of a job that started at
// start, read after look since, hold: no look after it saw a finished
// job written that ended before start.
func (l *lateLog) unchanged(since uint64, start int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if since == 0 || since+maxLooks < l.looks {
		return false
	}
	for _, e := range l.ends {
		if e.look > since && e.end <= start {
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
		!a.late.unchanged(h.since, int64(d.Start)) {
		return nil
	}
	return h
}
