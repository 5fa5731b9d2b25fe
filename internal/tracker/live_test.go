package tracker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

func TestMain(m *testing.M) {
	simulator.RunDaemonIfRequested()
	os.Exit(m.Run())
}

// recSink records what the tracker reports.
type recSink struct {
	mu       sync.Mutex
	attempts map[string]wire.Attempt
	lastCPU  map[string]int64 // attempt -> cpu_ms of its last sample
	procs    map[uint64]wire.Process
	members  []wire.Membership
	events   []wire.Event
}

func newRecSink() *recSink {
	return &recSink{attempts: map[string]wire.Attempt{}, lastCPU: map[string]int64{}, procs: map[uint64]wire.Process{}}
}

func (s *recSink) Process(p *wire.Process)                      { s.procs[p.Key] = *p }
func (s *recSink) Attempt(a *wire.Attempt)                      { s.attempts[a.AttemptID] = *a }
func (s *recSink) Membership(m *wire.Membership)                { s.members = append(s.members, *m) }
func (s *recSink) Event(e *wire.Event)                          { s.events = append(s.events, *e) }
func (s *recSink) ProcessSample(uint64, int64, []int64, uint64) {}
func (s *recSink) AttemptSample(id string, ms int64, vals []int64, present uint64) {
	s.lastCPU[id] = vals[0]
}

// truthOf returns TASKSCOPE_SIM_UNIT and the cluster id of a process.
func truthOf(pid int32) (unit, cluster string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/environ")
	if err != nil {
		return "", ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(simulator.EnvUnit+"=")); ok {
			unit = string(v)
		}
		if v, ok := bytes.CutPrefix(kv, []byte(simulator.EnvCluster+"=")); ok {
			cluster = string(v)
		}
	}
	return unit, cluster
}

// live drives a tracker beside a simulated cluster and checks, at every
// tick, each process the simulator started against its ground truth.
type live struct {
	t       *testing.T
	tr      *Tracker
	sink    *recSink
	cluster string
	exact   bool
	// truth unit -> attempts the tracker put its processes in
	seen map[string]map[string]bool
	// processes of the cluster the tracker did not track, by pid (seen twice or more)
	missed map[int32]int
	wrong  []wrongAttempt
	// task JVMs sampled, and those whose scheduler runtime was not their
	// CPU (with thread group totals, it is all their threads')
	jvmSamples int
	wrongSched []string
	// schedGap is, per pid, the time from this tick's read of its stat to
	// its read of the scheduler figures (negative: those came first).
	schedGap map[int32]time.Duration
	// the largest gap seen, and how far the runtime was ahead of the CPU then
	maxGap   time.Duration
	maxAhead int64
}

// wrongAttempt is a process the tracker put in another attempt than its truth.
type wrongAttempt struct {
	at   time.Time
	unit string
	a    AttemptView
	cmd  string
}

func newLive(t *testing.T, c *simulator.Cluster, exact bool) *live {
	return newLiveWith(t, c, exact, collect.Config{PSSEvery: 0})
}

// newLiveWith is newLive with the metric sources of coll (its FS is /proc).
func newLiveWith(t *testing.T, c *simulator.Cluster, exact bool, coll collect.Config) *live {
	fs := procfs.NewFS("/proc")
	coll.FS = &fs
	cfg := Config{FS: &fs, Host: "test", Collect: coll}
	if exact {
		l, err := taskstats.Listen()
		if err != nil {
			t.Fatalf("taskstats: %v (the tests run as root)", err)
		}
		cfg.Exits = l
		q, err := taskstats.NewQuerier()
		if err != nil {
			t.Fatalf("taskstats: %v (the tests run as root)", err)
		}
		t.Cleanup(func() { q.Close() })
		cfg.Groups = q
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if os.Getenv("DEBUG_LIVE") != "" {
		tr.records.debugUnclaimed = func(r *taskstats.Record) {
			if r.CPUMs() > 2 {
				t.Logf("unclaimed exit record: pid %d tid %d ppid %d %s cpu %d ms", r.PID, r.TID, r.PPID, r.Comm, r.CPUMs())
			}
		}
		tr.ledger.debugReap = func(r *reaper, it reapItem, avail, est int64) {
			t.Logf("reaper %d: cutime grew %d ms (less its other children's records), estimates %d: %s life %d part %d doubt %d",
				r.pid, avail, est, it.a.info.AttemptID, it.life, it.part, it.doubt())
		}
		tr.acct.debugExit = func(p *proc, att string, own, children, final, charge int64, charged bool) {
			t.Logf("exit pid %d ppid %d %s: own %d children %d record %d -> %d charged %v (%s) rss %d vms %d threads %d pending %d certain %d pendDoubt %d",
				p.pid, p.ppid, p.t.comm, own, children, final, charge, charged, att, val(p.t, tr.idx.rss), val(p.t, tr.idx.vms), val(p.t, tr.idx.threads),
				p.t.pending, p.t.certain, p.t.pendDoubt)
		}
		tr.attr.debugClassify = func(p *proc, why string) {
			if u, cl := truthOf(p.pid); cl != "" || u != "" {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(int(p.pid)) + "/cmdline")
				t.Logf("classify pid %d ppid %d (%s): %s  [now: %.80s]", p.pid, p.ppid, u, why, strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
	}
	l := &live{t: t, tr: tr, sink: newRecSink(), cluster: c.ID(), exact: exact,
		seen: map[string]map[string]bool{}, missed: map[int32]int{}, schedGap: map[int32]time.Duration{}}
	tr.debugSched = func(p *proc, gap time.Duration) { l.schedGap[p.pid] = gap }
	return l
}

func (l *live) tick() {
	clear(l.schedGap)
	if err := l.tr.Tick(time.Now(), l.sink); err != nil {
		l.t.Fatal(err)
	}
	if l.tr.cfg.Groups != nil {
		l.checkSched()
	}
	where := map[int32]AttemptView{}
	for _, j := range l.tr.View() {
		for _, a := range j.Attempts {
			for _, p := range a.Processes {
				where[p.PID] = a
			}
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		unit, cl := truthOf(int32(pid))
		if cl != l.cluster || unit == "" {
			continue
		}
		a, ok := where[int32(pid)]
		if !ok {
			l.missed[int32(pid)]++
			continue
		}
		if l.seen[unit] == nil {
			l.seen[unit] = map[string]bool{}
		}
		l.seen[unit][a.AttemptID] = true
		if !matches(unit, a) {
			cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			l.wrong = append(l.wrong, wrongAttempt{at: time.Now(), unit: unit, a: a, cmd: strings.ReplaceAll(string(cmd), "\x00", " ")})
		}
	}
}

// matches says whether the tracker's attempt is right for a process whose
// truth is unit: the attempt itself, or for a unit that runs several
// attempts (a container, a reused Hadoop 1 JVM) the unit or one of its attempts.
func matches(unit string, a AttemptView) bool {
	if a.AttemptID == unit {
		return true
	}
	if strings.HasPrefix(unit, "container_") {
		return a.ContainerID == unit
	}
	// A Tez container is idle (its own pseudo-attempt) until its first
	// attempt writes its syslog.
	if at, ok := hadoop.ParseAttempt(unit); ok && at.Tez && a.AttemptID == a.ContainerID {
		return true
	}
	if strings.HasPrefix(unit, "jvm_") {
		_, ok := hadoop.ParseAttempt(a.AttemptID)
		return ok
	}
	return false
}

// run submits spec and ticks every interval until the job is done and its
// processes are gone, then a few more ticks.
func (l *live) run(c *simulator.Cluster, spec simulator.JobSpec, interval time.Duration) *simulator.JobResult {
	return l.runAll(c, []simulator.JobSpec{spec}, interval, 90*time.Second)[0]
}

// runAll submits every spec at once and ticks every interval until all the
// jobs are done and their processes gone, then a few ticks more.
func (l *live) runAll(c *simulator.Cluster, specs []simulator.JobSpec, interval, timeout time.Duration) []*simulator.JobResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var jobs []*simulator.Job
	for _, s := range specs {
		j, err := c.Submit(ctx, s)
		if err != nil {
			l.t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for _, j := range jobs {
	wait:
		for {
			select {
			case <-ctx.Done():
				l.t.Fatalf("job %s did not finish", j.ID)
			case <-j.Done():
				break wait
			case <-tk.C:
				l.tick()
			}
		}
	}
	for i := 0; i < 3; i++ {
		<-tk.C
		l.tick()
	}
	var out []*simulator.JobResult
	for _, j := range jobs {
		res, err := j.Wait(ctx)
		if err != nil {
			l.t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

// checkSched compares each JVM's scheduler runtime (its thread group's,
// from taskstats) with its CPU (stat's utime+stime): the same time, but
// for stat's clock ticks (10 ms each of user and system time, truncated)
// and what the JVM's threads ran between the two reads. That is bounded
// by the time between the reads on every CPU the JVM may use, and that
// time is measured: the agent can be preempted between them, longer than
// a tick on a loaded machine, while the JVM's threads run (JIT compilers
// at its start): "scheduler runtime 748 ms ahead of CPU" was that, with
// a fixed bound. The leader thread's runtime alone would fall far below.
func (l *live) checkSched() {
	tr := l.tr
	for _, p := range tr.procs {
		if p.t == nil || !p.t.launch.Kind.IsJVM() || p.t.vanished || p.t.age < 2 {
			continue
		}
		gap, ok := l.schedGap[p.pid]
		if !ok || p.t.exiting {
			continue // not read in full this tick (idle), or its figures kept while it exits
		}
		v := p.t.vals
		run := v[tr.idx.run] / 1e6
		cpu := v[tr.idx.cpuUser] + v[tr.idx.cpuSys]
		l.jvmSamples++
		ran := (gap.Abs().Milliseconds() + 1) * int64(min(max(p.t.threads, 1), int64(tr.acct.ncpu)))
		lo, hi := int64(-20), int64(0)
		if gap >= 0 {
			hi += ran
		} else {
			lo -= ran
		}
		if gap.Abs() > l.maxGap.Abs() {
			l.maxGap, l.maxAhead = gap, run-cpu
		}
		if d := run - cpu; d < lo || d > hi+20 {
			l.wrongSched = append(l.wrongSched, fmt.Sprintf("pid %d (%s): scheduler runtime %d ms, CPU %d ms, read %s apart on %d threads",
				p.pid, p.t.comm, run, cpu, gap, p.t.threads))
		}
	}
}

func (l *live) check(res *simulator.JobResult) {
	t := l.t
	t.Helper()
	if l.tr.cfg.Groups != nil {
		if l.jvmSamples == 0 {
			t.Error("no task JVM sampled")
		}
		t.Logf("JVMs' scheduler figures read up to %s after their stat (runtime then %d ms ahead of CPU), %d samples",
			l.maxGap, l.maxAhead, l.jvmSamples)
		for _, w := range l.wrongSched {
			t.Error(w)
		}
	}
	for _, w := range l.wrong {
		if idleContainer(res, w) {
			continue
		}
		t.Errorf("wrong attempt: %s -> %s (%s): %s", w.unit, w.a.AttemptID, w.a.ContainerID, w.cmd)
	}
	// A process seen in two ticks or more must have been tracked.
	for pid, n := range l.missed {
		if n >= 2 {
			t.Errorf("pid %d of the cluster was never tracked (%d ticks)", pid, n)
		}
	}
	for _, a := range res.Attempts {
		if len(l.seen[a.Unit]) == 0 {
			t.Errorf("unit %s (%s %s) was never seen", a.Unit, a.Type, a.MainClass)
		}
	}
}

// idleContainer says whether w is a process of a container that had not
// begun its first attempt yet (a Tez container waiting for its task, whose
// JVM starts slowly under load): the tracker shows the container itself
// then, where the simulator's truth, given once per process tree, names
// the only attempt the container ran.
func idleContainer(res *simulator.JobResult, w wrongAttempt) bool {
	if w.a.AttemptID != w.a.ContainerID || w.a.ContainerID == "" {
		return false
	}
	for _, r := range res.Attempts {
		if r.Unit == w.unit && r.ContainerID == w.a.ContainerID && len(r.Switches) > 0 {
			// The tracker sees the attempt's log at its next tick.
			return w.at.Before(r.Switches[0].At.Add(time.Second))
		}
	}
	return false
}

// cpuOf is the tracker's total CPU for one of the simulator's process
// trees: over all the attempts it ran, those the test saw it under and
// those it can only have been reported under: a Tez container is its own
// pseudo-attempt until its first attempt begins, which may fall between
// two of the test's looks at /proc.
func (l *live) cpuOf(a simulator.AttemptResult) int64 {
	ids := map[string]bool{}
	for id := range l.seen[a.Unit] {
		ids[id] = true
	}
	for _, id := range []string{a.Unit, a.AttemptID, a.ContainerID} {
		ids[id] = id != ""
	}
	for _, s := range a.Switches {
		ids[s.AttemptID] = true
	}
	var ms int64
	for id, ok := range ids {
		if ok {
			ms += l.sink.lastCPU[id]
		}
	}
	return ms
}

// cpuDoubtOf is how far off the tracker said a's CPU may be: the CPU
// doubt of every attempt its unit ran (wire.Attempt.CPUDoubtMs).
func (l *live) cpuDoubtOf(a simulator.AttemptResult) int64 {
	ids := map[string]bool{a.Unit: true, a.AttemptID: true, a.ContainerID: true}
	for id := range l.seen[a.Unit] {
		ids[id] = true
	}
	for _, s := range a.Switches {
		ids[s.AttemptID] = true
	}
	var ms int64
	for id := range ids {
		if id != "" {
			ms += l.sink.attempts[id].CPUDoubtMs
		}
	}
	return ms
}

func (l *live) checkCPU(res *simulator.JobResult, tolerance float64) {
	l.t.Helper()
	l.checkCPUWithin(res, tolerance, 0)
}

// checkCPUWithin is checkCPU where ApplicationMasters may be off by
// floorMs (0: by 25%).
func (l *live) checkCPUWithin(res *simulator.JobResult, tolerance float64, floorMs int64) {
	t := l.t
	t.Helper()
	for _, a := range res.Attempts {
		if a.Lost || a.Orphaned || a.CPU <= 0 {
			continue
		}
		want := a.CPU.Milliseconds()
		got := l.cpuOf(a)
		diff := float64(got-want) / float64(want)
		tol := tolerance
		if raceEnabled {
			// The race detector slows the tracker five to ten times: its reads
			// interleave with exits it would otherwise see apart. CPU accuracy
			// is asserted by the run without it (make test-accuracy).
			tol = max(tol, 0.15)
		}
		if a.Type == "am" && floorMs > 0 {
			tol = max(tol, float64(floorMs)/float64(want))
		} else if a.Type == "am" {
			// An ApplicationMaster here only starts and stops a JVM (0.2 s of
			// CPU); the CPU its exit costs after the kernel's exit record,
			// 10-20 ms, is not seen when the whole tree exits within one tick.
			tol = max(tol, 0.25)
		}
		t.Logf("%s %-8s wait4 %6d ms, tracker %6d ms (%+.1f%%)", a.Unit, a.Type, want, got, diff*100)
		if diff < -tol || diff > tol {
			t.Errorf("%s: CPU %d ms, wait4 says %d ms (%+.1f%%, tolerance %.0f%%)", a.Unit, got, want, diff*100, tol*100)
		}
	}
}

func startCluster(t *testing.T, kind simulator.NodeKind) *simulator.Cluster {
	c, err := simulator.Start(context.Background(), simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 1, Kind: kind,
		MapSlots: 2, ReduceSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestLiveYARN(t *testing.T) {
	if testing.Short() {
		t.Skip("starts JVMs")
	}
	c := startCluster(t, simulator.NodeYARN)
	cases := []struct {
		name string
		spec simulator.JobSpec
	}{
		{"mapreduce", simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 2, Reduces: 1, TaskCPU: 2 * time.Second}},
		{"streaming", simulator.JobSpec{Kind: simulator.JobStreaming, Maps: 2, Reduces: 1, TaskCPU: time.Second,
			StreamCPU: 1500 * time.Millisecond, ShortLivedChildren: 60}},
		{"spark", simulator.JobSpec{Kind: simulator.JobSpark, Executors: 1, Maps: 2, TaskCPU: time.Second, PySpark: true}},
		{"tez", simulator.JobSpec{Kind: simulator.JobTez, Maps: 2, TaskCPU: 1500 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLive(t, c, true)
			res := l.run(c, tc.spec, 200*time.Millisecond)
			l.check(res)
			l.checkCPU(res, 0.03)
		})
	}
}

func TestLiveHadoop1(t *testing.T) {
	if testing.Short() {
		t.Skip("starts JVMs")
	}
	c := startCluster(t, simulator.NodeHadoop1)
	cases := []struct {
		name string
		spec simulator.JobSpec
	}{
		{"child", simulator.JobSpec{Kind: simulator.JobHadoop1, Maps: 2, Reduces: 1, TaskCPU: 2 * time.Second}},
		// /proc's CPU counts 10 ms clock ticks (user and system each): a
		// reduce of 1 s would leave its 3 % little room beyond that.
		{"jvm-reuse", simulator.JobSpec{Kind: simulator.JobHadoop1, Maps: 4, Reduces: 1, TaskCPU: 1500 * time.Millisecond, JVMReuse: -1}},
		{"streaming", simulator.JobSpec{Kind: simulator.JobHadoop1Streaming, Maps: 2, Reduces: 1, TaskCPU: time.Second,
			StreamCPU: 1500 * time.Millisecond, ShortLivedChildren: 40}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLive(t, c, true)
			res := l.run(c, tc.spec, 200*time.Millisecond)
			l.check(res)
			l.checkCPU(res, 0.03)
			if tc.spec.JVMReuse != 0 {
				// A reused JVM's attempts are told apart: every attempt the
				// simulator switched to shows as an attempt of the tracker.
				for _, a := range res.Attempts {
					var want []string
					for _, s := range a.Switches {
						want = append(want, s.AttemptID)
					}
					var got []string
					for id := range l.seen[a.Unit] {
						got = append(got, id)
					}
					sort.Strings(want)
					sort.Strings(got)
					if len(want) > 1 && strings.Join(want, ",") != strings.Join(got, ",") {
						t.Errorf("JVM %s ran %v, tracker saw %v", a.Unit, want, got)
					}
				}
			}
		})
	}
}
