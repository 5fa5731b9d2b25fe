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
// init) whose stat is read around each listing, the growth split among
// the processes it reaped in proportion to their estimates. Exit records
// (taskstats) tell when and how a process ended and give the CPU of those
// the tracker never saw: each thread's scheduler runtime at its exit, exact
// but for what the exit itself costs after the record (a JVM's 10-20 ms),
// so they estimate the rest, and the growth settles it.
package tracker

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/taskscope/taskscope/internal/cgroups"
	"github.com/taskscope/taskscope/internal/collect"
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
	// ReapedAfterListing counts tracked (or new) processes that a listing
	// showed but that their reaper (the NodeManager, init) had reaped
	// before its read right after: taken as gone at that tick, so that its
	// cutime's growth settles them (reapers.go). ReapersUnsettled counts
	// the ticks a reaper kept reaping while it was read, whose growth was
	// not used.
	ReapedAfterListing, ReapersUnsettled uint64
	// SplitGuesses counts the reapers' growths split between attempts by a
	// guess (an exit record lost): those attempts' CPU is an estimate
	// (wire.Attempt.CPUDoubtMs).
	SplitGuesses uint64
	// StandingGuesses counts the attempts whose CPU holds a guess (an exit
	// record lost, a process's own or its short-lived children's) that
	// no reaper's growth settled, an attempt once: their CPU is an
	// estimate too (wire.Attempt.CPUDoubtMs).
	StandingGuesses uint64
}

// Tracker keeps the state of one node. It is not safe for concurrent use.
//
// It is the process table (which pids live, their stats, the clock) and
// the sampling of the tracked processes (sample.go, attempts.go, sweep.go);
// the rest is done by parts with their own state, each seeing the table
// through a narrow view: attribution (attributor: classify.go, unit.go,
// scope.go, daemons.go), the exit records (exitrecords.go), the reapers'
// ledger (reapers.go), memberships and CPU accounting (membership.go),
// how attempts end (exits.go, oom.go, tasklog.go), lost processes
// (orphans.go), descriptions (describe.go). docs/architecture.md has
// their map.
type Tracker struct {
	cfg   Config
	stats Stats
	errs  readErrors
	sink  Sink // this tick's

	// The process table.
	lister   *procfs.Lister
	entries  []procfs.PidEntry
	procs    map[int32]*proc
	cycle    uint64
	clock    clock
	newProcs []*proc // this tick's
	nListed  int     // the processes of the table in this tick's listing (all: nothing to sweep)
	reused   []*proc // pids found reused by the listing: gone, handled in the sweep
	heldNew  int     // new processes of this tick whose stat is held (readNewStat)
	buf      []byte
	cmdBuf   []byte
	wp       wire.Process // wireProcess's
	stat     procfs.Stat

	users map[uint32]string // user names of uids (sample.go)

	// Sampling.
	sources []collect.Source
	setters []setter
	metrics []string
	idx     metricIndex
	target  collect.Target
	sched   procfs.Schedstat
	status  procfs.Status
	group   taskstats.Group // readSched's

	// The parts.
	attr    *attributor   // classify.go, unit.go, scope.go, daemons.go
	records *exitRecords  // exitrecords.go
	ledger  *reaperLedger // reapers.go
	acct    *accountant   // membership.go
	ends    *outcomes     // exits.go
	desc    describer     // describe.go
	lost    *lostChecker  // orphans.go

	debugListed func() // tests: right after the listing, before the reapers' read
	// debugSched gets the time from a sample's read of the stat to its
	// read of the scheduler figures (negative: those came first).
	debugSched func(p *proc, statToSched time.Duration)
}

// clock is the tracker's time: this tick's, and when the machine booted
// (processes' starts count from it).
type clock struct {
	bootMs  int64 // when the machine booted, ms: btime's second, made exact at the first tick
	btimeMs int64 // btime's second, ms: what process keys are made from (stable across restarts)
	fixed   bool
	nowMs   int64 // this tick's, ms
	// bootNowMs is sinceBoot at this tick's listing. exitsFromMs is
	// sinceBoot when the tracker was made: its exit records' source
	// (Config.Exits) was open by then, so a process that started after it
	// was born under the tracker: every thread's record of it comes.
	bootNowMs, exitsFromMs int64
	sinceBoot              func() int64 // ms since boot (CLOCK_BOOTTIME, as /proc's start times)
}

// tick starts a tick at now and returns its time, ms: later than the
// last one's. Every series needs increasing times: two ticks within one
// millisecond (a late ticker fires twice) or a clock stepped back keep
// them apart.
func (c *clock) tick(now time.Time) int64 {
	c.nowMs = max(now.UnixMilli(), c.nowMs+1)
	return c.nowMs
}

// listed takes the time since boot at a listing. At the first, it makes
// the boot time exact: btime is whole seconds, so processes' starts from
// it would be up to a second early, and attempts that long. The wall
// clock less the time since boot is exact (when it agrees with btime: a
// procfs of this machine).
func (c *clock) listed() {
	c.bootNowMs = c.sinceBoot()
	if c.fixed {
		return
	}
	c.fixed = true
	if cand := c.nowMs - c.bootNowMs; c.bootNowMs > 0 && cand >= c.btimeMs-1000 && cand < c.btimeMs+2000 {
		c.bootMs = cand
	}
}

// sinceBoot is CLOCK_BOOTTIME, ms (0 if it cannot be read).
func sinceBoot() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return ts.Nano() / 1e6
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
		return nil, fmt.Errorf("cannot start tracking %s: %w", cfg.FS.Root(), err)
	}
	t := &Tracker{
		cfg:    cfg,
		lister: cfg.FS.NewLister(),
		procs:  make(map[int32]*proc, 1024),
		clock:  clock{bootMs: btime * 1000, btimeMs: btime * 1000, sinceBoot: sinceBoot, exitsFromMs: sinceBoot()},
		buf:    make([]byte, 0, 8192),
		cmdBuf: make([]byte, 0, 8192),
		users:  map[uint32]string{},
	}
	t.errs = readErrors{stats: &t.stats, bySource: map[string]uint64{}}
	t.sources = collect.Enabled(&t.cfg.Collect)
	for _, s := range t.sources {
		t.setters = append(t.setters, setter{off: len(t.metrics)})
		t.metrics = append(t.metrics, s.Metrics()...)
	}
	if len(t.metrics) > 64 {
		return nil, fmt.Errorf("cannot sample %d process metrics: at most 64", len(t.metrics))
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
	t.ledger = newReaperLedger(t, &t.stats)
	t.records = newExitRecords(cfg.Exits, t, t.ledger, &t.stats, &t.errs)
	t.acct = newAccountant(t, t.ledger, t.idx, &t.stats, cfg.Exits != nil, runtime.NumCPU())
	hier := cgroups.NewHierarchies(cfg.CgroupPrefix)
	t.attr = newAttributor(cfg.FS, t, &t.errs, &t.stats, &t.cfg.Scope, hier)
	t.ends = newOutcomes(cfg.FS, t, &t.errs, cfg.CgroupRoot, hier)
	t.desc = describer{fs: cfg.FS, errs: &t.errs}
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
func (t *Tracker) SourceErrors() map[string]uint64 { return t.errs.bySource }

// Exact reports whether exited processes' CPU comes from exit records.
func (t *Tracker) Exact() bool { return t.acct.exact }

// Close releases every held file and the exit source.
func (t *Tracker) Close() error {
	t.closeLost() // orphans.go
	t.ends.close(t.attr.units)
	for _, p := range t.procs {
		if p.t != nil && p.t.h != nil {
			p.t.h.Close()
		}
	}
	t.ledger.close()
	t.lister.Close()
	if err := t.records.close(); err != nil {
		return fmt.Errorf("cannot close the exit records' source: %w", err)
	}
	return nil
}

// setter is a metric source's way to set its values in a process's sample.
type setter struct {
	off int
	p   *tracked
}

func (s *setter) Set(i int, v int64) {
	j := s.off + i
	s.p.vals[j] = v
	s.p.present |= 1 << uint(j)
}

// Tick lists /proc, classifies new processes, samples the tracked ones and
// reports everything to sink, stamped with now. Its steps are those of
// docs/architecture.md ("One tick").
func (t *Tracker) Tick(now time.Time, sink Sink) error {
	t.cycle++
	t.stats.Ticks++
	t.sink = sink
	ms := t.clock.tick(now)
	if err := t.list(); err != nil { // 1. List
		return err
	}
	t.classifyNew()          // 2. Classify new pids
	t.records.drain(t.cycle) // 3. Drain exit records
	t.sweep(ms)              // 4. Sweep
	t.sampleUnits(ms)        // 5. Sample, 6. Report
	t.watch(ms)              // 7. Watch for ends to come
	t.checkLost(ms)          // 8. Check for lost processes (orphans.go)
	return nil
}

// list lists /proc (the reapers' stats are read right before and right
// after: a child missing from the listing was reaped before the read
// after, reapers.go), and takes the new pids (reading their stat: their
// start, their parent) and the reused ones.
func (t *Tracker) list() error {
	t.ledger.readBefore()
	entries, err := t.lister.List(t.entries[:0])
	t.clock.listed()
	t.entries = entries
	if err != nil {
		return fmt.Errorf("cannot list the processes of %s: %w", t.cfg.FS.Root(), err)
	}
	if t.debugListed != nil {
		t.debugListed()
	}
	t.stats.Scanned = len(entries)
	t.stats.ListingsReused = t.lister.Reused()
	moved := t.ledger.read()
	t.newProcs = t.newProcs[:0]
	t.nListed = 0
	for _, e := range entries {
		p := t.procs[e.PID]
		if p != nil {
			if p.ino == e.Ino {
				p.seen = t.cycle
				t.nListed++
				continue
			}
			// A new inode: the pid may belong to a new process now.
			if t.readStat(e.PID, nil) == nil && t.stat.StartTime == p.startTicks {
				p.ino, p.seen = e.Ino, t.cycle
				t.nListed++
				continue
			}
			// Handled after the exit records are in.
			t.reused = append(t.reused, p)
			delete(t.procs, e.PID)
		}
		if e.PID == t.cfg.SelfPID {
			t.procs[e.PID] = &proc{pid: e.PID, ino: e.Ino, seen: t.cycle, state: stIgnored}
			t.nListed++
			continue
		}
		np := &proc{pid: e.PID, ino: e.Ino, seen: t.cycle}
		if err := t.readNewStat(np); err != nil {
			continue // vanished already; unreadable stat is not a process we can use
		}
		np.setStat(&t.stat)
		t.procs[e.PID] = np
		t.newProcs = append(t.newProcs, np)
		t.nListed++
	}
	if moved {
		t.ledger.resolve(t)
	}
	return nil
}

// newChildren appends to dst the pids of this tick's new processes whose
// parent is ppid (the ledger's listing view).
func (t *Tracker) newChildren(ppid int32, dst []int32) []int32 {
	for _, p := range t.newProcs {
		if p.ppid == ppid {
			dst = append(dst, p.pid)
		}
	}
	return dst
}

// unlist takes pid out of this tick's listing, if it is there, with its
// descendants that are gone too: its reaper had reaped it before its read
// right after the listing (the ledger's listing view), and it had reaped
// them before it exited. A tracked process ends at this tick; a new one is
// forgotten, as one the listing missed (its exit record goes to its parent
// as a short-lived process's).
func (t *Tracker) unlist(pid int32) bool {
	p := t.procs[pid]
	if p == nil || p.seen != t.cycle {
		return false
	}
	t.unlistOne(p)
	if p.t != nil {
		for _, m := range p.t.unit.members {
			if m.seen == t.cycle && t.descends(m, pid) && t.pidGone(m.pid) {
				t.unlistOne(m)
			}
		}
	}
	for i := len(t.newProcs) - 1; i >= 0; i-- {
		if np := t.newProcs[i]; t.descends(np, pid) && t.pidGone(np.pid) {
			t.unlistOne(np)
		}
	}
	return true
}

// unlistOne takes p out of this tick's listing: a tracked process is gone
// at this tick's sweep, a new one forgotten.
func (t *Tracker) unlistOne(p *proc) {
	t.nListed--
	i := slices.Index(t.newProcs, p)
	if i < 0 {
		p.seen = t.cycle - 1
		return
	}
	t.newProcs = slices.Delete(t.newProcs, i, i+1)
	if p.h != nil {
		p.h.Close()
		p.h = nil
		t.heldNew--
	}
	delete(t.procs, p.pid)
}

// descends reports whether ancestor is p's parent, or its parent's, and so
// on (as far as the process table knows them).
func (t *Tracker) descends(p *proc, ancestor int32) bool {
	for depth := 0; depth < 32 && p != nil; depth++ {
		if p.ppid == ancestor {
			return true
		}
		p = t.procs[p.ppid]
	}
	return false
}

// classifyNew has the attributor classify this tick's new processes
// (and those it looks at again), then closes the stat files held of those
// that are no task's.
func (t *Tracker) classifyNew() {
	t.attr.classifyAll(t.cycle, t.newProcs)
	for _, p := range t.newProcs {
		if p.h != nil { // no task's (or not yet)
			p.h.Close()
			p.h = nil
		}
	}
	t.heldNew = 0
}

// watch keeps what tells of the ends to come: the outcomes part's watch
// of units and of ended containers (exits.go), the reapers of the
// tracked processes (reapers.go), the exit records not yet claimed.
func (t *Tracker) watch(ms int64) {
	t.ends.watch(t.attr.units, ms, t.sink)
	for _, u := range t.attr.units {
		for _, p := range u.members {
			if p.t.vanished || p.ppid <= 0 {
				continue
			}
			if par := t.procs[p.ppid]; par != nil && par.t != nil {
				continue
			}
			t.ledger.mark(p.ppid, p.pid, t.cycle)
		}
	}
	t.ledger.sweep(t.cycle)
	t.records.expire(t.cycle)
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
	return t.clock.bootMs + int64(ticks)*1000/procfs.UserHZ
}

// KeyStartOffsetMs is how much later the starts the tracker reports are
// than the starts their process keys are made from (wire.Batch's
// KeyStartOffsetMs): the exact boot time over btime's second.
func (t *Tracker) KeyStartOffsetMs() int64 { return t.clock.bootMs - t.clock.btimeMs }

// keyMs is a process's start as its key has it: from btime alone, so that
// an agent that starts again gives a process the key it had.
func (t *Tracker) keyMs(ticks uint64) int64 {
	return t.clock.btimeMs + int64(ticks)*1000/procfs.UserHZ
}

func (t *Tracker) countErr(source string, err error) { t.errs.count(source, err) }

// readErrors counts the reads that failed: of files of processes that had
// just exited (Stats.Vanished), and others by source (Stats.ReadErrors,
// SourceErrors). Every part of the tracker counts in the one.
type readErrors struct {
	stats    *Stats
	bySource map[string]uint64
}

func (e *readErrors) count(source string, err error) {
	if procfs.IsGone(err) {
		e.stats.Vanished++
		return
	}
	if err == procfs.ErrUnavailable {
		return // counted when it was found unavailable (that error says why)
	}
	e.stats.ReadErrors++
	e.bySource[source]++
}

// The parts' views of the process table (outcomeView, exitView,
// memberView, statReader, attributionView).

// proc is the process the tracker knows by pid (nil: none).
func (t *Tracker) proc(pid int32) *proc { return t.procs[pid] }

// listed reports whether p was in this tick's listing.
func (t *Tracker) listed(p *proc) bool { return p.seen == t.cycle }

// alive reports whether a tracked process will be sampled again.
func (t *Tracker) alive(p *proc) bool { return p.seen == t.cycle && !p.t.vanished }

// bootNow is CLOCK_BOOTTIME at this tick's listing, ms.
func (t *Tracker) bootNow() int64 { return t.clock.bootNowMs }

// pidGone reports whether pid has left /proc.
func (t *Tracker) pidGone(pid int32) bool { return t.cfg.FS.Gone(pid) }

// openProc is a handle on pid's /proc directory (nothing opened yet).
func (t *Tracker) openProc(pid int32) *procfs.Proc { return t.cfg.FS.OpenProc(pid) }

// statOf reads pid's stat (through h when given) into t.stat.
func (t *Tracker) statOf(pid int32, h *procfs.Proc) (*procfs.Stat, error) {
	if err := t.readStat(pid, h); err != nil {
		return nil, err
	}
	return &t.stat, nil
}
