// Package tracker finds every process of every task attempt on a node and
// samples it: job -> attempt -> process. Each tick it lists /proc, classifies
// only the pids it has not seen (command line and, when needed, cgroup and
// environment are read once per process), samples the tracked ones through
// the metric sources of package collect, and reports to a Sink.
//
// Attribution rules (from Hadoop's sources, see docs/architecture.md):
// a process belongs to a unit (a YARN container, or a Hadoop 1 task JVM) when
// its command line names one (task JVMs and their wrappers), when its parent
// belongs to one, when it was reparented to init and its session leader
// belongs to one, or when its cgroup or its environment (CONTAINER_ID,
// mapreduce_task_attempt_id) names one. A unit runs one attempt at a time;
// a reused JVM or container switches attempts, and its processes get a new
// membership each time.
//
// CPU that adds up to what wait4 reports: the kernel adds a reaped child's
// CPU (its scheduler runtime, as /proc/PID/stat shows it) to its parent's
// cutime/cstime. An exited process's CPU is therefore settled by the
// cutime growth of the process that reaped it: a tracked parent sampled in
// the same tick, or an untracked one (the NodeManager, the TaskTracker,
// init) whose stat is read right after each listing, the growth split among
// the processes it reaped in proportion to their estimates. Exit records
// (taskstats) tell when and how a process ended and give the CPU of those
// the tracker never saw: each thread's scheduler runtime at its exit, exact
// but for what the exit itself costs after the record (a JVM's 10-20 ms),
// so they estimate the rest, and the growth settles it.
package tracker

import (
	"cmp"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
	"golang.org/x/sys/unix"
)

// Config configures a Tracker.
type Config struct {
	FS      *procfs.FS
	Host    string
	Collect collect.Config
	// Exits, when set, gives the exact CPU of every exiting process
	// (taskstats). Without it, the CPU of exited children is taken from
	// their parents' cutime/cstime, and a process whose parent is not
	// tracked is charged what it had used at its last sample.
	Exits ExitSource
	// CgroupPrefix is the YARN cgroup hierarchy name (yarn.nodemanager.
	// linux-container-executor.cgroups.hierarchy), "hadoop-yarn" by default.
	CgroupPrefix string
	// SelfPID is ignored (the agent itself). 0: os.Getpid().
	SelfPID int32
	Log     *slog.Logger
	// Lost configures the search for lost and runaway task processes (orphans.go).
	Lost LostConfig
	// CgroupRoot is where the cgroup controllers are mounted (default
	// /sys/fs/cgroup; "-": none), for the OOM kills in containers' memory
	// cgroups (oom.go).
	CgroupRoot string
	// Scope limits the tracker to one daemon's tasks (scope.go).
	Scope Scope
	// Groups, when set, gives the scheduler totals of a whole thread group
	// (taskstats.Querier): a JVM's time on a CPU and waiting for one over
	// all its threads. Without it they are its leader thread's.
	Groups ThreadGroups
}

// ThreadGroups reads the scheduler totals of thread groups.
type ThreadGroups interface {
	ThreadGroup(tgid int32, g *taskstats.Group) error
}

// Stats are the tracker's counters.
type Stats struct {
	Ticks      uint64
	Scanned    int // pids listed at the last tick
	Tracked    int // processes tracked at the last tick
	Units      int
	New        uint64 // processes classified, cumulative
	Attributed uint64 // processes attributed to an attempt, cumulative
	Exited     uint64 // tracked processes that exited, cumulative
	ShortLived uint64 // processes never sampled whose CPU was charged from exit records
	ReadErrors uint64 // reads of optional files that failed (not counting vanished processes)
	Vanished   uint64 // reads that failed because the process had just exited
	IdleSkips  uint64 // samples of processes that had not run, kept without reading more than their runtime
	// ListingsReused counts ticks whose /proc listing was the last one
	// again (nothing created or reaped since: procfs.Lister).
	ListingsReused uint64
	ExitRecords    uint64 // taskstats records received
	// ExitOverflows counts the times the exit records' socket overflowed,
	// ExitRecordsDropped the records the kernel dropped then (ExitSource's).
	ExitOverflows, ExitRecordsDropped uint64
	// ExitsWithoutRecord counts tracked processes that exited without their
	// exit record though exit records are on (the kernel dropped it: the
	// socket was full): what they used after their last sample is estimated.
	ExitsWithoutRecord uint64
	Unclaimed          uint64 // exit records of processes that were no task's (or whose ancestry was lost)
	// NMPollErrors counts the polls of NodeManagers that failed (nmpoll.go).
	NMPollErrors uint64
	// ExitCorrectionMs is how much the CPU estimates of exited processes
	// exceeded what their reapers' cutime/cstime showed, cumulative (signed).
	ExitCorrectionMs int64
}

// Tracker keeps the state of one node. It is not safe for concurrent use.
type Tracker struct {
	cfg          Config
	lister       *procfs.Lister
	entries      []procfs.PidEntry
	procs        map[int32]*proc
	units        map[string]*unit
	apps         map[string]string // application id -> framework, as its units told
	sources      []collect.Source
	setters      []setter
	metrics      []string
	idx          metricIndex
	cycle        uint64
	bootMs       int64 // when the machine booted, ms: btime's second, made exact at the first tick
	btimeMs      int64 // btime's second, ms: what process keys are made from (stable across restarts)
	bootFixed    bool
	buf          []byte
	cmdBuf       []byte
	stat         procfs.Stat
	sched        procfs.Schedstat
	status       procfs.Status
	newProcs     []*proc
	recs         map[int32]*heldRecord // exit records of tracked processes, until they vanish
	orphanRecs   []*heldRecord         // records not yet attributable
	attVals      []int64
	stats        Stats
	sink         Sink
	srcErrs      map[string]uint64
	log          *slog.Logger
	exact        bool
	users        map[uint32]string
	target       collect.Target
	nowMs        int64
	reused       []*proc
	again        []*proc // to classify once more (seen between fork and exec)
	orphanByPID  map[int32]*heldRecord
	orphanExited map[int32]bool
	takeExitFn   func(*taskstats.Record)
	reapers      map[int32]*reaper // untracked parents of tracked processes
	bootClock    func() int64      // ms since boot (CLOCK_BOOTTIME, as /proc's start times)
	bootNowMs    int64             // bootClock at this tick's listing
	ncpu         int
	lost         *lostState // orphans.go
	scope        scopeState // scope.go
	closing      []*closing // exits.go: ended containers' attempts whose end may still be told
	heldNew      int        // new processes of this tick whose stat is held (readNewStat)

	debugUnclaimed func(*taskstats.Record)   // tests
	debugClassify  func(p *proc, why string) // tests
	debugExit      func(p *proc, attempt string, own, children, final, charge int64, charged bool)
	debugReap      func(r *reaper, it reapItem, avail, est int64) // settleReapers: each item, before it is settled
	// debugSched gets the time from a sample's read of the stat to its
	// read of the scheduler figures (negative: those came first).
	debugSched func(p *proc, statToSched time.Duration)
}

// metricIndex holds the positions of the metrics the tracker sums per attempt.
type metricIndex struct {
	cpuUser, cpuSys, cpuCUser, cpuCSys, rss, pss, vms, read, write, heap, gc, run, wait, threads int
}

// New returns a Tracker. Nothing is read until the first Tick.
func New(cfg Config) (*Tracker, error) {
	if cfg.FS == nil {
		fs := procfs.NewFS("")
		cfg.FS = &fs
	}
	if cfg.Collect.FS == nil {
		cfg.Collect.FS = cfg.FS
	}
	if cfg.CgroupPrefix == "" {
		cfg.CgroupPrefix = "hadoop-yarn"
	}
	if cfg.SelfPID == 0 {
		cfg.SelfPID = int32(os.Getpid())
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	btime, err := cfg.FS.BootTime()
	if err != nil {
		return nil, err
	}
	t := &Tracker{
		cfg:     cfg,
		lister:  cfg.FS.NewLister(),
		procs:   make(map[int32]*proc, 1024),
		units:   map[string]*unit{},
		apps:    map[string]string{},
		bootMs:  btime * 1000,
		btimeMs: btime * 1000,
		buf:     make([]byte, 0, 8192),
		cmdBuf:  make([]byte, 0, 8192),
		recs:    map[int32]*heldRecord{},
		srcErrs: map[string]uint64{},
		log:     cfg.Log,
		exact:   cfg.Exits != nil,
		users:   map[uint32]string{},
		reapers: map[int32]*reaper{},
		bootClock: func() int64 {
			var ts unix.Timespec
			if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
				return 0
			}
			return ts.Nano() / 1e6
		},
		ncpu: runtime.NumCPU(),
	}
	t.sources = collect.Enabled(&t.cfg.Collect)
	for i, s := range t.sources {
		t.setters = append(t.setters, setter{t: t, off: len(t.metrics)})
		_ = i
		t.metrics = append(t.metrics, s.Metrics()...)
	}
	if len(t.metrics) > 64 {
		return nil, errors.New("tracker: more than 64 process metrics")
	}
	find := func(name string) int {
		for i, m := range t.metrics {
			if m == name {
				return i
			}
		}
		return -1
	}
	t.idx = metricIndex{
		cpuUser: find(wire.CPUUserMs), cpuSys: find(wire.CPUSysMs),
		cpuCUser: find(wire.CPUChildUserMs), cpuCSys: find(wire.CPUChildSysMs),
		rss: find(wire.RSSBytes), pss: find(wire.PSSBytes), vms: find(wire.VMSBytes),
		read: find(wire.ReadBytes), write: find(wire.WriteBytes), heap: find(wire.HeapUsedBytes),
		gc: find(wire.GCTimeMs), run: find(wire.SchedRunNs), wait: find(wire.SchedWaitNs), threads: find(wire.Threads),
	}
	t.attVals = make([]int64, len(wire.AttemptMetrics))
	return t, nil
}

// ProcessMetrics are the names of the values of ProcessSample, in order.
func (t *Tracker) ProcessMetrics() []string { return t.metrics }

// AttemptMetrics are the names of the values of AttemptSample, in order.
func (t *Tracker) AttemptMetrics() []string {
	out := make([]string, len(wire.AttemptMetrics))
	for i, m := range wire.AttemptMetrics {
		out[i] = m.Name
	}
	return out
}

// Sources are the enabled metric sources.
func (t *Tracker) Sources() []collect.Source { return t.sources }

// Stats returns the counters.
func (t *Tracker) Stats() Stats { return t.stats }

// SourceErrors returns read errors per source, cumulative.
func (t *Tracker) SourceErrors() map[string]uint64 { return t.srcErrs }

// Exact reports whether exited processes' CPU comes from exit records.
func (t *Tracker) Exact() bool { return t.exact }

// Close releases every held file and the exit source.
func (t *Tracker) Close() error {
	t.closeLost()       // orphans.go
	t.closeOOMWatches() // oom.go
	for _, p := range t.procs {
		if p.t != nil && p.t.h != nil {
			p.t.h.Close()
		}
	}
	for _, r := range t.reapers {
		r.h.Close()
	}
	t.lister.Close()
	if t.cfg.Exits != nil {
		return t.cfg.Exits.Close()
	}
	return nil
}

type setter struct {
	t   *Tracker
	off int
	p   *tracked
}

func (s *setter) Set(i int, v int64) {
	j := s.off + i
	s.p.vals[j] = v
	s.p.present |= 1 << uint(j)
}

// Tick lists /proc, classifies new processes, samples the tracked ones and
// reports everything to sink, stamped with now.
func (t *Tracker) Tick(now time.Time, sink Sink) error {
	t.cycle++
	t.stats.Ticks++
	t.sink = sink
	// Every series needs increasing times: two ticks within one millisecond
	// (a late ticker fires twice) or a clock stepped back keep them apart.
	ms := max(now.UnixMilli(), t.nowMs+1)
	t.nowMs = ms
	entries, err := t.lister.List(t.entries[:0])
	t.bootNowMs = t.bootClock()
	if !t.bootFixed {
		// btime is whole seconds: processes' starts from it would be up to
		// a second early, and attempts that long. The wall clock less the
		// time since boot is exact (when it agrees with btime: a procfs of
		// this machine).
		t.bootFixed = true
		if cand := ms - t.bootNowMs; t.bootNowMs > 0 && cand >= t.btimeMs-1000 && cand < t.btimeMs+2000 {
			t.bootMs = cand
		}
	}
	t.entries = entries
	if err != nil {
		return err
	}
	t.stats.Scanned = len(entries)
	t.stats.ListingsReused = t.lister.Reused()
	t.readReapers()
	t.newProcs = t.newProcs[:0]
	for _, e := range entries {
		p := t.procs[e.PID]
		if p != nil {
			if p.ino == e.Ino {
				p.seen = t.cycle
				continue
			}
			// A new inode: the pid may belong to a new process now.
			if t.readStat(e.PID, nil) == nil && t.stat.StartTime == p.startTicks {
				p.ino, p.seen = e.Ino, t.cycle
				continue
			}
			// Handled after the exit records are in.
			t.reused = append(t.reused, p)
			delete(t.procs, e.PID)
		}
		if e.PID == t.cfg.SelfPID {
			t.procs[e.PID] = &proc{pid: e.PID, ino: e.Ino, seen: t.cycle, state: stIgnored}
			continue
		}
		np := &proc{pid: e.PID, ino: e.Ino, seen: t.cycle}
		if err := t.readNewStat(np); err != nil {
			continue // vanished already; unreadable stat is not a process we can use
		}
		np.setStat(&t.stat)
		t.procs[e.PID] = np
		t.newProcs = append(t.newProcs, np)
	}
	t.scopeDaemon() // scope.go
	// Parents start before their children: classify in start order.
	slices.SortFunc(t.newProcs, func(a, b *proc) int {
		if a.startTicks != b.startTicks {
			return cmp.Compare(a.startTicks, b.startTicks)
		}
		return cmp.Compare(a.pid, b.pid)
	})
	// Second looks first: a process seen before its exec last tick may be
	// the parent of this tick's new ones.
	again := t.again
	t.again = nil
	for _, p := range again {
		if p.seen == t.cycle && p.t == nil && t.procs[p.pid] == p {
			p.state, p.kind = stIgnored, hadoop.KindNone
			t.classify(p, ms)
		}
	}
	for _, p := range t.newProcs {
		t.stats.New++
		t.classify(p, ms)
	}
	for _, p := range t.newProcs {
		if p.h != nil { // no task's (or not yet)
			p.h.Close()
			p.h = nil
		}
	}
	t.heldNew = 0
	// Every process that left /proc before the listing has sent its exit
	// record by now: drain before sweeping.
	t.drainExits()
	// Exits children first (a child starts after its parent): a parent that
	// exited in the same interval must still be there to take its child's
	// CPU, which the kernel put in its cutime.
	gone := t.reused
	for _, p := range t.procs {
		if p.seen != t.cycle && (p.t != nil || p.zombieLife != 0) {
			gone = append(gone, p)
		}
	}
	// A parent and the child it forked at once share a start tick: then the
	// higher pid is the child (pids wrap around rarely).
	slices.SortFunc(gone, func(a, b *proc) int {
		if a.startTicks != b.startTicks {
			return cmp.Compare(b.startTicks, a.startTicks)
		}
		return cmp.Compare(b.pid, a.pid)
	})
	for i, p := range gone {
		t.gone(p, ms)
		gone[i] = nil
	}
	t.reused = gone[:0]
	t.settleReapers()
	for pid, p := range t.procs {
		if p.seen != t.cycle {
			delete(t.procs, pid)
		}
	}
	t.sampleUnits(ms)
	t.watchEnds(ms) // exits.go
	t.watchReapers()
	t.expireRecords()
	t.checkLost(ms) // orphans.go
	return nil
}

// maxHeldNew bounds the new processes of a tick whose stat stays open
// until they are classified (readNewStat): the descriptors a burst of new
// processes can hold.
const maxHeldNew = 256

// readNewStat reads a new process's stat into t.stat and, when its parent
// is tracked (then it is a task's too), for up to maxHeldNew processes a
// tick, keeps it open in p.h until the process is classified: its first
// sample reads it again through the same descriptor (no second open, and
// no close of a file of a process that may be gone by then). Another's is
// closed at once, while it lives.
func (t *Tracker) readNewStat(p *proc) error {
	if t.heldNew >= maxHeldNew {
		return t.readStat(p.pid, nil)
	}
	h, b, err := t.cfg.FS.OpenProcFile(p.pid, procfs.FileStat, t.buf)
	t.buf = b
	if err != nil {
		return err
	}
	err = procfs.ParseStat(b, &t.stat)
	if par := t.procs[t.stat.PPID]; err != nil || par == nil || par.t == nil {
		h.Close()
		return err
	}
	p.h = h
	t.heldNew++
	return nil
}

// readStat reads /proc/PID/stat into t.stat, through h when given.
func (t *Tracker) readStat(pid int32, h *procfs.Proc) error {
	var err error
	if h != nil {
		t.buf, err = h.Read(procfs.FileStat, t.buf)
	} else {
		t.buf, err = t.cfg.FS.ReadPidFile(pid, "stat", t.buf)
	}
	if err != nil {
		return err
	}
	return procfs.ParseStat(t.buf, &t.stat)
}

func (t *Tracker) startMs(ticks uint64) int64 {
	return t.bootMs + int64(ticks)*1000/procfs.UserHZ
}

// KeyStartOffsetMs is how much later the starts the tracker reports are
// than the starts their process keys are made from (wire.Batch's
// KeyStartOffsetMs): the exact boot time over btime's second.
func (t *Tracker) KeyStartOffsetMs() int64 { return t.bootMs - t.btimeMs }

// keyMs is a process's start as its key has it: from btime alone, so that
// an agent that starts again gives a process the key it had.
func (t *Tracker) keyMs(ticks uint64) int64 {
	return t.btimeMs + int64(ticks)*1000/procfs.UserHZ
}

func (t *Tracker) countErr(source string, err error) {
	if procfs.IsGone(err) {
		t.stats.Vanished++
		return
	}
	if err == procfs.ErrUnavailable {
		return // counted when it was found unavailable (that error says why)
	}
	t.stats.ReadErrors++
	t.srcErrs[source]++
}
