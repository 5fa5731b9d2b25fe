package tracker

import (
	"io"
	"os"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// describer is the part of the tracker that reads what an attempt's
// configuration says of it (its job's name, user and queue, its
// container's memory, its java options): MapReduce's job.xml, Spark's
// __spark_conf__, Tez's DAG logs, the JVM's own command line. It reads
// them as the attempt's JVM sees them (through <procfs>/<pid>/cwd and
// root).
type describer struct {
	fs   *procfs.FS
	errs *readErrors
	jobs jobConfs // jobconf.go: what each job's job.xml said
}

// maxConfTries bounds the reads of an attempt's configuration: the first,
// when the attempt starts, and retries 1, 2, 4 and 8 ticks apart.
const maxConfTries = 5

// describe reads what the attempt's configuration says: job.xml for
// MapReduce, __spark_conf__ for Spark; the JVM's own -Xmx wins over the
// configured one. It reports whether it got what a MapReduce unit's job.xml
// must say (its job's name and its container's memory): YarnChild rewrites
// job.xml while its attempt starts, so a read may find it missing, half
// written (unparsable) or without those keys; then the caller tries again
// later. A read that fails leaves what an earlier one found.
func (d *describer) describe(u *unit, a *wire.Attempt) bool {
	pid := u.jvmPID
	if pid == 0 && len(u.members) > 0 {
		pid = u.members[0].pid
	}
	if pid == 0 {
		return true
	}
	cwd := d.fs.PidPath(pid, "cwd")
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
		conf, err := d.jobs.read(a.JobID, f)
		f.Close()
		if err != nil {
			d.errs.count("job.xml", err)
			continue
		}
		jc := conf.JobConfFor(a.Type)
		a.JobName, a.User, a.Queue, a.MemoryMB, a.VCores = jc.JobName, jc.User, jc.Queue, jc.MemoryMB, jc.VCores
		a.JavaOpts, a.XmxBytes, a.Streaming = jc.JavaOpts, jc.XmxBytes, jc.Streaming
		complete = jc.JobName != "" && (jc.MemoryMB != 0 || !sizedTask(a.Type))
		break
	}
	switch u.jvmKind {
	case hadoop.KindSparkExecutor, hadoop.KindSparkAM:
		d.readSparkConf(cwd, a, u.jvmKind == hadoop.KindSparkAM)
		complete = a.JobName != ""
	case hadoop.KindTezAM:
		d.readTezConf(cwd, a, true)
		if name := d.tezDAGName(pid, u.logDir); name != "" {
			a.JobName = name
		}
		complete = a.JobName != ""
	case hadoop.KindTezChild:
		// (Its launch script links tez-conf.pb into the container's
		// directory before it starts the JVM: read before that, the
		// container has no size yet, and is read again.)
		complete = d.readTezConf(cwd, a, false) || u.allocMB > 0
	}
	if u.allocMB > 0 {
		a.MemoryMB = u.allocMB // what the NodeManager allocated (alloc.go)
	}
	if u.allocVCores > 0 {
		a.VCores = u.allocVCores
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
	case hadoop.KindSparkExecutor, hadoop.KindSparkAM, hadoop.KindTezAM, hadoop.KindTezChild:
		return complete
	}
	return complete || (u.framework != hadoop.FrameworkMapReduce && u.containerID != "")
}

// tezDAGName is the name of the newest DAG a Tez ApplicationMaster runs:
// DAGAppMaster logs "Running DAG: <name>" (Tez 0.9 on: followed by
// ", callerContext=...") at the start of each DAG's log, syslog_dag_<dag
// id>, in its container's log directory (read as the AM sees it).
func (d *describer) tezDAGName(pid int32, logDir string) string {
	if pid == 0 || logDir == "" {
		return ""
	}
	dir := d.fs.PidPath(pid, "root") + logDir
	f, err := os.Open(dir)
	if err != nil {
		return ""
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
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

// retryConf reads an attempt's configuration again (see describe) and
// reports the attempt again if what it says changed.
func (t *Tracker) retryConf(u *unit, a *attempt) {
	before := confFields(&a.info)
	ok := t.desc.describe(u, &a.info)
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
	memoryMB, vcores, xmx          int64
	streaming                      bool
}

func confFields(a *wire.Attempt) attemptConf {
	return attemptConf{a.JobName, a.User, a.Queue, a.JavaOpts, a.MemoryMB, a.VCores, a.XmxBytes, a.Streaming}
}

// readSparkConf reads a Spark container's __spark_conf__ (see
// hadoop.SparkConfFor).
func (d *describer) readSparkConf(cwd string, a *wire.Attempt, am bool) {
	if c, ok := d.readAppConf(cwd+"/"+hadoop.SparkConfFile, hadoop.ParseSparkConf); ok {
		setConf(a, c.SparkConfFor(am))
	}
}

// readTezConf reads a Tez container's tez-conf.pb (see
// hadoop.TezConfFor): its queue and size; a Tez AM names its job from its
// DAG's log. It reports whether it read the file.
func (d *describer) readTezConf(cwd string, a *wire.Attempt, am bool) bool {
	c, ok := d.readAppConf(cwd+"/"+hadoop.TezConfFile, hadoop.ParseTezConf)
	if ok {
		setConf(a, c.TezConfFor(am))
	}
	return ok
}

// readAppConf reads a framework's configuration file; a missing one is
// not an error, one that does not parse is counted.
func (d *describer) readAppConf(path string, parse func(io.Reader) (hadoop.Conf, error)) (hadoop.Conf, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	c, err := parse(f)
	if err != nil {
		d.errs.count(path[strings.LastIndexByte(path, '/')+1:], err)
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
	if jc.VCores > 0 {
		a.VCores = jc.VCores
	}
	if jc.JavaOpts != "" {
		a.JavaOpts = wire.SanitizeText([]byte(jc.JavaOpts))
	}
	if jc.XmxBytes > 0 {
		a.XmxBytes = jc.XmxBytes
	}
}
