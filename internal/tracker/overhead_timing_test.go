package tracker

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// BenchmarkAgent measures the whole agent: real taskscope-agent processes,
// configured as docs/operations.md deploys them (a spool, a token file, the
// metrics listener, the defaults otherwise) and shipping to a local HTTP
// server that answers at once, each run in turn with a baseline program over
// the same Hadoop-shaped process trees (startNode). The baseline is this
// test binary re-executed as a bare Go loop (runAgentBaseline): every
// interval it lists /proc, reads stat and cmdline of each new pid to find the
// task processes (as the tick benchmarks' baseline does), and reads stat,
// statm and io of every task process (held open, one pread each).
//
//	CGO_ENABLED=0 go build -trimpath -o /tmp/ab/agent-start ./cmd/taskscope-agent   # at the commit to compare with
//	CGO_ENABLED=0 go build -trimpath -o /tmp/ab/agent-new ./cmd/taskscope-agent
//	go test -c -o /tmp/ab/tracker.test ./internal/tracker
//	cd internal/tracker && TASKSCOPE_AGENTS=start=/tmp/ab/agent-start,new=/tmp/ab/agent-new \
//	    flock /tmp/bench.lock /tmp/ab/tracker.test -test.run '^$' -test.bench 'Agent/^(50of300-1s|50of300-250ms|churn500-250ms|start)$' -test.benchtime 1x -test.count 5 -test.v | tee agent.txt
//	benchstat -filter '.unit:/ratio$/' agent.txt          # each agent's CPU per tick over the baseline's
//	awk -f testdata/benchsplit.awk agent.txt > split.txt
//	benchstat -col /impl split.txt                         # CPU per tick, the agents and the baseline
//
// Without TASKSCOPE_AGENTS it builds ./cmd/taskscope-agent and calls it
// "agent". Each iteration runs the baseline and every agent once, one
// after another (the order turns from one iteration to the next), and
// reports for each the CPU per tick in the steady state (X-cpu-ns/tick),
// each agent's ratio to the baseline (X/baseline-ratio), each agent's peak
// RSS (X-rss-MB, VmHWM) and the host's load meanwhile (host-busy-%,
// host-steal-%: /proc/stat over the runs). -test.v logs every run with
// the host's load beside it.
//
// The steady state: a run is let warm up (its first ticks classify every
// process and fill the buffers), then the CPU of its whole thread group
// (taskstats: every thread's run time, exited threads included; ns) is
// read midway between two ticks and again exactly agentWindow ticks later:
// everything the agent does (ticks, batches, compression, the spool and
// its fsync, sending, exit records, the runtime's own wake-ups) over a
// whole number of batches and PSS rounds, and nothing of its start or stop.
//
// The start: BenchmarkAgent/start runs each agent with --max-ticks 1 over 300
// processes and reports its whole CPU (wait4: start, the first tick that
// classifies every process, the one batch shipped, the exit) as X-start-cpu-ms.
//
// TASKSCOPE_AGENT_TOGETHER=1 runs the baseline and the agents of a round
// at once instead of in turn, over the same seconds: on a machine that
// other work loads unevenly (other engineers' builds, whose processes the
// agents classify and whose exit records they receive), each round's
// ratios then compare runs under the same load.
//
// TASKSCOPE_FLOOR=/path/to/floor makes the floor (../shared/bench/floor,
// built into a scratch directory: an external yardstick, not the repo's
// code) the baseline of every round instead of this test binary's loop,
// run as its README runs it (-interval as the agents', until stopped;
// TASKSCOPE_FLOOR_ARGS adds flags, e.g. -keepfd); its figures and the
// ratios are then named floor. Issue 25's steady state is 40of150-250ms
// (about 40 task processes among 150, a tick every 250 ms), its churn
// churn500-40of150-250ms; TASKSCOPE_AGENT_WARMUP=15s and
// TASKSCOPE_AGENT_WINDOW=180 measure as the floor's README does (15 s of
// warm-up, 45 s counted).
//
// TASKSCOPE_AGENT_CALLGRIND=DIR counts each agent's instructions in user
// space over its window with valgrind's callgrind (agentCallgrind).
//
// TASKSCOPE_AGENT_PERF=DIR profiles every agent's steady window with
// `perf record -e cpu-clock -g` into DIR (perf's sampling costs the
// agent: take CPU figures from runs without it); testdata/perfsplit.awk
// sorts the samples into the agent's parts.
func BenchmarkAgent(b *testing.B) {
	impls := agentImpls(b)
	for _, sc := range agentScenarios {
		b.Run(sc.name, func(b *testing.B) {
			s := startNodeWorking(b, sc.containers, 0, sc.churnTask, sc.churnOther, sc.working)
			if sc.churnTask+sc.churnOther > 0 {
				time.Sleep(time.Second) // the churn in full swing
			}
			s.fillTo(b, sc.total)
			benchAgentSteady(b, sc, impls)
		})
	}
	b.Run("start", func(b *testing.B) {
		s := startNode(b, 10, 0, 0, 0)
		s.fillTo(b, 300)
		benchAgentStart(b, impls)
	})
}

// agentScenario is a node and an interval.
type agentScenario struct {
	name                              string
	containers, churnTask, churnOther int // 5 task processes a container; new processes a second
	total                             int // processes on the node
	working                           bool
	interval                          time.Duration
}

var agentScenarios = []agentScenario{
	// The targets: 50 task processes among 300, all asleep, at 1 s and at
	// 250 ms; the same under 500 new processes a second (300 started by
	// the task JVMs, 200 by a process that is no task's).
	{name: "50of300-1s", containers: 10, total: 300, interval: time.Second},
	{name: "50of300-250ms", containers: 10, total: 300, interval: 250 * time.Millisecond},
	{name: "churn500-250ms", containers: 10, churnTask: 300, churnOther: 200, total: 300, interval: 250 * time.Millisecond},
	{name: "churn500-1s", containers: 10, churnTask: 300, churnOther: 200, total: 300, interval: time.Second},
	// Each container's JVM, mapper and sort running a little every 50 ms.
	{name: "working50of300-1s", containers: 10, total: 300, working: true, interval: time.Second},
	// A big node: 200 task processes among 3,000 and the churn.
	{name: "busy200of3000-250ms", containers: 40, churnTask: 300, churnOther: 200, total: 3000, interval: 250 * time.Millisecond},
	// Issue 25's: about 40 task processes among 150 at 250 ms (against the
	// floor, TASKSCOPE_FLOOR), asleep and working (as a node's running
	// tasks are: each JVM, mapper and sort never idle between two ticks),
	// and the same under 500 new processes a second.
	{name: "40of150-250ms", containers: 8, total: 150, interval: 250 * time.Millisecond},
	{name: "working40of150-250ms", containers: 8, total: 150, working: true, interval: 250 * time.Millisecond},
	{name: "churn500-40of150-250ms", containers: 8, churnTask: 300, churnOther: 200, total: 150, interval: 250 * time.Millisecond},
}

// agentWindow is the steady window, in ticks: a whole number of batches
// (every 5 ticks), PSS rounds and full reads of idle processes (every 10).
// TASKSCOPE_AGENT_WINDOW=N sets it (a multiple of 10; longer for a profile).
var agentWindow = func() int {
	if n, err := strconv.Atoi(os.Getenv("TASKSCOPE_AGENT_WINDOW")); err == nil && n > 0 {
		return n
	}
	return 20
}()

// agentWarmup is how long a run warms up before its window: at least 10
// intervals and 5 s (the first ticks classify every process; the churn's
// maps and buffers grow to their working size), or TASKSCOPE_AGENT_WARMUP
// (a duration; the floor's README says 15 s).
func agentWarmup(iv time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("TASKSCOPE_AGENT_WARMUP")); err == nil && d > 0 {
		return d
	}
	return max(10*iv, 5*time.Second)
}

// agentFloor is the floor program (../shared/bench/floor, built by hand:
// its code is not the repo's) to run as the baseline instead of this test
// binary's bare loop: TASKSCOPE_FLOOR=/path/to/floor, with
// TASKSCOPE_FLOOR_ARGS (space-separated, e.g. -keepfd) added to its flags.
// Its runs and ratios are then named "floor".
func agentFloor(b *testing.B) (bin string, args []string) {
	bin = os.Getenv("TASKSCOPE_FLOOR")
	if bin == "" {
		return "", nil
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("TASKSCOPE_FLOOR: %v", err)
	}
	return bin, strings.Fields(os.Getenv("TASKSCOPE_FLOOR_ARGS"))
}

// isBaseline says whether a run's name is the baseline's (this binary's
// loop, or the floor).
func isBaseline(name string) bool { return name == "baseline" || name == "floor" }

// agentImpl is one agent binary to measure.
type agentImpl struct{ name, bin string }

// agentImpls is TASKSCOPE_AGENTS (name=binary,...), or ./cmd/taskscope-agent
// built now.
func agentImpls(b *testing.B) []agentImpl {
	if env := os.Getenv("TASKSCOPE_AGENTS"); env != "" {
		var out []agentImpl
		for _, kv := range strings.Split(env, ",") {
			name, bin, ok := strings.Cut(kv, "=")
			if !ok || name == "" || isBaseline(name) {
				b.Fatalf("TASKSCOPE_AGENTS: %q is not name=binary (name neither baseline nor floor)", kv)
			}
			if _, err := os.Stat(bin); err != nil {
				b.Fatalf("TASKSCOPE_AGENTS: %v", err)
			}
			out = append(out, agentImpl{name, bin})
		}
		return out
	}
	bin := filepath.Join(b.TempDir(), "taskscope-agent")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../../cmd/taskscope-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return []agentImpl{{"agent", bin}}
}

// agentBaselineEnv makes this test binary the baseline program; its value
// is the interval.
const agentBaselineEnv = "TASKSCOPE_BENCH_AGENT_BASELINE"

func init() {
	if iv := os.Getenv(agentBaselineEnv); iv != "" {
		os.Exit(runAgentBaseline(iv))
	}
}

// runAgentBaseline is the baseline program: every interval, a tick of the
// baseline reading stat, statm and io of the task processes. It runs until
// it is killed.
func runAgentBaseline(interval string) int {
	iv, err := time.ParseDuration(interval)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	bl := newBaseline(1, agentBaseFiles)
	bl.tick()
	for range time.Tick(iv) {
		bl.tick()
	}
	return 0
}

// agentRun is what one run measured.
type agentRun struct {
	cpuPerTick float64 // ns
	// What the agent says of itself over the window (its /metrics, read
	// just before and just after): the ticks it took, its allocations (Go's
	// heap: objects and bytes) and garbage collections a tick, and the
	// instructions callgrind counted a tick (TASKSCOPE_AGENT_CALLGRIND)
	// over those ticks. Zero for the baseline.
	self agentSelf
	// Context switches a tick, voluntary and not, of its threads: each a
	// thread put to sleep and woken, what the runtime's idle wake-ups cost.
	switches float64
	rssMB    float64
	host     hostLoad
	procs    int // processes on the machine at the window's start
	// userShare is the part of its CPU in user space (/proc/PID/stat's
	// utime and stime, clock ticks): the rest is the kernel's, mostly
	// reading /proc.
	userShare float64
}

// userSys is pid's user and system time so far, clock ticks.
func userSys(pid int) (user, sys uint64) {
	b, err := procfs.ReadFile(fmt.Sprintf("/proc/%d/stat", pid), nil)
	if err != nil {
		return 0, 0
	}
	var st procfs.Stat
	if procfs.ParseStat(b, &st) != nil {
		return 0, 0
	}
	return st.UTime, st.STime
}

func userShare(user, sys uint64) float64 {
	if user+sys == 0 {
		return 0
	}
	return float64(user) / float64(user+sys)
}

// agentRound counts the rounds, to turn the order of the runs.
var agentRound int

// benchAgentSteady runs, b.N times, the baseline and each agent in turn
// (in an order that turns from one round to the next) and reports the CPU
// per tick of each in the steady state and each agent's ratio to the
// baseline.
func benchAgentSteady(b *testing.B, sc agentScenario, impls []agentImpl) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hs.Close()
	q, err := taskstats.NewQuerier()
	if err != nil {
		b.Logf("CPU from the threads' schedstat (taskstats: %v)", err)
	} else {
		defer q.Close()
	}
	base := "baseline"
	floorBin, floorArgs := agentFloor(b)
	if floorBin != "" {
		base = "floor"
	}
	names := append([]string{base}, implNames(impls)...)
	sum := map[string]float64{}
	switches := map[string]float64{}
	rss := map[string]float64{}
	selfSum := map[string]agentSelf{}
	var load hostLoad
	together := os.Getenv("TASKSCOPE_AGENT_TOGETHER") != ""
	self := selfExe(b)
	run := func(name string, q *taskstats.Querier) agentRun {
		if name == "floor" {
			// Until it is stopped: far more ticks than a run lasts.
			args := append([]string{"-interval", sc.interval.String(), "-ticks", "1000000000"}, floorArgs...)
			return runSteady(b, q, sc, name, exec.Command(floorBin, args...))
		}
		if name == "baseline" {
			return runSteady(b, q, sc, name, exec.Command(self), agentBaselineEnv+"="+sc.interval.String())
		}
		bin := impls[slices.Index(names, name)-1].bin
		listen := testsrv.FreeAddr(b)
		args := agentArgs(b, hs.URL, sc.interval, listen)
		if cg := agentCallgrind(fmt.Sprintf("%s-%s-%d", sc.name, name, agentRound)); cg != nil {
			// (Go's preemption signals trip callgrind's signal handling.)
			return runSteady(b, q, sc, name, exec.Command("valgrind", append(append(cg, bin), args...)...), "GODEBUG=asyncpreemptoff=1",
				agentListenEnv+"="+listen)
		}
		return runSteady(b, q, sc, name, exec.Command(bin, args...), agentListenEnv+"="+listen)
	}
	for i := 0; i < b.N; i++ {
		agentRound++
		runs := make([]agentRun, len(names))
		if together {
			// All at once, each with a querier of its own (not safe for
			// concurrent use).
			var wg sync.WaitGroup
			for k, name := range names {
				wg.Add(1)
				go func() {
					defer wg.Done()
					q, err := taskstats.NewQuerier()
					if err == nil {
						defer q.Close()
					}
					runs[k] = run(name, q)
				}()
			}
			wg.Wait()
		} else {
			for j := range names {
				k := (j + agentRound) % len(names)
				runs[k] = run(names[k], q)
			}
		}
		for k, name := range names {
			r := runs[k]
			if !isBaseline(name) {
				rss[name] = max(rss[name], r.rssMB)
				selfSum[name] = selfSum[name].add(r.self)
			}
			sum[name] += r.cpuPerTick
			switches[name] += r.switches
			load.add(r.host)
			b.Logf("round %d %s %s: %.0f us CPU a tick (%.0f%% user), %.1f context switches%s; host %s, %d processes", agentRound, sc.name, name,
				r.cpuPerTick/1e3, 100*r.userShare, r.switches, r.self, r.host, r.procs)
		}
	}
	n := float64(b.N)
	for _, name := range names {
		if rss[name] > 25 && os.Getenv("TASKSCOPE_AGENT_CALLGRIND") == "" { // (valgrind's own memory counts under callgrind)
			b.Errorf("%s: peak RSS %.1f MB, over 25 MB", name, rss[name])
		}
		b.ReportMetric(sum[name]/n, name+"-cpu-ns/tick")
		b.ReportMetric(switches[name]/n, name+"-switches/tick")
		if !isBaseline(name) {
			b.ReportMetric(sum[name]/sum[base], name+"/"+base+"-ratio")
			b.ReportMetric(rss[name], name+"-rss-MB")
			selfSum[name].report(b, name, n)
		}
	}
	b.ReportMetric(load.busyPct(), "host-busy-%")
	b.ReportMetric(load.stealPct(), "host-steal-%")
	b.ReportMetric(0, "ns/op")
}

// agentArgs are the agent's flags as docs/operations.md deploys it, its
// metrics on listen.
func agentArgs(b *testing.B, url string, interval time.Duration, listen string) []string {
	dir := b.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("bench\n"), 0o600)
	return []string{"run", "--server", url, "--token-file", token, "--spool-dir", filepath.Join(dir, "spool"),
		"--listen", listen, "--interval", interval.String(), "--log-level", "warn"}
}

// agentListenEnv tells runSteady where the agent serves its metrics (the
// variable is the runner's, not the agent's: the agent ignores it).
const agentListenEnv = "TASKSCOPE_BENCH_AGENT_LISTEN"

// agentSelf is what an agent says of itself over a window, from its
// /metrics: ticks, Go's heap allocations (objects and bytes), garbage
// collections and their CPU; and callgrind's instructions, when counted.
type agentSelf struct {
	ticks, allocs, allocBytes, gcs, gcCPUSec, instructions float64
}

func (a agentSelf) add(o agentSelf) agentSelf {
	return agentSelf{a.ticks + o.ticks, a.allocs + o.allocs, a.allocBytes + o.allocBytes, a.gcs + o.gcs, a.gcCPUSec + o.gcCPUSec,
		a.instructions + o.instructions}
}

func (a agentSelf) String() string {
	if a.ticks == 0 {
		return ""
	}
	s := fmt.Sprintf("; %.0f ticks: %.0f allocations (%.0f B) a tick, %.0f GCs (%.0f us of CPU)", a.ticks, a.allocs/a.ticks,
		a.allocBytes/a.ticks, a.gcs, a.gcCPUSec*1e6)
	if a.instructions > 0 {
		s += fmt.Sprintf(", %.0f instructions a tick in user space", a.instructions/a.ticks)
	}
	return s
}

// report reports the sums over the rounds a tick (n rounds).
func (a agentSelf) report(b *testing.B, name string, n float64) {
	if a.ticks == 0 {
		return
	}
	b.ReportMetric(a.allocs/a.ticks, name+"-allocs/tick")
	b.ReportMetric(a.allocBytes/a.ticks, name+"-alloc-B/tick")
	b.ReportMetric(a.gcs/n, name+"-gcs/window")
	if a.instructions > 0 {
		b.ReportMetric(a.instructions/a.ticks, name+"-instructions/tick")
	}
}

// agentSelfNow reads what the agent at addr says of itself; ok false when
// it does not answer.
func agentSelfNow(addr string) (s agentSelf, ok bool) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, found := strings.Cut(sc.Text(), " ")
		if !found {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch name {
		case "taskscope_agent_ticks_total":
			s.ticks = f
		case "go_memstats_mallocs_total":
			s.allocs = f
		case "go_memstats_alloc_bytes_total":
			s.allocBytes = f
		case "go_gc_duration_seconds_count":
			s.gcs = f
		case "go_gc_cpu_seconds_total":
			s.gcCPUSec = f
		}
	}
	return s, sc.Err() == nil && s.ticks > 0
}

func (a agentSelf) sub(o agentSelf) agentSelf {
	return agentSelf{a.ticks - o.ticks, a.allocs - o.allocs, a.allocBytes - o.allocBytes, a.gcs - o.gcs, a.gcCPUSec - o.gcCPUSec, 0}
}

// callgrindTotal is the instructions a callgrind output file counted (its
// "totals:" line), 0 when it cannot be read.
func callgrindTotal(path string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var total float64
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			total += f
		}
	}
	return total
}

// runSteady starts cmd, lets it warm up, measures its CPU over agentWindow
// ticks from midway between two of its ticks, and stops it. It may run in
// a goroutine of its own (TASKSCOPE_AGENT_TOGETHER): it fails the benchmark
// with Errorf, and returns a zero run.
func runSteady(b *testing.B, q *taskstats.Querier, sc agentScenario, name string, cmd *exec.Cmd, env ...string) agentRun {
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	slack := timerSlackOf(name)
	if err := startWithSlack(cmd, slack); err != nil {
		b.Error(err)
		return agentRun{}
	}
	pid := int32(cmd.Process.Pid)
	iv := sc.interval
	// Warm up: the first ticks classify every process; at 250 ms, five
	// seconds (the churn's maps and buffers at their working size).
	time.Sleep(agentWarmup(iv))
	listen := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, agentListenEnv+"="); ok {
			listen = v
		}
	}
	if listen != "" {
		// An agent under valgrind starts slowly: its warm-up is its ticks.
		warm := float64(agentWarmup(iv) / iv)
		if !testsrv.Poll(3*time.Minute, func() bool { s, ok := agentSelfNow(listen); return ok && s.ticks >= warm }) {
			b.Errorf("%s: not %.0f ticks after 3 minutes", name, warm)
		}
	}
	// Its ticks: the moments its CPU jumps (polled every 2 ms over two
	// intervals); the window starts midway between two.
	tick := lastTick(q, pid, 2*iv)
	t0 := tick.Add(iv / 2)
	for t0.Before(time.Now()) {
		t0 = t0.Add(iv)
	}
	time.Sleep(time.Until(t0))
	// Two reads of its metrics back to back: what one costs it (its
	// allocations) is taken off the window's.
	var self0, scrape agentSelf
	if listen != "" {
		first, _ := agentSelfNow(listen)
		self0, _ = agentSelfNow(listen)
		scrape = self0.sub(first)
	}
	h0 := readHostLoad()
	g0 := processGroup(q, int(pid))
	u0, s0 := userSys(int(pid))
	procs := countProcs()
	if perfArgs := agentPerf(fmt.Sprintf("%s-%s-%d", sc.name, name, agentRound)); perfArgs != nil {
		perf := exec.Command("perf", append(perfArgs, "-p", strconv.Itoa(int(pid)), "--",
			"sleep", strconv.FormatFloat((time.Duration(agentWindow)*iv).Seconds(), 'f', 3, 64))...)
		perf.Stderr = os.Stderr
		if err := perf.Start(); err != nil {
			b.Errorf("perf: %v", err)
		} else {
			defer perf.Wait()
		}
	}
	callgrind := os.Getenv("TASKSCOPE_AGENT_CALLGRIND") != "" && !isBaseline(name)
	if callgrind {
		callgrindControl(b, "-i", "on", pid)
	}
	time.Sleep(time.Until(t0.Add(time.Duration(agentWindow) * iv))) // the window measured
	if callgrind {
		callgrindControl(b, "-i", "off", pid)
	}
	g1 := processGroup(q, int(pid))
	u1, s1 := userSys(int(pid))
	h1 := readHostLoad()
	var self agentSelf
	if listen != "" {
		if self1, ok := agentSelfNow(listen); ok {
			self = self1.sub(self0)
			self.allocs -= scrape.allocs
			self.allocBytes -= scrape.allocBytes
		}
	}
	// Its peak RSS so far, from its own VmHWM: wait4's ru_maxrss counts
	// this process's RSS too (the child shared our memory until exec).
	rssMB := vmHWM(int(pid))
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if !isBaseline(name) && err != nil {
		b.Errorf("%s: %v\n%s", name, err, stderr.String())
		return agentRun{}
	}
	if !isBaseline(name) && stderr.Len() > 0 {
		b.Logf("%s said:\n%s", name, stderr.String())
	}
	if g0.RunNs == 0 || g1.RunNs < g0.RunNs {
		b.Errorf("%s: CPU %d then %d: gone?", name, g0.RunNs, g1.RunNs)
		return agentRun{}
	}
	if callgrind {
		for _, a := range cmd.Args {
			if out, ok := strings.CutPrefix(a, "--callgrind-out-file="); ok {
				self.instructions = callgrindTotal(out)
			}
		}
	}
	ticks := float64(agentWindow)
	return agentRun{cpuPerTick: float64(g1.RunNs-g0.RunNs) / ticks, rssMB: rssMB, host: h1.sub(h0), procs: procs, self: self,
		userShare: userShare(u1-u0, s1-s0),
		switches:  float64(int64(g1.VolCtx+g1.InvolCtx)-int64(g0.VolCtx+g0.InvolCtx)) / ticks}
}

// agentTimerSlack is the unit's TimerSlackNSec
// (packaging/taskscope-agent.service): agents run with it, as deployed.
const agentTimerSlack = time.Millisecond

// timerSlackOf is the timer slack a run starts with: the unit's for an
// agent, except those named in TASKSCOPE_AGENT_NOSLACK (name,...: agents
// of before the unit set it, as they were deployed); the system's default
// for the baseline, or the agents' with TASKSCOPE_BASELINE_SLACK=1.
func timerSlackOf(name string) time.Duration {
	if isBaseline(name) {
		if os.Getenv("TASKSCOPE_BASELINE_SLACK") != "" {
			return agentTimerSlack
		}
		return 0
	}
	if slices.Contains(strings.Split(os.Getenv("TASKSCOPE_AGENT_NOSLACK"), ","), name) {
		return 0
	}
	return agentTimerSlack
}

// startWithSlack starts cmd with a timer slack of slack (0: the system's
// default, 50 µs) as systemd's TimerSlackNSec does: the child inherits the
// slack of the thread that forks it, through exec, and its threads theirs.
func startWithSlack(cmd *exec.Cmd, slack time.Duration) error {
	if slack <= 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack.Nanoseconds()), 0, 0, 0); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
	return cmd.Start()
}

// vmHWM is pid's peak RSS in MB (VmHWM in its status), 0 once it is gone.
func vmHWM(pid int) float64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(st)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// lastTick polls pid's CPU for d and returns when it last jumped the most
// (a tick).
func lastTick(q *taskstats.Querier, pid int32, d time.Duration) time.Time {
	var best int64
	var at time.Time
	prev := processCPU(q, int(pid))
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(2 * time.Millisecond)
		c := processCPU(q, int(pid))
		// The latest of the biggest jumps (within a tenth): a tick.
		if d := c - prev; d*10 >= best*9 {
			best, at = max(best, d), time.Now()
		}
		prev = c
	}
	return at
}

// benchAgentStart runs each agent with --max-ticks 1 b.N times, in turn,
// and reports its CPU (wait4) and peak RSS.
func benchAgentStart(b *testing.B, impls []agentImpl) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hs.Close()
	sum := map[string]float64{}
	rss := map[string]float64{}
	var load hostLoad
	for i := 0; i < b.N; i++ {
		agentRound++
		for k := range impls {
			im := impls[(k+agentRound)%len(impls)]
			cmd := exec.Command(im.bin, append(agentArgs(b, hs.URL, time.Second, "127.0.0.1:0"), "--max-ticks", "1")...)
			if perfArgs := agentPerf(fmt.Sprintf("start-%s-%d", im.name, agentRound)); perfArgs != nil {
				// perf's own CPU counts too: take the figures from runs without it.
				cmd = exec.Command("perf", append(append(perfArgs, "--", im.bin), cmd.Args[1:]...)...)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			h0 := readHostLoad()
			if err := startWithSlack(cmd, timerSlackOf(im.name)); err != nil {
				b.Fatal(err)
			}
			// Its peak RSS: its VmHWM, polled until it exits (wait4's
			// ru_maxrss counts this process's RSS too, shared until exec).
			peak := make(chan float64, 1)
			exited := make(chan struct{})
			go func() {
				var p float64
				for {
					if m := vmHWM(cmd.Process.Pid); m > 0 {
						p = m
					}
					select {
					case <-exited:
						peak <- p
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			err := cmd.Wait()
			close(exited)
			peakMB := <-peak
			if err != nil {
				b.Fatalf("%s: %v\n%s", im.name, err, stderr.String())
			}
			h := readHostLoad().sub(h0)
			load.add(h)
			last := strings.TrimSpace(stderr.String())
			if !strings.HasPrefix(last[strings.LastIndexByte(last, '\n')+1:], "ticks=1 tracked=") {
				b.Fatalf("%s said:\n%s", im.name, last)
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
			sum[im.name] += cpu
			rss[im.name] = max(rss[im.name], peakMB)
			b.Logf("round %d start %s: %.1f ms CPU, peak RSS %.1f MB (at least); host %s", agentRound, im.name, cpu, peakMB, h)
		}
	}
	for _, im := range impls {
		if rss[im.name] > 25 {
			b.Errorf("%s: peak RSS %.1f MB, over 25 MB", im.name, rss[im.name])
		}
		b.ReportMetric(sum[im.name]/float64(b.N), im.name+"-start-cpu-ms")
		b.ReportMetric(rss[im.name], im.name+"-rss-MB")
	}
	b.ReportMetric(load.busyPct(), "host-busy-%")
	b.ReportMetric(load.stealPct(), "host-steal-%")
	b.ReportMetric(0, "ns/op")
}

// agentPerf is the start of a perf record command line writing
// TASKSCOPE_AGENT_PERF/<name>.perf, nil without TASKSCOPE_AGENT_PERF.
func agentPerf(name string) []string {
	dir := os.Getenv("TASKSCOPE_AGENT_PERF")
	if dir == "" {
		return nil
	}
	return []string{"record", "-q", "-e", "cpu-clock", "-F", "9999", "-g", "-o", filepath.Join(dir, name+".perf")}
}

// agentCallgrind is the start of a valgrind command line that counts the
// instructions an agent runs in user space over its steady window into
// TASKSCOPE_AGENT_CALLGRIND/<name>.callgrind (callgrind_annotate reads it),
// nil without TASKSCOPE_AGENT_CALLGRIND: counts that do not move with the
// machine's load, where the CPU figures do. The agent runs many times
// slower in user space under valgrind (its system calls do not): take its
// CPU figures from runs without it.
func agentCallgrind(name string) []string {
	dir := os.Getenv("TASKSCOPE_AGENT_CALLGRIND")
	if dir == "" {
		return nil
	}
	return []string{"--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + filepath.Join(dir, name+".callgrind")}
}

// callgrindControl turns the instrumentation of a process under callgrind
// on or off.
func callgrindControl(b *testing.B, flag, arg string, pid int32) {
	if out, err := exec.Command("callgrind_control", flag, arg, strconv.Itoa(int(pid))).CombinedOutput(); err != nil {
		b.Errorf("callgrind_control %s %s: %v\n%s", flag, arg, err, out)
	}
}

func implNames(impls []agentImpl) []string {
	var out []string
	for _, im := range impls {
		out = append(out, im.name)
	}
	return out
}

func selfExe(b *testing.B) string {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	return self
}

// hostLoad is the machine's CPU time (/proc/stat's first line, clock
// ticks): all of it, idle (idle and iowait) and stolen by the hypervisor.
type hostLoad struct{ total, idle, steal uint64 }

func readHostLoad() hostLoad {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return hostLoad{}
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	var h hostLoad
	for i, fld := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(fld, 10, 64)
		if i >= 8 {
			break // guest time is counted in user already
		}
		h.total += v
		switch i {
		case 3, 4:
			h.idle += v
		case 7:
			h.steal += v
		}
	}
	return h
}

func (h hostLoad) sub(o hostLoad) hostLoad {
	return hostLoad{h.total - o.total, h.idle - o.idle, h.steal - o.steal}
}

func (h *hostLoad) add(o hostLoad) { h.total += o.total; h.idle += o.idle; h.steal += o.steal }

func (h hostLoad) busyPct() float64 {
	if h.total == 0 {
		return 0
	}
	return 100 * float64(h.total-h.idle) / float64(h.total)
}

func (h hostLoad) stealPct() float64 {
	if h.total == 0 {
		return 0
	}
	return 100 * float64(h.steal) / float64(h.total)
}

func (h hostLoad) String() string {
	return fmt.Sprintf("busy %.1f%%, steal %.1f%%", h.busyPct(), h.stealPct())
}

// processCPU is the CPU of a process so far (ns), all its threads', exited
// ones included: taskstats' thread group runtime. 0 when it is gone.
func processCPU(q *taskstats.Querier, pid int) int64 { return int64(processGroup(q, pid).RunNs) }

// processGroup is what taskstats says of a process's threads (zero when it
// is gone). Without taskstats (q nil: another pid namespace than the
// host's), the sums over its live threads of their schedstat and their
// context switches (status): exited threads are missed, and Go's threads
// rarely exit.
func processGroup(q *taskstats.Querier, pid int) taskstats.Group {
	var g taskstats.Group
	if q != nil {
		q.ThreadGroup(int32(pid), &g)
		return g
	}
	fs := procfs.NewFS("")
	dir := fs.PidPath(int32(pid), "task")
	tids, err := os.ReadDir(dir)
	if err != nil {
		return g
	}
	var buf []byte
	for _, tid := range tids {
		if buf, err = procfs.ReadFile(dir+"/"+tid.Name()+"/schedstat", buf); err == nil {
			var ss procfs.Schedstat
			if procfs.ParseSchedstat(buf, &ss) == nil {
				g.RunNs += ss.RunNs
			}
		}
		if buf, err = procfs.ReadFile(dir+"/"+tid.Name()+"/status", buf); err == nil {
			var st procfs.Status
			if procfs.ParseStatus(buf, &st) == nil {
				g.VolCtx += st.VoluntaryCtx
				g.InvolCtx += st.InvoluntaryCtx
			}
		}
	}
	return g
}
