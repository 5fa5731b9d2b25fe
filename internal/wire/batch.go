// Package wire is the agent -> server batch format, version 1: a protobuf
// message (docs/wire.proto), encoded and decoded here by hand with protowire so
// that decoding is strict, bounded and allocation-light. docs/wire.md
// describes it for people writing their own agents.
package wire

// Version is the batch format version this package writes and reads.
const Version = 1

// ContentType is the media type of an encoded batch.
const ContentType = "application/x-taskscope-batch"

// Batch is one agent -> server message. Everything in it is in unix
// milliseconds, bytes and counts; metric values are integers.
type Batch struct {
	Version       uint32
	AgentID       string // the agent's identity; Seq counts per AgentID
	Seq           uint64 // 1, 2, 3, ... per AgentID; a retry sends the same Seq again
	Host          string
	SentMs        int64
	Metrics       []string // metric names; Column.Metric indexes this list
	Processes     []Process
	Attempts      []Attempt
	Members       []Membership
	ProcSeries    []Series // Key is a process key
	AttemptSeries []Series // AttemptID names the attempt
	Events        []Event
	Stats         AgentStats
	// KeyStartOffsetMs is how much later the processes' StartMs are than
	// the starts their keys were made from: an agent keys a process by its
	// start from the kernel's btime (whole seconds, the same after the
	// agent restarts) and reports its exact start (btime's second made
	// exact), so that a server can check a key against the batch's host
	// (ProcessKey(host, pid, StartMs-KeyStartOffsetMs)). 0 when they agree;
	// within ±MaxKeyStartOffsetMs.
	KeyStartOffsetMs int64
	// Profiles are the stack profiles of JVMs that ended since the last
	// batch (see Profile).
	Profiles []Profile
}

// MaxKeyStartOffsetMs bounds Batch.KeyStartOffsetMs: btime is the boot
// time's second, so an exact boot time is less than a second after it
// (two, to allow for a clock read between the kernel's ticks).
const MaxKeyStartOffsetMs = 2000

// Process describes one process (pid + start time) once; later batches may
// repeat it with EndMs set when it exits.
type Process struct {
	Key     uint64 // ProcessKey(host, pid, start)
	PID     int32
	PPID    int32
	SID     int32
	StartMs int64
	EndMs   int64 // 0 while alive
	Cmdline string
	Comm    string
	Role    string
	UID     uint32
	User    string
}

// Attempt describes a task attempt, or a container that runs no attempt
// (AttemptID is then the container id). Sent when first seen and when it changes.
type Attempt struct {
	AttemptID   string
	JobID       string
	AppID       string
	ContainerID string
	Type        string // map, reduce, am, executor, tez, container, ...
	Framework   string
	FirstMs     int64
	LastMs      int64
	Ended       bool
	JobName     string
	User        string
	Queue       string
	MemoryMB    int64
	JavaOpts    string
	XmxBytes    int64
	Streaming   bool
	// How it ended, as the node showed it: each status as its source gave
	// it, sent once seen (and again in every later description of the
	// attempt); what it means (succeeded, killed for memory, ...) is the
	// server's to say (package store, Outcome).
	JVMExit  ExitStatus // the task JVM's wait status, from its taskstats exit record
	RootExit ExitStatus // the container root's (or the task process tree's top) wait status
	FileExit ExitStatus // the number in the NodeManager's container exit-code file (<container>.pid.exitcode)
	NMExit   ExitStatus // the NodeManager's exitCode for the container (REST): a ContainerExitStatus such as -104, or the exit code
	// TaskLog is what the attempt's own log said of its end (Hadoop 1's
	// userlogs/<job>/<attempt>/syslog): 0 the task said it was done
	// ("Task '<attempt>' done."), 1 it logged that it failed ("Error
	// running child"). Not a wait status.
	TaskLog ExitStatus
	// ExitDiagnostics is the NodeManager's diagnostics for the container
	// ("Container ... is running beyond physical memory limits ...").
	ExitDiagnostics string
	// OOMKills counts the kernel OOM killer's kills in the container's
	// memory cgroup while the attempt ran (memory.events oom_kill).
	OOMKills uint32
	// VCores is the virtual cores allocated to its container (or slot),
	// as YARN says them: the NodeManager's totalVCoresNeeded, or its job's
	// configuration (mapreduce.map.cpu.vcores, spark.executor.cores, ...);
	// 0 when not known.
	VCores int64
	// CPUDoubtMs says the attempt's CPU is an estimate, and by how much it
	// may be off, ms: its processes ended in the interval other
	// containers' did, reaped by the same process (a NodeManager), whose
	// CPU the tracker knows only in sum (the reaper's cutime), and an exit
	// record of one of them was lost, so how the sum splits between them
	// is a guess. 0: not such an estimate.
	CPUDoubtMs int64
}

// ExitStatus is one exit status an agent saw, and when. Ms is 0 when none
// was seen (Status 0 with Ms > 0 is a status of 0).
type ExitStatus struct {
	// Status is the status as its source gives it: a wait status for a
	// process (the exit code << 8, or the terminating signal, | 0x80 with a
	// core dump, as wait(2) and taskstats' ac_exitcode say it), the number
	// written for an exit-code file or a NodeManager.
	Status int32
	Ms     int64 // when the agent saw it, unix ms
}

// Seen reports whether the status was seen.
func (e ExitStatus) Seen() bool { return e.Ms > 0 }

// Membership says that a process belonged to an attempt from FromMs to ToMs
// (0: still). A JVM that runs several attempts (Hadoop 1 JVM reuse, Tez
// container reuse) has one membership per attempt. CPUBaseMs is the process's
// cumulative CPU when the membership began: what it spent before belongs to
// an earlier attempt.
type Membership struct {
	Process   uint64
	AttemptID string
	FromMs    int64
	ToMs      int64
	CPUBaseMs int64
	Role      string
}

// Series is a run of samples of one process or one attempt.
type Series struct {
	Key       uint64 // process key (process series)
	AttemptID string // attempt series
	Times     []int64
	Columns   []Column
}

// Column is one metric of a Series. Values has one entry per time; where
// Absent has the bit set, the value is missing and Values holds 0. An empty
// Absent is the same as nil (the encoding does not tell them apart).
type Column struct {
	Metric uint32
	Values []int64
	Absent []byte // bitmap, LSB first; nil: all present
}

// IsAbsent reports whether value i is missing.
func (c *Column) IsAbsent(i int) bool {
	return c.Absent != nil && i/8 < len(c.Absent) && c.Absent[i/8]&(1<<(i%8)) != 0
}

// Event is something that happened at an instant: a process started or
// exited, an attempt switched, a task process was orphaned, ...
type Event struct {
	Ms        int64
	Kind      string
	Process   uint64
	PID       int32
	AttemptID string
	JobID     string
	Message   string
	Value     int64
}

// AgentStats are the agent's own counters, cumulative since it started.
type AgentStats struct {
	DroppedSamples uint64 // samples the agent could not keep (queue or spool full)
	DroppedBatches uint64
	SpoolBytes     uint64
	Ticks          uint64
	Overruns       uint64
	ReadErrors     uint64
}

// SampleCount is the number of process samples in the batch.
func (b *Batch) SampleCount() int {
	n := 0
	for i := range b.ProcSeries {
		n += len(b.ProcSeries[i].Times)
	}
	return n
}

// ProcessKey is the stable 64-bit key of the process (pid, start) on host:
// FNV-1a over the host, the pid and the start time in milliseconds.
func ProcessKey(host string, pid int32, startMs int64) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(host); i++ {
		h ^= uint64(host[i])
		h *= prime
	}
	h ^= 0
	h *= prime
	for _, v := range [2]uint64{uint64(uint32(pid)), uint64(startMs)} {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	return h
}
