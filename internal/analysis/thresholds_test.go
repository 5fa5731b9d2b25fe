package analysis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

func finding(r *analysis.Report, heuristic string) *analysis.Finding {
	var w *analysis.Finding
	for i := range r.Findings {
		if f := &r.Findings[i]; f.Heuristic == heuristic && (w == nil || f.Severity > w.Severity) {
			w = f
		}
	}
	return w
}

func number(f *analysis.Finding, name string) float64 {
	for _, n := range f.Numbers {
		if n.Name == name {
			return n.Value
		}
	}
	return math.NaN()
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func report(t *testing.T, st store.Store, id string) *analysis.Report {
	t.Helper()
	r, err := analysis.New(st).Report(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		t.Logf("[%s] %s %s: %s -> %s (%s=%s) %v", f.Severity, f.Heuristic, f.Cause, f.Message, f.Recommendation, f.Parameter, f.Value, f.Numbers)
	}
	return r
}

// TestThresholds runs the heuristics on hand-built jobs (no database):
// each raises its finding at the severity its thresholds give, with the
// numbers behind it, and healthy jobs raise nothing above low.
func TestThresholds(t *testing.T) {
	m := task{typ: "map", d: 10, cpu: 0.9, gcMs: 200, ioMB: 100} // a healthy map
	r := task{typ: "reduce", host: "h1", s: 10, d: 10, cpu: 0.9, gcMs: 200, ioMB: 100}
	with := func(t task, f func(*task)) task { f(&t); return t }
	type tc struct {
		name   string
		tasks  []task
		others []task // another job's attempts (neighbours)
		events []store.Event
		series map[string]float64 // fakeStore.series
		want   map[string]analysis.Severity
		loose  bool // other heuristics may raise what they will
		check  func(t *testing.T, r *analysis.Report)
	}
	cases := []tc{
		{name: "healthy", tasks: cat(same(6, m), []task{r})},
		{name: "healthy under load", // GC time stretched 3× by the load, CPU time not: 600 ms of GC over 5 s of CPU is 12 %; over 10 s runnable 6 %
			tasks: same(6, with(m, func(t *task) { t.cpu, t.gcMs, t.waitMs = 0.5, 600, 10000 }))},
		// The same on a busy node: its runnable time stretched with its
		// JVM's other threads' waits, its share reads 9 %, its siblings' 1 %:
		// it stands out, moderate (e2e TestCraftedJobs/gc-bound-single).
		{name: "GC-bound single attempt on a busy node",
			tasks: cat(same(5, with(m, func(t *task) { t.d, t.cpu, t.gcMs, t.waitMs = 17, 0.25, 150, 20000 })),
				[]task{with(m, func(t *task) { t.host, t.d, t.cpu, t.gcMs, t.waitMs = "h1", 17, 0.25, 1530, 20000 })}),
			want: map[string]analysis.Severity{"gc_pressure": analysis.Moderate},
			check: func(t *testing.T, r *analysis.Report) {
				f := finding(r, "gc_pressure")
				if len(f.AttemptIDs) != 1 || f.AttemptIDs[0] != "attempt_1700000000000_0001_m_000005_0" || !near(number(f, "gc_share"), 9, 0.01) ||
					!near(number(f, "type_gc_share"), 150.0/17000*100, 0.01) {
					t.Errorf("gc_pressure %v %v", f.AttemptIDs, f.Numbers)
				}
			}},
		// The crafted job of e2e's gc-bound-single on a loaded CI host
		// (7 s maps waiting for a CPU as long as they ran): the GC-bound map
		// at 17 %, a sibling's pauses stretched to 6 %, low on its own
		// and nowhere near 3 times its type's: the sibling is not named
		// beside the map that stands out.
		{name: "GC-bound single attempt beside a stretched sibling",
			tasks: []task{
				with(m, func(t *task) { t.d, t.cpu, t.gcMs, t.waitMs = 7.1, 4.4/7.1, 1200, 4200 }),
				with(m, func(t *task) { t.d, t.cpu, t.gcMs, t.waitMs = 7.6, 4.3/7.6, 500, 4600 }),
				with(m, func(t *task) { t.d, t.cpu, t.gcMs, t.waitMs = 7.1, 4.3/7.1, 200, 3600 }),
				with(m, func(t *task) { t.d, t.cpu, t.gcMs, t.waitMs = 5.1, 4.3/5.1, 200, 900 }),
				with(m, func(t *task) { t.d, t.cpu, t.gcMs, t.waitMs = 5.0, 4.4/5.0, 100, 800 }),
			},
			want: map[string]analysis.Severity{"gc_pressure": analysis.Severe},
			check: func(t *testing.T, r *analysis.Report) {
				f := finding(r, "gc_pressure")
				if len(f.AttemptIDs) != 1 || f.AttemptIDs[0] != "attempt_1700000000000_0001_m_000000_0" || number(f, "gc_bound_attempts") != 1 {
					t.Errorf("gc_pressure names %v (%v), want the GC-bound map alone", f.AttemptIDs, f.Numbers)
				}
			}},
		// One with a little more GC than the rest, not 3 times theirs: low.
		{name: "a little more GC than its type",
			tasks: cat(same(5, with(m, func(t *task) { t.gcMs = 400 })), []task{with(m, func(t *task) { t.host, t.gcMs = "h1", 600 })}),
			want:  map[string]analysis.Severity{"gc_pressure": analysis.Low}},
		// A healthy job on a loaded node, two minutes of attempts: a
		// fifth of the time on a CPU, most of the rest waiting for one.
		{name: "healthy on a busy node, a minute long",
			tasks: same(6, with(m, func(t *task) { t.d, t.cpu, t.waitMs = 20, 0.2, 14000 }))},
		{name: "GC-bound single attempt", tasks: cat(same(5, m), []task{with(m, func(t *task) { t.host, t.gcMs = "h1", 1500 })}),
			want: map[string]analysis.Severity{"gc_pressure": analysis.Severe},
			check: func(t *testing.T, r *analysis.Report) {
				f := finding(r, "gc_pressure")
				if len(f.AttemptIDs) != 1 || f.AttemptIDs[0] != "attempt_1700000000000_0001_m_000005_0" {
					t.Errorf("gc_pressure names %v", f.AttemptIDs)
				}
				if g := number(f, "gc_share"); !near(g, 1500.0/9000*100, 0.1) {
					t.Errorf("gc_share %.2f, want 16.7", g)
				}
			}},
		{name: "straggler on a busy node",
			tasks:  cat(same(5, m), []task{with(m, func(t *task) { t.host, t.d, t.cpu, t.waitMs = "h9", 30, 0.3, 12000 })}),
			others: []task{{typ: "map", host: "h9", d: 30, cpu: 1}, {typ: "map", host: "h9", d: 30, cpu: 1}},
			want: map[string]analysis.Severity{"straggler": analysis.Moderate, "outlier": analysis.Moderate,
				"noisy_neighbours": analysis.Severe, "skew": analysis.Low},
			check: func(t *testing.T, r *analysis.Report) {
				f := finding(r, "outlier")
				if f.Cause != "cpu_wait" || !near(number(f, "neighbour_cores"), 2, 0.01) || !near(number(f, "sched_wait_share"), 40, 0.1) {
					t.Errorf("outlier: cause %s, numbers %v", f.Cause, f.Numbers)
				}
			}},
		// Its threads waited at once: sched_wait sums over threads, three
		// times its wall time here (e2e straggler-busy-node read 299 %).
		{name: "straggler on a busy node, threads waiting at once",
			tasks:  cat(same(5, m), []task{with(m, func(t *task) { t.host, t.d, t.cpu, t.waitMs = "h9", 30, 0.3, 90000 })}),
			others: []task{{typ: "map", host: "h9", d: 30, cpu: 1}, {typ: "map", host: "h9", d: 30, cpu: 1}},
			want: map[string]analysis.Severity{"straggler": analysis.Moderate, "outlier": analysis.Moderate,
				"noisy_neighbours": analysis.Critical, "skew": analysis.Low},
			check: func(t *testing.T, r *analysis.Report) {
				for _, h := range []string{"outlier", "noisy_neighbours"} {
					f := finding(r, h)
					if strings.Contains(f.Message, "300%") || !strings.Contains(f.Message, "90.0 s in all over its 30 s (3.0 threads at once on average)") {
						t.Errorf("%s: %s", h, f.Message)
					}
				}
				last := r.Path.Steps[len(r.Path.Steps)-1]
				if !strings.Contains(last.Note, "waiting for a CPU 3.0 threads at once") {
					t.Errorf("critical path step %s: %s", last.AttemptID, last.Note)
				}
			}},
		// Starved: its GC pauses (1.3 s) outlast all its CPU (0.7 s), they
		// were waits for its threads to get a CPU (e2e
		// straggler-busy-node read a moderate gc_pressure): no GC finding.
		{name: "starved straggler's stretched GC pauses",
			tasks: cat(same(5, with(m, func(t *task) { t.d, t.cpu, t.gcMs = 2, 0.3, 100 })),
				[]task{with(m, func(t *task) { t.host, t.d, t.cpu, t.gcMs, t.waitMs = "h9", 13, 0.054, 1300, 33600 })}),
			others: []task{{typ: "map", host: "h9", d: 13, cpu: 1}},
			want: map[string]analysis.Severity{"straggler": analysis.Critical, "outlier": analysis.Critical, "noisy_neighbours": analysis.Critical,
				"skew": analysis.Moderate, "gc_pressure": analysis.None},
			check: func(t *testing.T, r *analysis.Report) {
				if f := finding(r, "outlier"); f.Cause != "cpu_wait" || strings.Contains(f.Message, "garbage") {
					t.Errorf("outlier: cause %s: %s", f.Cause, f.Message)
				}
			}},
		{name: "straggler with more work", tasks: cat(same(5, m), []task{with(m, func(t *task) { t.host, t.d = "h1", 35 })}),
			want: map[string]analysis.Severity{"straggler": analysis.Moderate, "outlier": analysis.Moderate, "noisy_neighbours": analysis.None},
			check: func(t *testing.T, r *analysis.Report) {
				if f := finding(r, "outlier"); f.Cause != "more_work" || !near(number(f, "cpu_ratio"), 3.5, 0.01) {
					t.Errorf("outlier: cause %s, numbers %v", f.Cause, f.Numbers)
				}
			}},
		{name: "slow node", tasks: cat(same(6, m), []task{with(m, func(t *task) { t.host, t.d, t.cpu = "h4", 25, 0.36 }),
			with(m, func(t *task) { t.host, t.s, t.d, t.cpu = "h4", 1, 26, 0.35 })}),
			want: map[string]analysis.Severity{"straggler": analysis.Low, "outlier": analysis.Low},
			check: func(t *testing.T, r *analysis.Report) {
				if f := finding(r, "outlier"); f.Cause != "slow_node" || !near(number(f, "host_ratio"), 2.55, 0.01) {
					t.Errorf("outlier: cause %s, numbers %v", f.Cause, f.Numbers)
				}
			}},
		{name: "waiting on IO", tasks: cat(same(5, m), []task{with(m, func(t *task) { t.host, t.d, t.cpu, t.ioMB = "h1", 45, 0.2, 3000 })}),
			want: map[string]analysis.Severity{"straggler": analysis.Severe, "outlier": analysis.Severe, "skew": analysis.Moderate},
			check: func(t *testing.T, r *analysis.Report) {
				if f := finding(r, "outlier"); f.Cause != "io_wait" || !near(number(f, "off_cpu_share"), 80, 0.1) {
					t.Errorf("outlier: cause %s, numbers %v", f.Cause, f.Numbers)
				}
			}},
		{name: "memory pressure", tasks: cat(same(5, m), []task{with(m, func(t *task) { t.host, t.rssMB = "h1", 1000 })}),
			want: map[string]analysis.Severity{"outlier": analysis.Critical, "skew": analysis.Critical, "memory_headroom": analysis.Moderate},
			check: func(t *testing.T, r *analysis.Report) {
				if f := finding(r, "outlier"); f.Cause != "memory" || !near(number(f, "memory_ratio"), 5, 0.01) {
					t.Errorf("outlier: cause %s, numbers %v", f.Cause, f.Numbers)
				}
			}},
		{name: "badly filled last wave", // 9 maps on 4 containers: the last wave runs one for 10 s
			tasks: cat(same(4, m), same(4, with(m, func(t *task) { t.s = 10 })), []task{with(m, func(t *task) { t.s = 20 })}),
			want:  map[string]analysis.Severity{"last_wave": analysis.Moderate, "straggler": analysis.None, "outlier": analysis.None},
			check: func(t *testing.T, r *analysis.Report) {
				f := finding(r, "last_wave")
				if number(f, "waves") != 3 || number(f, "slots") != 4 || number(f, "last_wave_fill") != 25 || !near(number(f, "idle_share"), 25, 0.01) {
					t.Errorf("last_wave numbers %v", f.Numbers)
				}
				w := r.Path.Waves[0]
				if w.Kind != "partial" || w.Waves != 3 {
					t.Errorf("waves %+v", w)
				}
			}},
		// The same seen by agents: each end seen up to an interval late,
		// after the attempt that took the container was seen to start
		// (e2e TestCraftedJobs/last-wave read 6 containers for 3).
		{name: "badly filled last wave, ends seen late",
			tasks: cat(same(4, with(m, func(t *task) { t.d = 10.3 })), same(4, with(m, func(t *task) { t.s, t.d = 10, 10.3 })),
				[]task{with(m, func(t *task) { t.s = 20 })}),
			want: map[string]analysis.Severity{"last_wave": analysis.Moderate, "straggler": analysis.None, "outlier": analysis.None},
			check: func(t *testing.T, r *analysis.Report) {
				f := finding(r, "last_wave")
				if number(f, "waves") != 3 || number(f, "slots") != 4 || number(f, "last_wave_attempts") != 1 || !near(number(f, "idle_share"), 25, 1) {
					t.Errorf("last_wave numbers %v", f.Numbers)
				}
			}},
		{name: "a straggler in the last wave is not a badly filled wave",
			tasks: cat(same(4, m), []task{with(m, func(t *task) { t.host, t.s, t.d, t.cpu = "h1", 10, 45, 0.2 })}),
			want: map[string]analysis.Severity{"last_wave": analysis.None, "straggler": analysis.Severe, "outlier": analysis.Severe,
				"skew": analysis.Moderate},
			check: func(t *testing.T, r *analysis.Report) {
				if w := r.Path.Waves[0]; w.Kind != "straggler" {
					t.Errorf("last wave %+v, want a straggler's", w)
				}
			}},
	}
	a5 := "attempt_1700000000000_0001_m_000005_0"
	cases = append(cases,
		tc{name: "skew of CPU 4x", tasks: cat(same(5, m), []task{with(m, func(t *task) { t.host, t.cpu = "h1", 3.6 })}),
			want: map[string]analysis.Severity{"skew": analysis.Moderate, "outlier": analysis.Moderate}},
		tc{name: "memory too close to the container", tasks: same(4, with(m, func(t *task) { t.rssMB = 980 })),
			want: map[string]analysis.Severity{"memory_headroom": analysis.Moderate}},
		tc{name: "memory reserved but unused", tasks: same(4, with(m, func(t *task) { t.rssMB, t.memMB = 500, 4096 })),
			want: map[string]analysis.Severity{"memory_headroom": analysis.Critical}},
		tc{name: "heap full", tasks: same(4, with(m, func(t *task) { t.heapMB = 790 })),
			want: map[string]analysis.Severity{"heap_headroom": analysis.Severe}},
		tc{name: "cpu mostly idle", tasks: same(4, with(m, func(t *task) { t.d, t.cpu = 30, 0.1 })),
			want: map[string]analysis.Severity{"cpu_efficiency": analysis.Severe}},
		tc{name: "one lost process", tasks: same(4, m),
			events: []store.Event{{Kind: "orphan", JobID: "job_1700000000000_0001", Host: "h1", PID: 42, AttemptID: a5}},
			want:   map[string]analysis.Severity{"lost_processes": analysis.Severe}},
		tc{name: "three lost processes", tasks: same(4, m),
			events: []store.Event{{Kind: "orphan", JobID: "job_1700000000000_0001", Host: "h1", PID: 42}, {Kind: "orphan", JobID: "job_1700000000000_0001", Host: "h1", PID: 43},
				{Kind: "orphan", JobID: "job_1700000000000_0001", Host: "h2", PID: 42}},
			want: map[string]analysis.Severity{"lost_processes": analysis.Critical},
			check: func(t *testing.T, r *analysis.Report) {
				if f := finding(r, "lost_processes"); f.Cause != "orphan" || analysis.LostWhat(f.Cause) == "" || number(f, "processes") != 3 {
					t.Errorf("lost_processes: cause %q, numbers %v", f.Cause, f.Numbers)
				}
			}},
		tc{name: "short-lived processes 50/s", tasks: same(4, m),
			series: map[string]float64{"attempt_1700000000000_0001_m_000000_0/short_lived": 500},
			want:   map[string]analysis.Severity{"short_lived_processes": analysis.Severe}},
		tc{name: "short-lived processes below 50", tasks: same(4, m),
			series: map[string]float64{"attempt_1700000000000_0001_m_000000_0/short_lived": 49}},
	)
	// straggler: slowest/median 2, 3, 4, 6.
	for _, c := range []struct {
		ratio float64
		sev   analysis.Severity
	}{{1.9, analysis.None}, {2, analysis.Low}, {3, analysis.Moderate}, {4, analysis.Severe}, {5.9, analysis.Severe}, {6, analysis.Critical}} {
		cases = append(cases, tc{name: fmt.Sprintf("straggler %.1fx", c.ratio),
			tasks: cat(same(4, m), []task{with(m, func(t *task) { t.host, t.d, t.cpu = "h1", 10*c.ratio, 0.9/c.ratio })}),
			want:  map[string]analysis.Severity{"straggler": c.sev}, loose: true})
	}
	// gc_pressure of a type: 5, 10, 15, 25 % of runnable time.
	for _, c := range []struct {
		share float64
		sev   analysis.Severity
	}{{0.04, analysis.None}, {0.05, analysis.Low}, {0.1, analysis.Moderate}, {0.15, analysis.Severe}, {0.25, analysis.Critical}} {
		cases = append(cases, tc{name: fmt.Sprintf("gc %.0f%%", c.share*100),
			tasks: same(4, with(m, func(t *task) { t.d, t.gcMs = 20, int64(c.share*18000) })),
			want:  map[string]analysis.Severity{"gc_pressure": c.sev}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := job(1, "wordcount", c.tasks...)
			fs := newFake(d)
			if c.others != nil {
				fs = newFake(d, job(2, "other", c.others...))
			}
			fs.events, fs.series = c.events, c.series
			r := report(t, fs, d.JobID)
			for h, want := range c.want {
				got := analysis.None
				if f := finding(r, h); f != nil {
					got = f.Severity
					if f.Severity > analysis.None && (f.Message == "" || len(f.Numbers) == 0) {
						t.Errorf("%s without message or numbers", h)
					}
				}
				if got != want {
					t.Errorf("%s is %s, want %s", h, got, want)
				}
			}
			for _, f := range r.Findings {
				checkAgrees(t, f)
				if _, ok := c.want[f.Heuristic]; !ok && !c.loose && f.Severity > analysis.Low {
					t.Errorf("unexpected [%s] %s: %s", f.Severity, f.Heuristic, f.Message)
				}
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

// TestStoreErrorFails: a store error during the analysis fails the report
// (instead of a report that looks clean), whichever read meets it.
func TestStoreErrorFails(t *testing.T) {
	m := task{typ: "map", d: 10, cpu: 0.9, gcMs: 200}
	d := job(1, "wordcount", cat(same(5, m), []task{{typ: "map", host: "h9", d: 30, cpu: 0.3, waitMs: 9000}})...)
	for _, what := range []string{"job", "host", "events"} {
		fs := newFake(d)
		fs.failOn = what
		_, err := analysis.New(fs).Report(context.Background(), d.JobID)
		if !errors.Is(err, errBroken) {
			t.Errorf("a failing %s read: report error %v", what, err)
		}
		if fs.reads[what] == 0 {
			t.Errorf("no %s read", what)
		}
	}
	// A series that is not there is not an error.
	fs := newFake(d)
	if _, err := analysis.New(fs).Report(context.Background(), d.JobID); err != nil {
		t.Fatal(err)
	}
}

// TestStableOrder: findings of equal severity come in the order of the
// heuristics, then by task type and attempt, every time.
func TestStableOrder(t *testing.T) {
	m := task{typ: "map", d: 10, cpu: 0.9, gcMs: 200}
	rd := task{typ: "reduce", s: 20, d: 10, cpu: 0.9, gcMs: 200}
	d := job(1, "wordcount", cat(same(4, m), same(4, rd),
		[]task{{typ: "map", host: "h1", d: 30, cpu: 0.9}, {typ: "reduce", s: 20, host: "h2", d: 30, cpu: 0.9}})...)
	var first []analysis.Finding
	for i := 0; i < 20; i++ {
		r, err := analysis.New(newFake(d)).Report(context.Background(), d.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Findings
			for k := 1; k < len(first); k++ {
				a, b := first[k-1], first[k]
				if a.Severity < b.Severity || a.Severity == b.Severity && a.Heuristic == b.Heuristic && a.TaskType > b.TaskType {
					t.Errorf("out of order: %s %s %s before %s %s %s", a.Severity, a.Heuristic, a.TaskType, b.Severity, b.Heuristic, b.TaskType)
				}
			}
			if len(first) < 4 {
				t.Fatalf("only %d findings", len(first))
			}
			continue
		}
		if !reflect.DeepEqual(r.Findings, first) {
			t.Fatalf("run %d lists the findings in another order", i)
		}
	}
}

// contradictions are what a finding's text may say only when its number
// agrees: "no GC" beside a GC share above 0, "no IO" beside IO, "no wait
// for a CPU" beside a wait.
var contradictions = []struct{ text, number string }{
	{"no GC", "gc_share"}, {"no IO", "io"}, {"no wait for a CPU", "sched_wait_share"}, {"no more CPU", "cpu_ratio"},
}

// checkAgrees fails when a finding's message says none of something its
// numbers show.
func checkAgrees(t *testing.T, f analysis.Finding) {
	t.Helper()
	for _, c := range contradictions {
		if v := number(&f, c.number); strings.Contains(f.Message, c.text) && !math.IsNaN(v) && v > 0 {
			t.Errorf("%s says %q beside %s=%g: %s", f.Heuristic, c.text, c.number, v, f.Message)
		}
	}
}

// TestExplanations: an outlier's explanation agrees with its numbers. A
// few per cent of GC where its siblings collect nothing explains it; where
// no cause does, the message gives what was measured, never "no GC" (no
// IO, no wait) beside a figure that says otherwise.
func TestExplanations(t *testing.T) {
	sib := task{typ: "map", d: 20, cpu: 0.9, ioMB: 100}               // 5 siblings: 18 s of CPU, no GC
	slow := task{typ: "map", host: "h1", d: 60, cpu: 0.35, gcMs: 700} // 3× as long, 21 s of CPU (1.2×), 65 % off a CPU
	with := func(t task, f func(*task)) task { f(&t); return t }
	for _, c := range []struct {
		name      string
		siblingGC int64 // ms of GC of each sibling
		outlier   task
		cause     string
		has, not  []string // in the outlier's message
	}{
		{name: "a few per cent of GC against none", outlier: slow, cause: "gc",
			has: []string{"garbage collection: 3% of its runnable time (0.7 s) against 0% for its type"}, not: []string{"no GC", "nothing measured"}},
		{name: "a few per cent of GC against as much", siblingGC: 450, outlier: slow, cause: "unexplained",
			has: []string{"nothing measured explains it", "GC 3% of its runnable time (0.7 s) against 2% for its type", "no IO", "no wait for a CPU",
				"its CPU 1.2× the median CPU", "its type 1.0× as slow on its node as elsewhere"},
			not: []string{"no GC", "garbage collection:"}},
		{name: "GC below what is worth tuning", outlier: with(slow, func(t *task) { t.gcMs = 300 }), cause: "unexplained",
			has: []string{"GC 1% of its runnable time (0.3 s) against 0% for its type"}, not: []string{"no GC"}},
		{name: "nothing at all", outlier: with(slow, func(t *task) { t.gcMs = 0 }), cause: "unexplained",
			has: []string{"no GC", "no IO", "no wait for a CPU", "off a CPU 65% of the time"}},
		{name: "a little wait for a CPU", outlier: with(slow, func(t *task) { t.gcMs, t.waitMs = 0, 2000 }), cause: "unexplained",
			has: []string{"waiting for a CPU 3% of the time (2.0 s)"}, not: []string{"no wait"}},
		{name: "a little IO", outlier: with(slow, func(t *task) { t.gcMs, t.d, t.cpu, t.ioMB = 0, 45, 0.55, 10 }), cause: "unexplained",
			has: []string{"10 MB of IO, 0.1× the median"}, not: []string{"no IO"}},
		{name: "GC pauses that were waits", outlier: with(slow, func(t *task) { t.cpu, t.gcMs = 0.01, 700 }), cause: "unexplained",
			has: []string{"GC pauses of 0.7 s, longer than its 0.6 s of CPU (the pauses were waits, not collection work)", "its CPU 0.03× the median CPU"}, not: []string{"no GC", "garbage collection:"}},
		{name: "much GC against some", siblingGC: 900, outlier: with(slow, func(t *task) { t.gcMs = 4000 }), cause: "gc",
			has: []string{"garbage collection: 19% of its runnable time (4.0 s) against 5% for its type"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := job(1, "wordcount", cat(same(5, with(sib, func(t *task) { t.gcMs = c.siblingGC })), []task{c.outlier})...)
			r := report(t, newFake(d), d.JobID)
			var o *analysis.Finding
			for i, f := range r.Findings {
				checkAgrees(t, f)
				if f.Heuristic == "outlier" && f.AttemptIDs[0] == "attempt_1700000000000_0001_m_000005_0" {
					o = &r.Findings[i]
				}
			}
			if o == nil {
				t.Fatal("no outlier finding for the slow attempt")
			}
			if o.Cause != c.cause {
				t.Errorf("cause %s, want %s: %s", o.Cause, c.cause, o.Message)
			}
			for _, s := range c.has {
				if !strings.Contains(o.Message, s) {
					t.Errorf("message lacks %q: %s", s, o.Message)
				}
			}
			for _, s := range c.not {
				if strings.Contains(o.Message, s) {
					t.Errorf("message has %q: %s", s, o.Message)
				}
			}
		})
	}
}

// TestWorkTexts: "without doing (much) more work" comes with the CPU it
// did, for a straggler and its noisy neighbours' finding.
func TestWorkTexts(t *testing.T) {
	m := task{typ: "map", d: 10, cpu: 0.9}
	d := job(1, "wordcount", cat(same(5, m), []task{{typ: "map", host: "h9", d: 30, cpu: 0.4, waitMs: 9000}})...)
	r := report(t, newFake(d, job(2, "other", task{typ: "map", host: "h9", d: 30, cpu: 1}, task{typ: "map", host: "h9", d: 30, cpu: 1})), d.JobID)
	if f := finding(r, "straggler"); f == nil || !strings.Contains(f.Recommendation, "did not do much more work (1.3× the median CPU)") ||
		!near(number(f, "slowest_cpu_ratio"), 12.0/9, 0.01) {
		t.Errorf("straggler: %+v", f)
	}
	if f := finding(r, "noisy_neighbours"); f == nil || !strings.Contains(f.Message, "without doing much more work (1.3× the median CPU)") ||
		!near(number(f, "cpu_ratio"), 12.0/9, 0.01) {
		t.Errorf("noisy_neighbours: %+v", f)
	}
}
