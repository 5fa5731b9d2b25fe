package wire

// MetricInfo describes a well-known metric. Agents may send others; the
// server stores any metric whose name is valid, and gives these their own
// columns.
type MetricInfo struct {
	Name       string
	Unit       string // ms, bytes, count, ns
	Cumulative bool   // a counter that only grows while the process lives
	Help       string
}

// Well-known process metrics.
const (
	CPUUserMs       = "cpu_user_ms"
	CPUSysMs        = "cpu_sys_ms"
	CPUChildUserMs  = "cpu_children_user_ms"
	CPUChildSysMs   = "cpu_children_sys_ms"
	RSSBytes        = "rss_bytes"
	VMSBytes        = "vms_bytes"
	PSSBytes        = "pss_bytes"
	Threads         = "threads"
	MinorFaults     = "minflt"
	MajorFaults     = "majflt"
	ReadBytes       = "read_bytes"
	WriteBytes      = "write_bytes"
	ReadChars       = "rchar"
	WriteChars      = "wchar"
	CtxVoluntary    = "ctx_voluntary"
	CtxInvoluntary  = "ctx_involuntary"
	SchedRunNs      = "sched_run_ns"
	SchedWaitNs     = "sched_wait_ns"
	FDs             = "fds"
	HeapUsedBytes   = "heap_used_bytes"
	HeapCommitBytes = "heap_committed_bytes"
	HeapMaxBytes    = "heap_max_bytes"
	GCCount         = "gc_count"
	GCTimeMs        = "gc_time_ms"
	JVMThreads      = "jvm_threads"
)

// Well-known attempt metrics (attempt series): sums over the attempt's
// processes at one instant.
const (
	// AttemptCPUMs is all CPU of the attempt so far: live processes, exited
	// ones, and children reaped between two samples.
	AttemptCPUMs       = "cpu_ms"
	AttemptRSSBytes    = "rss_bytes"
	AttemptPSSBytes    = "pss_bytes"
	AttemptVMSBytes    = "vms_bytes"
	AttemptProcesses   = "processes"
	AttemptReadBytes   = "read_bytes"
	AttemptWriteBytes  = "write_bytes"
	AttemptHeapUsed    = "heap_used_bytes"
	AttemptGCTimeMs    = "gc_time_ms"
	AttemptSchedWaitNs = "sched_wait_ns"
	// AttemptShortLived counts the attempt's processes that lived less than
	// one sampling interval (seen only through their exit records).
	AttemptShortLived = "short_lived"
)

// ProcessMetrics lists the well-known process metrics, in the order the
// stores keep them.
var ProcessMetrics = []MetricInfo{
	{CPUUserMs, "ms", true, "CPU time in user mode (utime)"},
	{CPUSysMs, "ms", true, "CPU time in kernel mode (stime)"},
	{CPUChildUserMs, "ms", true, "user CPU of waited-for children (cutime)"},
	{CPUChildSysMs, "ms", true, "kernel CPU of waited-for children (cstime)"},
	{RSSBytes, "bytes", false, "resident set size"},
	{VMSBytes, "bytes", false, "virtual memory size"},
	{PSSBytes, "bytes", false, "proportional set size (smaps_rollup), sampled less often"},
	{Threads, "count", false, "threads"},
	{MinorFaults, "count", true, "minor page faults"},
	{MajorFaults, "count", true, "major page faults"},
	{ReadBytes, "bytes", true, "bytes read from storage (io read_bytes)"},
	{WriteBytes, "bytes", true, "bytes written to storage (io write_bytes)"},
	{ReadChars, "bytes", true, "bytes read by read(2) and the like (io rchar)"},
	{WriteChars, "bytes", true, "bytes written by write(2) and the like (io wchar)"},
	{CtxVoluntary, "count", true, "voluntary context switches"},
	{CtxInvoluntary, "count", true, "involuntary context switches"},
	{SchedRunNs, "ns", true, "time on a CPU (schedstat)"},
	{SchedWaitNs, "ns", true, "time runnable but waiting for a CPU (schedstat)"},
	{FDs, "count", false, "open file descriptors"},
	{HeapUsedBytes, "bytes", false, "JVM heap used (hsperfdata)"},
	{HeapCommitBytes, "bytes", false, "JVM heap committed (hsperfdata)"},
	{HeapMaxBytes, "bytes", false, "JVM heap max (hsperfdata)"},
	{GCCount, "count", true, "JVM garbage collections (hsperfdata)"},
	{GCTimeMs, "ms", true, "JVM time in garbage collection (hsperfdata)"},
	{JVMThreads, "count", false, "JVM live threads (hsperfdata)"},
}

// AttemptMetrics lists the well-known attempt metrics, in the order the
// stores keep them.
var AttemptMetrics = []MetricInfo{
	{AttemptCPUMs, "ms", true, "all CPU of the attempt, exited processes included"},
	{AttemptRSSBytes, "bytes", false, "sum of the processes' RSS"},
	{AttemptPSSBytes, "bytes", false, "sum of the processes' PSS"},
	{AttemptVMSBytes, "bytes", false, "sum of the processes' virtual memory"},
	{AttemptProcesses, "count", false, "live processes"},
	{AttemptReadBytes, "bytes", true, "bytes read from storage, exited processes included"},
	{AttemptWriteBytes, "bytes", true, "bytes written to storage, exited processes included"},
	{AttemptHeapUsed, "bytes", false, "sum of the JVMs' heap used"},
	{AttemptGCTimeMs, "ms", true, "JVM time in garbage collection"},
	{AttemptSchedWaitNs, "ns", true, "time runnable but waiting for a CPU"},
	{AttemptShortLived, "count", true, "processes that lived less than one sampling interval"},
}

// Event kinds.
const (
	EventProcessStart     = "process_start"
	EventProcessExit      = "process_exit"
	EventAttemptStart     = "attempt_start"
	EventAttemptEnd       = "attempt_end"
	EventAttemptSwitch    = "attempt_switch"    // a reused JVM or container began another attempt
	EventOrphan           = "orphan"            // a task process whose launcher is gone
	EventLostJVM          = "lost_jvm"          // Hadoop 1: more Child JVMs than slots
	EventUnknownContainer = "unknown_container" // the NodeManager no longer lists the container
	EventOutlived         = "outlived_job"
	EventReap             = "reap"        // the agent signalled an orphan (or would have, in dry-run)
	EventShortLived       = "short_lived" // processes that lived less than one interval, counted
)

// Roles of processes.
const (
	RoleWrapper        = "wrapper"
	RoleTaskJVM        = "task-jvm"
	RoleAppMaster      = "app-master"
	RoleExecutor       = "executor"
	RoleStreaming      = "streaming"       // the Streaming mapper or reducer started by the task JVM
	RoleStreamingChild = "streaming-child" // anything the Streaming process started
	RoleChild          = "child"           // another descendant of a task JVM
)
