package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestOutcomes injects every way an attempt ends on the simulated YARN node
// (exit 1, kill -9, over its container's memory, a speculative copy, and
// the kernel's OOM killer where cgroups can be made) and checks what the
// API says of each attempt: its outcome, the exit code it is read from,
// and the attempts that retries and speculative copies repeat.
func TestOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	if !exactExits() {
		t.Log("no taskstats here (not root): outcomes come from the NodeManager alone")
	}
	h := newHarness(t)
	faults := []simulator.Fault{simulator.FaultExit1, simulator.FaultKill9, simulator.FaultPmem, simulator.FaultSpeculate}
	o := simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 1, MapSlots: 3, ReduceSlots: 1}
	if os.Geteuid() == 0 {
		o.Cgroups = true
		faults = append(faults, simulator.FaultOOM)
	} else {
		t.Log("the OOM killer's case needs cgroups (root): not run")
	}
	c, err := simulator.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h.startAgent("e2e-outcomes", nil)
	res := run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "outcomes", Maps: len(faults), NoReduces: true,
		TaskCPU: 300 * time.Millisecond, MemoryMB: 256, Faults: faults})
	truth := map[string]simulator.AttemptResult{}
	for _, a := range res.Attempts {
		truth[a.AttemptID] = a
		t.Logf("simulated %s: exit %d, NodeManager %d, %s..%s", a.AttemptID, a.ExitCode, a.YarnExitStatus,
			a.Start.Format("15:04:05.000"), a.End.Format("15:04:05.000"))
	}
	attempt := func(i, n int) string {
		return strings.Replace(res.JobID, "job_", "attempt_", 1) + "_m_00000" + string(rune('0'+i)) + "_" + string(rune('0'+n))
	}
	wants := map[string]outcomeWant{}
	for i, f := range faults {
		first, second := attempt(i, 0), attempt(i, 1)
		wants[second] = outcomeWant{store.OutcomeSucceeded, 0, first, f == simulator.FaultSpeculate, ""}
		switch f {
		case simulator.FaultExit1:
			wants[first] = outcomeWant{store.OutcomeFailed, 1, "", false, ""}
		case simulator.FaultKill9:
			wants[first] = outcomeWant{store.OutcomeKilled, 137, "", false, ""}
		case simulator.FaultPmem:
			wants[first] = outcomeWant{store.OutcomeKilledMemory, store.YarnKilledExceededPmem, "", false, ""}
		case simulator.FaultSpeculate:
			wants[first] = outcomeWant{store.OutcomeKilled, store.YarnKilledByAppMaster, "", false, ""}
		case simulator.FaultOOM:
			wants[first] = outcomeWant{store.OutcomeKilledMemory, 137, "", false, ""}
		}
	}
	h.waitOutcomes(t, res.JobID, wants)
	// The attempt's own page says the same, and the NodeManager's words.
	var d store.AttemptDetail
	if err := h.get("/api/v1/jobs/"+res.JobID+"/attempts/"+attempt(2, 0), &d); err != nil {
		t.Fatal(err)
	}
	if d.Outcome != store.OutcomeKilledMemory || !strings.Contains(d.ExitDiagnostics, "beyond the 'PHYSICAL' memory limit") {
		t.Errorf("the pmem attempt's page: %s %q", d.Outcome, d.ExitDiagnostics)
	}
	if err := h.get("/api/v1/jobs/"+res.JobID+"/attempts/"+attempt(3, 1), &d); err != nil {
		t.Fatal(err)
	}
	if d.RetryOf != attempt(3, 0) || !d.Speculative {
		t.Errorf("the speculative copy's page: retry of %q, speculative %v", d.RetryOf, d.Speculative)
	}
}

// TestOutcomesHadoop1: on a TaskTracker (no NodeManager, no exit-code
// file), a Child whose task fails logs "Error running child" and exits 0,
// as Hadoop 1's does: it is read failed from its own log (task_log), and
// its retry, linked to it, succeeded. With JVM reuse, the attempts ended
// by their JVM taking the next one, and each JVM's last, succeeded, from
// their log. Without taskstats (not root) too: the log needs none.
func TestOutcomesHadoop1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	h := newHarness(t)
	c := startCluster(t, simulator.NodeHadoop1)
	h.startAgent("e2e-h1-outcomes", nil)
	res := run(t, c, simulator.JobSpec{Kind: simulator.JobHadoop1, Name: "h1-outcomes", Maps: 2, NoReduces: true,
		TaskCPU: 300 * time.Millisecond, FailMaps: 1})
	first := strings.Replace(res.JobID, "job_", "attempt_", 1) + "_m_000000_0"
	second := first[:len(first)-1] + "1"
	other := strings.Replace(first, "_m_000000_", "_m_000001_", 1)
	h.waitOutcomes(t, res.JobID, map[string]outcomeWant{
		first:  {store.OutcomeFailed, 1, "", false, store.ExitSourceTaskLog},
		second: {store.OutcomeSucceeded, 0, first, false, store.ExitSourceTaskLog},
		other:  {store.OutcomeSucceeded, 0, "", false, store.ExitSourceTaskLog},
	})
	// JVM reuse: 4 maps in the 2 map slots' JVMs, each attempt long
	// enough for the agent's ticks to see it.
	res = run(t, c, simulator.JobSpec{Kind: simulator.JobHadoop1, Name: "h1-reuse-outcomes", Maps: 4, NoReduces: true,
		JVMReuse: -1, TaskCPU: 300 * time.Millisecond, Hold: 1500 * time.Millisecond})
	units := map[string]bool{}
	wants := map[string]outcomeWant{}
	for _, a := range res.Attempts {
		units[a.Unit] = true
	}
	if len(units) >= 4 {
		t.Fatalf("no JVM reuse: %d JVMs for 4 maps", len(units))
	}
	for i := 0; i < 4; i++ {
		id := strings.Replace(res.JobID, "job_", "attempt_", 1) + "_m_00000" + itoa(i) + "_0"
		wants[id] = outcomeWant{store.OutcomeSucceeded, 0, "", false, store.ExitSourceTaskLog}
	}
	h.waitOutcomes(t, res.JobID, wants)
}

// outcomeWant is what the API should say of how an attempt ended.
type outcomeWant struct {
	outcome string
	code    int32
	retryOf string
	spec    bool
	source  string // where the outcome is read from; "": any
}

// waitOutcomes waits until the job's attempts in the API are as wants says
// (the NodeManager's verdicts come a moment after the attempts end), and
// fails with what it shows otherwise.
func (h *harness) waitOutcomes(t *testing.T, jobID string, wants map[string]outcomeWant) {
	t.Helper()
	var j store.JobDetail
	var last time.Time
	ok := testsrv.Poll(60*time.Second, func() bool {
		if time.Since(last) < 300*time.Millisecond {
			return false
		}
		last = time.Now()
		j = store.JobDetail{}
		if h.get("/api/v1/jobs/"+jobID, &j) != nil {
			return false
		}
		got := map[string]store.Attempt{}
		for _, a := range j.AttemptList {
			got[a.AttemptID] = a
		}
		for id, w := range wants {
			a, ok := got[id]
			if !ok || a.Outcome != w.outcome || a.ExitCode == nil || *a.ExitCode != w.code || a.RetryOf != w.retryOf || a.Speculative != w.spec ||
				w.source != "" && a.ExitSource != w.source {
				return false
			}
		}
		return true
	})
	for _, a := range j.AttemptList {
		code := "null"
		if a.ExitCode != nil {
			code = itoa(int(*a.ExitCode))
		}
		t.Logf("API %s: %s %s, exit %s from %s, retry of %q, speculative %v, %q", a.AttemptID, a.State, a.Outcome, code,
			a.ExitSource, a.RetryOf, a.Speculative, firstLine(a.ExitDiagnostics))
	}
	if !ok {
		for id, w := range wants {
			t.Logf("want %s: %+v", id, w)
		}
		t.Fatal("the API does not show every injected outcome as it was")
	}
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
