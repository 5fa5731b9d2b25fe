package tracker

import (
	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
)

// A reaper is a process that is no task's but is the parent of tracked ones:
// the NodeManager or TaskTracker above each unit's first process, init above
// processes that were reparented. When it reaps a child the kernel adds the
// child's whole CPU, as wait4 reports it, to its cutime/cstime. The tracker
// reads its stat at each tick around the listing of /proc, and charges the
// attempts of the tracked processes it reaped in that interval what its
// cutime grew by, instead of their estimates (last sample plus the exit
// records' tail): the difference is split in proportion to each estimate's
// doubt (its tail, and the clock ticks of its last sample). Exit records
// miss what a process's exit costs after them (a JVM's 10-20 ms), and
// without one (dropped) the tail is a guess. The exit records of its
// other children (helpers it runs) are taken off first.
//
// The growth must hold the children the listing missed and none that it
// showed. A child reaped between the listing and the read (a window that
// grows with the machine's load) is in both: its CPU would settle this
// tick's other exits and be missing at the next tick, when it is found
// gone (a map charged twice its CPU, its neighbours less, was seen so).
// So the cutime is read right before the listing too: when the two reads
// differ, the reaper reaped something meanwhile, and its children in the
// listing that are gone from /proc now are taken as gone at this tick
// (resolve); a read after that check that has not moved shows that those
// still there were not reaped before it.
type reaper struct {
	pid        int32
	startTicks uint64
	h          *procfs.Proc
	children   int64 // cutime+cstime at the last read, ms
	before     int64 // cutime+cstime read right before this tick's listing, ms (<0: not read)
	grown      int64 // growth at this tick's read; <0: unknown
	other      int64 // exit records of its untracked children this tick
	items      []reapItem
	// kids are the tracked processes it was the parent of at the last
	// tick (mark); moved: its cutime moved across this tick's listing;
	// blind: it would not hold still at the last tick, so its growth at
	// this one is unknown too.
	kids         []int32
	moved, blind bool
	seen         uint64
}

type reapItem struct {
	a    *attempt
	life int64 // the estimate of all the process used (what cutime will show)
	part int64 // the part of it that is a's (a reused unit's earlier attempts had the rest)
	// tail is how far off life may be: what its exit records miss
	// (recordLagMs a thread), or, without them, what it may have used
	// since its last sample; the clock ticks its last sample's figures
	// were cut to; and the doubt of its children's estimates
	// (accountant.leave).
	tail int64
	// guess: its estimate holds a guess of what a process used after its
	// last sample (its exit record, or its short-lived children's, lost):
	// how far off that is, its doubt does not bound.
	guess bool
	share int64 // what settle hands it of the growth beyond the estimates
}

// doubt is how far off the item's life may be, ms (at least 1).
func (it reapItem) doubt() int64 { return max(it.tail, 1) }

// reaperLedger is the part of the tracker that keeps the reapers: what
// each one's cutime/cstime grew by at this tick, what of that its other
// children's exit records account for, and the processes it reaped,
// charged at the end of the tick (settle).
type reaperLedger struct {
	stats *Stats // ExitCorrectionMs, ReapedAfterListing, ReapersUnsettled, SplitGuesses
	stat  statReader
	byPID map[int32]*reaper
	kids  []int32 // resolve's, reused

	debugReap func(r *reaper, it reapItem, avail, est int64) // tests: each item, before it is settled
}

// statReader is what the ledger reads of the process table: a process's
// stat, whether it is gone.
type statReader interface {
	// openProc is a handle on pid's /proc directory (nothing opened yet).
	openProc(pid int32) *procfs.Proc
	// statOf reads pid's stat through h (valid until the next read).
	statOf(pid int32, h *procfs.Proc) (*procfs.Stat, error)
	// pidGone reports whether pid has left /proc.
	pidGone(pid int32) bool
}

// listing is what the ledger changes of this tick's listing when a
// reaper's cutime moved across it (resolve).
type listing interface {
	// newChildren appends to dst the pids of this tick's new processes
	// whose parent is ppid.
	newChildren(ppid int32, dst []int32) []int32
	// unlist takes pid out of this tick's listing, if it is there: it was
	// reaped right after it, before its reaper's read.
	unlist(pid int32) bool
}

func newReaperLedger(stat statReader, stats *Stats) *reaperLedger {
	return &reaperLedger{stat: stat, stats: stats, byPID: map[int32]*reaper{}}
}

// cutime reads a reaper's cutime+cstime, ms; false when it cannot be read
// or its pid names another process now.
func (l *reaperLedger) cutime(r *reaper) (int64, bool) {
	st, err := l.stat.statOf(r.pid, r.h)
	if err != nil || st.StartTime != r.startTicks {
		return 0, false
	}
	return collect.TicksToMs(st.CUTime + st.CSTime), true
}

// readBefore reads every reaper's cutime right before the listing.
func (l *reaperLedger) readBefore() {
	for _, r := range l.byPID {
		r.before = -1
		if c, ok := l.cutime(r); ok {
			r.before = c
		}
	}
}

// read reads every reaper's stat right after the listing (a child missing
// from the listing was reaped before this read) and reports whether the
// cutime of one moved since its read before the listing: then a child the
// listing shows may have been reaped before this read too (resolve).
func (l *reaperLedger) read() (moved bool) {
	for pid, r := range l.byPID {
		r.grown = -1
		c, ok := l.cutime(r)
		if !ok {
			r.h.Close()
			delete(l.byPID, pid)
			continue
		}
		r.moved = c != r.before
		if r.blind {
			// What it reaped at the last tick after its last read there is in
			// this growth, and was charged then.
			r.blind, r.moved, r.children = false, false, c
			continue
		}
		r.grown, r.children = c-r.children, c
		moved = moved || r.moved
	}
	return moved
}

// maxRereads bounds the reads of a reaper's cutime at one tick while it
// keeps reaping children (resolve).
const maxRereads = 4

// resolve handles the reapers whose cutime moved across this tick's
// listing: each of their children the listing shows (its tracked ones at
// the last tick, and this tick's new ones) that is gone from /proc now was
// reaped before the check, and is taken out of the listing (it ends at
// this tick, and its CPU is in this tick's growth). Then the cutime is
// read again: if it has not moved, those still there were not reaped
// before that read, which is this tick's. If it has, what it grew by is
// this tick's too, and the children are looked at again; a reaper that
// does not hold still within maxRereads reads leaves this tick's growth
// and the next one's unknown (the estimates stand).
//
// (A child is gone from /proc once its reaper has added its CPU to its
// cutime: wait4 does both, in that order, within microseconds.)
func (l *reaperLedger) resolve(lst listing) {
	for _, r := range l.byPID {
		if !r.moved || r.grown < 0 {
			continue
		}
		r.moved = false
		l.kids = lst.newChildren(r.pid, append(l.kids[:0], r.kids...))
		for try := 1; ; try++ {
			for i, pid := range l.kids {
				if pid != 0 && l.stat.pidGone(pid) {
					if lst.unlist(pid) {
						l.stats.ReapedAfterListing++
					}
					l.kids[i] = 0
				}
			}
			c, ok := l.cutime(r)
			if ok && c == r.children {
				break
			}
			if !ok || try == maxRereads {
				l.stats.ReapersUnsettled++
				r.grown, r.blind = -1, true
				if ok {
					r.children = c
				}
				break
			}
			r.grown += c - r.children
			r.children = c
		}
	}
}

// otherExit takes the exit record of a thread of a process that is not
// tracked: if a reaper is its parent, the reaper's cutime will hold it.
func (l *reaperLedger) otherExit(rec *taskstats.Record) {
	if r := l.byPID[rec.PPID]; r != nil {
		r.other += rec.CPUMs()
	}
}

// reaped notes that a process that had ended as a zombie under ppid left
// /proc: its reaper's cutime grew by its life, which was charged when it
// exited.
func (l *reaperLedger) reaped(ppid int32, life int64) {
	if r := l.byPID[ppid]; r != nil {
		r.other += life
	}
}

// charge defers the charge of an exited process to the settling of its
// reaper's cutime at the end of the tick. It reports false when ppid is
// not a reaper whose cutime is known at this tick.
func (l *reaperLedger) charge(ppid int32, a *attempt, life, part, tail int64, guess bool) bool {
	r := l.byPID[ppid]
	if r == nil || r.grown < 0 {
		return false
	}
	r.items = append(r.items, reapItem{a: a, life: life, part: part, tail: tail, guess: guess})
	return true
}

// settle charges what each reaper's cutime grew by (less its other
// children's records) to the attempts of the processes it reaped, when
// that is within a factor of two of their estimates; else the estimates
// stand (a child reaped between the listing and the read, or one whose
// parent ignores SIGCHLD, makes the growth mean nothing).
func (l *reaperLedger) settle() {
	for _, r := range l.byPID {
		if len(r.items) == 0 {
			r.other = 0
			continue
		}
		var est, doubt int64
		for _, it := range r.items {
			est += it.life
			doubt += it.doubt()
		}
		avail := r.grown - r.other
		scale := est > 0 && 2*avail >= est && avail <= 2*est
		if l.debugReap != nil {
			for _, it := range r.items {
				l.debugReap(r, it, avail, est)
			}
		}
		// What the growth says beyond the estimates is their error, split in
		// proportion to how uncertain each is: its tail (what it used after
		// its last sample) and the clock ticks its last sample's user and
		// system times were truncated to.
		extra, left := avail-est, avail-est
		for i := range r.items {
			it := &r.items[i]
			if !scale {
				it.share = 0
				continue
			}
			it.share = left
			if i < len(r.items)-1 {
				it.share = extra * it.doubt() / doubt
			}
			left -= it.share
		}
		if scale {
			l.markGuessed(r.items, extra, doubt)
		}
		for i, it := range r.items {
			if !scale && it.guess {
				// The estimate stands, a guess in it: no growth settles it.
				guessStands(it.a, it.doubt(), l.stats)
			}
			c := it.life + it.share
			// The correction is all in the tail (the samples were exact),
			// which is the current attempt's.
			l.stats.ExitCorrectionMs += it.life - c
			it.a.exitedCPU += max(0, it.part+c-it.life)
			r.items[i] = reapItem{}
		}
		r.items = r.items[:0]
		r.other = 0
	}
}

// markGuessed tells the attempts of one settlement that their CPU is an
// estimate (wire.Attempt.CPUDoubtMs) when the split is a guess: two
// attempts or more share the growth, and an item's estimate holds a guess
// (a lost exit record). The growth is right in sum, not how it splits:
// an item whose estimate was right got its share of extra, the error of
// the guessed one, which took the rest (live, with every other tick's
// records lost: a map −467 ms beside +391 and +85).
//
// How far off each attempt may be is the worst its share can be wrong by
// over every way the error, extra in all, could lie among the estimates:
// none is over what its process used by more than its doubt (a guessed
// tail, never below nothing, cannot be; one under by any amount is in
// extra), and one that holds no guess is not under by more either. An
// attempt's estimates were off by err in all, its share less err is how
// far off it is told; err is within its doubt and its guessed part's
// "any amount", and leaves the other attempts' estimates the rest of
// extra, within theirs (cpuBound). So an attempt with no guess is told
// its doubt and its share at most, not |extra| and every doubt of the
// settlement (an ApplicationMaster was told ±2,028 ms so); and of two
// attempts, each is told the same: their errors are one another's
// (TestReaperLedgerDoubtBound).
func (l *reaperLedger) markGuessed(items []reapItem, extra, doubt int64) {
	guess, shared := false, false
	for _, it := range items {
		guess = guess || it.guess
		shared = shared || it.a != items[0].a
	}
	if !guess || !shared {
		return
	}
next:
	for i, it := range items {
		for _, o := range items[:i] {
			if o.a == it.a {
				continue next // (told once)
			}
		}
		var own, share int64
		ownGuess, restGuess := false, false
		for _, o := range items {
			if o.a == it.a {
				own, share, ownGuess = own+o.doubt(), share+o.share, ownGuess || o.guess
			} else {
				restGuess = restGuess || o.guess
			}
		}
		it.a.info.CPUDoubtMs += cpuBound(extra, share, own, doubt-own, ownGuess, restGuess)
	}
	l.stats.SplitGuesses++
}

// cpuBound is how far off an attempt's CPU may be after a settlement
// handed it share of extra, the growth beyond all the estimates: its own
// estimates' doubt sums to own, the others' to rest; ownGuess and
// restGuess say whether a guess is among them (then they may be under
// what their processes used by any amount). Its estimates were off by
// err, within [-own, own] (no upper bound when guessed), the others' by
// extra-err, within [-rest, rest] likewise: it is told share-err at its
// worst. Estimates over by more than their doubts (extra below all of
// them) leave no such err: then |extra| and every doubt.
func cpuBound(extra, share, own, rest int64, ownGuess, restGuess bool) int64 {
	lo, hi := -own, extra+rest
	if !ownGuess {
		hi = min(hi, own)
	}
	if !restGuess {
		lo = max(lo, extra-rest)
	}
	if lo > hi {
		return max(extra, -extra) + own + rest
	}
	return max(share-lo, hi-share)
}

// mark makes pid, the untracked parent of the tracked process kid, a
// reaper (from the tick of cycle on).
func (l *reaperLedger) mark(pid, kid int32, cycle uint64) {
	r := l.byPID[pid]
	if r == nil {
		h := l.stat.openProc(pid)
		st, err := l.stat.statOf(pid, h)
		if err != nil {
			h.Close()
			return
		}
		r = &reaper{pid: pid, startTicks: st.StartTime, h: h, grown: -1,
			children: collect.TicksToMs(st.CUTime + st.CSTime)}
		l.byPID[pid] = r
	}
	if r.seen != cycle {
		r.seen = cycle
		r.kids = r.kids[:0]
	}
	r.kids = append(r.kids, kid)
}

// sweep forgets the reapers not marked at the tick of cycle: no longer
// parents of any tracked process.
func (l *reaperLedger) sweep(cycle uint64) {
	for pid, r := range l.byPID {
		if r.seen != cycle {
			r.h.Close()
			delete(l.byPID, pid)
		}
	}
}

// close releases the reapers' held files.
func (l *reaperLedger) close() {
	for _, r := range l.byPID {
		r.h.Close()
	}
}
