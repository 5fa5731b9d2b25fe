package tracker

import (
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

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
	if t.mayBeIdle(p) && !t.records.leaderIn(p.pid) {
		if sched = t.readSched(p); sched != nil && sched.RunNs == tr.runNs {
			t.stayIdle(tr, sched)
			return
		}
		schedAt = t.debugNow()
	}
	if !t.readLiveStat(p) {
		return
	}
	first := tr.age == 0
	t.noticeExec(p, first)
	statAt := t.debugNow()
	sched, schedAt = t.schedFigures(p, sched, schedAt)
	if t.debugSched != nil {
		// Positive: read after the stat, the thread group ran meanwhile.
		t.debugSched(p, schedAt.Sub(statAt))
	}
	t.readSources(p, sched, first)
	t.endSample(p, sched, first)
}

// debugNow is the time when a test watches the order of reads (debugSched).
func (t *Tracker) debugNow() time.Time {
	if t.debugSched == nil {
		return time.Time{}
	}
	return time.Now()
}

// readLiveStat reads a tracked process's stat into t.stat and reports
// whether it lives on: one that is gone (or whose pid names another
// process now) has vanished; one that exited but was not reaped yet ends
// (exitZombie).
func (t *Tracker) readLiveStat(p *proc) bool {
	tr := p.t
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
		return false
	}
	p.ppid, p.sid, p.pgrp = t.stat.PPID, t.stat.Session, t.stat.PGRP
	if t.stat.State == 'Z' && t.stat.Threads <= 1 {
		// It exited; its parent has not reaped it yet (a busy launcher
		// waits late). It ends now, not when it is reaped: its stat holds
		// its final CPU and that of the children it reaped.
		t.exitZombie(p)
		return false
	}
	return true
}

// noticeExec takes a process's name and stack start from its stat (its
// first sample), or reads its command line again when they changed: it
// exec'd.
func (t *Tracker) noticeExec(p *proc, first bool) {
	tr := p.t
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
}

// schedFigures are the process's scheduler figures for this sample: those
// read already (sched, at schedAt), else read now.
//
// A process whose threads are exiting (exit_group: its leader has
// PF_EXITING, or has exited already) is counted twice by the kernel's
// thread group totals: each exiting thread is added to the group's dead
// threads' sums before it leaves the thread list, and unmapping a JVM's
// heap can hold the last one there for long (its scheduler runtime was
// seen hundreds of ms ahead of its CPU). Its scheduler figures keep their
// last values until it is gone.
func (t *Tracker) schedFigures(p *proc, sched *procfs.Schedstat, schedAt time.Time) (*procfs.Schedstat, time.Time) {
	tr := p.t
	tr.exiting = t.stat.Flags&procfs.PFExiting != 0 || t.stat.State == 'Z'
	if tr.exiting && tr.groupSched {
		t.sched = procfs.Schedstat{RunNs: tr.runNs, WaitNs: uint64(max(val(tr, t.idx.wait), 0))}
		return &t.sched, schedAt
	}
	if sched == nil || (tr.threads > 1 && !tr.groupSched && t.cfg.Groups != nil) {
		sched = t.readSched(p)
		schedAt = t.debugNow()
	}
	return sched, schedAt
}

// readSources reads the process through every metric source; at its
// first sample, its owner too, and it is described to the sink.
func (t *Tracker) readSources(p *proc, sched *procfs.Schedstat, first bool) {
	tr := p.t
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
	if !first {
		return
	}
	if ownerKnown {
		t.setOwner(tr, owner)
	} else if t.status.HasUID {
		t.setOwner(tr, t.status.UID)
	} else {
		t.readOwner(tr)
	}
	t.sink.Process(t.wireProcess(p))
}

// endSample settles the CPU of the children the process reaped since its
// last sample and keeps what the next sample compares with.
func (t *Tracker) endSample(p *proc, sched *procfs.Schedstat, first bool) {
	tr := p.t
	// Children's CPU that arrived in the cutime/cstime is no longer pending.
	children := collect.TicksToMs(t.stat.CUTime + t.stat.CSTime)
	t.acct.settleChildren(&tr.cpuAccount, children-tr.lastChildren)
	tr.lastChildren = children
	tr.runKnown = sched != nil
	if sched != nil {
		tr.runNs = sched.RunNs
	}
	t.noteShort(tr)
	tr.age++
	tr.cpuPrevMs, tr.tPrevMs = tr.cpuMs, tr.tMs
	tr.cpuMs = collect.TicksToMs(t.stat.UTime + t.stat.STime)
	tr.tMs = t.clock.nowMs
	tr.bootMs = t.clock.bootNowMs
	if first && !tr.firstTick {
		// Most new processes are seen once (under churn, a task's short
		// children): its files are closed now, while it lives, and held
		// from its second sample on. A file closed after its process is
		// gone costs the closer the freeing of the process's /proc
		// entries, which its exit does otherwise.
		tr.h.Release()
	}
}

// noteShort keeps, at a sample, the CPU of the short-lived children
// charged to tr since its last one as their rate when no record was lost
// meanwhile (the socket did not overflow), and the socket's overflows
// (membership.go's lostChildren).
func (t *Tracker) noteShort(tr *tracked) {
	if tr.bootMs > 0 && t.stats.ExitOverflows == tr.sampledOverflows {
		tr.shortLastMs, tr.shortDtMs = tr.shortMs, t.clock.bootNowMs-tr.bootMs
	}
	tr.shortMs = 0
	tr.sampledOverflows = t.stats.ExitOverflows
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
	t.acct.settleChildren(&tr.cpuAccount, children-tr.lastChildren)
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
	t.noteShort(tr)
	tr.age++
	tr.cpuPrevMs, tr.tPrevMs = tr.cpuMs, tr.tMs
	tr.tMs = t.clock.nowMs
	tr.bootMs = t.clock.bootNowMs
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
		g := &t.group
		if err := t.cfg.Groups.ThreadGroup(p.pid, g); err == nil {
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
	g := &t.group
	if err := t.cfg.Groups.ThreadGroup(p.pid, g); err != nil {
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
	argv, cmdline, ok := t.attr.readCmdline(p.pid)
	if !ok {
		// Caught inside its exec: the kernel names the new program and
		// moves its stack before it lays out the new command line, which
		// reads empty meanwhile. Its name and stack are the new ones now,
		// so only a look due tells: at the next tick, then less and less
		// often (1, 2, 4 ... 32 ticks) for one whose command line stays
		// empty.
		tr.recheckAt = t.cycle + 1<<tr.blankLooks
		tr.blankLooks = min(tr.blankLooks+1, 5)
		return
	}
	tr.blankLooks = 0
	if cmdline == tr.cmdline {
		if tr.startStack != 0 {
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
		tr.unit.learn(t.attr, p, &l)
	} else if tr.preExec {
		// Seen before its exec: its role is what it exec'd under its parent.
		if par := t.procs[p.ppid]; par != nil && par.t != nil {
			tr.role = t.attr.roleUnder(p, par.t, &l)
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

// track makes p a member of u, sampled from this tick on (the
// attributor's attributionView): its key, start, held files and values.
func (t *Tracker) track(p *proc, u *unit, argv []string, cmdline string, l *hadoop.Launch, role string) {
	p.state = stTracked
	h := p.h // its stat, held since the listing
	p.h = nil
	if h == nil {
		h = t.cfg.FS.OpenProc(p.pid)
	}
	tr := &tracked{
		key:       wire.ProcessKey(t.cfg.Host, p.pid, t.keyMs(p.startTicks)),
		startMs:   t.startMs(p.startTicks),
		cmdline:   cmdline,
		launch:    *l,
		role:      role,
		unit:      u,
		h:         h,
		vals:      make([]int64, len(t.metrics)),
		srcState:  make([]any, len(t.sources)),
		firstTick: t.stats.Ticks == 1,
		bornUnder: int64(p.startTicks)*1000/procfs.UserHZ > t.clock.exitsFromMs && t.clock.exitsFromMs > 0,
		overflows: t.stats.ExitOverflows,
		// (and at its first sample, this tick)
		sampledOverflows: t.stats.ExitOverflows,
	}
	if len(argv) > 0 {
		tr.commRaw = argv[0]
	}
	// Its comm, owner and Process record come with its first sample, this
	// tick (the stat and status read then are the ones it needs).
	p.t = tr
	u.members = append(u.members, p)
}

// readOwner finds the process's real uid (status) and its user name.
func (t *Tracker) readOwner(tr *tracked) {
	b, err := tr.h.Read(procfs.FileStatus, t.buf)
	t.buf = b
	if err != nil {
		return
	}
	var st procfs.Status
	if procfs.ParseStatus(b, &st) != nil {
		return
	}
	t.setOwner(tr, st.UID)
}

func (t *Tracker) setOwner(tr *tracked, uid uint32) {
	tr.uid = uid
	name, ok := t.users[uid]
	if !ok {
		if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
			name = u.Username
		}
		t.users[uid] = name
	}
	tr.user = name
}

func (t *Tracker) wireProcess(p *proc) *wire.Process {
	tr := p.t
	t.wp = wire.Process{
		Key: tr.key, PID: p.pid, PPID: p.ppid, SID: p.sid, StartMs: tr.startMs,
		Cmdline: tr.cmdline, Comm: tr.comm, Role: tr.role, UID: tr.uid, User: tr.user,
	}
	return &t.wp
}
