package tracker

import (
	"cmp"
	"slices"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/wire"
)

// sweep ends the tracked processes that left /proc (or whose pid names
// another process now), children first: a parent that exited in the same
// interval must still be there to take its child's CPU, which the kernel
// put in its cutime. Then the reapers' ledger is settled, and the pids
// not listed are forgotten.
func (t *Tracker) sweep(ms int64) {
	if len(t.reused) == 0 && t.nListed == len(t.procs) {
		// Every process known was listed (the steady state): no walk of
		// the table.
		t.ledger.settle()
		return
	}
	gone := t.reused
	for _, p := range t.procs {
		if p.seen != t.cycle && (p.t != nil || p.zombieLife != 0) {
			gone = append(gone, p)
		}
	}
	slices.SortFunc(gone, childrenFirst)
	for i, p := range gone {
		t.gone(p, ms)
		gone[i] = nil
	}
	t.reused = gone[:0]
	t.ledger.settle()
	for pid, p := range t.procs {
		if p.seen != t.cycle {
			delete(t.procs, pid)
		}
	}
}

// childrenFirst orders processes children first: a child starts after
// its parent; a parent and the child it forked at once share a start
// tick, and then the higher pid is the child (pids wrap around rarely).
func childrenFirst(a, b *proc) int {
	if a.startTicks != b.startTicks {
		return cmp.Compare(b.startTicks, a.startTicks)
	}
	return cmp.Compare(b.pid, a.pid)
}

// endZombies ends the unit's members that exited but were not reaped
// (children first, as exits are), and reports whether none is left.
func (t *Tracker) endZombies(u *unit, ms int64) bool {
	var zs []*proc
	for _, p := range u.members {
		if p.t.exited {
			zs = append(zs, p)
		}
	}
	slices.SortFunc(zs, childrenFirst)
	for _, p := range zs {
		t.gone(p, ms)
	}
	return len(u.members) == 0
}

// reaped notes that a process that had ended as a zombie left /proc: its
// reaper's cutime grew by its life, which was charged when it exited.
func (t *Tracker) reaped(p *proc) {
	if p.zombieLife == 0 {
		return
	}
	t.ledger.reaped(p.ppid, p.zombieLife)
	p.zombieLife, p.zombieCredit, p.zombieAtt = 0, 0, nil
}

// gone handles a process that exited: it left /proc (or its pid now names
// another), or it is a zombie its parent has not reaped yet.
func (t *Tracker) gone(p *proc, ms int64) {
	tr := p.t
	if tr == nil {
		t.reaped(p)
		return
	}
	final, threads := t.records.take(p.pid)
	// It ended when it exited, not when it was reaped: the exit record
	// says when (its life since its start).
	if final != nil && final.EtimeUs > 0 {
		// (Not before it was last seen alive: a record that says so is
		// not to be believed, a clock suspended meanwhile.)
		if end := tr.startMs + int64(final.EtimeUs/1000); end > tr.startMs && end >= tr.tMs && end < ms {
			ms = end
		}
	}
	t.ends.exited(p, final, ms)
	t.acct.leave(p, final, threads, ms, t.sink)
	u := tr.unit
	for i, m := range u.members {
		if m == p {
			u.members = append(u.members[:i], u.members[i+1:]...)
			break
		}
	}
	wp := t.wireProcess(p)
	wp.EndMs = ms
	t.sink.Process(wp)
	// Starts and exits are in the process records; an exit is an event of
	// its own only when it failed (the status says how).
	if final != nil && final.ExitCode != 0 {
		t.sink.Event(&wire.Event{Ms: ms, Kind: wire.EventProcessExit, Process: tr.key, PID: p.pid, Value: int64(final.ExitCode),
			Message: exitMessage(final.ExitCode)})
	}
	for i, s := range t.sources {
		if f, ok := s.(collect.Forgetter); ok && tr.srcState[i] != nil {
			f.Forget(tr.srcState[i])
		}
	}
	tr.h.Close()
	t.stats.Exited++
	p.t = nil
}
