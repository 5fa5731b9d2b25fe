package tracker

import (
	"fmt"

	"github.com/taskscope/taskscope/internal/taskstats"
)

// ExitSource delivers exit records (taskstats.Listener). Drain calls fn for
// every record that arrived since the last call, without blocking. Every
// thread of a process that was reaped before Drain was called must have been
// reported (the kernel sends the records before the process leaves /proc).
type ExitSource interface {
	Drain(fn func(*taskstats.Record)) error
	Close() error
}

// exitLosses is an ExitSource that counts what it could not deliver
// (taskstats.Listener): the times its socket overflowed, and the records
// the kernel dropped then.
type exitLosses interface {
	Lost() uint64
	Dropped() uint64
}

// exitRecords is the part of the tracker that takes the exit records
// (taskstats) at each tick, before the sweep: records of a tracked
// process's threads add up to its exact end, taken when it leaves /proc
// (take); records of processes the tracker never saw (they lived less
// than a tick) are charged to the attempt of their nearest tracked
// ancestor, through the records of the processes between; records of a
// reaper's other children go to the ledger (reapers.go); records nobody
// claims within a few ticks are dropped and counted.
type exitRecords struct {
	src    ExitSource // nil: no exit records
	view   exitView
	ledger *reaperLedger
	stats  *Stats // ExitRecords, ShortLived, Unclaimed, ExitOverflows, ExitRecordsDropped
	errs   *readErrors
	held   map[int32]*heldRecord // records of tracked processes, until they leave /proc
	// orphans are records not yet attributable; byPID indexes them by
	// process, exited says which processes exited (their leader's record
	// is in).
	orphans []*heldRecord
	byPID   map[int32]*heldRecord
	exited  map[int32]bool
	cycle   uint64
	takeFn  func(*taskstats.Record) // x.file, one method value, not a closure per tick
	// free are records done with, for the next ones (under churn thousands
	// a second, most of them other processes'), up to maxFreeRecords;
	// taken are those take returned at this tick, free at the next.
	free, taken []*heldRecord
	spent       []*heldRecord // orphans done with at this drain (done)

	debugUnclaimed func(*taskstats.Record) // tests
}

// exitView is what the exit records part needs of the process table.
type exitView interface {
	// proc is the process known by pid (nil: none).
	proc(pid int32) *proc
	// alive reports whether a tracked process will be sampled again.
	alive(p *proc) bool
	// startMs is when a process that started at ticks after boot started.
	startMs(ticks uint64) int64
	// pidGone reports whether pid has left /proc.
	pidGone(pid int32) bool
}

func newExitRecords(src ExitSource, view exitView, ledger *reaperLedger, stats *Stats, errs *readErrors) *exitRecords {
	x := &exitRecords{src: src, view: view, ledger: ledger, stats: stats, errs: errs, held: map[int32]*heldRecord{},
		byPID: map[int32]*heldRecord{}, exited: map[int32]bool{}}
	x.takeFn = x.file
	return x
}

// maxFreeRecords bounds the records kept for reuse.
const maxFreeRecords = 4096

// newHeld is a zeroed record: a freed one, or a new one.
func (x *exitRecords) newHeld() *heldRecord {
	if n := len(x.free); n > 0 {
		h := x.free[n-1]
		x.free[n-1] = nil
		x.free = x.free[:n-1]
		*h = heldRecord{}
		return h
	}
	return &heldRecord{}
}

// release keeps h for reuse.
func (x *exitRecords) release(h *heldRecord) {
	if len(x.free) < maxFreeRecords {
		x.free = append(x.free, h)
	}
}

// heldRecord sums the exit records of one process's threads.
type heldRecord struct {
	rec     taskstats.Record // sums; PPID, exit code and start from the leader
	cycle   uint64
	leader  bool  // the thread group leader's record is in
	threads int64 // the records summed (a record a thread)
}

func (h *heldRecord) add(r *taskstats.Record) {
	h.threads++
	h.rec.PID = r.PID
	h.rec.UTimeUs += r.UTimeUs
	h.rec.STimeUs += r.STimeUs
	h.rec.RunNs += r.RunNs
	h.rec.ReadBytes += r.ReadBytes
	h.rec.WriteBytes += r.WriteBytes
	if r.TID == r.PID {
		h.leader = true
		h.rec.TID, h.rec.PPID, h.rec.BtimeSec, h.rec.ExitCode, h.rec.Comm = r.TID, r.PPID, r.BtimeSec, r.ExitCode, r.Comm
		h.rec.EtimeUs = r.EtimeUs
	}
}

// drain takes the exit records that arrived by the tick of cycle. Every
// process that left /proc before the listing has sent its records by
// then.
func (x *exitRecords) drain(cycle uint64) {
	if x.src == nil {
		return
	}
	x.cycle = cycle
	for i, h := range x.taken {
		x.release(h)
		x.taken[i] = nil
	}
	x.taken = x.taken[:0]
	if err := x.src.Drain(x.takeFn); err != nil {
		x.errs.count("taskstats", err)
	}
	if l, ok := x.src.(exitLosses); ok {
		x.stats.ExitOverflows, x.stats.ExitRecordsDropped = l.Lost(), l.Dropped()
	}
	// Index the unclaimed records: by process, and which processes exited
	// (their leader's record is in).
	byPID, exited := x.byPID, x.exited
	clear(byPID)
	clear(exited)
	for _, h := range x.orphans {
		if h.leader {
			exited[h.rec.PID] = true
			byPID[h.rec.PID] = h
		} else if byPID[h.rec.PID] == nil {
			byPID[h.rec.PID] = h
		}
	}
	kept := x.orphans[:0]
	for _, h := range x.orphans {
		// A thread of a process that is tracked now belongs to it.
		if p := x.view.proc(h.rec.PID); p != nil && p.t != nil && h.rec.BtimeSec >= x.view.startMs(p.startTicks)/1000-1 {
			x.hold(&h.rec)
			x.done(h)
			continue
		}
		// A thread of a process still alive (not yet listed): wait for it.
		if !exited[h.rec.PID] {
			kept = append(kept, h)
			continue
		}
		// A process that lived less than a tick: its nearest tracked ancestor's.
		if !x.chargeAncestor(h) {
			kept = append(kept, h)
		} else {
			x.done(h)
		}
	}
	for i := len(kept); i < len(x.orphans); i++ {
		x.orphans[i] = nil
	}
	x.orphans = kept
	for i, h := range x.spent {
		x.release(h)
		x.spent[i] = nil
	}
	x.spent = x.spent[:0]
}

// chargeAncestor charges the CPU and IO of a process that lived less than
// a tick to the attempt of its nearest tracked ancestor. It reports false
// when none is known (yet).
func (x *exitRecords) chargeAncestor(h *heldRecord) bool {
	a, live, sampled := x.ancestorAttempt(h.rec.PPID, 0)
	if a == nil {
		return false
	}
	if h.leader {
		a.shortLived++
		x.stats.ShortLived++
	}
	if live == nil {
		a.exitedCPU += h.rec.CPUMs()
		a.exitedRead += int64(h.rec.ReadBytes)
		a.exitedWrite += int64(h.rec.WriteBytes)
		return true
	}
	// Reaped (or to be reaped) by a member: pending there until its
	// counters show it; exactly what they show if it was its child and is
	// gone from /proc already. Pending, its record is short of what its
	// parent's cutime will show by what it ran after the record
	// (recordLagMs): if the parent exits before its cutime shows it, a
	// reaper's cutime settles it, and the parent's estimate is that much
	// less sure.
	live.shortMs += h.rec.CPUMs()
	if x.reapedInto(&h.rec, live) {
		live.addCertain(h.rec.CPUMs())
	} else {
		live.addPending(h.rec.CPUMs())
	}
	live.pendDoubt += recordLagMs
	if !sampled {
		live.pendRead += int64(h.rec.ReadBytes)
		live.pendWrite += int64(h.rec.WriteBytes)
	}
	return true
}

// file files one exit record: with the process it belongs to, or aside
// until its ancestry tells whose it is.
func (x *exitRecords) file(r *taskstats.Record) {
	x.stats.ExitRecords++
	if p := x.view.proc(r.PID); p != nil && r.BtimeSec >= x.view.startMs(p.startTicks)/1000-1 {
		if p.t != nil {
			x.hold(r)
		} else {
			x.ledger.otherExit(r)
		}
		return // a thread of a process the tracker knows: tracked, or not a task's
	}
	x.ledger.otherExit(r)
	h := x.newHeld()
	h.rec, h.cycle, h.leader = *r, x.cycle, r.TID == r.PID
	x.orphans = append(x.orphans, h)
}

// hold adds a record of a tracked process's thread to its sums.
func (x *exitRecords) hold(r *taskstats.Record) {
	h := x.held[r.PID]
	if h == nil {
		h = x.newHeld()
		x.held[r.PID] = h
	}
	h.add(r)
}

// done notes an orphan record that was charged or moved to its process:
// released once the drain is over (byPID may point at it until then).
func (x *exitRecords) done(h *heldRecord) { x.spent = append(x.spent, h) }

// leaderIn reports whether the exit record of pid's thread group leader
// is in: then it has exited, or will have at the next tick.
func (x *exitRecords) leaderIn(pid int32) bool {
	h := x.held[pid]
	return h != nil && h.leader
}

// take returns the sums of the records of a tracked process that left
// /proc, if its leader's is in (nil: none), and how many records (threads)
// they sum, and forgets them.
func (x *exitRecords) take(pid int32) (*taskstats.Record, int64) {
	h := x.held[pid]
	if h == nil {
		return nil, 0
	}
	delete(x.held, pid)
	if !h.leader {
		x.release(h)
		return nil, 0
	}
	x.taken = append(x.taken, h) // (its record is the caller's until the next drain)
	return &h.rec, h.threads
}

// ancestorAttempt walks up from pid through unseen processes known only by
// their exit records to the first tracked one, and returns its attempt and
// the process (everything below it that exited is, or will be, in its
// counters), and whether that process will be sampled again.
func (x *exitRecords) ancestorAttempt(pid int32, depth int) (*attempt, *tracked, bool) {
	if depth > 32 || pid <= 1 {
		return nil, nil, false
	}
	if p := x.view.proc(pid); p != nil {
		if p.t == nil {
			return nil, nil, false
		}
		a := p.t.unit.cur
		if p.t.mem != nil {
			a = p.t.mem.att
		}
		if p.t.mem == nil || p.t.mem.att == a {
			return a, p.t, x.view.alive(p)
		}
		return a, nil, false
	}
	if h := x.byPID[pid]; h != nil {
		return x.ancestorAttempt(h.rec.PPID, depth+1)
	}
	return nil, nil, false
}

// reapedInto reports whether the process of an exit record, never seen, is
// in live's cutime already: it is gone from /proc, and so is every process
// between it and live, and live will be sampled this tick.
func (x *exitRecords) reapedInto(rec *taskstats.Record, live *tracked) bool {
	pid, ppid := rec.PID, rec.PPID
	for depth := 0; depth < 32; depth++ {
		if !x.view.pidGone(pid) {
			return false
		}
		if par := x.view.proc(ppid); par != nil {
			return par.t == live && x.view.alive(par)
		}
		h := x.byPID[ppid]
		if h == nil || !h.leader {
			return false
		}
		pid, ppid = ppid, h.rec.PPID
	}
	return false
}

// expire drops exit records nobody claimed within a few ticks.
func (x *exitRecords) expire(cycle uint64) {
	kept := x.orphans[:0]
	for _, h := range x.orphans {
		if cycle-h.cycle < 3 {
			kept = append(kept, h)
		} else {
			x.stats.Unclaimed++
			if x.debugUnclaimed != nil {
				x.debugUnclaimed(&h.rec)
			}
			x.release(h)
		}
	}
	for i := len(kept); i < len(x.orphans); i++ {
		x.orphans[i] = nil
	}
	x.orphans = kept
}

// close closes the exit source.
func (x *exitRecords) close() error {
	if x.src == nil {
		return nil
	}
	return x.src.Close()
}

// exitMessage describes a wait status.
func exitMessage(status int32) string {
	if sig := status & 0x7f; sig != 0 {
		return fmt.Sprintf("killed by signal %d", sig)
	}
	return fmt.Sprintf("exited with status %d", (status>>8)&0xff)
}
