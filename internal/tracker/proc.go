package tracker

import (
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
)

type procState uint8

const (
	stIgnored procState = iota
	stTracked
	stDaemon // a Hadoop daemon: remembered so that orphaned task processes can be told
)

// proc is every pid the tracker knows. Untracked ones cost a few words.
type proc struct {
	pid        int32
	ppid       int32
	sid        int32
	pgrp       int32
	ino        uint64
	seen       uint64 // cycle stamp
	startTicks uint64
	state      procState
	kind       hadoop.Kind // daemons and tracked processes
	looks      uint8       // more looks taken or queued (between fork and exec)
	fork       bool        // a daemon's fork that has not exec'd yet: launches like its daemon
	// zombieLife is the CPU (its own and its children's, ms) of a tracked
	// process that exited but was not reaped yet: what its reaper's
	// cutime will show when it reaps it, not to be charged to anyone else.
	zombieLife int64
	// zombieCredit is the part of such a zombie's last cutime no handled
	// exit accounted for (its children reaped whose exits come later),
	// charged to zombieAtt with it.
	zombieCredit int64
	zombieAtt    *attempt
	t            *tracked
	// h holds the stat read when the listing found it, until it is
	// classified: a task's first sample reads it again through it.
	h *procfs.Proc
}

func (p *proc) setStat(s *procfs.Stat) {
	p.ppid, p.sid, p.pgrp, p.startTicks = s.PPID, s.Session, s.PGRP, s.StartTime
}

// tracked is the state of a process that belongs to a unit.
type tracked struct {
	key        uint64
	startMs    int64
	comm       string
	cmdline    string
	uid        uint32
	user       string
	launch     hadoop.Launch
	role       string
	unit       *unit
	mem        *member
	h          *procfs.Proc
	vals       []int64
	present    uint64
	age        uint64 // ticks sampled
	srcState   []any
	vanished   bool
	exited     bool  // a zombie: it exited (its stat says Z), its parent has not reaped it
	exiting    bool  // its threads are exiting (PF_EXITING, or its leader exited): its last stat said so
	cpuAccount       // the CPU and IO of the children it reaps (membership.go)
	cpuPrevMs  int64 // for the snapshot's CPU percentage
	tPrevMs    int64
	cpuMs      int64
	tMs        int64
	bootMs     int64  // when it was last sampled, ms since boot
	recheckAt  uint64 // when to read the command line again (wrappers exec)
	startStack uint64 // stat's startstack: a new one means an exec
	preExec    bool   // joined before its exec: its role is settled at the recheck
	blankLooks uint8  // rechecks in a row that read an empty command line (inside an exec)
	firstTick  bool   // discovered at the tracker's first tick
	// bornUnder: it started after the tracker was made (its exit records'
	// source was open); overflows is how often the exit records' socket
	// had overflowed when it was found: while that stands, every thread's
	// exit record of it comes (membership.go's tail).
	bornUnder bool
	overflows uint64
	// sampledOverflows is how often the socket had overflowed at its last
	// sample: when that changed by its exit, exit records of children it
	// reaped since may have been lost (membership.go's lostChildren).
	sampledOverflows uint64
	commRaw          string
	// threads and runNs are from the last full read; runKnown says runNs
	// was read; groupSched: runNs and the wait come from taskstats' thread
	// group totals, not the leader's schedstat.
	threads    int64
	runNs      uint64
	runKnown   bool
	groupSched bool
	// firstGroup: its first sample's scheduler figures and context
	// switches were its thread group's (taskstats) though it had one
	// thread; later ones are its schedstat's unless that shows less.
	firstGroup bool
	// ctx is the thread group's context switches (voluntary, involuntary)
	// counted from taskstats; ctxRaw the live threads' sums last read.
	ctx, ctxRaw [2]uint64
}
