package tracker

import (
	"bytes"
	"cmp"
	"slices"
	"strings"

	"github.com/taskscope/taskscope/internal/cgroups"
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

const maxCmdline = 4096

// attributor is the part of the tracker that says which unit (a YARN
// container, a Hadoop 1 task JVM), attempt and job each process belongs
// to (docs/architecture.md, "Attribution"): it classifies new processes
// by their command lines, parents, sessions, cgroups and environments,
// keeps the units and what they have learnt (the attempt each runs now,
// their application's framework), the node's daemons and the scope's.
// It reads the processes' own files (command lines, environments,
// cgroups, working directories) through fs; what it sees of the process
// table is an attributionView; a process it attributes is made a member
// of its unit by the table (track), which samples it from then on.
type attributor struct {
	fs       *procfs.FS
	view     attributionView
	errs     *readErrors
	stats    *Stats // New, Attributed
	scopeCfg *Scope // Config's (tests change it after New)
	// hier are YARN's cgroup hierarchies: Config's, and each
	// NodeManager's (daemons.go).
	hier    *cgroups.Hierarchies
	units   map[string]*unit
	apps    map[string]string // application id -> framework, as its units told
	again   []*proc           // to classify once more (seen between fork and exec)
	scope   scopeState        // scope.go
	cycle   uint64            // this tick's
	buf     []byte
	cmdBuf  []byte
	lineBuf []byte   // readCmdline's
	argv    []string // readCmdline's

	debugClassify func(p *proc, why string) // tests
}

// attributionView is what the attributor needs of the process table.
type attributionView interface {
	// proc is the process known by pid (nil: none).
	proc(pid int32) *proc
	// listed reports whether p was in this tick's listing.
	listed(p *proc) bool
	// track makes p a member of u, sampled from this tick on, with what
	// its command line said and its role.
	track(p *proc, u *unit, argv []string, cmdline string, l *hadoop.Launch, role string)
}

func newAttributor(fs *procfs.FS, view attributionView, errs *readErrors, stats *Stats, scope *Scope, hier *cgroups.Hierarchies) *attributor {
	return &attributor{fs: fs, view: view, errs: errs, stats: stats, scopeCfg: scope, hier: hier,
		units: map[string]*unit{}, apps: map[string]string{}, buf: make([]byte, 0, 8192), cmdBuf: make([]byte, 0, 8192)}
}

// classifyAll classifies the processes of a tick (cycle): the scope's
// daemon found first, then those to look at again, then the new ones,
// parents before children.
func (a *attributor) classifyAll(cycle uint64, newProcs []*proc) {
	a.cycle = cycle
	a.scopeDaemon() // scope.go
	// Parents start before their children: classify in start order.
	slices.SortFunc(newProcs, func(x, y *proc) int {
		if x.startTicks != y.startTicks {
			return cmp.Compare(x.startTicks, y.startTicks)
		}
		return cmp.Compare(x.pid, y.pid)
	})
	// Second looks first: a process seen before its exec last tick may be
	// the parent of this tick's new ones.
	again := a.again
	a.again = nil
	for _, p := range again {
		if a.view.listed(p) && p.t == nil && a.view.proc(p.pid) == p {
			p.state, p.kind = stIgnored, hadoop.KindNone
			a.classify(p)
		}
	}
	for _, p := range newProcs {
		a.stats.New++
		a.classify(p)
	}
}

// classify decides whether a new process belongs to a task, and to which unit.
func (a *attributor) classify(p *proc) {
	if p.ppid == 2 || p.pid == 2 {
		return // a kernel thread
	}
	if a.debugClassify != nil {
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
			a.debugClassify(p, why)
		}()
	}
	parent := a.view.proc(p.ppid)
	argv, cmdline, ok := a.readCmdline(p.pid)
	if !ok || (parent != nil && parent.t != nil && cmdline == parent.t.cmdline) || hadoop.IsSpawnHelper(argv) {
		// An empty command line, or its tracked parent's, or the JDK's
		// jspawnhelper: a process between fork and exec (or a zombie, or a
		// subshell), whose environment is not yet its own. Under a tracked parent
		// it belongs to the task anyway, and what it is shows once it has
		// exec'd; else look again at the next tick.
		if parent != nil && parent.t != nil {
			var none hadoop.Launch
			a.join(p, parent.t.unit, nil, cmdline, &none, a.roleUnder(p, parent.t, &none))
			p.t.recheckAt = a.cycle + 1
			p.t.preExec = true
			return
		}
		a.later(p)
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
			a.laterN(p, maxForkLooks)
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
			u.learn(a, p, &l)
		}
		a.join(p, u, argv, cmdline, &l, a.roleUnder(p, parent.t, &l))
		return
	}
	// 2. Task JVMs and their wrappers name their container or attempt.
	if l.Kind.IsJVM() || l.Kind.IsWrapper() {
		if u := a.unitFor(p, &l); u != nil {
			a.join(p, u, argv, cmdline, &l, roleOf(&l))
			return
		}
	}
	// 3. Reparented to init and not a session leader: the session leader's unit (YARN-4834).
	if p.ppid == 1 && p.sid != p.pid {
		if leader := a.view.proc(p.sid); leader != nil && leader.t != nil {
			a.join(p, leader.t.unit, argv, cmdline, &l, wire.RoleChild)
			return
		}
	}
	// 4. Escaped with setsid and reparented (or its parent is gone): only the
	// cgroup or the environment still tie it to a task.
	if p.ppid == 1 || parent == nil {
		if u, streaming := a.unitFromCgroupOrEnv(p); u != nil {
			// One that carries the job configuration descends from a
			// Streaming process.
			role := wire.RoleChild
			if streaming {
				role = wire.RoleStreamingChild
			}
			a.join(p, u, argv, cmdline, &l, role)
			return
		}
	}
	// A daemon's child that matched nothing may be about to exec what will.
	if parent.launches() {
		a.later(p)
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
func (a *attributor) later(p *proc) { a.laterN(p, 1) }

// laterN queues p to be classified again at the next tick, up to n times.
func (a *attributor) laterN(p *proc, n uint8) {
	if p.looks < n {
		p.looks++
		a.again = append(a.again, p)
	}
}

// readCmdline reads and splits /proc/PID/cmdline once.
//
// Every new pid's command line is read: one string is made of it (the
// command line, NULs as spaces), and its arguments are cut from that string
// when it needed no escaping (the bytes are the same), in a slice that is
// the attributor's, valid until the next read.
func (a *attributor) readCmdline(pid int32) ([]string, string, bool) {
	b, err := a.fs.ReadPidFile(pid, "cmdline", a.cmdBuf)
	a.cmdBuf = b
	if err != nil || len(b) == 0 {
		return nil, "", false
	}
	raw := bytes.TrimRight(b, "\x00")
	line := append(a.lineBuf[:0], raw...)
	a.lineBuf = line
	for i, c := range line {
		if c == 0 {
			line[i] = ' '
		}
	}
	if len(line) > maxCmdline {
		line = line[:maxCmdline]
	}
	cmdline := wire.SanitizeText(line)
	argv := a.argv[:0]
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
	a.argv = argv
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
func (a *attributor) roleUnder(p *proc, parent *tracked, l *hadoop.Launch) string {
	if l.Kind != hadoop.KindNone {
		return roleOf(l)
	}
	switch parent.role {
	case wire.RoleTaskJVM:
		// Streaming's PipeMapRed puts the job conf into its child's environment.
		env := a.readEnv(p.pid)
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

func (a *attributor) readEnv(pid int32) hadoop.TaskEnv {
	b, err := a.fs.ReadPidFile(pid, "environ", a.buf)
	a.buf = b
	if err != nil {
		if !procfs.IsGone(err) {
			a.errs.count("environ", err)
		}
		return hadoop.TaskEnv{}
	}
	return hadoop.ParseTaskEnv(b)
}

// unitFor finds or creates the unit a JVM or wrapper names.
func (a *attributor) unitFor(p *proc, l *hadoop.Launch) *unit {
	var key, container string
	switch {
	case l.HasContainer:
		key, container = l.Container.Raw, l.Container.Raw
	case l.HasAttempt:
		key = l.Attempt.Raw
	default:
		// A wrapper whose command line names nothing (launch_container.sh run
		// by a relative path): its working directory does.
		cwd, err := a.fs.Readlink(p.pid, "cwd")
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
	u := a.units[key]
	if u == nil {
		if !a.inScope(p) {
			return nil // another daemon's (scope.go)
		}
		u = a.newUnit(key, container, p)
	}
	u.learn(a, p, l)
	return u
}

// unitFromCgroupOrEnv ties an escaped process to a unit by its cgroup
// (<prefix>/container_...) or its environment, and says whether the
// environment is a Streaming process's.
func (a *attributor) unitFromCgroupOrEnv(p *proc) (*unit, bool) {
	b, err := a.fs.ReadPidFile(p.pid, "cgroup", a.buf)
	a.buf = b
	if err == nil {
		for _, path := range procfs.CgroupPaths(b, nil) {
			rest, ok := cgroups.UnderHierarchy(path, a.hier.Names())
			if !ok {
				continue
			}
			if c, ok := hadoop.FindContainer(rest); ok {
				if u := a.units[c.Raw]; u != nil {
					return u, false
				}
				if !a.inScopeDirs(p) {
					return nil, false
				}
				return a.newUnit(c.Raw, c.Raw, p), false
			}
		}
	}
	env := a.readEnv(p.pid)
	if env.ContainerID != "" {
		if u := a.units[env.ContainerID]; u != nil {
			return u, env.Streaming
		}
	}
	if (env.ContainerID != "" || env.AttemptID != "") && !a.inScopeDirs(p) {
		// Units it would be new in are another daemon's (scope.go),
		// unless it is a known unit's attempt's.
		for _, u := range a.units {
			if env.AttemptID != "" && u.attemptID == env.AttemptID {
				return u, true
			}
		}
		return nil, false
	}
	if env.ContainerID != "" {
		if env.AttemptID == "" {
			return a.newUnit(env.ContainerID, env.ContainerID, p), false
		}
	}
	if env.AttemptID != "" {
		// A Hadoop 1 unit is keyed by its JVM's first attempt: look for the
		// unit running this attempt now.
		for _, u := range a.units {
			if u.attemptID == env.AttemptID {
				return u, true
			}
		}
		if env.ContainerID != "" {
			u := a.newUnit(env.ContainerID, env.ContainerID, p)
			u.attemptID = env.AttemptID
			return u, true
		}
		u := a.newUnit(env.AttemptID, "", p)
		u.attemptID = env.AttemptID
		return u, true
	}
	return nil, false
}

// join makes p a tracked member of u (the table samples it from now on).
func (a *attributor) join(p *proc, u *unit, argv []string, cmdline string, l *hadoop.Launch, role string) {
	a.view.track(p, u, argv, cmdline, l, role)
	if role == wire.RoleWrapper {
		p.t.recheckAt = a.cycle + 5
	}
	a.stats.Attributed++
	if u.launcherPID == 0 {
		u.launcherPID = p.ppid
	}
}
