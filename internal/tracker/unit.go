package tracker

import (
	"io"
	"os"
	"path"
	"sort"
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
	info        wire.Attempt
	unit        *unit
	exitedCPU   int64
	exitedRead  int64
	exitedWrite int64
	exitedGC    int64
	exitedWait  int64
	shortLived  int64
	cleanup     bool // a Hadoop 1 task-cleanup run (tasklog.go)
	// confTries counts the reads of its configuration; confRetryAt is the
	// tick of the next one (0: none).
	confTries   int
	confRetryAt uint64
}

// maxConfTries bounds the reads of an attempt's configuration: the first,
// when the attempt starts, and retries 1, 2, 4 and 8 ticks apart.
const maxConfTries = 5

func (t *Tracker) newUnit(key, container string, p *proc) *unit {
	u := &unit{key: key, containerID: container, framework: hadoop.FrameworkUnknown, bornCycle: t.cycle}
	if c, ok := hadoop.FindContainer(container); ok {
		u.appID = c.AppID()
	} else if a, ok := hadoop.ParseAttempt(key); ok {
		u.framework = hadoop.FrameworkMapReduce
		if a.Tez {
			u.framework = hadoop.FrameworkTez
		}
	}
	t.units[key] = u
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
func (t *Tracker) jobOf(u *unit) (string, bool) {
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
		fw = t.apps[app]
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
func (u *unit) learn(t *Tracker, p *proc, l *hadoop.Launch) {
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
			t.apps[app] = fw
		}
	}
	jvm := l
	if l.Inner != nil {
		jvm = l.Inner
	}
	if jvm.Kind.IsJVM() {
		if a := u.cur; a != nil && u.jvmKind != jvm.Kind {
			// Its attempt began before its JVM was known (an executor
			// whose AM told the framework): what the JVM's
			// configuration says is read again.
			a.confTries, a.confRetryAt = 1, t.cycle+1
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
			b, err := os.ReadFile(t.cfg.FS.PidPath(p.pid, "cwd") + "/" + name)
			if err != nil {
				continue
			}
			if sl, ok := hadoop.ClassifyScript(b); ok {
				u.learn(t, nil, &sl)
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
func (u *unit) poll(t *Tracker) {
	switch {
	case u.h1 != nil:
		if u.h1.hint != "" {
			u.attemptID, u.h1.hint = u.h1.hint, ""
		}
		logDir := u.logDir
		if id := u.h1.scan(t, func(name string, full string) bool {
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
		if id := u.tez.scan(t, func(name, _ string) bool {
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

func (w *dirWatch) scan(t *Tracker, match func(name, full string) bool, stamp string) string {
	root := t.cfg.FS.PidPath(w.pid, "root") + w.dir
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

// readConf reads what the attempt's configuration says: job.xml for
// MapReduce, __spark_conf__ for Spark; the JVM's own -Xmx wins over the
// configured one. It reports whether it got what a MapReduce unit's job.xml
// must say (its job's name and its container's memory): YarnChild rewrites
// job.xml while its attempt starts, so a read may find it missing, half
// written (unparsable) or without those keys; then the caller tries again
// later. A read that fails leaves what an earlier one found.
func (t *Tracker) readConf(u *unit, a *wire.Attempt) bool {
	pid := u.jvmPID
	if pid == 0 && len(u.members) > 0 {
		pid = u.members[0].pid
	}
	if pid == 0 {
		return true
	}
	cwd := t.cfg.FS.PidPath(pid, "cwd")
	var candidates []string
	if u.containerID != "" {
		candidates = []string{cwd + "/job.xml"}
	} else {
		// Hadoop 1: <jobcache>/<job>/<attempt>/job.xml; the JVM's cwd is <first attempt>/work.
		candidates = []string{cwd + "/../../" + a.AttemptID + "/job.xml", cwd + "/../job.xml"}
	}
	complete := false
	for _, c := range candidates {
		f, err := os.Open(c)
		if err != nil {
			continue
		}
		conf, err := hadoop.ParseConf(f)
		f.Close()
		if err != nil {
			t.countErr("job.xml", err)
			continue
		}
		jc := conf.JobConfFor(a.Type)
		a.JobName, a.User, a.Queue, a.MemoryMB = jc.JobName, jc.User, jc.Queue, jc.MemoryMB
		a.JavaOpts, a.XmxBytes, a.Streaming = jc.JavaOpts, jc.XmxBytes, jc.Streaming
		complete = jc.JobName != "" && (jc.MemoryMB != 0 || !sizedTask(a.Type))
		break
	}
	switch u.jvmKind {
	case hadoop.KindSparkExecutor, hadoop.KindSparkAM:
		t.readSparkConf(cwd, a, u.jvmKind == hadoop.KindSparkAM)
		complete = a.JobName != ""
	case hadoop.KindTezAM:
		t.readTezConf(cwd, a, true)
		if name := t.tezDAGName(pid, u.logDir); name != "" {
			a.JobName = name
		}
		complete = a.JobName != ""
	case hadoop.KindTezChild:
		t.readTezConf(cwd, a, false)
	}
	if u.allocMB > 0 {
		a.MemoryMB = u.allocMB // what the NodeManager allocated (alloc.go)
	}
	if u.jvmPID != 0 {
		for _, m := range u.members {
			if m.pid == u.jvmPID && m.t != nil {
				if x := hadoop.ParseXmx(m.t.cmdline); x > 0 {
					a.XmxBytes = x
				}
			}
		}
	}
	if a.User == "" && len(u.members) > 0 && u.members[0].t != nil {
		a.User = u.members[0].t.user
	}
	// Only MapReduce units are sure to have a job.xml (Hadoop 1's are
	// MapReduce's, keyed by attempt); Spark's containers their
	// __spark_conf__; a Tez AM names its DAG once it runs one.
	switch u.jvmKind {
	case hadoop.KindSparkExecutor, hadoop.KindSparkAM, hadoop.KindTezAM:
		return complete
	}
	return complete || (u.framework != hadoop.FrameworkMapReduce && u.containerID != "")
}

// tezDAGName is the name of the newest DAG a Tez ApplicationMaster runs:
// DAGAppMaster logs "Running DAG: <name>" (Tez 0.9 on: followed by
// ", callerContext=...") at the start of each DAG's log, syslog_dag_<dag
// id>, in its container's log directory (read as the AM sees it).
func (t *Tracker) tezDAGName(pid int32, logDir string) string {
	if pid == 0 || logDir == "" {
		return ""
	}
	dir := t.cfg.FS.PidPath(pid, "root") + logDir
	d, err := os.Open(dir)
	if err != nil {
		return ""
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var logs []string
	for _, n := range names {
		if strings.HasPrefix(n, "syslog_dag_") {
			logs = append(logs, n)
		}
	}
	// The newest DAG first: dag_<ts>_<app>_<n>, n growing.
	sort.Slice(logs, func(i, j int) bool {
		if len(logs[i]) != len(logs[j]) {
			return len(logs[i]) > len(logs[j])
		}
		return logs[i] > logs[j]
	})
	for _, n := range logs {
		if name := hadoop.ParseTezDAGLog(readHead(dir+"/"+n, 64<<10)); name != "" {
			if len(name) > maxJobName {
				name = name[:maxJobName]
			}
			return wire.SanitizeText([]byte(name))
		}
	}
	return ""
}

// maxJobName bounds a job name read from a log.
const maxJobName = 1024

// readHead reads at most n bytes from the start of a file.
func readHead(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return b
}

// sizedTask reports whether job.xml gives the memory of a task of this type.
func sizedTask(taskType string) bool {
	return taskType == "map" || taskType == "reduce" || taskType == "am"
}

// retryConf reads an attempt's configuration again (see readConf) and
// reports the attempt again if what it says changed.
func (t *Tracker) retryConf(u *unit, a *attempt) {
	before := confFields(&a.info)
	ok := t.readConf(u, &a.info)
	a.confTries++
	switch {
	case ok:
		a.confRetryAt = 0
	case u.jvmKind == hadoop.KindTezAM:
		// A Tez session may run its first DAG any time: look every 8
		// ticks at most (a directory listing) until it names one.
		a.confRetryAt = t.cycle + 1<<uint(min(a.confTries-1, 3))
	case a.confTries >= maxConfTries:
		a.confRetryAt = 0
	default:
		a.confRetryAt = t.cycle + 1<<uint(a.confTries-1)
	}
	if confFields(&a.info) != before {
		t.sink.Attempt(&a.info)
	}
}

type attemptConf struct {
	jobName, user, queue, javaOpts string
	memoryMB, xmx                  int64
	streaming                      bool
}

func confFields(a *wire.Attempt) attemptConf {
	return attemptConf{a.JobName, a.User, a.Queue, a.JavaOpts, a.MemoryMB, a.XmxBytes, a.Streaming}
}

// readSparkConf reads a Spark container's __spark_conf__ (see
// hadoop.SparkConfFor).
func (t *Tracker) readSparkConf(cwd string, a *wire.Attempt, am bool) {
	if c, ok := t.readAppConf(cwd+"/"+hadoop.SparkConfFile, hadoop.ParseSparkConf); ok {
		setConf(a, c.SparkConfFor(am))
	}
}

// readTezConf reads a Tez container's tez-conf.pb (see
// hadoop.TezConfFor): its queue and size; a Tez AM names its job from its
// DAG's log.
func (t *Tracker) readTezConf(cwd string, a *wire.Attempt, am bool) {
	if c, ok := t.readAppConf(cwd+"/"+hadoop.TezConfFile, hadoop.ParseTezConf); ok {
		setConf(a, c.TezConfFor(am))
	}
}

// readAppConf reads a framework's configuration file; a missing one is
// not an error, one that does not parse is counted.
func (t *Tracker) readAppConf(path string, parse func(io.Reader) (hadoop.Conf, error)) (hadoop.Conf, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	c, err := parse(f)
	if err != nil {
		t.countErr(path[strings.LastIndexByte(path, '/')+1:], err)
		return nil, false
	}
	return c, true
}

// setConf takes what a Spark or Tez configuration says into the attempt,
// made safe to send (the files are the job's: any bytes), keeping what
// it does not say.
func setConf(a *wire.Attempt, jc hadoop.JobConf) {
	clean := func(s string) string { return wire.SanitizeText([]byte(s[:min(len(s), maxJobName)])) }
	if jc.JobName != "" {
		a.JobName = clean(jc.JobName)
	}
	if jc.User != "" {
		a.User = clean(jc.User)
	}
	if jc.Queue != "" {
		a.Queue = clean(jc.Queue)
	}
	if jc.MemoryMB > 0 {
		a.MemoryMB = jc.MemoryMB
	}
	if jc.JavaOpts != "" {
		a.JavaOpts = wire.SanitizeText([]byte(jc.JavaOpts))
	}
	if jc.XmxBytes > 0 {
		a.XmxBytes = jc.XmxBytes
	}
}
