package simulator

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// NodeKind is the kind of worker node a cluster has.
type NodeKind int

// The kinds of worker node.
const (
	NodeYARN    NodeKind = iota // a NodeManager stand-in: YARN containers
	NodeHadoop1                 // a TaskTracker stand-in: Hadoop 1 Child JVMs in slots
	NodeMixed                   // half the nodes (rounded up) YARN, the rest Hadoop 1
)

func (k NodeKind) String() string {
	switch k {
	case NodeYARN:
		return "yarn"
	case NodeHadoop1:
		return "hadoop1"
	case NodeMixed:
		return "mixed"
	}
	return fmt.Sprintf("NodeKind(%d)", int(k))
}

// ParseNodeKind parses "yarn", "hadoop1" or "mixed".
func ParseNodeKind(s string) (NodeKind, error) {
	switch strings.ToLower(s) {
	case "yarn", "":
		return NodeYARN, nil
	case "hadoop1", "h1", "mr1":
		return NodeHadoop1, nil
	case "mixed":
		return NodeMixed, nil
	}
	return 0, fmt.Errorf("unknown node kind %q (want yarn, hadoop1 or mixed)", s)
}

// JobKind is the framework a job runs on.
type JobKind int

// The kinds of job.
const (
	JobMapReduce        JobKind = iota // MapReduce on YARN: MRAppMaster + YarnChild containers
	JobStreaming                       // Hadoop Streaming on YARN: YarnChild running a bash mapper and a python3 reducer
	JobSpark                           // Spark on YARN: ExecutorLauncher + YarnCoarseGrainedExecutorBackend containers
	JobTez                             // Tez on YARN: DAGAppMaster + TezChild containers running two attempts each
	JobHadoop1                         // MapReduce on Hadoop 1: Child JVMs started by a TaskTracker
	JobHadoop1Streaming                // Streaming on Hadoop 1
)

var jobKindNames = [...]string{"mapreduce", "streaming", "spark", "tez", "hadoop1", "hadoop1-streaming"}

func (k JobKind) String() string {
	if k >= 0 && int(k) < len(jobKindNames) {
		return jobKindNames[k]
	}
	return fmt.Sprintf("JobKind(%d)", int(k))
}

// ParseJobKind parses a JobKind's String form.
func ParseJobKind(s string) (JobKind, error) {
	for i, n := range jobKindNames {
		if strings.EqualFold(s, n) {
			return JobKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown job kind %q (want one of %s)", s, strings.Join(jobKindNames[:], ", "))
}

// Hadoop1 reports whether jobs of this kind run on Hadoop 1 nodes.
func (k JobKind) Hadoop1() bool { return k == JobHadoop1 || k == JobHadoop1Streaming }

// Options configure a simulated cluster. The zero value is a 2-node YARN
// cluster in a temporary directory.
type Options struct {
	// Dir holds every node's directories (conf, local, logs). Empty: a new
	// temporary directory, removed by Close. A given Dir is left in place.
	Dir string
	// Nodes is the number of worker nodes (default 2).
	Nodes int
	// Kind is what the worker nodes run.
	Kind NodeKind
	// Java is the java binary of the task JVMs; its javac compiles the
	// stand-ins. Empty: $JAVA_HOME/bin/java, else java from PATH.
	Java string
	// Scale multiplies every CPU amount and duration of the jobs (default 1).
	Scale float64
	// Cgroups puts each YARN container into <mount>/<controller>/hadoop-yarn/<containerId>
	// for the cpu and memory controllers (cgroup v1, as root). Start fails
	// when that is not possible.
	Cgroups bool
	// Log receives the simulator's own log (default: discarded).
	Log *slog.Logger
	// MapSlots and ReduceSlots are a TaskTracker's slots (defaults 2 and 1).
	// A NodeManager runs MapSlots+ReduceSlots task containers at a time;
	// ApplicationMasters do not count.
	MapSlots, ReduceSlots int
	// Epoch is the ResourceManager epoch in container ids (container_e<epoch>_...);
	// 0 means 1, negative means none (container_<ts>_...).
	Epoch int
	// ReapDelay makes every NodeManager and TaskTracker reap what it
	// launched (a container's default_container_executor.sh, a Child JVM)
	// this long after it exited, as a busy daemon does: it stays a zombie
	// meanwhile. Attempts' End is when it exited.
	ReapDelay time.Duration
	// Security runs the cluster secured: NodeManagers on HTTPS only,
	// demanding Kerberos (SPNEGO), as production clusters (secure.go).
	// Nil: plain HTTP, no authentication.
	Security *Security
	// Notify, if set, is called for every job and process event, from the
	// cluster's goroutines, one call at a time. It must not block for long.
	Notify func(Event)
}

// JobSpec describes a job to Submit. CPU amounts and durations are
// multiplied by Options.Scale.
type JobSpec struct {
	Kind  JobKind
	Name  string // job name (mapreduce.job.name, spark.app.name, ...); default "<kind>-<n>"
	User  string // the job's user (USER, usercache/<user>, mapreduce.job.user.name); default "hadoop"
	Queue string // default "default"

	Maps    int // map tasks (Tez: vertex 1 tasks; Spark: tasks); default 2
	Reduces int // reduce tasks (Tez: vertex 2 tasks); default 1 (0 stays 0 if NoReduces)

	NoReduces bool          // run no reduce phase
	TaskCPU   time.Duration // CPU of each task's JVM; default 1s
	TaskMemMB int           // memory each task holds; default 32
	MemoryMB  int           // container or slot size asked for (mapreduce.map.memory.mb, ...); default 1024
	Xmx       string        // -Xmx of the task JVMs; default from TaskMemMB, leak and GC settings
	JavaOpts  string        // more options of the task JVMs (their command lines and the job's configuration)
	Hold      time.Duration // each task lasts at least this long (wall clock)
	IOMB      int           // each task writes, syncs and reads back this many MB

	Straggler bool    // map 0 takes 5 times the CPU and hold time
	Skew      float64 // reduce 0 gets (1+Skew) times the CPU (Spark: executor 1; Tez: the first vertex 2 task)
	Oversized bool    // containers and slots ask for 4 times MemoryMB: far more than the task uses
	Leak      bool    // task memory grows steadily (about TaskMemMB per second)
	GCBound   bool    // tasks burn their CPU in garbage collection of a nearly full small heap
	// GCBoundMaps makes the first GCBoundMaps maps alone GC-bound (the
	// job's heap is GCBound's small one; the other tasks burn their CPU
	// without churning): one GC-bound attempt among healthy ones.
	GCBoundMaps int

	// OnCPU0 runs the job's task containers (MapReduce and Streaming
	// tasks, Spark executors on YARN) on the first CPU the simulator may
	// use alone
	// (their processes inherit the affinity), as on a node whose one core
	// they share; OnCPU0Maps only its first OnCPU0Maps maps, and at the
	// lowest priority of their session's scheduling group (autogroup nice
	// 19: each container is a session, which the kernel weighs as one
	// however many threads it runs), as one task among many busy
	// neighbours gets a CPU. A job with OnCPU0 running beside one with
	// OnCPU0Maps makes those maps wait for a CPU, and no others.
	OnCPU0     bool
	OnCPU0Maps int

	// ShortLivedChildren is how many short-lived children (sort, awk, sh -c true, ...)
	// each streaming mapper and reducer forks. Default 6 for streaming jobs.
	ShortLivedChildren int
	// StreamCPU is the CPU each streaming script burns itself (default TaskCPU/2).
	StreamCPU time.Duration

	JVMReuse  int  // Hadoop 1 mapred.job.reuse.jvm.num.tasks (0: 1, no reuse; -1: unlimited); Tez: attempts per container (default 2)
	LostChild bool // Hadoop 1: map 0's first JVM hangs before getTask and is "just removed" by its TaskTracker

	PySpark   bool // Spark: tasks run in python3 workers forked by a pyspark.daemon
	Executors int  // Spark executors (default 2)
	Cores     int  // Spark executor cores (default 1)

	FailMaps int // the first FailMaps map attempts exit 1 (and are retried once)

	// Where the tasks' time goes, in methods a profile of their JVMs
	// shows: InputWait in taskscope.sim.Work.readInput (sleeps standing
	// for slow input IO), then LockWait in Work.awaitLock (blocked on a
	// lock that a thread "lock-holder" of the task holds, in
	// Work.holdLock), then TaskCPU in Work.burnUntil (a hot loop).
	InputWait, LockWait time.Duration
	// SlowMap makes map 0 wait that much longer in Work.readInput: a
	// straggler reading from a slow disk, with its siblings' work.
	SlowMap time.Duration
	// Threads starts that many more threads in each task JVM, idle
	// (parked in Work.idle): JVMs of many threads.
	Threads int

	// Faults says how each map task's first attempt ends, by map index
	// (MapReduce and Streaming on YARN): exit 1, kill -9, killed by the
	// NodeManager over its memory, by the kernel's OOM killer, or killed
	// by the ApplicationMaster after a speculative copy won (see Fault).
	Faults []Fault
}

// Switch says when a JVM began one of its attempts (Hadoop 1 JVM reuse, Tez container reuse).
type Switch struct {
	AttemptID string
	At        time.Time
}

// AttemptResult is one process tree the simulator started for a job: a
// YARN container or a Hadoop 1 Child JVM, which may have run several
// attempts (see Switches).
type AttemptResult struct {
	Unit        string // TASKSCOPE_SIM_UNIT of the tree: the attempt id, or the container (or Hadoop 1 JVM) id where it runs several attempts
	AttemptID   string // the attempt the process started with ("" for ApplicationMasters and Spark executors)
	ContainerID string // YARN only
	JVMID       string // Hadoop 1 only: jvm_<ts>_<job>_<m|r>_<jvmIdInt>
	Node        string
	Type        string // map, reduce, am, executor, tez
	MainClass   string

	LauncherPID int // what the daemon started and waited for: bash default_container_executor.sh (YARN), the Child (Hadoop 1)
	RootPID     int // the root of the task's tree: /bin/bash -c <java ...> (YARN), the Child (Hadoop 1)
	JVMPID      int

	Start, End time.Time
	// ExitCode of the launcher (the JVM's own through bash); 128+n for a
	// signal; -1 while unknown (still running, lost, orphaned).
	ExitCode int
	// CPU is user+system time from wait4 of the launcher: the whole tree's
	// waited-for processes, so short-lived children count.
	CPU         time.Duration
	MaxRSSBytes int64 // wait4 ru_maxrss: the largest process of the tree
	// YarnExitStatus is the NodeManager's exitCode for the container
	// (YARN): a kill's ContainerExitStatus (-104 over its physical memory,
	// -105 by the ApplicationMaster), else ExitCode; Diagnostics its text.
	YarnExitStatus int
	Diagnostics    string

	Switches []Switch

	Lost     bool // Hadoop 1: removed by its TaskTracker before it reported its pid; it lives on until Close
	Orphaned bool // its daemon was killed: it lives on, unwatched; ExitCode stays -1

	WorkDir string // the process's working directory
	LogDir  string // its container log directory, or Hadoop 1 userlogs/<job>/<first attempt>
}

// Done reports whether the process has ended or is no longer followed.
func (a *AttemptResult) Done() bool { return !a.End.IsZero() || a.Lost || a.Orphaned }

// JobResult is what a finished job ran.
type JobResult struct {
	JobID, AppID string
	Kind         JobKind
	Start, End   time.Time
	Attempts     []AttemptResult // in start order
}

// NodeInfo describes a worker node.
type NodeInfo struct {
	Name     string
	Kind     NodeKind // NodeYARN or NodeHadoop1
	Dir      string   // the node's root
	ConfDir  string   // HADOOP_CONF_DIR: yarn-site.xml or mapred-site.xml
	LocalDir string   // yarn.nodemanager.local-dirs / mapred.local.dir
	LogDir   string   // yarn.nodemanager.log-dirs / hadoop.log.dir
	PID      int      // the NodeManager or TaskTracker stand-in
	// PIDFile holds PID, as Hadoop's daemon scripts write it:
	// <root>/pids/yarn-<user>-nodemanager.pid, hadoop-<user>-tasktracker.pid.
	PIDFile string
	// WebAddress is the NodeManager's web address (host:port): GET
	// http://<WebAddress>/ws/v1/node/containers lists its containers
	// (https://, with SPNEGO, on a secured cluster).
	WebAddress string
	// UmbilicalAddress is the TaskTracker's task report address (host:port).
	UmbilicalAddress string
	Alive            bool
}

// EventKind names an Event.
type EventKind string

// The events a cluster reports through Options.Notify.
const (
	EventJobSubmitted   EventKind = "job-submitted"
	EventProcessStarted EventKind = "process-started" // Process has its pids
	EventAttemptStarted EventKind = "attempt-started" // a JVM began an attempt (Process.Switches' last)
	EventProcessExited  EventKind = "process-exited"
	EventProcessLost    EventKind = "process-lost"
	EventJobFinished    EventKind = "job-finished"
	EventNodeLost       EventKind = "node-lost"
)

// Event is something that happened in the cluster.
type Event struct {
	Kind    EventKind
	Time    time.Time
	JobID   string
	Node    string
	Process AttemptResult
	Err     error // for job-finished
}

// StreamOptions shape the endless job mix of RunStream.
type StreamOptions struct {
	// Concurrency is how many jobs run at a time (default: one per node).
	Concurrency int
	// Kinds limits the job kinds (default: every kind the nodes can run).
	Kinds []JobKind
	// AnomalyRate is the share of jobs with an anomaly (straggler, skew,
	// leak, GC-bound, oversized, lost Child, fork storm); default 0.25, negative for none.
	AnomalyRate float64
	// Seed seeds the job mix (0: from the clock).
	Seed int64
	// MaxJobs stops after that many jobs were submitted (0: until ctx is done).
	MaxJobs int
	// First are submitted before the mix (they count as its jobs).
	First []JobSpec
}

// ProfiledStraggler is a job whose straggler shows where its time goes: 30
// maps in waves (25 s each; their time in a sleep standing for slow input,
// a lock a thread of their own holds, and a hot loop: the methods of
// JobSpec.InputWait, LockWait and TaskCPU), map 0 of which reads its input
// 5 minutes longer. The analysis names it a straggler while siblings of
// later waves still run: a profile of each over the same window shows what
// the straggler does more (taskscope demo submits one first).
func ProfiledStraggler() JobSpec {
	return JobSpec{Kind: JobMapReduce, Name: "sessionize-clicks-slow-disk", User: "analytics", Queue: "etl", Maps: 30, NoReduces: true,
		TaskCPU: 2 * time.Second, Hold: 25 * time.Second, InputWait: 5 * time.Second, LockWait: 3 * time.Second,
		SlowMap: 5 * time.Minute, TaskMemMB: 48, MemoryMB: 1024}
}
