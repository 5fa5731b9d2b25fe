package simulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cluster is a running simulated cluster: worker daemons (real processes,
// this binary re-executed) and the jobs submitted to it. The Cluster itself
// plays the ResourceManager / JobTracker and the ApplicationMasters'
// scheduling. Its methods are safe for concurrent use.
type Cluster struct {
	o          Options
	id         string
	ts         int64
	dir        string
	ownDir     bool
	java       javaEnv
	python     string
	hadoop3    string // fake HADOOP_HOME of YARN nodes
	hadoop1    string // fake HADOOP_HOME of Hadoop 1 nodes
	path       string // PATH of daemons and tasks
	log        *slog.Logger
	epoch      int
	cgroups    []string
	security   *clusterSecurity // nil: not secured
	exe        string
	realUser   string
	scale      float64
	ctx        context.Context // cancelled by Close
	cancel     context.CancelFunc
	runners    sync.WaitGroup
	notifyMu   sync.Mutex
	closeOnce  sync.Once
	closeErr   error
	started    time.Time
	startDelay time.Duration

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever capacity or node state changes
	nodes   []*node
	seq     int
	jobs    map[string]*Job
	closed  bool
}

// node is one worker daemon as the controller sees it.
type node struct {
	c           *Cluster
	info        NodeInfo
	cfg         *daemonConfig
	cmd         *exec.Cmd
	conn        *conn
	exited      chan struct{} // the daemon process was reaped
	ready       chan struct{}
	readyErr    error
	used        [2]int // YARN: containers; Hadoop 1: map, reduce slots
	procs       map[string]*proc
	tasks       map[string]chan taskOutcome
	stopping    bool
	lostHandled bool
}

// proc is one process tree of a job; all fields are guarded by Cluster.mu.
type proc struct {
	res     AttemptResult
	job     *Job
	node    *node
	started chan struct{}
	done    chan struct{}
	isStart bool
	isDone  bool
}

type taskOutcome struct {
	code     int
	lost     bool
	orphaned bool
	err      string
}

// Start starts a cluster: compiles the Java stand-ins (once per source
// hash, cached), lays out the nodes' directories and starts one daemon per
// node. It returns when every daemon listens. Close it.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	t0 := time.Now()
	if o.Nodes <= 0 {
		o.Nodes = 2
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if o.MapSlots <= 0 {
		o.MapSlots = 2
	}
	if o.ReduceSlots <= 0 {
		o.ReduceSlots = 1
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{o: o, log: log, scale: o.Scale, ts: clusterTimestamp(), jobs: map[string]*Job{}, changed: make(chan struct{})}
	c.id = fmt.Sprintf("%d-%d", os.Getpid(), c.ts)
	c.epoch = o.Epoch
	if c.epoch == 0 {
		c.epoch = 1
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	var err error
	if o.Dir == "" {
		c.dir, err = os.MkdirTemp("", "taskscope-sim-")
		if err != nil {
			return nil, fmt.Errorf("cannot create the cluster directory: %w", err)
		}
		c.ownDir = true
	} else {
		c.dir, err = filepath.Abs(o.Dir)
		if err == nil {
			err = os.MkdirAll(c.dir, 0o755)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot create the cluster directory %s: %w", o.Dir, err)
		}
	}
	if c.java, err = findJava(o.Java); err != nil {
		return nil, err
	}
	if c.java.Classes, err = compileJava(ctx, c.java, c.dir); err != nil {
		return nil, err
	}
	c.python = findPython()
	if c.exe, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("cannot find this executable to re-execute as a daemon: %w", err)
	}
	if u, err := user.Current(); err == nil {
		c.realUser = u.Username
	} else {
		c.realUser = strconv.Itoa(os.Getuid())
	}
	if o.Cgroups {
		if c.cgroups, err = detectCgroups(); err != nil {
			return nil, fmt.Errorf("cannot use cgroups: %w", err)
		}
	}
	if o.Security != nil {
		if c.security, err = prepareSecurity(ctx, o.Security, filepath.Join(c.dir, "security")); err != nil {
			return nil, fmt.Errorf("cannot secure the cluster: %w", err)
		}
	}
	c.path = taskPath(c.python)
	c.hadoop3 = filepath.Join(c.dir, "hadoop-3.3.6")
	c.hadoop1 = filepath.Join(c.dir, "hadoop-1.2.1")
	for _, d := range []string{
		filepath.Join(c.hadoop3, "share", "hadoop", "common", "lib"), filepath.Join(c.hadoop3, "lib", "native"),
		filepath.Join(c.hadoop1, "lib", "native", "Linux-amd64-64"),
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for i := 0; i < o.Nodes; i++ {
		kind := o.Kind
		if kind == NodeMixed {
			kind = NodeYARN
			if i >= (o.Nodes+1)/2 {
				kind = NodeHadoop1
			}
		}
		n, err := c.startNode(i, kind)
		if n != nil {
			c.mu.Lock()
			c.nodes = append(c.nodes, n)
			c.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes {
		select {
		case <-n.ready:
			if n.readyErr != nil {
				return nil, n.readyErr
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(60 * time.Second):
			return nil, fmt.Errorf("daemon of %s did not start within 60s", n.info.Name)
		}
	}
	c.started = time.Now()
	c.startDelay = c.started.Sub(t0)
	log.Info("cluster started", "dir", c.dir, "nodes", o.Nodes, "kind", o.Kind, "in", c.startDelay, "classes", c.java.Classes)
	ok = true
	return c, nil
}

// taskPath is the PATH daemons and tasks get: the system directories, with
// the python3 interpreter's first.
func taskPath(python string) string {
	dirs := []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	if python != "" {
		d := filepath.Dir(python)
		out := []string{d}
		for _, x := range dirs {
			if x != d {
				out = append(out, x)
			}
		}
		dirs = out
	}
	return strings.Join(dirs, ":")
}

// Dir is the cluster's root directory.
func (c *Cluster) Dir() string { return c.dir }

// ID is the cluster's id: the value of EnvCluster in its processes.
func (c *Cluster) ID() string { return c.id }

// Timestamp is the cluster timestamp in every id (ms since the epoch).
func (c *Cluster) Timestamp() int64 { return c.ts }

// StartupTime is how long Start took.
func (c *Cluster) StartupTime() time.Duration { return c.startDelay }

// ClassesDir is where the compiled Java stand-ins are.
func (c *Cluster) ClassesDir() string { return c.java.Classes }

func (c *Cluster) startNode(i int, kind NodeKind) (*node, error) {
	name := fmt.Sprintf("node%d", i+1)
	root := filepath.Join(c.dir, name)
	n := &node{c: c, exited: make(chan struct{}), ready: make(chan struct{}), procs: map[string]*proc{}, tasks: map[string]chan taskOutcome{}}
	n.info = NodeInfo{Name: name, Kind: kind, Dir: root, ConfDir: filepath.Join(root, "conf"), LocalDir: filepath.Join(root, "local")}
	daemonLogs := filepath.Join(root, "logs")
	cfg := &daemonConfig{
		Name: name, ClusterID: c.id, Dir: root, ConfDir: n.info.ConfDir, LocalDir: n.info.LocalDir,
		JavaHome: c.java.Home, Java: c.java.Java, Classes: c.java.Classes,
		MapSlots: c.o.MapSlots, ReduceSlots: c.o.ReduceSlots, DaemonLogs: daemonLogs,
		ReapDelayMs: c.o.ReapDelay.Milliseconds(),
	}
	var argv []string
	var env []kv
	logFile := ""
	if kind == NodeYARN {
		cfg.Role = roleNodeManager
		cfg.HadoopHome = c.hadoop3
		cfg.LogDir = filepath.Join(daemonLogs, "userlogs")
		cfg.Cgroups = c.cgroups
		logFile = "hadoop-" + c.realUser + "-nodemanager-" + name + ".log"
		cfg.SiteConf = []kv{
			{"yarn.nodemanager.local-dirs", cfg.LocalDir},
			{"yarn.nodemanager.log-dirs", cfg.LogDir},
			{"yarn.nodemanager.container-executor.class", "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor"},
			{"yarn.nodemanager.resource.memory-mb", strconv.Itoa(8192)},
			{"yarn.nodemanager.resource.cpu-vcores", strconv.Itoa(c.o.MapSlots + c.o.ReduceSlots)},
			{"yarn.nodemanager.aux-services", "mapreduce_shuffle"},
			{"yarn.nodemanager.container-monitor.interval-ms", "3000"},
			{"yarn.nodemanager.linux-container-executor.cgroups.hierarchy", "/" + cgroupHierarchy},
			{"yarn.nodemanager.linux-container-executor.cgroups.mount-path", "/sys/fs/cgroup"},
			{"yarn.resourcemanager.hostname", "127.0.0.1"},
		}
		if c.security != nil {
			cfg.Secure = &c.security.nm
			cfg.SiteConf = append(cfg.SiteConf, c.security.yarn...)
		}
		cp := strings.Join([]string{
			cfg.ConfDir, cfg.ConfDir, filepath.Join(c.hadoop3, "share/hadoop/common/lib/*"), filepath.Join(c.hadoop3, "share/hadoop/common/*"),
			filepath.Join(c.hadoop3, "share/hadoop/hdfs"), filepath.Join(c.hadoop3, "share/hadoop/hdfs/lib/*"), filepath.Join(c.hadoop3, "share/hadoop/hdfs/*"),
			filepath.Join(c.hadoop3, "share/hadoop/mapreduce/*"), filepath.Join(c.hadoop3, "share/hadoop/yarn"),
			filepath.Join(c.hadoop3, "share/hadoop/yarn/lib/*"), filepath.Join(c.hadoop3, "share/hadoop/yarn/*"),
			filepath.Join(cfg.ConfDir, "nm-config/log4j.properties"),
		}, ":")
		argv = []string{c.java.Java, "-Dproc_nodemanager", "-Djava.net.preferIPv4Stack=true",
			"-Dyarn.log.dir=" + daemonLogs, "-Dyarn.log.file=" + logFile, "-Dyarn.home.dir=" + c.hadoop3,
			"-Dyarn.root.logger=INFO,console", "-Djava.library.path=" + filepath.Join(c.hadoop3, "lib/native"),
			"-Dhadoop.log.dir=" + daemonLogs, "-Dhadoop.log.file=" + logFile, "-Dhadoop.home.dir=" + c.hadoop3,
			"-Dhadoop.id.str=" + c.realUser, "-Dhadoop.root.logger=INFO,RFA", "-Dhadoop.policy.file=hadoop-policy.xml",
			"-Dhadoop.security.logger=INFO,NullAppender", "-Xmx1000m",
			"-classpath", cp, "org.apache.hadoop.yarn.server.nodemanager.NodeManager"}
		env = []kv{
			{"HADOOP_HOME", c.hadoop3}, {"HADOOP_COMMON_HOME", c.hadoop3}, {"HADOOP_HDFS_HOME", c.hadoop3},
			{"HADOOP_YARN_HOME", c.hadoop3}, {"HADOOP_MAPRED_HOME", c.hadoop3}, {"YARN_LOG_DIR", daemonLogs},
		}
		n.info.LogDir = cfg.LogDir
	} else {
		cfg.Role = roleTaskTracker
		cfg.HadoopHome = c.hadoop1
		cfg.LogDir = daemonLogs
		logFile = "hadoop-" + c.realUser + "-tasktracker-" + name + ".log"
		cfg.SiteConf = []kv{
			{"mapred.job.tracker", "127.0.0.1:8021"},
			{"mapred.local.dir", cfg.LocalDir},
			{"hadoop.log.dir", daemonLogs},
			{"mapred.tasktracker.map.tasks.maximum", strconv.Itoa(c.o.MapSlots)},
			{"mapred.tasktracker.reduce.tasks.maximum", strconv.Itoa(c.o.ReduceSlots)},
			{"mapred.task.tracker.task-controller", "org.apache.hadoop.mapred.DefaultTaskController"},
		}
		cp := strings.Join([]string{cfg.ConfDir, filepath.Join(c.java.Home, "lib/tools.jar"), c.hadoop1,
			filepath.Join(c.hadoop1, "hadoop-core-1.2.1.jar"), filepath.Join(c.hadoop1, "lib/*")}, ":")
		argv = []string{c.java.Java, "-Dproc_tasktracker", "-Xmx1000m",
			"-Dhadoop.log.dir=" + daemonLogs, "-Dhadoop.log.file=" + logFile, "-Dhadoop.home.dir=" + c.hadoop1,
			"-Dhadoop.id.str=" + c.realUser, "-Dhadoop.root.logger=INFO,DRFA", "-Dhadoop.security.logger=INFO,NullAppender",
			"-Djava.library.path=" + filepath.Join(c.hadoop1, "lib/native/Linux-amd64-64"), "-Dhadoop.policy.file=hadoop-policy.xml",
			"-classpath", cp, "org.apache.hadoop.mapred.TaskTracker"}
		env = []kv{{"HADOOP_HOME", c.hadoop1}, {"HADOOP_PREFIX", c.hadoop1}}
		n.info.LogDir = daemonLogs
	}
	n.cfg = cfg
	for _, d := range []string{cfg.ConfDir, cfg.LocalDir, cfg.LogDir, daemonLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cannot create %s: %w", d, err)
		}
	}
	core := confList{{"fs.defaultFS", "hdfs://127.0.0.1:8020"}, {"hadoop.tmp.dir", filepath.Join(root, "tmp")}}
	if c.security != nil {
		core = append(core, c.security.coreConf()...)
		ssl := xmlConf(c.security.sslClientConf(), "ssl-client.xml")
		if err := writeFileAtomic(filepath.Join(cfg.ConfDir, "ssl-client.xml"), ssl, 0o644); err != nil {
			return nil, err
		}
	}
	if err := writeFileAtomic(filepath.Join(cfg.ConfDir, "core-site.xml"), xmlConf(core, "core-site.xml"), 0o644); err != nil {
		return nil, err
	}
	env = append(env,
		kv{"PATH", c.path}, kv{"JAVA_HOME", c.java.Home}, kv{"HADOOP_CONF_DIR", cfg.ConfDir},
		kv{"HADOOP_LOG_DIR", daemonLogs}, kv{"HADOOP_IDENT_STRING", c.realUser},
		kv{"USER", c.realUser}, kv{"LOGNAME", c.realUser},
		kv{envRole, cfg.Role}, kv{EnvCluster, c.id},
	)
	for _, k := range []string{"HOME", "LANG", "TZ", "TMPDIR", "GORACE", "GOCOVERDIR", "GOTRACEBACK", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, kv{k, v})
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot create a socketpair: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "daemon-"+name), os.NewFile(uintptr(fds[1]), "controller")
	nc, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		child.Close()
		return nil, err
	}
	out, err := os.OpenFile(filepath.Join(daemonLogs, strings.TrimSuffix(logFile, ".log")+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		nc.Close()
		child.Close()
		return nil, err
	}
	cmd := &exec.Cmd{Path: c.exe, Args: argv, Dir: root, Stdout: out, Stderr: out, ExtraFiles: []*os.File{child},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	for _, e := range env {
		cmd.Env = append(cmd.Env, e.K+"="+e.V)
	}
	err = cmd.Start()
	child.Close()
	out.Close()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cannot start the %s daemon: %w", name, err)
	}
	n.cmd = cmd
	n.info.PID = cmd.Process.Pid
	n.info.Alive = true
	// As hadoop-daemon.sh and yarn-daemon.sh do ($HADOOP_PID_DIR): one
	// agent per node finds its daemon there (the demo's, the tests').
	pidName := "yarn-" + c.realUser + "-nodemanager.pid"
	if kind != NodeYARN {
		pidName = "hadoop-" + c.realUser + "-tasktracker.pid"
	}
	n.info.PIDFile = filepath.Join(root, "pids", pidName)
	if err := writeFileAtomic(n.info.PIDFile, []byte(strconv.Itoa(n.info.PID)+"\n"), 0o644); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		nc.Close()
		return nil, err
	}
	n.conn = newConn(nc)
	go func() {
		cmd.Wait()
		close(n.exited)
	}()
	if err := n.conn.send(&message{Op: "config", Config: cfg}); err != nil {
		return n, err
	}
	go n.readLoop()
	return n, nil
}

// broadcast wakes everything waiting for capacity; c.mu must be held.
func (c *Cluster) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Cluster) notify(ev Event) {
	if c.o.Notify == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	c.o.Notify(ev)
}

// readLoop handles the daemon's messages until its connection closes.
func (n *node) readLoop() {
	c := n.c
	first := true
	for {
		m, err := n.conn.recv()
		if err != nil {
			if first {
				n.readyErr = fmt.Errorf("daemon of %s failed to start (see %s): %w", n.info.Name, filepath.Join(n.info.Dir, "logs"), err)
				close(n.ready)
			}
			n.lost()
			return
		}
		if first {
			first = false
			if m.Op != evReady || m.Ready == nil {
				n.readyErr = fmt.Errorf("daemon of %s: unexpected first message %q", n.info.Name, m.Op)
				close(n.ready)
				continue
			}
			c.mu.Lock()
			n.info.WebAddress = m.Ready.WebAddr
			n.info.UmbilicalAddress = m.Ready.Umbilical
			c.mu.Unlock()
			close(n.ready)
			continue
		}
		n.handle(m)
	}
}

func (n *node) handle(m *message) {
	c := n.c
	switch m.Op {
	case evStarted:
		c.procStarted(n, m.Proc)
	case evSwitch:
		c.mu.Lock()
		p := n.procs[m.Key]
		var ev Event
		if p != nil {
			p.res.Switches = append(p.res.Switches, Switch{AttemptID: m.Attempt, At: time.Unix(0, m.At)})
			c.broadcast()
			ev = Event{Kind: EventAttemptStarted, JobID: p.job.ID, Node: n.info.Name, Process: p.snapshot()}
		}
		c.mu.Unlock()
		if p != nil {
			c.notify(ev)
		}
	case evExited:
		c.procExited(n, m)
	case evLost:
		c.mu.Lock()
		p := n.procs[m.Key]
		var ev Event
		if p != nil {
			p.res.Lost = true
			p.markDone()
			c.broadcast()
			ev = Event{Kind: EventProcessLost, JobID: p.job.ID, Node: n.info.Name, Process: p.snapshot()}
		}
		if ch := n.tasks[m.Attempt]; ch != nil {
			delete(n.tasks, m.Attempt)
			ch <- taskOutcome{code: -1, lost: true}
		}
		c.mu.Unlock()
		if p != nil {
			c.notify(ev)
		}
	case evTaskDone:
		c.mu.Lock()
		if ch := n.tasks[m.Attempt]; ch != nil {
			delete(n.tasks, m.Attempt)
			ch <- taskOutcome{code: m.Code, err: m.Text}
		}
		c.mu.Unlock()
	case opShutdown:
		// acknowledged; the daemon exits
	}
}

// procStarted records a process tree's pids; Hadoop 1 JVMs are first heard of here.
func (c *Cluster) procStarted(n *node, info *procInfo) {
	if info == nil {
		return
	}
	c.mu.Lock()
	p := n.procs[info.Key]
	if p == nil {
		job := c.jobForAttempt(info.AttemptID)
		if job == nil {
			c.mu.Unlock()
			c.log.Warn("process of an unknown job", "unit", info.Unit, "attempt", info.AttemptID)
			return
		}
		p = newProc(job, n, AttemptResult{Unit: info.Unit, AttemptID: info.AttemptID, JVMID: info.JVMID,
			Type: info.Type, MainClass: info.MainClass, Node: n.info.Name, ExitCode: -1})
		n.procs[info.Key] = p
		job.procs = append(job.procs, p)
	}
	r := &p.res
	r.LauncherPID, r.RootPID, r.JVMPID = info.LauncherPID, info.RootPID, info.JVMPID
	r.Start = time.Unix(0, info.Start)
	r.WorkDir, r.LogDir = info.WorkDir, info.LogDir
	if r.JVMID == "" {
		r.JVMID = info.JVMID
	}
	p.markStarted()
	c.broadcast()
	ev := Event{Kind: EventProcessStarted, JobID: p.job.ID, Node: n.info.Name, Process: p.snapshot()}
	c.mu.Unlock()
	c.notify(ev)
}

func (c *Cluster) procExited(n *node, m *message) {
	info := m.Proc
	if info == nil {
		return
	}
	c.mu.Lock()
	p := n.procs[m.Key]
	if p == nil {
		c.mu.Unlock()
		return
	}
	r := &p.res
	r.End = time.Unix(0, info.End)
	r.ExitCode = info.ExitCode
	r.CPU = time.Duration(info.CPUNanos)
	r.MaxRSSBytes = info.MaxRSS
	r.YarnExitStatus, r.Diagnostics = info.YarnExitStatus, info.Diagnostics
	if r.Start.IsZero() && info.Start != 0 {
		r.Start = time.Unix(0, info.Start)
	}
	logDir, isTez := r.LogDir, r.MainClass == "org.apache.tez.runtime.task.TezChild"
	c.mu.Unlock()
	var sw []Switch
	if isTez && logDir != "" {
		sw = tezSwitches(logDir)
	}
	c.mu.Lock()
	if sw != nil {
		r.Switches = sw
	}
	if m.Text != "" {
		c.log.Warn("process failed", "unit", r.Unit, "err", m.Text)
	}
	p.markStarted()
	p.markDone()
	c.broadcast()
	ev := Event{Kind: EventProcessExited, JobID: p.job.ID, Node: n.info.Name, Process: p.snapshot()}
	c.mu.Unlock()
	c.notify(ev)
}

// lost handles the daemon's end: its processes are orphaned, its tasks lost.
func (n *node) lost() {
	c := n.c
	c.mu.Lock()
	if n.lostHandled {
		c.mu.Unlock()
		return
	}
	n.lostHandled = true
	n.info.Alive = false
	expected := n.stopping
	var evs []Event
	for _, p := range n.procs {
		if !p.isDone {
			p.res.Orphaned = true
			p.markStarted()
			p.markDone()
			evs = append(evs, Event{Kind: EventProcessLost, JobID: p.job.ID, Node: n.info.Name, Process: p.snapshot()})
		}
	}
	for a, ch := range n.tasks {
		delete(n.tasks, a)
		ch <- taskOutcome{code: -1, orphaned: true}
	}
	c.broadcast()
	c.mu.Unlock()
	n.conn.close()
	if !expected {
		c.log.Warn("node lost", "node", n.info.Name)
		c.notify(Event{Kind: EventNodeLost, Node: n.info.Name})
	}
	for _, ev := range evs {
		c.notify(ev)
	}
}

func newProc(j *Job, n *node, r AttemptResult) *proc {
	return &proc{res: r, job: j, node: n, started: make(chan struct{}), done: make(chan struct{})}
}

func (p *proc) markStarted() {
	if !p.isStart {
		p.isStart = true
		close(p.started)
	}
}

func (p *proc) markDone() {
	if !p.isDone {
		p.isDone = true
		close(p.done)
	}
}

// snapshot copies the result; c.mu must be held.
func (p *proc) snapshot() AttemptResult {
	r := p.res
	r.Switches = append([]Switch(nil), p.res.Switches...)
	return r
}

// Nodes describes the worker nodes.
func (c *Cluster) Nodes() []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NodeInfo, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n.info)
	}
	return out
}

func (c *Cluster) node(name string) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.info.Name == name {
			return n
		}
	}
	return nil
}

// KillDaemon sends SIGKILL to a node's NodeManager or TaskTracker stand-in,
// as when the daemon crashes: its task processes are orphaned (reparented
// to init) and keep running, unwatched. The node is lost; its running tasks
// are retried on other nodes. It returns once the daemon is gone.
func (c *Cluster) KillDaemon(node string) error {
	n := c.node(node)
	if n == nil {
		return fmt.Errorf("no node %q", node)
	}
	if err := syscall.Kill(n.info.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cannot kill the daemon of %s (pid %d): %w", node, n.info.PID, err)
	}
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the daemon of %s (pid %d) did not die", node, n.info.PID)
	}
	n.lost()
	return nil
}

// Close stops everything: the jobs, the daemons (which kill their
// containers and JVMs), then every process still carrying the cluster's
// EnvCluster (orphans of killed daemons, lost Child JVMs, children that
// escaped with setsid), and removes the cgroups it made and, when it chose
// it, the directory. When Close returns no process it started is running;
// the error says otherwise. Orphans whose parent became init are reaped by
// init: where init does not reap, they stay zombies.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	c.mu.Lock()
	c.closed = true
	nodes := append([]*node(nil), c.nodes...)
	c.broadcast()
	c.mu.Unlock()
	c.cancel()
	var errs []error
	for _, n := range nodes {
		c.mu.Lock()
		n.stopping = true
		c.mu.Unlock()
		n.conn.send(&message{Op: opShutdown})
	}
	for _, n := range nodes {
		select {
		case <-n.exited:
		case <-time.After(15 * time.Second):
			c.log.Warn("daemon did not stop; killing it", "node", n.info.Name, "pid", n.info.PID)
			syscall.Kill(n.info.PID, syscall.SIGKILL)
			<-n.exited
		}
		n.lost()
	}
	c.runners.Wait()
	if err := c.sweep(15 * time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, m := range c.cgroups {
		entries, _ := os.ReadDir(filepath.Join(m, cgroupHierarchy))
		var paths []string
		for _, e := range entries {
			if e.IsDir() && strings.Contains(e.Name(), fmt.Sprintf("_%d_", c.ts)) {
				paths = append(paths, filepath.Join(m, cgroupHierarchy, e.Name()))
			}
		}
		if err := removeCgroups(paths); err != nil {
			errs = append(errs, err)
		}
		syscall.Rmdir(filepath.Join(m, cgroupHierarchy)) // only if no one else uses it
	}
	if c.ownDir && c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sweep kills every process that still has the cluster's marker, until none is left.
func (c *Cluster) sweep(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	clean := 0
	for {
		left := c.Leftovers()
		if len(left) == 0 {
			// Twice in a row: a process caught mid-exec may have read as unmarked once.
			if clean++; clean == 2 {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		clean = 0
		if time.Now().After(deadline) {
			var s []string
			for _, p := range left {
				s = append(s, fmt.Sprintf("%d (%s)", p, commOf(p)))
			}
			return fmt.Errorf("processes left after Close: %s", strings.Join(s, ", "))
		}
		for _, pid := range left {
			killGroupAndPid(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Leftovers lists the live processes that carry the cluster's EnvCluster:
// after Close, none.
func (c *Cluster) Leftovers() []int {
	var pids []int
	for _, p := range markedProcs(EnvCluster, c.id) {
		pids = append(pids, p.PID)
	}
	return pids
}

func commOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
