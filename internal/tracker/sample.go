package tracker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

// sampleUnits samples every member of every unit, settles which attempt
// each unit runs, and reports samples and attempt sums.
func (t *Tracker) sampleUnits(ms int64) {
	tracked := 0
	for key, u := range t.units {
		if len(u.members) == 0 {
			t.endUnit(u, ms)
			delete(t.units, key)
			continue
		}
		for _, p := range u.members {
			t.sampleProc(p)
		}
		if u.cur == nil {
			if _, ok := t.jobOf(u); !ok && t.cycle-u.bornCycle < undecidedTicks {
				// No attempt until its job is known (jobOf): its
				// processes' samples go out, their memberships start
				// with its first attempt, from their starts.
				for _, p := range u.members {
					if !p.t.vanished {
						t.sink.ProcessSample(p.t.key, ms, p.t.vals, p.t.present)
						tracked++
					}
				}
				continue
			}
		}
		u.poll(t)
		if want := u.wantAttempt(); u.cur == nil || u.cur.info.AttemptID != want {
			t.switchAttempt(u, want, ms)
		} else if a := u.cur; a.confRetryAt != 0 && t.cycle >= a.confRetryAt {
			t.retryConf(u, a)
		}
		t.allocation(u)
		if !u.orphaned && u.launcherPID > 1 && t.procs[u.launcherPID] == nil {
			u.orphaned = true
			t.sink.Event(&wire.Event{Ms: ms, Kind: wire.EventOrphan, AttemptID: u.cur.info.AttemptID,
				JobID: u.cur.info.JobID, PID: u.launcherPID, Message: "the process that launched this task is gone"})
		}
		zombies := false
		for _, p := range u.members {
			tr := p.t
			if tr.mem == nil {
				t.startMembership(p, u.cur, false, ms)
			}
			if !tr.vanished {
				t.sink.ProcessSample(tr.key, ms, tr.vals, tr.present)
				tracked++
			}
			zombies = zombies || tr.exited
		}
		if zombies && t.endZombies(u, ms) {
			t.endUnit(u, ms)
			delete(t.units, key)
			continue
		}
		t.emitAttemptSample(u.cur, ms)
		u.cur.info.LastMs = ms
	}
	t.stats.Tracked = tracked
	t.stats.Units = len(t.units)
	if t.cycle%64 == 0 {
		// Forget the frameworks of applications no unit runs any more.
		live := make(map[string]bool, len(t.units))
		for _, u := range t.units {
			live[u.app()] = true
		}
		for app := range t.apps {
			if !live[app] {
				delete(t.apps, app)
			}
		}
	}
}

// idleFullEvery is how often (in ticks of its life) an idle process is read
// in full all the same: its RSS can shrink while it sleeps (reclaim, swap),
// and PSS moves as the processes it shares pages with come and go. It is a
// multiple of the PSS and status periods people set (5, 10).
const idleFullEvery = 10

// sampleProc reads one tick of a tracked process through every source. A
// process that has not run since its last sample (its scheduler runtime,
// read first, has not moved) keeps that sample: what a process does not run
// for cannot change its CPU, faults, IO, context switches, threads, mappings
// or children, so nothing else is read for it.
func (t *Tracker) sampleProc(p *proc) {
	tr := p.t
	if tr.vanished {
		return
	}
	var sched *procfs.Schedstat
	var schedAt time.Time // tests: when the scheduler figures were read (debugSched)
	if t.mayBeIdle(p) && !t.exitedRecord(p.pid) {
		if sched = t.readSched(p); sched != nil && sched.RunNs == tr.runNs {
			t.stayIdle(tr, sched)
			return
		}
		if t.debugSched != nil {
			schedAt = time.Now()
		}
	}
	if err := t.readStat(p.pid, tr.h); err != nil || t.stat.StartTime != p.startTicks {
		tr.vanished = true
		// If a new process has the pid (and, against the odds, its /proc
		// inode number too), the next listing must look at it again.
		p.ino = 0
		if err != nil && !procfs.IsGone(err) {
			t.countErr("stat", err)
		} else {
			t.stats.Vanished++
		}
		return
	}
	p.ppid, p.sid, p.pgrp = t.stat.PPID, t.stat.Session, t.stat.PGRP
	if t.stat.State == 'Z' && t.stat.Threads <= 1 {
		// It exited; its parent has not reaped it yet (a busy launcher
		// waits late). It ends now, not when it is reaped: its stat holds
		// its final CPU and that of the children it reaped.
		t.exitZombie(p)
		return
	}
	first := tr.age == 0
	if first {
		tr.comm = wire.SanitizeText(t.stat.Comm)
		tr.startStack = t.stat.StartStack
		if tr.startStack != 0 {
			// Its execs will show in startstack: no need to read its
			// command line again and again in case it exec'd. Unless it
			// exec'd between the read of its command line and this first
			// read of its stat (a wrapper's bash that became the JVM, a
			// jspawnhelper that became a Streaming mapper): startstack is
			// already the new one, and only its name, no longer that of
			// its command line's program, tells. Then look once more.
			tr.recheckAt = 0
			if tr.comm != commOf(tr.cmdline) {
				tr.recheckAt = t.cycle + 1
			}
		}
	} else if string(t.stat.Comm) != tr.comm || t.stat.StartStack != tr.startStack || (tr.recheckAt != 0 && t.cycle >= tr.recheckAt) {
		t.recheck(p)
	}
	tr.threads = t.stat.Threads
	var statAt time.Time
	if t.debugSched != nil {
		statAt = time.Now()
	}
	// A process whose threads are exiting (exit_group: its leader has
	// PF_EXITING, or has exited already) is counted twice by the
	// kernel's thread group totals: each exiting thread is added to the
	// group's dead threads' sums before it leaves the thread list, and
	// unmapping a JVM's heap can hold the last one there for long (its
	// scheduler runtime was seen hundreds of ms ahead of its CPU). Its
	// scheduler figures keep their last values until it is gone.
	tr.exiting = t.stat.Flags&procfs.PFExiting != 0 || t.stat.State == 'Z'
	if tr.exiting && tr.groupSched {
		t.sched = procfs.Schedstat{RunNs: tr.runNs, WaitNs: uint64(max(val(tr, t.idx.wait), 0))}
		sched = &t.sched
	} else if sched == nil || (tr.threads > 1 && !tr.groupSched && t.cfg.Groups != nil) {
		sched = t.readSched(p)
		if t.debugSched != nil {
			schedAt = time.Now()
		}
	}
	if t.debugSched != nil {
		// Positive: read after the stat, the thread group ran meanwhile.
		t.debugSched(p, schedAt.Sub(statAt))
	}
	tr.present = 0
	tg := &t.target
	*tg = collect.Target{PID: p.pid, Tick: t.cycle, Age: tr.age, Proc: tr.h, Stat: &t.stat, Sched: sched,
		IsJVM: tr.launch.Kind.IsJVM(), User: tr.user, Buf: &t.buf, State: tr.srcState}
	if tr.groupSched || first && tr.firstGroup {
		tg.Ctx = &tr.ctx
	}
	var owner uint32
	ownerKnown := false
	if first {
		// Its owner: with its context switches from taskstats, the owner
		// of its /proc directory (its effective uid, as ps shows it: no
		// read of status for it); else the real uid of the status read
		// for its context switches. (They differ for a setuid program.)
		if tg.Ctx != nil {
			var err error
			owner, err = t.cfg.FS.Owner(p.pid)
			ownerKnown = err == nil
		}
		if !ownerKnown {
			t.status = procfs.Status{}
			tg.Status = &t.status // the owner, from the status source's read
		}
	}
	for i, s := range t.sources {
		st := &t.setters[i]
		st.p = tr
		if err := s.Sample(&t.cfg.Collect, tg, i, st); err != nil {
			t.countErr(s.Name(), err)
		}
	}
	if first {
		if ownerKnown {
			t.setOwner(tr, owner)
		} else if t.status.HasUID {
			t.setOwner(tr, t.status.UID)
		} else {
			t.readOwner(tr)
		}
		t.sink.Process(t.wireProcess(p))
	}
	// Children's CPU that arrived in the cutime/cstime is no longer pending.
	children := collect.TicksToMs(t.stat.CUTime + t.stat.CSTime)
	t.settleChildren(tr, children-tr.lastChildren)
	tr.lastChildren = children
	tr.runKnown = sched != nil
	if sched != nil {
		tr.runNs = sched.RunNs
	}
	tr.age++
	tr.cpuPrevMs, tr.tPrevMs = tr.cpuMs, tr.tMs
	tr.cpuMs = collect.TicksToMs(t.stat.UTime + t.stat.STime)
	tr.tMs = t.nowMs
	tr.bootMs = t.bootNowMs
	if first && !tr.firstTick {
		// Most new processes are seen once (under churn, a task's short
		// children): its files are closed now, while it lives, and held
		// from its second sample on. A file closed after its process is
		// gone costs the closer the freeing of the process's /proc
		// entries, which its exit does otherwise.
		tr.h.Release()
	}
}

// exitedRecord reports whether the exit record of pid's thread group
// leader is in: then it has exited, or will have at the next tick.
func (t *Tracker) exitedRecord(pid int32) bool {
	h := t.recs[pid]
	return h != nil && h.leader
}

// exitZombie takes the last figures of a process that exited but was not
// reaped: its stat, read last, has its final CPU and that of the children
// it reaped. It is sampled no more, and ends with this tick's exits.
func (t *Tracker) exitZombie(p *proc) {
	tr := p.t
	st := &t.stat
	for _, v := range [...]struct {
		idx   int
		ticks uint64
	}{{t.idx.cpuUser, st.UTime}, {t.idx.cpuSys, st.STime}, {t.idx.cpuCUser, st.CUTime}, {t.idx.cpuCSys, st.CSTime}} {
		if v.idx >= 0 {
			tr.vals[v.idx] = collect.TicksToMs(v.ticks)
			tr.present |= 1 << uint(v.idx)
		}
	}
	children := collect.TicksToMs(st.CUTime + st.CSTime)
	t.settleChildren(tr, children-tr.lastChildren)
	tr.lastChildren = children
	tr.exited, tr.vanished = true, true
}

// mayBeIdle reports whether p's scheduler runtime can tell that it has not
// run since its last sample: it has one thread (whose schedstat is the
// process's) or its thread group's totals come from taskstats; it is not due
// for a full read, a second look at its command line, or children's CPU
// still to settle; and its parent is the one it had (a process reparented
// while it sleeps has not run either, but its new parent must be read).
func (t *Tracker) mayBeIdle(p *proc) bool {
	tr := p.t
	if tr.age == 0 || !tr.runKnown || tr.age%idleFullEvery == 0 || (tr.threads != 1 && !tr.groupSched) ||
		(tr.recheckAt != 0 && t.cycle >= tr.recheckAt) || tr.certain != 0 || tr.pending != 0 {
		return false
	}
	par := t.procs[p.ppid]
	return par != nil && par.seen == t.cycle && par.startTicks <= p.startTicks
}

// stayIdle keeps the last sample of a process that has not run since.
func (t *Tracker) stayIdle(tr *tracked, sched *procfs.Schedstat) {
	if i := t.idx.wait; i >= 0 && tr.present&(1<<uint(i)) != 0 {
		tr.vals[i] = int64(sched.WaitNs)
	}
	t.stats.IdleSkips++
	tr.age++
	tr.cpuPrevMs, tr.tPrevMs = tr.cpuMs, tr.tMs
	tr.tMs = t.nowMs
	tr.bootMs = t.bootNowMs
}

// readSched reads the process's time on a CPU and waiting for one: its
// whole thread group's from the kernel (taskstats) once it has had more
// than one thread, if the kernel answers (with its context switches), else
// /proc/PID/schedstat, which is its leader thread's. A process on the first
// way stays on it (its counters never go back). Nil when neither could be
// read.
func (t *Tracker) readSched(p *proc) *procfs.Schedstat {
	tr := p.t
	if t.cfg.Groups != nil && !tr.groupSched && tr.threads == 1 && tr.age == 0 && !tr.firstTick && !tr.exiting {
		// Its first sample (under churn, most task processes' only one):
		// its thread group's figures are its own, and bring its context
		// switches with them, in one request instead of the reads of
		// schedstat and status. Its later samples read its schedstat.
		var g taskstats.Group
		if err := t.cfg.Groups.ThreadGroup(p.pid, &g); err == nil {
			t.sched = procfs.Schedstat{RunNs: g.RunNs, WaitNs: g.WaitNs}
			tr.ctx = [2]uint64{g.VolCtx, g.InvolCtx}
			tr.firstGroup = true
			return &t.sched
		}
	}
	if t.cfg.Groups != nil && (tr.groupSched || tr.threads > 1) {
		err := t.readGroup(p)
		if err == nil {
			return &t.sched
		}
		if procfs.IsGone(err) || tr.groupSched {
			if !procfs.IsGone(err) {
				t.countErr("taskstats", err)
			}
			return nil
		}
		t.countErr("taskstats", err)
	}
	b, err := tr.h.Read(procfs.FileSchedstat, t.buf)
	t.buf = b
	if err == nil {
		err = procfs.ParseSchedstat(b, &t.sched)
	}
	if err != nil {
		if !procfs.IsGone(err) {
			t.countErr("schedstat", err)
		}
		return nil
	}
	if tr.firstGroup {
		tr.firstGroup = false
		if tr.runKnown && (t.sched.RunNs < tr.runNs || int64(t.sched.WaitNs) < val(tr, t.idx.wait)) && t.cfg.Groups != nil {
			// Its first figures, its thread group's, were more than its
			// leader's: threads of it had exited before. Its group's
			// from now on, as for a process of many threads.
			t.readGroup(p)
		}
	}
	return &t.sched
}

// readGroup reads the process's thread group's figures into t.sched and
// its context switches, and keeps it on that way from now on.
func (t *Tracker) readGroup(p *proc) error {
	tr := p.t
	var g taskstats.Group
	if err := t.cfg.Groups.ThreadGroup(p.pid, &g); err != nil {
		return err
	}
	tr.firstGroup = false
	t.sched = procfs.Schedstat{RunNs: g.RunNs, WaitNs: g.WaitNs}
	// The live threads' context switches: counted on from the first read,
	// through drops (a thread exited).
	raw := [2]uint64{g.VolCtx, g.InvolCtx}
	for i := range raw {
		if !tr.groupSched {
			tr.ctx[i] = raw[i]
		} else if raw[i] > tr.ctxRaw[i] {
			tr.ctx[i] += raw[i] - tr.ctxRaw[i]
		}
	}
	tr.ctxRaw = raw
	tr.groupSched = true
	return nil
}

// recheck reads the command line again: the process exec'd (taskjvm.sh
// becomes the Child JVM; a container's session script becomes
// launch_container.sh, then bash -c).
func (t *Tracker) recheck(p *proc) {
	tr := p.t
	tr.comm = wire.SanitizeText(t.stat.Comm)
	tr.startStack = t.stat.StartStack
	if tr.recheckAt != 0 && tr.startStack == 0 {
		tr.recheckAt = t.cycle + 10
	}
	argv, cmdline, ok := t.readCmdline(p.pid)
	if !ok || cmdline == tr.cmdline {
		if ok && tr.startStack != 0 {
			// Its command line is that of its stat: execs from now on
			// show in startstack (a script run by its #! line, whose name
			// is the script's, is looked at once, not at every tick).
			tr.recheckAt = 0
		}
		return
	}
	// The read above reused t.buf's sibling; t.stat still holds this process.
	l := hadoop.Classify(argv)
	tr.cmdline, tr.launch = cmdline, l
	if l.Kind != hadoop.KindNone {
		tr.role = roleOf(&l)
		tr.unit.learn(t, p, &l)
	} else if tr.preExec {
		// Seen before its exec: its role is what it exec'd under its parent.
		if par := t.procs[p.ppid]; par != nil && par.t != nil {
			tr.role = t.roleUnder(p, par.t, &l)
		}
	}
	tr.preExec = false
	if tr.role != wire.RoleWrapper {
		tr.recheckAt = 0
	}
	t.sink.Process(t.wireProcess(p))
}

// commOf is the name the kernel gives a process running cmdline: its
// program's base name, cut to 15 bytes (TASK_COMM_LEN).
func commOf(cmdline string) string {
	prog, _, _ := strings.Cut(cmdline, " ")
	prog = prog[strings.LastIndexByte(prog, '/')+1:]
	if len(prog) > 15 {
		prog = prog[:15]
	}
	return prog
}

// cpuAcct is the CPU charged to a process so far: its own, that of the
// children it reaped (cutime/cstime, as the kernel charges a parent), and
// that of children that exited but do not show in its cutime yet.
func (t *Tracker) cpuAcct(tr *tracked) int64 {
	return tr.vals[t.idx.cpuUser] + tr.vals[t.idx.cpuSys] + tr.vals[t.idx.cpuCUser] + tr.vals[t.idx.cpuCSys] + tr.pending + tr.certain
}

// reaper returns the tracked process of attempt a that was the parent of an
// exited process (ppid at its exit): the kernel adds a reaped child's whole
// CPU and IO, its exit included, to the parent's cutime/cstime and io.
// Exits are handled children first, so the parent is still known even if it
// exited in the same interval.
func (t *Tracker) reaper(ppid int32, a *attempt) *tracked {
	parent := t.procs[ppid]
	if parent == nil || parent.t == nil || parent.t.mem == nil || parent.t.mem.att != a {
		return nil
	}
	return parent.t
}

// alive reports whether a tracked process will be sampled again.
func (t *Tracker) alive(p *proc) bool { return p.seen == t.cycle && !p.t.vanished }

func val(tr *tracked, i int) int64 {
	if i < 0 || tr.present&(1<<uint(i)) == 0 {
		return 0
	}
	return tr.vals[i]
}

// startMembership makes p a member of a. A process that moves from an
// earlier attempt of the same unit starts from what it has used so far.
func (t *Tracker) startMembership(p *proc, a *attempt, carry bool, ms int64) {
	tr := p.t
	m := &member{att: a, fromMs: ms}
	if carry {
		m.cpuBase = t.cpuAcct(tr)
		m.readBase, m.writeBase = val(tr, t.idx.read), val(tr, t.idx.write)
		m.gcBase, m.waitBase = val(tr, t.idx.gc), val(tr, t.idx.wait)
	} else {
		m.fromMs = tr.startMs
		if m.fromMs < a.info.FirstMs || m.fromMs == 0 {
			m.fromMs = a.info.FirstMs
		}
	}
	tr.mem = m
	t.sink.Membership(&wire.Membership{Process: tr.key, AttemptID: a.info.AttemptID, FromMs: m.fromMs,
		CPUBaseMs: m.cpuBase, Role: tr.role})
}

// exitDoubtMs is how far off a process's CPU is when its exit records give
// its threads' scheduler runtime: what its exit costs after them (a JVM's
// 10-20 ms, a shell's less than one), one clock tick, for the split of a
// reaper's cutime among the processes it reaped.
const exitDoubtMs = 1000 / procfs.UserHZ

// endMembership folds what p used in its attempt into the attempt's totals
// for exited processes (or, for a process that moves on, for the past).
func (t *Tracker) endMembership(p *proc, final *taskstats.Record, ms int64) {
	tr := p.t
	m := tr.mem
	if m == nil {
		return
	}
	a := m.att
	cpu := t.cpuAcct(tr)
	var tail int64 // the estimate of what it used after its last sample
	// doubt is how far off cpu may be: the tail, or what its last interval
	// may have held when no exit record told (a reaper's correction is
	// split in proportion to it), and what its children's pending
	// estimates may be off by.
	var doubt int64
	exited := p.seen != t.cycle || tr.exited
	read, write := val(tr, t.idx.read)+tr.pendRead, val(tr, t.idx.write)+tr.pendWrite
	if final == nil && exited && !tr.exited {
		// Gone without its exit record: none come without taskstats, and
		// the kernel drops them when the agent's socket is full (counted:
		// ExitsWithoutRecord). It ran for some part of the time since its
		// last sample: half of it at its last rate, give or take as much.
		if t.exact {
			t.stats.ExitsWithoutRecord++
		}
		tail = t.tailUnknown(p)
		cpu += tail
		doubt = tail
	}
	if final != nil {
		// The threads' records add up to the whole process when the agent saw
		// it born (for one that predates the agent they miss the threads that
		// exited before: the last sample is then the better figure). What it
		// had reaped is in its last sample's cutime/cstime.
		own := tr.vals[t.idx.cpuUser] + tr.vals[t.idx.cpuSys]
		if !tr.exited {
			// (A zombie's last stat is read after its exit: nothing follows it.)
			tail = t.tail(p, final, max(0, final.CPUMs()-own))
			cpu += tail
			doubt = tail
			if final.RunNs > 0 {
				// The records' scheduler runtime is exact: what the exit
				// costs after them is unknown, and about the same for
				// every process, not more for one that ran more since its
				// last sample.
				doubt = exitDoubtMs
			}
		}
		read, write = max(read, int64(final.ReadBytes)+tr.pendRead), max(write, int64(final.WriteBytes)+tr.pendWrite)
	}
	// An exited process reaped by a parent of the same attempt is in that
	// parent's counters (exit costs included): charging it here would count
	// it twice. It stays pending there until the parent's cutime shows it.
	doubt += tr.pendDoubt
	charged := true
	ppid := int32(0)
	if exited {
		ppid = p.ppid
		if final != nil && final.PPID > 0 {
			ppid = final.PPID
		}
		if par := t.reaper(ppid, a); par != nil && par != tr {
			charged = false
			// The parent's cutime will show all the child used; what of it
			// earlier attempts had (a reused unit) is not this attempt's.
			if t.alive(t.procs[ppid]) && !tr.exited {
				// It left /proc before the listing, so its parent had reaped
				// it: the parent's stat, read after, shows it.
				par.addCertain(max(0, cpu))
			} else {
				// Its parent exited too, or has not reaped it yet (a
				// zombie): its cutime will show it when it does.
				par.addPending(max(0, cpu))
				par.pendDoubt += doubt
			}
			par.mem.cpuBase += m.cpuBase
			if !t.alive(t.procs[ppid]) {
				par.pendRead += max(0, read-m.readBase)
				par.pendWrite += max(0, write-m.writeBase)
			}
		} else if zp := t.procs[ppid]; zp != nil && zp.t == nil && zp.zombieAtt == a && zp.zombieCredit > 0 {
			// Its parent ended as a zombie before this exit was handled
			// (it was gone when read, at the tick its parent was found a
			// zombie): it had reaped it, and its last cutime, charged
			// then, holds it already.
			used := min(max(cpu, 0), zp.zombieCredit)
			zp.zombieCredit -= used
			cpu -= used
		}
	}
	if t.debugExit != nil && exited {
		fin := int64(-1)
		if final != nil {
			fin = final.CPUMs()
		}
		t.debugExit(p, a.info.AttemptID, tr.vals[t.idx.cpuUser]+tr.vals[t.idx.cpuSys], tr.vals[t.idx.cpuCUser]+tr.vals[t.idx.cpuCSys], fin, cpu-m.cpuBase, charged)
	}
	if charged {
		// Reaped by a process that is no task's (a NodeManager, a
		// TaskTracker, init): that process's cutime says what it cost.
		if tr.exited {
			// Not reaped yet: its stat's last figures are final, and its
			// reaper's cutime will show them when it reaps it (reaped).
			// Its cutime's growth that no exit handled yet stands for
			// children whose exits come later.
			p.zombieLife = max(cpu, 1)
			p.zombieCredit, p.zombieAtt = tr.credit, a
		}
		if cpu > m.cpuBase && (ppid == 0 || tr.exited || !t.chargeToReaper(ppid, a, cpu, cpu-m.cpuBase, doubt)) {
			a.exitedCPU += cpu - m.cpuBase
		}
		if read > m.readBase {
			a.exitedRead += read - m.readBase
		}
		if write > m.writeBase {
			a.exitedWrite += write - m.writeBase
		}
	}
	if gc := val(tr, t.idx.gc); gc > m.gcBase {
		a.exitedGC += gc - m.gcBase
	}
	if w := val(tr, t.idx.wait); w > m.waitBase {
		a.exitedWait += w - m.waitBase
	}
	tr.mem = nil
	t.sink.Membership(&wire.Membership{Process: tr.key, AttemptID: a.info.AttemptID, FromMs: m.fromMs, ToMs: ms,
		CPUBaseMs: m.cpuBase, Role: tr.role})
}

// switchAttempt ends the unit's current attempt, if any, and starts want.
func (t *Tracker) switchAttempt(u *unit, want string, ms int64) {
	old := u.cur
	// Only the processes counted in old move on from now; one first seen
	// in this tick (a container's JVM that began its attempt before the
	// agent's first look at it) counts in want from its start.
	var carried []*proc
	if old != nil {
		t.emitAttemptSample(old, ms)
		for _, p := range u.members {
			if p.t.mem != nil && p.t.mem.att == old {
				t.endMembership(p, nil, ms)
				carried = append(carried, p)
			}
		}
		t.readTaskLog(u, old, ms) // tasklog.go
		t.finishAttempt(old, ms, wire.EventAttemptSwitch)
	}
	a := &attempt{unit: u, cleanup: u.cleanup}
	a.info = wire.Attempt{
		AttemptID: want, AppID: u.appID, ContainerID: u.containerID,
		Type: u.attemptType(want), Framework: u.framework, FirstMs: ms, LastMs: ms,
	}
	a.info.JobID, _ = t.jobOf(u)
	if at, ok := hadoop.ParseAttempt(want); ok {
		a.info.JobID = at.JobID()
		if at.Tez && u.appID == "" {
			a.info.AppID = at.JobID()
		}
	}
	if old == nil {
		// The unit's first attempt began when its first process did.
		for _, p := range u.members {
			if s := p.t.startMs; s > 0 && s < a.info.FirstMs {
				a.info.FirstMs = s
			}
		}
	}
	a.confTries = 1
	if !t.readConf(u, &a.info) {
		a.confRetryAt = t.cycle + 1
	}
	u.cur = a
	t.sink.Attempt(&a.info)
	t.sink.Event(&wire.Event{Ms: ms, Kind: wire.EventAttemptStart, AttemptID: want, JobID: a.info.JobID})
	for _, p := range carried {
		t.startMembership(p, a, true, ms)
	}
}

func (t *Tracker) finishAttempt(a *attempt, ms int64, kind string) {
	a.info.Ended = true
	a.info.LastMs = ms
	t.sink.Attempt(&a.info)
	t.sink.Event(&wire.Event{Ms: ms, Kind: kind, AttemptID: a.info.AttemptID, JobID: a.info.JobID, Value: a.exitedCPU})
}

// endUnit is called when the unit's last process has exited.
func (t *Tracker) endUnit(u *unit, ms int64) {
	if u.cur == nil {
		return
	}
	t.emitAttemptSample(u.cur, ms)
	t.closeUnit(u, ms) // exits.go
	t.finishAttempt(u.cur, ms, wire.EventAttemptEnd)
}

// emitAttemptSample sums the attempt's processes at this tick.
func (t *Tracker) emitAttemptSample(a *attempt, ms int64) {
	v := t.attVals
	for i := range v {
		v[i] = 0
	}
	v[0], v[5], v[6], v[8], v[9] = a.exitedCPU, a.exitedRead, a.exitedWrite, a.exitedGC, a.exitedWait
	present := uint64(1<<0 | 1<<1 | 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<9)
	if t.exact {
		v[10] = a.shortLived // counted from exit records only
		present |= 1 << 10
	}
	for _, p := range a.unit.members {
		tr := p.t
		m := tr.mem
		if m == nil || m.att != a {
			continue
		}
		if c := t.cpuAcct(tr) - m.cpuBase; c > 0 {
			v[0] += c
		}
		if r := val(tr, t.idx.read) + tr.pendRead - m.readBase; r > 0 {
			v[5] += r
		}
		if w := val(tr, t.idx.write) + tr.pendWrite - m.writeBase; w > 0 {
			v[6] += w
		}
		if w := val(tr, t.idx.wait) - m.waitBase; w > 0 {
			v[9] += w
		}
		if tr.vanished {
			continue
		}
		v[1] += val(tr, t.idx.rss)
		v[3] += val(tr, t.idx.vms)
		v[4]++
		if t.idx.pss >= 0 && tr.present&(1<<uint(t.idx.pss)) != 0 {
			v[2] += tr.vals[t.idx.pss]
			present |= 1 << 2
		}
		if t.idx.heap >= 0 && tr.present&(1<<uint(t.idx.heap)) != 0 {
			v[7] += tr.vals[t.idx.heap]
			present |= 1 << 7
		}
		if t.idx.gc >= 0 && tr.present&(1<<uint(t.idx.gc)) != 0 {
			v[8] += tr.vals[t.idx.gc] - m.gcBase
			present |= 1 << 8
		}
	}
	t.sink.AttemptSample(a.info.AttemptID, ms, v, present)
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
	slices.SortFunc(zs, func(a, b *proc) int {
		if a.startTicks != b.startTicks {
			return cmp.Compare(b.startTicks, a.startTicks)
		}
		return cmp.Compare(b.pid, a.pid)
	})
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
	if r := t.reapers[p.ppid]; r != nil {
		r.other += p.zombieLife
	}
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
	var final *taskstats.Record
	if h := t.recs[p.pid]; h != nil {
		if h.leader {
			final = &h.rec
		}
		delete(t.recs, p.pid)
	}
	// It ended when it exited, not when it was reaped: the exit record
	// says when (its life since its start).
	if final != nil && final.EtimeUs > 0 {
		// (Not before it was last seen alive: a record that says so is
		// not to be believed, a clock suspended meanwhile.)
		if end := tr.startMs + int64(final.EtimeUs/1000); end > tr.startMs && end >= tr.tMs && end < ms {
			ms = end
		}
	}
	t.noteExit(p, final, ms) // exits.go
	t.endMembership(p, final, ms)
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

// drainExits takes the exit records that arrived. Records of a tracked
// process's threads add up to its exact CPU, used when it leaves /proc.
// Records of processes the tracker never saw (they lived less than one tick)
// are charged to the attempt of their nearest tracked ancestor.
func (t *Tracker) drainExits() {
	if !t.exact {
		return
	}
	if t.takeExitFn == nil {
		t.takeExitFn = t.takeExit // one method value, not a closure per tick
	}
	err := t.cfg.Exits.Drain(t.takeExitFn)
	if err != nil {
		t.countErr("taskstats", err)
	}
	if l, ok := t.cfg.Exits.(exitLosses); ok {
		t.stats.ExitOverflows, t.stats.ExitRecordsDropped = l.Lost(), l.Dropped()
	}
	// Index the unclaimed records: by process, and which processes exited
	// (their leader's record is in).
	if t.orphanByPID == nil {
		t.orphanByPID, t.orphanExited = map[int32]*heldRecord{}, map[int32]bool{}
	}
	byPID, exited := t.orphanByPID, t.orphanExited
	clear(byPID)
	clear(exited)
	for _, h := range t.orphanRecs {
		if h.leader {
			exited[h.rec.PID] = true
			byPID[h.rec.PID] = h
		} else if byPID[h.rec.PID] == nil {
			byPID[h.rec.PID] = h
		}
	}
	kept := t.orphanRecs[:0]
	for _, h := range t.orphanRecs {
		// A thread of a process that is tracked now belongs to it.
		if p := t.procs[h.rec.PID]; p != nil && p.t != nil && h.rec.BtimeSec >= t.startMs(p.startTicks)/1000-1 {
			hr := t.recs[h.rec.PID]
			if hr == nil {
				hr = &heldRecord{}
				t.recs[h.rec.PID] = hr
			}
			hr.add(&h.rec)
			continue
		}
		// A thread of a process still alive (not yet listed): wait for it.
		if !exited[h.rec.PID] {
			kept = append(kept, h)
			continue
		}
		// A process that lived less than a tick: its nearest tracked ancestor's.
		a, live := t.ancestorAttempt(h.rec.PPID, 0)
		if a == nil {
			kept = append(kept, h)
			continue
		}
		if h.leader {
			a.shortLived++
			t.stats.ShortLived++
		}
		if live != nil {
			// Reaped (or to be reaped) by a member: pending there until its
			// counters show it; exactly what they show if it was its child
			// and is gone from /proc already.
			if t.reapedInto(&h.rec, live) {
				live.addCertain(h.rec.CPUMs())
			} else {
				live.addPending(h.rec.CPUMs())
			}
			if !live.sampledAgain {
				live.pendRead += int64(h.rec.ReadBytes)
				live.pendWrite += int64(h.rec.WriteBytes)
			}
			continue
		}
		a.exitedCPU += h.rec.CPUMs()
		a.exitedRead += int64(h.rec.ReadBytes)
		a.exitedWrite += int64(h.rec.WriteBytes)
	}
	for i := len(kept); i < len(t.orphanRecs); i++ {
		t.orphanRecs[i] = nil
	}
	t.orphanRecs = kept
}

// takeExit files one exit record: with the process it belongs to, or
// aside until its ancestry tells whose it is.
func (t *Tracker) takeExit(r *taskstats.Record) {
	t.stats.ExitRecords++
	if p := t.procs[r.PID]; p != nil && r.BtimeSec >= t.startMs(p.startTicks)/1000-1 {
		if p.t != nil {
			h := t.recs[r.PID]
			if h == nil {
				h = &heldRecord{}
				t.recs[r.PID] = h
			}
			h.add(r)
		} else {
			t.noteOtherExit(r)
		}
		return // a thread of a process the tracker knows: tracked, or not a task's
	}
	t.noteOtherExit(r)
	t.orphanRecs = append(t.orphanRecs, &heldRecord{rec: *r, cycle: t.cycle, leader: r.TID == r.PID})
}

// heldRecord sums the exit records of one process's threads.
type heldRecord struct {
	rec    taskstats.Record // sums; PPID, exit code and start from the leader
	cycle  uint64
	leader bool // the thread group leader's record is in
}

func (h *heldRecord) add(r *taskstats.Record) {
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

// ancestorAttempt walks up from pid through unseen processes known only by
// their exit records to the first tracked one, and returns its attempt and
// the process (everything below it that exited is, or will be, in its
// counters).
func (t *Tracker) ancestorAttempt(pid int32, depth int) (*attempt, *tracked) {
	if depth > 32 || pid <= 1 {
		return nil, nil
	}
	if p := t.procs[pid]; p != nil {
		if p.t == nil {
			return nil, nil
		}
		a := p.t.unit.cur
		if p.t.mem != nil {
			a = p.t.mem.att
		}
		if p.t.mem == nil || p.t.mem.att == a {
			p.t.sampledAgain = t.alive(p)
			return a, p.t
		}
		return a, nil
	}
	if h := t.orphanByPID[pid]; h != nil {
		return t.ancestorAttempt(h.rec.PPID, depth+1)
	}
	return nil, nil
}

// expireRecords drops exit records nobody claimed within a few ticks.
func (t *Tracker) expireRecords() {
	kept := t.orphanRecs[:0]
	for _, h := range t.orphanRecs {
		if t.cycle-h.cycle < 3 {
			kept = append(kept, h)
		} else {
			t.stats.Unclaimed++
			if t.debugUnclaimed != nil {
				t.debugUnclaimed(&h.rec)
			}
		}
	}
	for i := len(kept); i < len(t.orphanRecs); i++ {
		t.orphanRecs[i] = nil
	}
	t.orphanRecs = kept
}

// exitMessage describes a wait status.
func exitMessage(status int32) string {
	if sig := status & 0x7f; sig != 0 {
		return fmt.Sprintf("killed by signal %d", sig)
	}
	return fmt.Sprintf("exited with status %d", (status>>8)&0xff)
}

// addPending charges a reaped child's CPU to tr until its cutime shows it,
// unless its cutime already grew by that much.
func (tr *tracked) addPending(ms int64) {
	used := min(ms, tr.credit)
	tr.credit -= used
	tr.pending += ms - used
}

// addCertain charges the CPU of a child that tr has reaped already: tr's
// next stat shows it in cutime/cstime, exactly, and replaces the estimate.
func (tr *tracked) addCertain(ms int64) {
	used := min(ms, tr.credit)
	tr.credit -= used
	tr.certain += ms - used
}

// settleChildren takes the growth d of tr's cutime+cstime since its last
// sample. The kernel adds a reaped child's CPU there as wait4 reports it
// (its scheduler runtime), its exit included; exit records miss what the
// exit costs after them. So the children tr is known to have
// reaped (certain) cost what cutime says, not what their records said; an
// estimate that the growth does not cover by half at least (a parent that
// ignores SIGCHLD accrues nothing) stays pending.
func (t *Tracker) settleChildren(tr *tracked, d int64) {
	if tr.certain > 0 {
		used := min(max(d, 0), tr.certain)
		rest := tr.certain - used
		tr.certain = 0
		d -= used
		if 2*used < used+rest {
			tr.pending += rest
		} else if rest > 0 {
			t.stats.ExitCorrectionMs += rest
		}
	}
	if d > 0 {
		used := min(d, tr.pending)
		tr.pending -= used
		tr.credit += d - used
	}
	if tr.pending == 0 {
		tr.pendDoubt = 0
	}
}
