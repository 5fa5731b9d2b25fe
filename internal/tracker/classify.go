package tracker

import (
	"bytes"
	"os/user"
	"strconv"
	"strings"

	"github.com/taskscope/taskscope/internal/cgroups"
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

const maxCmdline = 4096

// classify decides whether a new process belongs to a task, and to which unit.
func (t *Tracker) classify(p *proc, ms int64) {
	if p.ppid == 2 || p.pid == 2 {
		return // a kernel thread
	}
	if t.debugClassify != nil {
		defer func() {
			why := "ignored"
			if p.t != nil {
				why = "tracked " + p.t.role + " in " + p.t.unit.key + ": " + p.t.cmdline
			} else if p.state == stDaemon {
				why = "daemon"
			}
			if p.looks > 0 {
				why += " (another look queued or done)"
			}
			t.debugClassify(p, why)
		}()
	}
	parent := t.procs[p.ppid]
	argv, cmdline, ok := t.readCmdline(p.pid)
	if !ok || (parent != nil && parent.t != nil && cmdline == parent.t.cmdline) || hadoop.IsSpawnHelper(argv) {
		// An empty command line, or its tracked parent's, or the JDK's
		// jspawnhelper: a process between fork and exec (or a zombie, or a
		// subshell), whose environment is not yet its own. Under a tracked parent
		// it belongs to the task anyway, and what it is shows once it has
		// exec'd; else look again at the next tick.
		if parent != nil && parent.t != nil {
			var none hadoop.Launch
			t.join(p, parent.t.unit, nil, cmdline, &none, t.roleUnder(p, parent.t, &none), ms)
			p.t.recheckAt = t.cycle + 1
			p.t.preExec = true
			return
		}
		t.later(p)
		return
	}
	l := hadoop.Classify(argv)
	p.kind = l.Kind
	p.fork = false
	if l.Kind.IsDaemon() {
		if parent != nil && parent.state == stDaemon && parent.kind == l.Kind {
			// A daemon's child that still shows the daemon's command line
			// has not exec'd yet (the NodeManager's and TaskTracker's
			// launchers look like this for a moment, longer when the
			// machine is busy): not a daemon, and looked at again until it
			// has exec'd. Its children are launched as the daemon's are.
			p.kind, p.fork = hadoop.KindNone, true
			t.laterN(p, maxForkLooks)
			return
		}
		p.state = stDaemon
		return
	}
	// 1. Descendants of a tracked process. A task JVM under its wrapper
	// tells the unit what its command line says (attempt, log directory).
	if parent != nil && parent.t != nil {
		u := parent.t.unit
		if l.Kind.IsJVM() || l.Kind.IsWrapper() {
			u.learn(t, p, &l)
		}
		t.join(p, u, argv, cmdline, &l, t.roleUnder(p, parent.t, &l), ms)
		return
	}
	// 2. Task JVMs and their wrappers name their container or attempt.
	if l.Kind.IsJVM() || l.Kind.IsWrapper() {
		if u := t.unitFor(p, &l); u != nil {
			t.join(p, u, argv, cmdline, &l, roleOf(&l), ms)
			return
		}
	}
	// 3. Reparented to init and not a session leader: the session leader's unit (YARN-4834).
	if p.ppid == 1 && p.sid != p.pid {
		if leader := t.procs[p.sid]; leader != nil && leader.t != nil {
			t.join(p, leader.t.unit, argv, cmdline, &l, wire.RoleChild, ms)
			return
		}
	}
	// 4. Escaped with setsid and reparented (or its parent is gone): only the
	// cgroup or the environment still tie it to a task.
	if p.ppid == 1 || parent == nil {
		if u, streaming := t.unitFromCgroupOrEnv(p); u != nil {
			// One that carries the job configuration descends from a
			// Streaming process.
			role := wire.RoleChild
			if streaming {
				role = wire.RoleStreamingChild
			}
			t.join(p, u, argv, cmdline, &l, role, ms)
			return
		}
	}
	// A daemon's child that matched nothing may be about to exec what will.
	if parent.launches() {
		t.later(p)
	}
}

// maxForkLooks bounds the looks at a daemon's fork that keeps its daemon's
// command line (one a tick: a command line's read): on a loaded node the
// fork may wait seconds to run its exec.
const maxForkLooks = 60

// launches reports whether p starts containers or task JVMs: a Hadoop
// daemon, or its fork on the way to exec'ing a launcher.
func (p *proc) launches() bool { return p != nil && (p.state == stDaemon || p.fork) }

// later queues p to be classified once more at the next tick.
func (t *Tracker) later(p *proc) { t.laterN(p, 1) }

// laterN queues p to be classified again at the next tick, up to n times.
func (t *Tracker) laterN(p *proc, n uint8) {
	if p.looks < n {
		p.looks++
		t.again = append(t.again, p)
	}
}

// readCmdline reads and splits /proc/PID/cmdline once.
//
// Every new pid's command line is read: one string is made of it (the
// command line, NULs as spaces), and its arguments are cut from that string
// when it needed no escaping (the bytes are the same), in a slice that is
// the tracker's, valid until the next read.
func (t *Tracker) readCmdline(pid int32) ([]string, string, bool) {
	b, err := t.cfg.FS.ReadPidFile(pid, "cmdline", t.cmdBuf)
	t.cmdBuf = b
	if err != nil || len(b) == 0 {
		return nil, "", false
	}
	raw := bytes.TrimRight(b, "\x00")
	line := append(t.lineBuf[:0], raw...)
	t.lineBuf = line
	for i, c := range line {
		if c == 0 {
			line[i] = ' '
		}
	}
	if len(line) > maxCmdline {
		line = line[:maxCmdline]
	}
	cmdline := wire.SanitizeText(line)
	argv := t.argv[:0]
	if len(raw) == len(cmdline) && cmdline == string(line) {
		start := 0
		for i, c := range raw {
			if c == 0 {
				argv = append(argv, cmdline[start:i])
				start = i + 1
			}
		}
		argv = append(argv, cmdline[start:])
	} else {
		argv = procfs.SplitCmdline(b, argv)
	}
	t.argv = argv
	if len(argv) == 1 && strings.ContainsRune(argv[0], ' ') {
		// setproctitle-style: argv rewritten as one string.
		argv = strings.Fields(argv[0])
	}
	return argv, cmdline, true
}

func roleOf(l *hadoop.Launch) string {
	switch l.Kind {
	case hadoop.KindYarnChild, hadoop.KindChild, hadoop.KindTezChild:
		return wire.RoleTaskJVM
	case hadoop.KindMRAppMaster, hadoop.KindSparkAM, hadoop.KindTezAM:
		return wire.RoleAppMaster
	case hadoop.KindSparkExecutor:
		return wire.RoleExecutor
	}
	if l.Kind.IsWrapper() {
		return wire.RoleWrapper
	}
	return wire.RoleChild
}

// roleUnder gives the role of a process started by a tracked parent.
func (t *Tracker) roleUnder(p *proc, parent *tracked, l *hadoop.Launch) string {
	if l.Kind != hadoop.KindNone {
		return roleOf(l)
	}
	switch parent.role {
	case wire.RoleTaskJVM:
		// Streaming's PipeMapRed puts the job conf into its child's environment.
		env := t.readEnv(p.pid)
		if env.Streaming {
			if u := parent.unit; u.h1 != nil && env.AttemptID != "" {
				u.h1.hint = env.AttemptID
			}
			return wire.RoleStreaming
		}
		return wire.RoleChild
	case wire.RoleStreaming, wire.RoleStreamingChild:
		return wire.RoleStreamingChild
	}
	return wire.RoleChild
}

func (t *Tracker) readEnv(pid int32) hadoop.TaskEnv {
	b, err := t.cfg.FS.ReadPidFile(pid, "environ", t.buf)
	t.buf = b
	if err != nil {
		if !procfs.IsGone(err) {
			t.countErr("environ", err)
		}
		return hadoop.TaskEnv{}
	}
	return hadoop.ParseTaskEnv(b)
}

// unitFor finds or creates the unit a JVM or wrapper names.
func (t *Tracker) unitFor(p *proc, l *hadoop.Launch) *unit {
	var key, container string
	switch {
	case l.HasContainer:
		key, container = l.Container.Raw, l.Container.Raw
	case l.HasAttempt:
		key = l.Attempt.Raw
	default:
		// A wrapper whose command line names nothing (launch_container.sh run
		// by a relative path): its working directory does.
		cwd, err := t.cfg.FS.Readlink(p.pid, "cwd")
		if err != nil {
			return nil
		}
		if c, ok := hadoop.FindContainer(cwd); ok {
			key, container = c.Raw, c.Raw
		} else if a, ok := hadoop.FindAttempt(cwd); ok {
			key = a.Raw
		} else {
			return nil
		}
	}
	u := t.units[key]
	if u == nil {
		if !t.inScope(p) {
			return nil // another daemon's (scope.go)
		}
		u = t.newUnit(key, container, p)
	}
	u.learn(t, p, l)
	return u
}

// unitFromCgroupOrEnv ties an escaped process to a unit by its cgroup
// (<prefix>/container_...) or its environment, and says whether the
// environment is a Streaming process's.
func (t *Tracker) unitFromCgroupOrEnv(p *proc) (*unit, bool) {
	b, err := t.cfg.FS.ReadPidFile(p.pid, "cgroup", t.buf)
	t.buf = b
	if err == nil {
		for _, path := range procfs.CgroupPaths(b, nil) {
			rest, ok := cgroups.UnderHierarchy(path, t.hier.Names())
			if !ok {
				continue
			}
			if c, ok := hadoop.FindContainer(rest); ok {
				if u := t.units[c.Raw]; u != nil {
					return u, false
				}
				if !t.inScopeDirs(p) {
					return nil, false
				}
				return t.newUnit(c.Raw, c.Raw, p), false
			}
		}
	}
	env := t.readEnv(p.pid)
	if env.ContainerID != "" {
		if u := t.units[env.ContainerID]; u != nil {
			return u, env.Streaming
		}
	}
	if (env.ContainerID != "" || env.AttemptID != "") && !t.inScopeDirs(p) {
		// Units it would be new in are another daemon's (scope.go),
		// unless it is a known unit's attempt's.
		for _, u := range t.units {
			if env.AttemptID != "" && u.attemptID == env.AttemptID {
				return u, true
			}
		}
		return nil, false
	}
	if env.ContainerID != "" {
		if env.AttemptID == "" {
			return t.newUnit(env.ContainerID, env.ContainerID, p), false
		}
	}
	if env.AttemptID != "" {
		// A Hadoop 1 unit is keyed by its JVM's first attempt: look for the
		// unit running this attempt now.
		for _, u := range t.units {
			if u.attemptID == env.AttemptID {
				return u, true
			}
		}
		if env.ContainerID != "" {
			u := t.newUnit(env.ContainerID, env.ContainerID, p)
			u.attemptID = env.AttemptID
			return u, true
		}
		u := t.newUnit(env.AttemptID, "", p)
		u.attemptID = env.AttemptID
		return u, true
	}
	return nil, false
}

// join makes p a tracked member of u.
func (t *Tracker) join(p *proc, u *unit, argv []string, cmdline string, l *hadoop.Launch, role string, ms int64) {
	p.state = stTracked
	startMs := t.startMs(p.startTicks)
	h := p.h // its stat, held since the listing
	p.h = nil
	if h == nil {
		h = t.cfg.FS.OpenProc(p.pid)
	}
	tr := &tracked{
		key:       wire.ProcessKey(t.cfg.Host, p.pid, t.keyMs(p.startTicks)),
		startMs:   startMs,
		cmdline:   cmdline,
		launch:    *l,
		role:      role,
		unit:      u,
		h:         h,
		vals:      make([]int64, len(t.metrics)),
		srcState:  make([]any, len(t.sources)),
		firstTick: t.stats.Ticks == 1,
	}
	if len(argv) > 0 {
		tr.commRaw = argv[0]
	}
	if role == wire.RoleWrapper {
		tr.recheckAt = t.cycle + 5
	}
	// Its comm, owner and Process record come with its first sample, this
	// tick (the stat and status read then are the ones it needs).
	p.t = tr
	u.members = append(u.members, p)
	t.stats.Attributed++
	if u.launcherPID == 0 {
		u.launcherPID = p.ppid
	}
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

// The record is the tracker's, valid until the next call (a Sink copies
// what it keeps).
func (t *Tracker) wireProcess(p *proc) *wire.Process {
	tr := p.t
	t.wp = wire.Process{
		Key: tr.key, PID: p.pid, PPID: p.ppid, SID: p.sid, StartMs: tr.startMs,
		Cmdline: tr.cmdline, Comm: tr.comm, Role: tr.role, UID: tr.uid, User: tr.user,
	}
	return &t.wp
}
