package tracker

import (
	"os"
	"path"
	"strings"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// unit is what processes belong to: a YARN container, or a Hadoop 1 task
// JVM (keyed by its first attempt). It runs one attempt at a time.
type unit struct {
	key         string
	containerID string
	appID       string
	framework   string
	jvmKind     hadoop.Kind // the kind of task JVM the unit runs, once known
	allocMB     int64       // the memory its NodeManager allocated its container, once listed (alloc.go)
	allocVCores int64       // and its virtual cores
	attemptID   string      // the attempt it runs now, once known
	jvmPID      int32
	jvmArgv     string // the JVM's command line, for -Xmx
	logDir      string // the JVM's log directory, as the JVM sees it
	members     []*proc
	launcherPID int32 // the parent of the unit's first process: the NodeManager or TaskTracker
	orphaned    bool
	cur         *attempt
	h1          *dirWatch // Hadoop 1 JVM reuse: userlogs/<job>/*/log.index
	cleanup     bool      // Hadoop 1: it runs a task-cleanup attempt now (tasklog.go)
	tez         *dirWatch // Tez container reuse: syslog_attempt_* in the log dir
	scriptTried bool
	createdMs   int64
	bornCycle   uint64  // the tick it was found
	end         unitEnd // exits.go
}

// attempt is one task attempt (or the pseudo-attempt of a container that
// runs none: an ApplicationMaster, a Spark executor, an idle Tez container).
type attempt struct {
	info wire.Attempt
	unit *unit
	attemptTotals
	cleanup bool // a Hadoop 1 task-cleanup run (tasklog.go)
	// guessStood: its CPU holds a guess no reaper settled (guessStands).
	guessStood bool
	// confTries counts the reads of its configuration; confRetryAt is the
	// tick of the next one (0: none).
	confTries   int
	confRetryAt uint64
}

func (a *attributor) newUnit(key, container string, p *proc) *unit {
	u := &unit{key: key, containerID: container, framework: hadoop.FrameworkUnknown, bornCycle: a.cycle}
	if c, ok := hadoop.FindContainer(container); ok {
		u.appID = c.AppID()
	} else if a, ok := hadoop.ParseAttempt(key); ok {
		u.framework = hadoop.FrameworkMapReduce
		if a.Tez {
			u.framework = hadoop.FrameworkTez
		}
	}
	a.units[key] = u
	return u
}

// undecidedTicks is how long a YARN unit whose framework is unknown (a
// container's wrappers seen before its JVM, whose command lines and launch
// script did not tell, as on a busy node) waits for it before it reports
// an attempt: its job's name depends on it (MapReduce's job_X_N,
// everything else's application_X_N), and an attempt's job never changes
// once reported. A container that runs no task JVM (YARN's distributed
// shell) is reported after that long, under application_X_N.
const undecidedTicks = 30

// jobOf decides the job of the unit's attempts: an attempt id names it
// (MapReduce's job_X_N, Tez's application_X_N); a container's application
// is MapReduce's job_X_N or, for Spark, Tez and the rest, application_X_N,
// by the framework of the unit or of any other unit of the application
// (its ApplicationMaster, another executor). It reports false while that
// is unknown (then application_X_N is the best guess).
func (a *attributor) jobOf(u *unit) (string, bool) {
	if a, ok := hadoop.ParseAttempt(u.attemptID); ok {
		return a.JobID(), true
	}
	app := u.app()
	if app == "" {
		if a, ok := hadoop.ParseAttempt(u.key); ok {
			return a.JobID(), true
		}
		return u.key, true
	}
	fw := u.framework
	if fw == hadoop.FrameworkUnknown {
		fw = a.apps[app]
	}
	switch fw {
	case hadoop.FrameworkMapReduce:
		return hadoop.JobForApp(app), true
	case hadoop.FrameworkSpark, hadoop.FrameworkTez:
		return app, true
	}
	return app, false
}

// app is the unit's YARN application, if it has one.
func (u *unit) app() string {
	if u.appID != "" {
		return u.appID
	}
	if c, ok := hadoop.FindContainer(u.containerID); ok {
		return c.AppID()
	}
	return ""
}

// learn takes what a member's command line says about the unit.
func (u *unit) learn(a *attributor, p *proc, l *hadoop.Launch) {
	if l.HasContainer && u.containerID == "" {
		u.containerID = l.Container.Raw
		u.appID = l.Container.AppID()
	}
	if l.AppID != "" {
		u.appID = l.AppID
	}
	if fw := l.Framework(); fw != hadoop.FrameworkUnknown {
		u.framework = fw
		if app := u.app(); app != "" {
			// Every container of the application is of this framework.
			a.apps[app] = fw
		}
	}
	jvm := l
	if l.Inner != nil {
		jvm = l.Inner
	}
	if jvm.Kind.IsJVM() {
		if at := u.cur; at != nil && u.jvmKind != jvm.Kind {
			// Its attempt began before its JVM was known (an executor
			// whose AM told the framework): what the JVM's
			// configuration says is read again.
			at.confTries, at.confRetryAt = 1, a.cycle+1
		}
		u.jvmKind = jvm.Kind
		if jvm.LogDir != "" {
			u.logDir = jvm.LogDir
		}
	}
	if l.Kind.IsJVM() && p != nil {
		u.jvmPID = p.pid
	}
	switch {
	case jvm.Kind == hadoop.KindChild:
		if u.attemptID == "" && jvm.HasAttempt {
			u.attemptID = jvm.Attempt.Raw
		}
		if u.h1 == nil && u.logDir != "" && p != nil && l.Kind.IsJVM() {
			u.h1 = &dirWatch{dir: path.Dir(u.logDir), pid: p.pid, known: map[string]bool{}}
			u.cleanup = isCleanupDir(u.logDir)
		}
	case jvm.Kind == hadoop.KindTezChild:
		if u.tez == nil && u.logDir != "" && p != nil && l.Kind.IsJVM() {
			u.tez = &dirWatch{dir: u.logDir, pid: p.pid, known: map[string]bool{}}
		}
	case jvm.HasAttempt && u.attemptID == "":
		u.attemptID = jvm.Attempt.Raw
	case l.HasAttempt && u.attemptID == "":
		u.attemptID = l.Attempt.Raw
	}
	// A wrapper that names only its container: its launch script names the JVM.
	if l.Kind.IsWrapper() && u.jvmKind == hadoop.KindNone && !u.scriptTried && p != nil {
		u.scriptTried = true
		for _, name := range []string{"launch_container.sh", "taskjvm.sh"} {
			b, err := os.ReadFile(a.fs.PidPath(p.pid, "cwd") + "/" + name)
			if err != nil {
				continue
			}
			if sl, ok := hadoop.ClassifyScript(b); ok {
				u.learn(a, nil, &sl)
				break
			}
		}
	}
}

// wantAttempt is the attempt the unit runs now: the one known, else the
// container itself.
func (u *unit) wantAttempt() string {
	if u.attemptID != "" {
		return u.attemptID
	}
	if u.containerID != "" {
		return u.containerID
	}
	return u.key
}

func (u *unit) attemptType(id string) string {
	if a, ok := hadoop.ParseAttempt(id); ok {
		return a.Type
	}
	switch {
	case u.jvmKind.IsAppMaster():
		return "am"
	case u.jvmKind == hadoop.KindSparkExecutor:
		return "executor"
	}
	return "container"
}

// poll looks for the attempt a reused JVM or container runs now.
func (u *unit) poll(fs *procfs.FS) {
	switch {
	case u.h1 != nil:
		if u.h1.hint != "" {
			u.attemptID, u.h1.hint = u.h1.hint, ""
		}
		logDir := u.logDir
		if id := u.h1.scan(fs, func(name string, full string) bool {
			if _, ok := hadoop.ParseAttempt(strings.TrimSuffix(name, ".cleanup")); !ok {
				return false
			}
			b, err := procfs.ReadFile(full+"/log.index", nil)
			if err != nil {
				return false
			}
			dir, ok := hadoop.ParseLogIndex(b)
			return ok && dir == logDir
		}, "/log.index"); id != "" {
			u.attemptID, u.cleanup = strings.TrimSuffix(id, ".cleanup"), isCleanupDir(id)
		}
	case u.tez != nil:
		if id := u.tez.scan(fs, func(name, _ string) bool {
			return strings.HasPrefix(name, "syslog_attempt_")
		}, ""); id != "" {
			if a, ok := hadoop.FindAttempt(id); ok {
				u.attemptID = a.Raw
			}
		}
	}
}

// dirWatch notices new entries of a directory (as the watched process sees
// it), and returns the newest that matches.
type dirWatch struct {
	dir     string
	pid     int32
	known   map[string]bool
	scanned bool
	hint    string
}

func (w *dirWatch) scan(fs *procfs.FS, match func(name, full string) bool, stamp string) string {
	root := fs.PidPath(w.pid, "root") + w.dir
	d, err := os.Open(root)
	if err != nil {
		return ""
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	best, bestT := "", int64(-1)
	for _, n := range names {
		if w.known[n] {
			continue
		}
		full := root + "/" + n
		if !match(n, full) {
			continue
		}
		w.known[n] = true
		fi, err := os.Stat(full + stamp)
		mt := int64(0)
		if err == nil {
			mt = fi.ModTime().UnixNano()
		}
		if mt > bestT {
			best, bestT = n, mt
		}
	}
	w.scanned = true
	return best
}
