package simulator

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// The controller (the Cluster) and each daemon talk over a socketpair that
// the daemon inherits as fd 3: one JSON object per line each way. The first
// message to the daemon is its daemonConfig; the daemon answers "ready".
// When the controller's end closes the daemon stops its tasks and exits;
// when the daemon's end closes (it died) the controller marks the node lost.

// Operations and event types.
const (
	opLaunch   = "launch"   // controller -> NM: start a container
	opAssign   = "assign"   // controller -> TT: run a task attempt
	opJobDone  = "jobdone"  // controller -> TT: the job is over, its idle JVMs die
	opKill     = "kill"     // controller -> daemon: kill one process tree
	opShutdown = "shutdown" // controller -> daemon: kill everything, exit

	evReady    = "ready"
	evStarted  = "started"  // a process tree has its pids
	evSwitch   = "switch"   // a JVM began an attempt
	evTaskDone = "taskdone" // TT: an attempt ended (the JVM may live on)
	evLost     = "lost"     // TT: a JVM was removed without being killed
	evExited   = "exited"
	evLog      = "log"
)

// message is every message, either way.
type message struct {
	Op string `json:"op"`

	Config *daemonConfig `json:"config,omitempty"`
	Launch *launchReq    `json:"launch,omitempty"`
	Assign *assignReq    `json:"assign,omitempty"`
	Job    string        `json:"job,omitempty"`

	Key     string `json:"key,omitempty"` // the process tree: its unit
	Attempt string `json:"attempt,omitempty"`

	Ready *readyInfo `json:"ready,omitempty"`
	Proc  *procInfo  `json:"proc,omitempty"`
	At    int64      `json:"at,omitempty"` // unix ns
	Code  int        `json:"code,omitempty"`
	Text  string     `json:"text,omitempty"`
}

// daemonConfig is everything a daemon needs to know.
type daemonConfig struct {
	Role        string   `json:"role"` // nodemanager, tasktracker
	Name        string   `json:"name"`
	ClusterID   string   `json:"cluster_id"`
	Dir         string   `json:"dir"`
	ConfDir     string   `json:"conf_dir"`
	LocalDir    string   `json:"local_dir"`
	LogDir      string   `json:"log_dir"` // container log root (NM) or hadoop.log.dir (TT)
	DaemonLogs  string   `json:"daemon_logs"`
	HadoopHome  string   `json:"hadoop_home"`
	JavaHome    string   `json:"java_home"`
	Java        string   `json:"java"`
	Classes     string   `json:"classes"`
	MapSlots    int      `json:"map_slots"`
	ReduceSlots int      `json:"reduce_slots"`
	Cgroups     []string `json:"cgroups,omitempty"` // controller mounts, e.g. /sys/fs/cgroup/cpu
	SiteConf    []kv     `json:"site_conf"`         // yarn-site.xml / mapred-site.xml before the daemon adds its addresses
	// ReapDelayMs: the daemon reaps what it launched this long after it
	// exited (Options.ReapDelay).
	ReapDelayMs int64 `json:"reap_delay_ms,omitempty"`
	// Secure: the NodeManager serves HTTPS only and demands SPNEGO
	// (Options.Security).
	Secure *secureConf `json:"secure,omitempty"`
}

// readyInfo is what a daemon tells once it listens.
type readyInfo struct {
	PID       int    `json:"pid"`
	WebAddr   string `json:"web_addr,omitempty"`
	NMAddr    string `json:"nm_addr,omitempty"`
	Umbilical string `json:"umbilical,omitempty"`
}

// procInfo reports a process tree.
type procInfo struct {
	Key         string `json:"key"`
	Unit        string `json:"unit"`
	AttemptID   string `json:"attempt,omitempty"`
	ContainerID string `json:"container,omitempty"`
	JVMID       string `json:"jvm_id,omitempty"`
	MainClass   string `json:"main_class,omitempty"`
	Type        string `json:"type,omitempty"`
	LauncherPID int    `json:"launcher_pid,omitempty"`
	RootPID     int    `json:"root_pid,omitempty"`
	JVMPID      int    `json:"jvm_pid,omitempty"`
	Start       int64  `json:"start,omitempty"`
	End         int64  `json:"end,omitempty"`
	ExitCode    int    `json:"exit_code"`
	CPUNanos    int64  `json:"cpu_ns,omitempty"`
	MaxRSS      int64  `json:"max_rss,omitempty"`
	WorkDir     string `json:"work_dir,omitempty"`
	LogDir      string `json:"log_dir,omitempty"`
	// The NodeManager's verdict (YARN): its exitCode for the container
	// (ContainerExitStatus: -104 killed over its physical memory, -105 by
	// the ApplicationMaster, ..., or the exit code) and diagnostics.
	YarnExitStatus int    `json:"yarn_exit_status,omitempty"`
	Diagnostics    string `json:"diagnostics,omitempty"`
}

// launchReq asks a NodeManager for a container.
type launchReq struct {
	ContainerID string `json:"container_id"`
	AppID       string `json:"app_id"`
	User        string `json:"user"`
	Unit        string `json:"unit"`
	Type        string `json:"type"`
	MainClass   string `json:"main_class"`
	AttemptID   string `json:"attempt_id,omitempty"`
	MemoryMB    int    `json:"memory_mb"`
	VCores      int    `json:"vcores"`
	// MemoryLimit limits the container's memory cgroup to MemoryMB
	// (memory.limit_in_bytes, as yarn.nodemanager.resource.memory.enforced
	// does: the kernel's OOM killer enforces it, not the NodeManager's
	// monitor). Needs the cluster's cgroups.
	MemoryLimit bool `json:"memory_limit,omitempty"`
	// CPUs, if any, are the only CPUs the container's processes may run on
	// (sched_setaffinity at its start, inherited).
	CPUs []int `json:"cpus,omitempty"`
	// Command is the container's command line: <LOG_DIR> is replaced by the
	// NodeManager, $JAVA_HOME and $PWD are left to the shell.
	Command string `json:"command"`
	// Env is what the ApplicationMaster put into the launch context, after
	// the variables the NodeManager sets itself.
	Env []kv `json:"env"`
	// Resources are localized into the application's filecache and linked
	// into the working directory.
	Resources []resource `json:"resources"`
}

// resource is one localized file or directory: filecache/<ID>/<Name>, linked as Link.
type resource struct {
	ID    int               `json:"id"`
	Name  string            `json:"name"`
	Link  string            `json:"link"`
	Data  []byte            `json:"data,omitempty"`  // a file
	Files map[string][]byte `json:"files,omitempty"` // a directory
	Exec  bool              `json:"exec,omitempty"`
}

// assignReq gives a TaskTracker a task attempt.
type assignReq struct {
	Attempt  string `json:"attempt"`
	Job      string `json:"job"`
	User     string `json:"user"`
	Type     string `json:"type"` // m or r
	JobConf  []kv   `json:"job_conf"`
	Reuse    int    `json:"reuse"` // mapred.job.reuse.jvm.num.tasks
	Hang     bool   `json:"hang,omitempty"`
	JavaOpts string `json:"java_opts"`
	ChildEnv string `json:"child_env,omitempty"` // mapred.child.env
	// Jars are written into jobcache/<job>/jars and linked into each work dir (Streaming scripts).
	Jars []resource `json:"jars,omitempty"`
	// LostAfterMs: a JVM that has not asked for its task by then is removed.
	LostAfterMs int64 `json:"lost_after_ms"`
}

// conn wraps one end of the socketpair.
type conn struct {
	mu  sync.Mutex
	enc *json.Encoder
	dec *json.Decoder
	c   io.ReadWriteCloser
}

func newConn(c io.ReadWriteCloser) *conn {
	return &conn{enc: json.NewEncoder(c), dec: json.NewDecoder(c), c: c}
}

func (c *conn) send(m *message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(m); err != nil {
		return fmt.Errorf("cannot send %s: %w", m.Op, err)
	}
	return nil
}

func (c *conn) recv() (*message, error) {
	var m message
	if err := c.dec.Decode(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (c *conn) close() error { return c.c.Close() }
