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
// reads its stat once per tick, right after listing /proc, and charges the
// attempts of the tracked processes it reaped in that interval what its
// cutime grew by, instead of their estimates (last sample plus the exit
// records' tail): the difference is split in proportion to each estimate's
// doubt (its tail, and the clock ticks of its last sample). Exit records
// miss what a process's exit costs after them (a JVM's 10-20 ms), and
// without one (dropped) the tail is a guess. The exit records of its
// other children (helpers it runs) are taken off first.
type reaper struct {
	pid        int32
	startTicks uint64
	h          *procfs.Proc
	children   int64 // cutime+cstime at the last read, ms
	grown      int64 // growth at this tick's read; <0: unknown
	other      int64 // exit records of its untracked children this tick
	items      []reapItem
	seen       uint64
}

type reapItem struct {
	a    *attempt
	life int64 // the estimate of all the process used (what cutime will show)
	part int64 // the part of it that is a's (a reused unit's earlier attempts had the rest)
	// tail is how far off life may be beyond its last sample's clock
	// ticks: the part of it after its last sample (from its exit records,
	// or, without them, what it may have used since), and the doubt of
	// its children's estimates.
	tail int64
}

// doubt is how far off the item's life may be, ms: its tail, and a clock
// tick each for the user and system time of its last sample.
func (it reapItem) doubt() int64 { return it.tail + 2*1000/procfs.UserHZ }

// readReapers reads every reaper's stat (right after the listing: a child
// missing from the listing was reaped before this read).
func (t *Tracker) readReapers() {
	for pid, r := range t.reapers {
		r.grown = -1
		if t.readStat(pid, r.h) != nil || t.stat.StartTime != r.startTicks {
			r.h.Close()
			delete(t.reapers, pid)
			continue
		}
		c := collect.TicksToMs(t.stat.CUTime + t.stat.CSTime)
		r.grown, r.children = c-r.children, c
	}
}

// noteOtherExit takes the exit record of a thread of a process that is not
// tracked: if a reaper is its parent, the reaper's cutime will hold it.
func (t *Tracker) noteOtherExit(rec *taskstats.Record) {
	if r := t.reapers[rec.PPID]; r != nil {
		r.other += rec.CPUMs()
	}
}

// chargeToReaper defers the charge of an exited process to the settling of
// its reaper's cutime at the end of the tick. It reports false when ppid is
// not a reaper whose cutime is known at this tick.
func (t *Tracker) chargeToReaper(ppid int32, a *attempt, life, part, tail int64) bool {
	r := t.reapers[ppid]
	if r == nil || r.grown < 0 {
		return false
	}
	r.items = append(r.items, reapItem{a: a, life: life, part: part, tail: tail})
	return true
}

// settleReapers charges what each reaper's cutime grew by (less its other
// children's records) to the attempts of the processes it reaped, when that
// is within a factor of two of their estimates; else the estimates stand
// (a child reaped between the listing and the read, or one whose parent
// ignores SIGCHLD, makes the growth mean nothing).
func (t *Tracker) settleReapers() {
	for _, r := range t.reapers {
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
		if t.debugReap != nil {
			for _, it := range r.items {
				t.debugReap(r, it, avail, est)
			}
		}
		// What the growth says beyond the estimates is their error, split in
		// proportion to how uncertain each is: its tail (what it used after
		// its last sample) and the clock ticks its last sample's user and
		// system times were truncated to.
		extra, left := avail-est, avail-est
		for i, it := range r.items {
			c := it.life
			if scale {
				share := left
				if i < len(r.items)-1 {
					share = extra * it.doubt() / doubt
				}
				left -= share
				c = it.life + share
			}
			// The correction is all in the tail (the samples were exact),
			// which is the current attempt's.
			t.stats.ExitCorrectionMs += it.life - c
			it.a.exitedCPU += max(0, it.part+c-it.life)
			r.items[i] = reapItem{}
		}
		r.items = r.items[:0]
		r.other = 0
	}
}

// watchReapers makes every untracked parent of a tracked process a reaper
// and forgets those that are no longer parents of any.
func (t *Tracker) watchReapers() {
	for _, u := range t.units {
		for _, p := range u.members {
			if p.t.vanished || p.ppid <= 0 {
				continue
			}
			if par := t.procs[p.ppid]; par != nil && par.t != nil {
				continue
			}
			r := t.reapers[p.ppid]
			if r == nil {
				r = t.newReaper(p.ppid)
				if r == nil {
					continue
				}
			}
			r.seen = t.cycle
		}
	}
	for pid, r := range t.reapers {
		if r.seen != t.cycle {
			r.h.Close()
			delete(t.reapers, pid)
		}
	}
}

func (t *Tracker) newReaper(pid int32) *reaper {
	h := t.cfg.FS.OpenProc(pid)
	if t.readStat(pid, h) != nil {
		h.Close()
		return nil
	}
	r := &reaper{pid: pid, startTicks: t.stat.StartTime, h: h, grown: -1,
		children: collect.TicksToMs(t.stat.CUTime + t.stat.CSTime)}
	t.reapers[pid] = r
	return r
}

// tail estimates the CPU an exited process used after its last sample.
// raw is what its exit records say (their sum less the last sample): on a
// kernel that leaves their scheduler runtime 0 they count clock ticks, an
// error over its whole life that for a process that ran for minutes can be
// far more than a tick's worth, and they miss the threads that exited
// before the agent started. So for a process sampled twice or more the tail is bounded by what it could
// have used between its last sample and its exit (the record gives its life,
// hence the moment of its exit): that time on as many CPUs as it had threads,
// and it is at least what it used at its last rate.
func (t *Tracker) tail(p *proc, final *taskstats.Record, raw int64) int64 {
	tr := p.t
	if tr.age < 2 || final.EtimeUs == 0 || tr.bootMs <= 0 || tr.tMs <= tr.tPrevMs {
		return raw
	}
	exitMs := int64(p.startTicks)*1000/procfs.UserHZ + int64(final.EtimeUs/1000)
	dt := min(max(exitMs-tr.bootMs, 0), max(t.bootNowMs-tr.bootMs, 0))
	rate := (tr.cpuMs - tr.cpuPrevMs) * dt / (tr.tMs - tr.tPrevMs)
	cpus := int64(min(max(val(tr, t.idx.threads), 1), int64(t.ncpu)))
	return max(max(rate, 0), min(raw, dt*cpus))
}

// tailUnknown estimates what an exited process whose exit record never
// came used after its last sample: it exited at some moment between that
// sample and this tick's listing, running meanwhile at its last rate (half
// of that time, on average).
func (t *Tracker) tailUnknown(p *proc) int64 {
	tr := p.t
	if tr.age < 2 || tr.bootMs <= 0 || tr.tMs <= tr.tPrevMs {
		return 0
	}
	dt := max(t.bootNowMs-tr.bootMs, 0)
	return max(0, (tr.cpuMs-tr.cpuPrevMs)*dt/(tr.tMs-tr.tPrevMs)/2)
}

// reapedInto reports whether the process of an exit record, never seen, is
// in live's cutime already: it is gone from /proc, and so is every process
// between it and live, and live will be sampled this tick.
func (t *Tracker) reapedInto(rec *taskstats.Record, live *tracked) bool {
	pid, ppid := rec.PID, rec.PPID
	for depth := 0; depth < 32; depth++ {
		if !t.cfg.FS.Gone(pid) {
			return false
		}
		if par := t.procs[ppid]; par != nil {
			return par.t == live && t.alive(par)
		}
		h := t.orphanByPID[ppid]
		if h == nil || !h.leader {
			return false
		}
		pid, ppid = ppid, h.rec.PPID
	}
	return false
}
