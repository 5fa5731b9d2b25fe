// Package e2e runs crafted jobs on the simulated cluster with the whole
// pipeline in one process: the agent (agent.Run, on the real /proc), the
// server (server.Start) with a DuckDB store and the analyzer, and checks
// what the API says: the findings of each job with their severities, and
// the lost task processes on the host endpoint.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/api"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/tracker"
	"github.com/taskscope/taskscope/internal/wire"
)

func TestMain(m *testing.M) {
	simulator.RunDaemonIfRequested()
	os.Exit(m.Run())
}

// harness is a server with its store, and agents shipping to it.
type harness struct {
	t   *testing.T
	srv *server.Server
	st  store.Store
	c   *http.Client
}

func newHarness(t *testing.T, mods ...func(*server.Config)) *harness {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Minute,
		Profiles: profiling.New(st, profiling.Config{OnDemand: true})}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := server.Start(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		st.Close()
	})
	return &harness{t: t, srv: srv, st: st, c: &http.Client{Timeout: 30 * time.Second}}
}

// startAgent runs an agent in this process until the test ends.
func (h *harness) startAgent(host string, mod func(*agent.Config)) (metricsAddr string) {
	t := h.t
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	var log testsrv.SyncBuffer
	cfg := agent.Config{Servers: []string{h.srv.URL()}, Interval: 250 * time.Millisecond, FlushInterval: time.Second,
		Host: host, MaxTicks: -1, PSSEvery: 8, Exits: "auto", Listen: "127.0.0.1:0",
		Log:   slog.New(slog.NewTextHandler(&log, nil)),
		Lost:  tracker.LostConfig{CheckEvery: 500 * time.Millisecond, LostAfter: 10 * time.Second, NMPoll: time.Second},
		Ready: func(addr string) { metricsAddr = addr; close(ready) }}
	if mod != nil {
		mod(&cfg)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := agent.Run(ctx, cfg); err != nil {
			t.Errorf("agent %s: %v", host, err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	// A failed test says what the agent said, and how its NodeManager
	// polls went (cleanups run last first: this one before the agent
	// stops).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		addr := ""
		select {
		case <-ready:
			addr = metricsAddr
		default:
		}
		agentDiagnostics(t, host, addr, log.String())
	})
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not start")
	}
	return metricsAddr
}

// agentMetrics is what an agent's /metrics says.
func agentMetrics(metricsAddr string) (string, error) {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(resp.Body, 4<<20)); err != nil {
		return "", fmt.Errorf("reading the agent's metrics: %w", err)
	}
	return b.String(), nil
}

// metricIn is the value of a metric (a counter or gauge without labels)
// in what an agent's /metrics said (agentMetrics).
func metricIn(all, name string) (float64, error) {
	for _, l := range strings.Split(all, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("the agent's metrics have no %s", name)
}

// agentDiagnostics logs an agent's log and its metrics of NodeManager
// polls and Kerberos (taskscope_agent_nodemanager_*, *_kerberos_*).
func agentDiagnostics(t *testing.T, host, metricsAddr, log string) {
	t.Helper()
	t.Logf("agent %s's log:\n%s", host, log)
	if metricsAddr == "" {
		return
	}
	all, err := agentMetrics(metricsAddr)
	if err != nil {
		t.Logf("agent %s's metrics: %v", host, err)
		return
	}
	var keep []string
	for _, l := range strings.Split(all, "\n") {
		if !strings.HasPrefix(l, "#") && (strings.Contains(l, "nodemanager") || strings.Contains(l, "kerberos")) {
			keep = append(keep, l)
		}
	}
	t.Logf("agent %s's metrics of NodeManagers:\n%s", host, strings.Join(keep, "\n"))
}

func (h *harness) get(path string, v any) error {
	resp, err := h.c.Get(h.srv.URL() + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, b.String())
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitJob waits until the store has the job with at least n task attempts
// (maps, reduces), none running.
func (h *harness) waitJob(id string, n int) *store.JobDetail {
	h.t.Helper()
	var j store.JobDetail
	var err error
	tasks := 0
	if !testsrv.Poll(30*time.Second, func() bool {
		j = store.JobDetail{}
		err = h.get("/api/v1/jobs/"+id, &j)
		tasks = 0
		for _, a := range j.AttemptList {
			if a.Type == "map" || a.Type == "reduce" {
				tasks++
			}
		}
		return err == nil && tasks >= n && j.Running == 0
	}) {
		h.t.Fatalf("job %s: %d of %d task attempts, %d running (%v)", id, tasks, n, j.Running, err)
	}
	return &j
}

func (h *harness) findings(id string) *analysis.Report {
	h.t.Helper()
	var r analysis.Report
	if err := h.get("/api/v1/jobs/"+id+"/findings", &r); err != nil {
		h.t.Fatal(err)
	}
	return &r
}

func logReport(t *testing.T, name string, r *analysis.Report) {
	t.Helper()
	for _, f := range r.Findings {
		t.Logf("%s: [%s] %s %s: %s -> %s (%s=%s)", name, f.Severity, f.Heuristic, f.TaskType, f.Message, f.Recommendation, f.Parameter, f.Value)
	}
	if len(r.Findings) == 0 {
		t.Logf("%s: no findings", name)
	}
}

// worst is the highest severity of a heuristic's findings (None if none).
func worst(r *analysis.Report, heuristic string) analysis.Severity {
	s := analysis.None
	for _, f := range r.Findings {
		if f.Heuristic == heuristic && f.Severity > s {
			s = f.Severity
		}
	}
	return s
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

// started submits spec and waits until an attempt of type typ ("": any)
// has its JVM; it returns the job and that attempt. The job lives on
// until ctx ends.
func started(ctx context.Context, t *testing.T, c *simulator.Cluster, spec simulator.JobSpec, typ string) (*simulator.Job, simulator.AttemptResult) {
	t.Helper()
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var got simulator.AttemptResult
	if _, err := j.WaitFor(ctx, func(rs []simulator.AttemptResult) bool {
		for _, r := range rs {
			if (typ == "" || r.Type == typ) && r.JVMPID > 0 {
				got = r
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	return j, got
}

func run(t *testing.T, c *simulator.Cluster, spec simulator.JobSpec) *simulator.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatalf("%s: %v", spec.Name, err)
	}
	return res
}

func exactExits() bool {
	// The agent counts short-lived processes from taskstats exit records,
	// which need root (CAP_NET_ADMIN).
	return os.Geteuid() == 0
}

// TestCraftedJobs runs one job per anomaly, and healthy ones, on a YARN
// node and checks the findings the API gives for each.
func TestCraftedJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	h := newHarness(t)
	c := startCluster(t, simulator.NodeYARN)
	h.startAgent("e2e-yarn", nil)

	type tc struct {
		name      string
		spec      simulator.JobSpec
		tasks     int
		heuristic string            // "" for healthy jobs
		atLeast   analysis.Severity // the heuristic's finding is at least this
		check     func(*testing.T, *analysis.Report)
	}
	cases := []tc{
		{name: "healthy", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 3, Reduces: 1, TaskCPU: time.Second}, tasks: 4},
		{name: "healthy-streaming", spec: simulator.JobSpec{Kind: simulator.JobStreaming, Maps: 2, Reduces: 1, TaskCPU: 500 * time.Millisecond}, tasks: 3},
		// The straggler takes 5 times the others' CPU and hold (22 s against
		// 4.4), and each attempt a JVM's start more: held 2 s, a run whose
		// JVMs started in 2.5 s came out 2.9 times the median, below the 3
		// of a moderate finding.
		{name: "straggler", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 4, NoReduces: true, TaskCPU: 400 * time.Millisecond,
			Hold: 4 * time.Second, Straggler: true}, tasks: 4, heuristic: "straggler", atLeast: analysis.Moderate,
			check: func(t *testing.T, r *analysis.Report) {
				// A straggler is not a badly filled last wave.
				if worst(r, "last_wave") > analysis.None {
					t.Errorf("a straggler read as a badly filled last wave")
				}
				if w := mapWaves(r); w == nil || w.Kind == "partial" {
					t.Errorf("map waves %+v, want a last wave not partial", w)
				}
			}},
		{name: "skewed-reduce", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 1, Reduces: 4, TaskCPU: 600 * time.Millisecond,
			Skew: 9}, tasks: 5, heuristic: "skew", atLeast: analysis.Moderate, check: func(t *testing.T, r *analysis.Report) {
			for _, f := range r.Findings {
				if f.Heuristic == "skew" && f.Severity >= analysis.Moderate && f.TaskType != "reduce" {
					t.Errorf("skew of %s, not of the reduces: %s", f.TaskType, f.Message)
				}
			}
		}},
		{name: "oversized", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 2, NoReduces: true, TaskCPU: 500 * time.Millisecond,
			MemoryMB: 1024, Oversized: true}, tasks: 2, heuristic: "memory_headroom", atLeast: analysis.Severe, check: func(t *testing.T, r *analysis.Report) {
			for _, f := range r.Findings {
				if f.Heuristic == "memory_headroom" && (f.Parameter != "mapreduce.map.memory.mb" || f.Value == "" || f.Value == "4096") {
					t.Errorf("memory headroom recommends %s=%s", f.Parameter, f.Value)
				}
			}
		}},
		// GC share is GC time over runnable time (docs/analysis.md): on this
		// loaded machine the GC-bound maps read 14-15 % (severe from 15),
		// where GC over CPU alone read twice that; a GC-bound attempt is
		// named at moderate or worse (issue 15).
		{name: "gc-bound", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 2, NoReduces: true, TaskCPU: 4 * time.Second,
			GCBound: true}, tasks: 2, heuristic: "gc_pressure", atLeast: analysis.Moderate},
		// One GC-bound map among five (issue 15: "a map that spent 16 %
		// of its CPU in garbage collection, in a job of six maps, raises
		// nothing"): its type's share stays low, the attempt is named on
		// its own at moderate or worse with its own GC share.
		{name: "gc-bound-single", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 5, NoReduces: true, TaskCPU: 4 * time.Second,
			GCBoundMaps: 1}, tasks: 5, heuristic: "gc_pressure", atLeast: analysis.Moderate, check: checkGCBoundSingle},
		// Seven maps of about the same time on the node's three containers:
		// waves of 3, 3 and 1, the last one badly filled (a third full),
		// told apart from a straggler.
		{name: "last-wave", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 7, NoReduces: true, TaskCPU: 300 * time.Millisecond,
			Hold: 3 * time.Second}, tasks: 7, heuristic: "last_wave", atLeast: analysis.Low, check: checkLastWave},
		{name: "streaming-bound", spec: simulator.JobSpec{Kind: simulator.JobStreaming, Maps: 2, NoReduces: true, TaskCPU: 200 * time.Millisecond,
			StreamCPU: 5 * time.Second}, tasks: 2, heuristic: "streaming_bottleneck", atLeast: analysis.Moderate},
		{name: "leaking-mapper", spec: simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 1, NoReduces: true, TaskCPU: 500 * time.Millisecond,
			Hold: 8 * time.Second, Leak: true, MemoryMB: 512}, tasks: 1, heuristic: "memory_growth", atLeast: analysis.Moderate,
			check: func(t *testing.T, r *analysis.Report) { h.logSeries(t, r.JobID, "map", "rss_bytes", "heap_used_bytes") }},
	}
	if exactExits() {
		cases = append(cases, tc{name: "fork-storm", spec: simulator.JobSpec{Kind: simulator.JobStreaming, Maps: 2, Reduces: 1,
			TaskCPU: 500 * time.Millisecond, StreamCPU: 300 * time.Millisecond, ShortLivedChildren: 400}, tasks: 3,
			heuristic: "short_lived_processes", atLeast: analysis.Moderate,
			check: func(t *testing.T, r *analysis.Report) { h.logCounts(t, r.JobID, "short_lived", "processes") }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Name = tc.name
			res := run(t, c, spec)
			h.waitJob(res.JobID, tc.tasks)
			r := h.findings(res.JobID)
			logReport(t, tc.name, r)
			h.logAttempts(t, res.JobID)
			h.logEvents(t, res)
			if tc.heuristic == "" {
				for _, f := range r.Findings {
					if f.Severity > analysis.Low {
						t.Errorf("a healthy job raised [%s] %s: %s", f.Severity, f.Heuristic, f.Message)
					}
				}
				return
			}
			if got := worst(r, tc.heuristic); got < tc.atLeast {
				t.Errorf("%s: %s is %s, want at least %s", tc.name, tc.heuristic, got, tc.atLeast)
			}
			for _, f := range r.Findings {
				if f.Heuristic == tc.heuristic && (f.Message == "" || f.Recommendation == "" || len(f.Numbers) == 0) {
					t.Errorf("%s finding without explanation, numbers or recommendation: %+v", f.Heuristic, f)
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
	t.Run("straggler-busy-node", func(t *testing.T) {
		// Three maps of the same work; the first runs on CPU 0, last in
		// line, beside a Spark executor whose four task threads keep CPU
		// 0 busy for 6 s of CPU (a node with busy neighbours: see
		// simulator.JobSpec.OnCPU0Maps), the others on the rest of the
		// machine: the first is a straggler that did no more work, and
		// its outlier finding says it waited for a CPU while its
		// neighbours kept cores busy.
		if runtime.NumCPU() < 2 {
			t.Skip("needs 2 CPUs: one busy, one for the other maps")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		nb, _ := started(ctx, t, c, simulator.JobSpec{Kind: simulator.JobSpark, Name: "busy-neighbours", Executors: 1, Cores: 4, Maps: 4,
			TaskCPU: 1500 * time.Millisecond, OnCPU0: true}, "executor")
		res := run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "straggler-busy-node", Maps: 3, NoReduces: true,
			TaskCPU: 500 * time.Millisecond, OnCPU0Maps: 1})
		if _, err := nb.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		h.waitJob(res.JobID, 3)
		r := h.findings(res.JobID)
		logReport(t, "straggler-busy-node", r)
		h.logAttempts(t, res.JobID)
		h.logEvents(t, res)
		var o *analysis.Finding
		for i, f := range r.Findings {
			if f.Heuristic == "outlier" && len(f.AttemptIDs) == 1 && strings.HasSuffix(f.AttemptIDs[0], "_m_000000_0") {
				o = &r.Findings[i]
			}
		}
		if o == nil {
			t.Fatalf("no outlier finding of the map on the busy CPU")
		}
		if o.Cause != "cpu_wait" && o.Cause != "neighbours" {
			t.Errorf("the straggler's cause is %q, want cpu_wait or neighbours: %s", o.Cause, o.Message)
		}
		// Right severity: the grade of its duration ratio (it did no more
		// work); numbers: how long it waited, and its neighbours' cores.
		dr := number(o, "duration_ratio")
		if want := gradeDuration(dr); o.Severity != want || dr < 2 {
			t.Errorf("outlier %s at %.1f× the median, want %s", o.Severity, dr, want)
		}
		if cr := number(o, "cpu_ratio"); cr >= 1.5 {
			t.Errorf("the straggler used %.1f× the median CPU: more work, not a busy node", cr)
		}
		if w := number(o, "sched_wait_share"); w < 10 {
			t.Errorf("it waited for a CPU %.0f%% of its time, want 10 %% or more", w)
		}
		if n := number(o, "neighbour_cores"); n < 0.5 {
			t.Errorf("its neighbours kept %.1f cores busy, want 0.5 or more", n)
		}
		// Its GC pauses stretch as it starves: waits, not GC work.
		if g := worst(r, "gc_pressure"); g > analysis.Low {
			t.Errorf("the starved straggler read as GC-bound (%s)", g)
		}
		var s *analysis.Finding
		for i, f := range r.Findings {
			if f.Heuristic == "straggler" {
				s = &r.Findings[i]
			}
		}
		if s == nil || s.Parameter != "mapreduce.map.speculative" {
			t.Errorf("straggler finding %+v, want one that did no more work (speculative execution)", s)
		}
	})
	t.Run("recurring", func(t *testing.T) {
		// Four nightly runs of one job (a date in its name, same user and
		// queue); the fourth holds 448 MB where the others held 32 (each
		// for 2 s, seen by the agent): it is outside its band on peak
		// memory (more than 25 % and 256 MB above the median of the three
		// before it). Its duration band needs 5 minutes more than the
		// median: too long for a test (TestRecurring has it).
		var last *simulator.JobResult
		for i, mb := range []int{32, 32, 32, 448} {
			last = run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: fmt.Sprintf("nightly-load 2026-12-0%d", i+1),
				User: "rita", Queue: "etl", Maps: 1, NoReduces: true, TaskCPU: 300 * time.Millisecond, Hold: 2 * time.Second, TaskMemMB: mb})
			h.waitJob(last.JobID, 1)
		}
		var f *analysis.Finding
		var r *analysis.Report
		if !testsrv.Poll(30*time.Second, func() bool {
			r, f = h.findings(last.JobID), nil
			for i := range r.Findings {
				if r.Findings[i].Heuristic == "recurring" {
					f = &r.Findings[i]
				}
			}
			return f != nil
		}) {
			logReport(t, "recurring", r)
			t.Fatal("no recurring finding")
		}
		logReport(t, "recurring", r)
		// Graded by the worst ratio of a measure outside its band (GC
		// share too: 448 MB in a 512 MB heap); not its duration.
		want := analysis.None
		for _, n := range f.Numbers {
			if strings.HasSuffix(n.Name, "_ratio") {
				want = max(want, gradeBy(n.Value, 1.25, 1.5, 2, 4))
			}
		}
		ratio := number(f, "peak_memory_ratio")
		if f.Severity != want || ratio < 1.25 || number(f, "baseline_runs") != 3 ||
			number(f, "peak_memory")-number(f, "median_peak_memory") < 256<<20 || number(f, "duration_ratio") != -1 {
			t.Errorf("recurring %s (want %s) at %.2f× the median peak memory: %v", f.Severity, want, ratio, f.Numbers)
		}
		var hist analysis.History
		if err := h.get("/api/v1/jobs/"+last.JobID+"/history?runs=4", &hist); err != nil {
			t.Fatal(err)
		}
		for _, run := range hist.Runs {
			t.Logf("run %s %q: %.1f s, CPU %.1f s, peak RSS %.0f MB, GC %.1f %%, outside %v", run.JobID, run.Name, run.Duration, run.CPU,
				run.PeakRSS/(1<<20), run.GCShare, run.Outside)
		}
		h.logAttempts(t, last.JobID)
		if hist.Name != "nightly-load <date>" || len(hist.Runs) != 4 || hist.Baseline != 3 || hist.Runs[3].JobID != last.JobID ||
			!slices.Contains(hist.Runs[3].Outside, "peak_memory") || len(hist.Runs[0].Outside)+len(hist.Runs[1].Outside)+len(hist.Runs[2].Outside) != 0 {
			t.Errorf("history %q: %d runs, baseline %d: %+v", hist.Name, len(hist.Runs), hist.Baseline, hist.Runs)
		}
	})
	t.Run("failed-and-speculative", func(t *testing.T) {
		// A map that fails once (its retry succeeds) and one that gets a
		// speculative copy (the original is killed): what they were given
		// is the job's waste, as soon as their outcomes are in. (3 s of
		// CPU: the original runs on beside its copy for longer than
		// store.SpeculativeOverlap, and the copy is told from a retry.)
		res := run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "failed-and-speculative", Maps: 4, NoReduces: true,
			TaskCPU: 3 * time.Second, Faults: []simulator.Fault{simulator.FaultExit1, simulator.FaultSpeculate}})
		h.waitJob(res.JobID, 6)
		var r *analysis.Report
		var w *analysis.Finding
		ok := testsrv.Poll(60*time.Second, func() bool {
			r, w = h.findings(res.JobID), nil // made at most every 5 s (findingsTTL): cheap to ask
			for i := range r.Findings {
				if r.Findings[i].Heuristic == "waste" {
					w = &r.Findings[i]
				}
			}
			return w != nil && number(w, "failed_attempts") == 1 && number(w, "speculative_attempts") == 1
		})
		logReport(t, "failed-and-speculative", r)
		if !ok {
			t.Fatalf("no waste finding of 1 failed and 1 speculative attempt: %+v", w)
		}
		// What they cost: their core-hours and GB-hours, the share of the
		// job's, graded 5, 15, 30, 50 % (low below).
		want := max(gradeBy(number(w, "wasted_share"), 5, 15, 30, 50), analysis.Low)
		if w.Severity != want || number(w, "wasted_share") <= 0 || len(w.AttemptIDs) != 2 {
			t.Errorf("waste finding %s, want %s: %+v", w.Severity, want, w)
		}
		for _, n := range []string{"failed_cpu_hours", "failed_gb_hours", "speculative_cpu_hours", "speculative_gb_hours"} {
			if v := number(w, n); !(v > 0) || v >= number(w, strings.TrimPrefix(strings.TrimPrefix(n, "failed_"), "speculative_")) {
				t.Errorf("waste %s %v of %v", n, v, number(w, strings.TrimPrefix(strings.TrimPrefix(n, "failed_"), "speculative_")))
			}
		}
	})
	t.Run("running", func(t *testing.T) {
		// Findings of a job that still runs: the leak shows before the task ends.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		j, err := c.Submit(ctx, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "leaking-running", Maps: 1, NoReduces: true,
			TaskCPU: 300 * time.Millisecond, Hold: 20 * time.Second, Leak: true, MemoryMB: 1024})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Wait(ctx)
		for {
			select {
			case <-j.Done():
				t.Fatal("the job ended before its leak was found")
			case <-time.After(time.Second):
			}
			var r analysis.Report
			if err := h.get("/api/v1/jobs/"+j.ID+"/findings", &r); err != nil {
				continue // not in the store yet
			}
			if worst(&r, "memory_growth") > analysis.None {
				logReport(t, "leaking-running", &r)
				if r.State != store.StateRunning {
					t.Errorf("state %q, want running", r.State)
				}
				return
			}
		}
	})
	t.Run("killed-nodemanager", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		j, _ := started(ctx, t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "orphaned", Maps: 1, NoReduces: true,
			TaskCPU: 200 * time.Millisecond, Hold: 30 * time.Second}, "map")
		testsrv.WaitUntil(t, "the agent tracking the map", 30*time.Second, func() bool {
			var d store.JobDetail
			return h.get("/api/v1/jobs/"+j.ID, &d) == nil && d.Running > 0
		})
		if err := c.KillDaemon(c.Nodes()[0].Name); err != nil {
			t.Fatal(err)
		}
		evs := h.waitEvents(t, "e2e-yarn", wire.EventOrphan, j.ID, 1)
		t.Logf("orphan: %s", evs[0].Message)
	})
}

// checkGCBoundSingle: the GC-bound map, and it alone, is named by
// gc_pressure at the grade of its own GC share (moderate from 10 %, or
// from 5 % when 3 times its type's median).
func checkGCBoundSingle(t *testing.T, r *analysis.Report) {
	named := false
	for _, f := range r.Findings {
		if f.Heuristic != "gc_pressure" || f.Severity <= analysis.Low {
			continue
		}
		if len(f.AttemptIDs) != 1 || !strings.HasSuffix(f.AttemptIDs[0], "_m_000000_0") || number(&f, "gc_bound_attempts") != 1 {
			t.Errorf("gc_pressure names %v, want the GC-bound map alone: %s", f.AttemptIDs, f.Message)
			continue
		}
		named = true
		// Graded by its share, moderate at least when 3× its type's.
		g, tg := number(&f, "gc_share"), number(&f, "type_gc_share")
		want := gradeGC(g)
		if want == analysis.Low && g >= 3*tg {
			want = analysis.Moderate
		}
		if g < 5 || f.Severity != want {
			t.Errorf("gc_pressure %s with a GC share of %.1f %% (its type's %.1f %%), want %s", f.Severity, g, tg, want)
		}
	}
	if !named {
		t.Errorf("the GC-bound map is not named at moderate or worse")
	}
}

// checkLastWave: the maps ran in waves of 3, 3 and 1; the last wave is
// badly filled ("partial"), its finding graded by the idle share it
// gives, and no attempt is a straggler.
func checkLastWave(t *testing.T, r *analysis.Report) {
	w := mapWaves(r)
	if w == nil || w.Kind != "partial" || w.Waves != 3 || w.LastWave != 1 || w.Slots != 3 {
		t.Errorf("map waves %+v, want 3 waves of 3 containers, the last partial with 1 attempt", w)
	}
	for _, f := range r.Findings {
		switch f.Heuristic {
		case "last_wave":
			idle := number(&f, "idle_share")
			if f.Severity != gradeIdle(idle) || number(&f, "last_wave_attempts") != 1 || number(&f, "slots") != 3 || len(f.AttemptIDs) != 1 {
				t.Errorf("last_wave %s with %.0f %% idle: %+v", f.Severity, idle, f)
			}
		case "straggler", "outlier":
			t.Errorf("a badly filled last wave read as a straggler: %s", f.Message)
		}
	}
}

// mapWaves is the waves of the job's maps in its report.
func mapWaves(r *analysis.Report) *analysis.Waves {
	if r.Path == nil {
		return nil
	}
	for i, w := range r.Path.Waves {
		if w.TaskType == "map" {
			return &r.Path.Waves[i]
		}
	}
	return nil
}

// The grades docs/analysis.md gives: an outlier's duration ratio (2, 3,
// 4, 6), a GC share (5, 10, 15, 25 %), a last wave's idle share (10, 20,
// 30, 45 %).
func gradeDuration(r float64) analysis.Severity { return gradeBy(r, 2, 3, 4, 6) }
func gradeGC(pct float64) analysis.Severity     { return gradeBy(pct, 5, 10, 15, 25) }
func gradeIdle(pct float64) analysis.Severity   { return gradeBy(pct, 10, 20, 30, 45) }

func gradeBy(v float64, t ...float64) analysis.Severity {
	s := analysis.None
	for i, x := range t {
		if v >= x {
			s = analysis.Severity(i + 1)
		}
	}
	return s
}

// logAttempts logs what the analysis reads of each task attempt.
func (h *harness) logAttempts(t *testing.T, job string) {
	var j store.JobDetail
	if err := h.get("/api/v1/jobs/"+job, &j); err != nil {
		t.Fatal(err)
	}
	for _, a := range j.AttemptList {
		t.Logf("%s %s %s %s-%s: %.1f s, CPU %.1f s, sched wait %.1f s, GC %.1f s, peak RSS %d MB, outcome %s",
			a.AttemptID, a.Type, a.Host, time.UnixMilli(int64(a.Start)).Format("15:04:05.000"), time.UnixMilli(int64(a.End)).Format("15:04:05.000"),
			float64(a.DurationMs)/1000, float64(a.CPUMs)/1000, float64(a.SchedWaitMs)/1000, float64(a.GCTimeMs)/1000, a.PeakRSS>>20, a.Outcome)
	}
}

// logEvents logs the job's events other than starts and ends, with the
// simulator's view of its processes.
func (h *harness) logEvents(t *testing.T, res *simulator.JobResult) {
	var evs struct{ Events []store.Event }
	if err := h.get("/api/v1/jobs/"+res.JobID+"/events", &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		switch e.Kind {
		case wire.EventAttemptStart, wire.EventAttemptEnd, wire.EventAttemptSwitch:
			continue
		}
		t.Logf("event %s %s pid %d %s: %s", time.UnixMilli(int64(e.Time)).Format("15:04:05.000"), e.Kind, e.PID, e.AttemptID, e.Message)
	}
	for _, a := range res.Attempts {
		t.Logf("sim %s %s launcher %d root %d jvm %d %s - %s", a.Unit, a.Type, a.LauncherPID, a.RootPID, a.JVMPID,
			a.Start.Format("15:04:05.000"), a.End.Format("15:04:05.000"))
	}
}

// logSeries logs an attempt series of each attempt of a type (to see what a
// heuristic saw).
func (h *harness) logSeries(t *testing.T, job, typ string, metrics ...string) {
	var j store.JobDetail
	if err := h.get("/api/v1/jobs/"+job, &j); err != nil {
		t.Fatal(err)
	}
	for _, a := range j.AttemptList {
		if a.Type != typ {
			continue
		}
		r, err := h.st.Series(context.Background(), store.SeriesQuery{Scope: store.ScopeAttempt, JobID: job, AttemptID: a.AttemptID,
			Metrics: metrics, From: int64(a.Start), To: int64(a.Start) + a.DurationMs + 1, Step: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.Series {
			var vs []string
			for _, v := range s.Values {
				vs = append(vs, fmt.Sprintf("%.0f", float64(v)/(1<<20)))
			}
			t.Logf("%s %s (MB, 500 ms buckets): %s", a.AttemptID, s.Metric, strings.Join(vs, " "))
		}
	}
}

// logCounts logs, for each task attempt, the largest value of count metrics.
func (h *harness) logCounts(t *testing.T, job string, metrics ...string) {
	var j store.JobDetail
	if err := h.get("/api/v1/jobs/"+job, &j); err != nil {
		t.Fatal(err)
	}
	for _, a := range j.AttemptList {
		r, err := h.st.Series(context.Background(), store.SeriesQuery{Scope: store.ScopeAttempt, JobID: job, AttemptID: a.AttemptID,
			Metrics: metrics, From: int64(a.Start), To: int64(a.Start) + a.DurationMs + 1, Step: a.DurationMs + 1})
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, s := range r.Series {
			parts = append(parts, fmt.Sprintf("%s %v", s.Metric, s.Values))
		}
		t.Logf("%s %s %.1f s: %s", a.AttemptID, a.Type, float64(a.DurationMs)/1000, strings.Join(parts, ", "))
	}
}

// waitTracked waits until the store lists an attempt of job with a
// process: the agent has found the job's task process.
func (h *harness) waitTracked(t *testing.T, job string) {
	t.Helper()
	testsrv.WaitUntil(t, "a tracked process of "+job, 30*time.Second, func() bool {
		var j store.JobDetail
		if h.get("/api/v1/jobs/"+job, &j) != nil {
			return false
		}
		for _, a := range j.AttemptList {
			if a.Processes > 0 {
				return true
			}
		}
		return false
	})
}

// waitEvents waits until the host endpoint lists n events of kind for job.
func (h *harness) waitEvents(t *testing.T, host, kind, job string, n int) []store.Event {
	t.Helper()
	var d api.HostDetail
	var out []store.Event
	var err error
	if !testsrv.Poll(30*time.Second, func() bool {
		d, out = api.HostDetail{}, nil
		if err = h.get("/api/v1/hosts/"+host, &d); err != nil {
			return false
		}
		for _, e := range d.Events {
			if e.Kind == kind && (job == "" || e.JobID == job) {
				out = append(out, e)
			}
		}
		return len(out) >= n
	}) {
		t.Fatalf("host %s: %d %s events of %s, want %d (%v; all: %+v)", host, len(out), kind, job, n, err, d.Events)
	}
	return out
}

// inCluster reports whether pid is a process of the simulated cluster (the
// reaper of these tests touches nothing else on a shared machine).
func inCluster(ids ...string) func(pid int32) bool {
	return func(pid int32) bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/environ")
		if err != nil {
			return false
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			for _, id := range ids {
				if string(kv) == simulator.EnvCluster+"="+id {
					return true
				}
			}
		}
		return false
	}
}

// TestLostTaskProcesses runs Hadoop 1 jobs whose Child JVMs escape the
// TaskTracker (one hangs before getTask and is "just removed"; then the
// TaskTracker is killed under a running Child), with the agent's reaper on
// (limited to the cluster's processes), and checks the events on the host
// endpoint and the job's findings.
func TestLostTaskProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	h := newHarness(t)
	c := startCluster(t, simulator.NodeHadoop1)
	h.startAgent("e2e-h1", func(cfg *agent.Config) {
		cfg.ReapAfter = 2 * time.Second
		cfg.ReapGrace = time.Second
		cfg.ReapAllow = inCluster(c.ID())
	})

	// A lost Child: map 0's first JVM hangs before getTask; the job goes on
	// with more map JVMs than slots.
	res := run(t, c, simulator.JobSpec{Kind: simulator.JobHadoop1, Name: "lost-child", Maps: 3, Reduces: 1,
		TaskCPU: 1500 * time.Millisecond, LostChild: true})
	var lost simulator.AttemptResult
	for _, a := range res.Attempts {
		if a.Lost {
			lost = a
		}
	}
	if lost.JVMPID == 0 {
		t.Fatalf("no lost Child in %+v", res.Attempts)
	}
	evs := h.waitEvents(t, "e2e-h1", wire.EventLostJVM, res.JobID, 1)
	found := false
	for _, e := range evs {
		t.Logf("lost_jvm: pid %d %s", e.PID, e.Message)
		found = found || int(e.PID) == lost.JVMPID
	}
	if !found {
		t.Errorf("no lost_jvm event names the lost Child (pid %d)", lost.JVMPID)
	}
	// The reaper ends it.
	reaps := h.waitEvents(t, "e2e-h1", wire.EventReap, res.JobID, 1)
	for _, e := range reaps {
		t.Logf("reap: pid %d %s", e.PID, e.Message)
	}
	if !testsrv.Poll(20*time.Second, func() bool { return !alive(lost.JVMPID) }) {
		t.Errorf("the lost Child (pid %d) is still alive", lost.JVMPID)
	}
	var r analysis.Report
	if err := h.get("/api/v1/jobs/"+res.JobID+"/findings", &r); err != nil {
		t.Fatal(err)
	}
	logReport(t, "lost-child", &r)
	if got := worst(&r, "lost_processes"); got < analysis.Moderate {
		t.Errorf("lost_processes is %s, want at least moderate", got)
	}

	// A task whose job the TaskTracker purged (jobcache/<job> removed)
	// while its Child lives on: it outlived its job, and is reaped.
	ctx0, cancel0 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel0()
	jo, op := started(ctx0, t, c, simulator.JobSpec{Kind: simulator.JobHadoop1, Name: "outlived", Maps: 1, NoReduces: true,
		TaskCPU: 200 * time.Millisecond, Hold: 60 * time.Second}, "")
	h.waitTracked(t, jo.ID)
	// Its job is purged once the Child runs its task (holds on): a JVM
	// still starting when its working directory goes dies of it ("Could
	// not determine current working directory"), as would one that has
	// not read its job.xml yet, and there is nothing left to reap (under
	// load, a JVM's start outlasted the agent's first report of it).
	testsrv.WaitUntil(t, "the Child holding on to its task", 60*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(op.LogDir, "syslog"))
		return strings.Contains(string(b), "holding on for")
	})
	jobcache := filepath.Dir(filepath.Dir(op.WorkDir)) // <local>/taskTracker/<user>/jobcache/<job>
	if filepath.Base(jobcache) != jo.ID {
		t.Fatalf("work dir %s is not under jobcache/%s", op.WorkDir, jo.ID)
	}
	if err := os.RemoveAll(jobcache); err != nil {
		t.Fatal(err)
	}
	out := h.waitEvents(t, "e2e-h1", wire.EventOutlived, jo.ID, 1)
	t.Logf("outlived_job: pid %d %s", out[0].PID, out[0].Message)
	h.waitEvents(t, "e2e-h1", wire.EventReap, jo.ID, 1)
	if !testsrv.Poll(20*time.Second, func() bool { return !alive(op.JVMPID) }) {
		t.Errorf("the Child that outlived its job (pid %d) is still alive", op.JVMPID)
	}

	// A Child whose TaskTracker is killed: orphaned.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, ch := started(ctx, t, c, simulator.JobSpec{Kind: simulator.JobHadoop1, Name: "orphaned-child", Maps: 1, NoReduces: true,
		TaskCPU: 200 * time.Millisecond, Hold: 60 * time.Second}, "")
	child := ch.JVMPID
	h.waitTracked(t, j.ID)
	if err := c.KillDaemon(c.Nodes()[0].Name); err != nil {
		t.Fatal(err)
	}
	orph := h.waitEvents(t, "e2e-h1", wire.EventOrphan, j.ID, 1)
	t.Logf("orphan: pid %d %s", orph[0].PID, orph[0].Message)
	// A Child whose TaskTracker died exits by itself once its pings fail
	// (exit 65/66); one that does not is reaped.
	if !testsrv.Poll(30*time.Second, func() bool { return !alive(child) }) {
		t.Errorf("the orphaned Child (pid %d) is still alive", child)
	}
	var d api.HostDetail
	if err := h.get("/api/v1/hosts/e2e-h1", &d); err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Events {
		if e.Kind == wire.EventReap && e.JobID == j.ID {
			t.Logf("reap: pid %d %s", e.PID, e.Message)
		}
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestUnknownContainers points an agent at a NodeManager that lists no
// container (the documented JSON from an httptest server) while a job
// runs: its containers are reported unknown. The agent of TestCraftedJobs,
// which asks the simulator's NodeManager, raises no such event.
func TestUnknownContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	h := newHarness(t)
	c := startCluster(t, simulator.NodeYARN)
	nm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/ws/v1/node/containers":
			w.Write([]byte(`{"containers":{}}`))
		case "/ws/v1/node/apps":
			// The application is known: its containers are not.
			var apps []string
			for _, n := range []string{"1", "2", "3"} {
				apps = append(apps, fmt.Sprintf(`{"id":"application_%d_000%s","state":"RUNNING","user":"hadoop"}`, c.Timestamp(), n))
			}
			w.Write([]byte(`{"apps":{"app":[` + strings.Join(apps, ",") + `]}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer nm.Close()
	h.startAgent("e2e-fake-nm", func(cfg *agent.Config) { cfg.Lost.NMURL = nm.URL; cfg.Lost.NMPoll = 300 * time.Millisecond })
	realNM := h.startAgent("e2e-real-nm", func(cfg *agent.Config) { cfg.Lost.NMPoll = 300 * time.Millisecond })
	res := run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "unknown", Maps: 1, NoReduces: true,
		TaskCPU: 200 * time.Millisecond, Hold: 4 * time.Second})
	evs := h.waitEvents(t, "e2e-fake-nm", wire.EventUnknownContainer, res.JobID, 1)
	t.Logf("unknown_container: %s", evs[0].Message)
	// The other agent listed the same NodeManager every 300 ms while the
	// job's containers lived, and has seen their end. Both agents watch
	// the same processes, and the store keeps an attempt on the host whose
	// agent wrote it last, so which of the two holds the job's attempts is
	// a race: wait until they ended on either, then until the agent that
	// asks the simulator's NodeManager has ticked and sent batches since.
	ended := func() (bool, string) {
		n, running := 0, 0
		var held []string
		for _, host := range []string{"e2e-fake-nm", "e2e-real-nm"} {
			var hd api.HostDetail
			if err := h.get("/api/v1/hosts/"+host, &hd); err != nil {
				return false, err.Error()
			}
			for _, a := range hd.Attempts {
				if a.JobID == res.JobID {
					n++
					if a.State == store.StateRunning {
						running++
					}
					held = append(held, fmt.Sprintf("%s on %s: %s, last seen %d", a.AttemptID, host, a.State, a.LastSeen))
				}
			}
		}
		return n > 0 && running == 0, strings.Join(held, "; ")
	}
	var held string
	if !testsrv.Poll(30*time.Second, func() bool {
		var ok bool
		ok, held = ended()
		return ok
	}) {
		t.Fatalf("timed out waiting for the job's attempts ended (the store holds: %s; job %s ended: %+v)", held, res.JobID, res)
	}
	all, err := agentMetrics(realNM)
	if err != nil {
		t.Fatal(err)
	}
	ticks0, err := metricIn(all, "taskscope_agent_ticks_total")
	if err != nil {
		t.Fatal(err)
	}
	// 8 ticks of 250 ms span two flushes (1 s apart), and what they sent
	// was acknowledged: nothing waits in the agent's queue or spool.
	var last error
	if !testsrv.Poll(30*time.Second, func() bool {
		var all string
		if all, last = agentMetrics(realNM); last != nil {
			return false
		}
		var v [3]float64
		for i, name := range []string{"taskscope_agent_ticks_total", "taskscope_agent_queue_batches", "taskscope_agent_spool_batches"} {
			if v[i], last = metricIn(all, name); last != nil {
				return false
			}
		}
		return v[0] >= ticks0+8 && v[1] == 0 && v[2] == 0
	}) {
		t.Fatalf("e2e-real-nm did not tick 8 times and send what it had after the job's attempts ended (%v)", last)
	}
	var d api.HostDetail
	if err := h.get("/api/v1/hosts/e2e-real-nm", &d); err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Events {
		if e.JobID == res.JobID {
			t.Errorf("the agent that asks the simulator's NodeManager reported %s: %s", e.Kind, e.Message)
		}
	}
}

// number is a finding's number of that name (-1 if it has none).
func number(f *analysis.Finding, name string) float64 {
	for _, n := range f.Numbers {
		if n.Name == name {
			return n.Value
		}
	}
	return -1
}
