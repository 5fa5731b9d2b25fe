package store

import (
	"reflect"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/hadoop"

	"github.com/taskscope/taskscope/internal/wire"
)

func seen(status int32) wire.ExitStatus { return wire.ExitStatus{Status: status, Ms: 5000} }

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		name       string
		m          wire.Attempt
		state      string
		want, from string
		code       *int32
	}{
		{name: "running: none, even with a status seen", m: wire.Attempt{JVMExit: seen(0)}, state: StateRunning},
		{name: "ended, nothing seen: unknown", state: StateFinished},
		{name: "lost, nothing seen", state: StateLost, want: OutcomeLost},
		{name: "JVM exit 0", m: wire.Attempt{JVMExit: seen(0)}, state: StateFinished, want: OutcomeSucceeded, from: ExitSourceTaskJVM, code: ptr(0)},
		{name: "JVM exit 1", m: wire.Attempt{JVMExit: seen(1 << 8)}, state: StateFinished, want: OutcomeFailed, from: ExitSourceTaskJVM, code: ptr(1)},
		{name: "JVM kill -9", m: wire.Attempt{JVMExit: seen(9)}, state: StateFinished, want: OutcomeKilled, from: ExitSourceTaskJVM, code: ptr(137)},
		{name: "JVM SIGSEGV with a core", m: wire.Attempt{JVMExit: seen(0x80 | 11)}, state: StateFinished, want: OutcomeFailed, from: ExitSourceTaskJVM, code: ptr(139)},
		{name: "JVM exits 143 on SIGTERM", m: wire.Attempt{JVMExit: seen(143 << 8)}, state: StateFinished, want: OutcomeKilled, from: ExitSourceTaskJVM, code: ptr(143)},
		{name: "the root before the JVM", m: wire.Attempt{JVMExit: seen(0), RootExit: seen(1 << 8)}, state: StateFinished, want: OutcomeFailed, from: ExitSourceContainerRoot, code: ptr(1)},
		{name: "the root killed by SIGTERM", m: wire.Attempt{RootExit: seen(15)}, state: StateLost, want: OutcomeKilled, from: ExitSourceContainerRoot, code: ptr(143)},
		{name: "the file before the root", m: wire.Attempt{RootExit: seen(9), FileExit: seen(0)}, state: StateFinished, want: OutcomeSucceeded, from: ExitSourceExitCodeFile, code: ptr(0)},
		{name: "the NodeManager before all: pmem", m: wire.Attempt{RootExit: seen(15), FileExit: seen(143), NMExit: seen(-104)}, state: StateFinished, want: OutcomeKilledMemory, from: ExitSourceNodeManager, code: ptr(-104)},
		{name: "vmem", m: wire.Attempt{NMExit: seen(-103)}, state: StateFinished, want: OutcomeKilledMemory, from: ExitSourceNodeManager, code: ptr(-103)},
		{name: "aborted: lost", m: wire.Attempt{NMExit: seen(-100)}, state: StateFinished, want: OutcomeLost, from: ExitSourceNodeManager, code: ptr(-100)},
		{name: "preempted: killed", m: wire.Attempt{NMExit: seen(-102)}, state: StateFinished, want: OutcomeKilled, from: ExitSourceNodeManager, code: ptr(-102)},
		{name: "killed by the AM", m: wire.Attempt{NMExit: seen(-105)}, state: StateFinished, want: OutcomeKilled, from: ExitSourceNodeManager, code: ptr(-105)},
		{name: "NodeManager's INVALID is passed over", m: wire.Attempt{NMExit: seen(-1000), FileExit: seen(1)}, state: StateFinished, want: OutcomeFailed, from: ExitSourceExitCodeFile, code: ptr(1)},
		{name: "SIGKILL with an OOM kill: the kernel's OOM killer", m: wire.Attempt{JVMExit: seen(9), RootExit: seen(137 << 8), OOMKills: 1}, state: StateFinished, want: OutcomeKilledMemory, from: ExitSourceContainerRoot, code: ptr(137)},
		{name: "exit 1 with an OOM kill of a child: failed", m: wire.Attempt{RootExit: seen(1 << 8), OOMKills: 1}, state: StateFinished, want: OutcomeFailed, from: ExitSourceContainerRoot, code: ptr(1)},
		{name: "Hadoop 1: the task said done, its idle JVM killed later", m: wire.Attempt{JVMExit: seen(143 << 8), RootExit: seen(15), TaskLog: seen(0)}, state: StateFinished, want: OutcomeSucceeded, from: ExitSourceTaskLog, code: ptr(0)},
		{name: "Hadoop 1: the task logged its failure, the Child exited 0", m: wire.Attempt{JVMExit: seen(0), RootExit: seen(0), TaskLog: seen(1)}, state: StateFinished, want: OutcomeFailed, from: ExitSourceTaskLog, code: ptr(1)},
		{name: "the task's log alone", m: wire.Attempt{TaskLog: seen(0)}, state: StateLost, want: OutcomeSucceeded, from: ExitSourceTaskLog, code: ptr(0)},
		{name: "the exit-code file before the task's log", m: wire.Attempt{TaskLog: seen(0), FileExit: seen(1)}, state: StateFinished, want: OutcomeFailed, from: ExitSourceExitCodeFile, code: ptr(1)},
		{name: "the NodeManager before the task's log", m: wire.Attempt{TaskLog: seen(0), NMExit: seen(-104)}, state: StateFinished, want: OutcomeKilledMemory, from: ExitSourceNodeManager, code: ptr(-104)},
		{name: "running: the task's log says nothing yet", m: wire.Attempt{TaskLog: seen(0)}, state: StateRunning},
		{name: "a status of 0 without a time is not seen", m: wire.Attempt{JVMExit: wire.ExitStatus{Status: 9}}, state: StateFinished},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, code, from := Outcome(&c.m, c.state)
			if got != c.want || from != c.from || !reflect.DeepEqual(code, c.code) {
				t.Errorf("Outcome = %q, %v, %q; want %q, %v, %q", got, deref(code), from, c.want, deref(c.code), c.from)
			}
		})
	}
}

func ptr(v int32) *int32 { return &v }

func deref(p *int32) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestShellCode(t *testing.T) {
	for wait, want := range map[int32]int32{0: 0, 1 << 8: 1, 255 << 8: 255, 9: 137, 15: 143, 0x80 | 6: 134, 143 << 8: 143} {
		if got := ShellCode(wait); got != want {
			t.Errorf("ShellCode(%#x) = %d, want %d", wait, got, want)
		}
	}
}

// Exit statuses merge source by source: a later sighting replaces, a
// description without one erases nothing; OOM kills only grow.
func TestMergeAttemptExits(t *testing.T) {
	dst := wire.Attempt{AttemptID: "a", JobID: "j", JVMExit: wire.ExitStatus{Status: 9, Ms: 100}, OOMKills: 2}
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a", RootExit: wire.ExitStatus{Status: 137 << 8, Ms: 110}, OOMKills: 1})
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a", NMExit: wire.ExitStatus{Status: -104, Ms: 120}, ExitDiagnostics: "beyond"})
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a", FileExit: wire.ExitStatus{Status: 137, Ms: 130}})
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a", NMExit: wire.ExitStatus{Status: -103, Ms: 140}})
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a", TaskLog: wire.ExitStatus{Status: 1, Ms: 150}})
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a", TaskLog: wire.ExitStatus{Status: 0, Ms: 160}})
	MergeAttempt(&dst, &wire.Attempt{AttemptID: "a"})
	want := wire.Attempt{AttemptID: "a", JobID: "j", JVMExit: wire.ExitStatus{Status: 9, Ms: 100}, TaskLog: wire.ExitStatus{Status: 0, Ms: 160},
		RootExit: wire.ExitStatus{Status: 137 << 8, Ms: 110}, FileExit: wire.ExitStatus{Status: 137, Ms: 130},
		NMExit: wire.ExitStatus{Status: -103, Ms: 140}, ExitDiagnostics: "beyond", OOMKills: 2}
	if !reflect.DeepEqual(dst, want) {
		t.Errorf("got  %+v\nwant %+v", dst, want)
	}
}

func TestAttemptOfOutcome(t *testing.T) {
	m := wire.Attempt{AttemptID: "a", JobID: "j", FirstMs: 1000, LastMs: 9000, Ended: true,
		FileExit: wire.ExitStatus{Status: 143, Ms: 9000}, NMExit: wire.ExitStatus{Status: -104, Ms: 9500},
		ExitDiagnostics: "Container is running beyond physical memory limits."}
	a := AttemptOf(&m, "h", &AttemptSummary{}, 1, 0)
	if a.Outcome != OutcomeKilledMemory || a.ExitCode == nil || *a.ExitCode != -104 || a.ExitSource != ExitSourceNodeManager ||
		a.ExitDiagnostics != m.ExitDiagnostics {
		t.Errorf("AttemptOf: %q %v %q %q", a.Outcome, deref(a.ExitCode), a.ExitSource, a.ExitDiagnostics)
	}
	m.Ended = false
	if a := AttemptOf(&m, "h", &AttemptSummary{}, 1, 0); a.Outcome != "" || a.ExitCode != nil {
		t.Errorf("running: %q %v", a.Outcome, deref(a.ExitCode))
	}
}

func TestLinkAttempts(t *testing.T) {
	const task = "attempt_1700000000000_0042_m_000003_"
	at := func(n string, start, end, last Time) Attempt {
		return Attempt{AttemptID: task + n, Start: start, End: end, LastSeen: last}
	}
	type link struct {
		retryOf string
		spec    bool
	}
	for _, c := range []struct {
		name string
		atts []Attempt
		want []link
	}{
		{name: "a retry after a failure", atts: []Attempt{at("1", 5000, 8000, 8000), at("0", 1000, 4000, 4000)},
			want: []link{{task + "0", false}, {}}},
		{name: "a speculative copy while the first runs", atts: []Attempt{at("0", 1000, 9000, 9000), at("1", 5000, 8000, 8000)},
			want: []link{{}, {task + "0", true}}},
		{name: "a copy of a running one (no end yet)", atts: []Attempt{at("0", 1000, 0, 9000), at("1", 5000, 0, 9000)},
			want: []link{{}, {task + "0", true}}},
		{name: "a retry that started before its failed attempt was seen gone (within the overlap)",
			atts: []Attempt{at("0", 1000, 4000, 4000), at("1", 3500, 8000, 8000)}, want: []link{{}, {task + "0", false}}},
		{name: "a copy that overlapped its original a moment, which succeeded",
			atts: []Attempt{func() Attempt { a := at("0", 1000, 4000, 4000); a.Outcome = OutcomeSucceeded; return a }(), at("1", 3500, 8000, 8000)},
			want: []link{{}, {task + "0", true}}},
		{name: "a retry of a retry", atts: []Attempt{at("0", 1000, 2000, 2000), at("1", 3000, 4000, 4000), at("2", 5000, 6000, 6000)},
			want: []link{{}, {task + "0", false}, {task + "1", false}}},
		{name: "the first attempt never seen: nothing to link", atts: []Attempt{at("1", 3000, 4000, 4000)}, want: []link{{}}},
		{name: "a copy of the straggler, not of a later retry", atts: []Attempt{at("0", 1000, 9000, 9000), at("1", 2000, 3000, 3000), at("2", 5000, 9000, 9000)},
			want: []link{{}, {task + "0", true}, {task + "0", true}}},
		{name: "other tasks and containers are not linked", atts: []Attempt{at("0", 1000, 9000, 9000),
			{AttemptID: "attempt_1700000000000_0042_m_000004_1", Start: 5000}, {AttemptID: "container_1700000000000_0042_01_000002", Start: 5000}},
			want: []link{{}, {}, {}}},
		{name: "Tez attempts", atts: []Attempt{{AttemptID: "attempt_1700000000000_0042_1_00_000003_0", Start: 1000, End: 2000},
			{AttemptID: "attempt_1700000000000_0042_1_00_000003_1", Start: 3000, End: 4000}},
			want: []link{{}, {"attempt_1700000000000_0042_1_00_000003_0", false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			atts := append([]Attempt(nil), c.atts...)
			atts[0].RetryOf = "stale" // set again from scratch
			LinkAttempts(atts)
			for i, a := range atts {
				if got := (link{a.RetryOf, a.Speculative}); got != c.want[i] {
					t.Errorf("%s: %+v, want %+v", a.AttemptID, got, c.want[i])
				}
			}
		})
	}
}

func TestTaskPrefix(t *testing.T) {
	for id, want := range map[string]string{
		"attempt_1700000000000_0042_m_000003_12":   "attempt_1700000000000_0042_m_000003_",
		"attempt_1700000000000_0042_1_00_000003_0": "attempt_1700000000000_0042_1_00_000003_",
		"container_1700000000000_0042_01_000002":   "",
		"attempt_x":                                "",
	} {
		if got := TaskPrefix(id); got != want {
			t.Errorf("TaskPrefix(%q) = %q, want %q", id, got, want)
		}
	}
}

// taskOf agrees with hadoop.ParseAttempt on every id that parses.
func FuzzTaskOf(f *testing.F) {
	for _, s := range []string{"attempt_1700000000000_0042_m_000003_12", "attempt_1700000000000_0042_1_00_000003_0",
		"container_1700000000000_0042_01_000002", "attempt_x", "attempt_1_0001_r_000000_", "attempt__0001_m_000000_1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		task, n, ok := taskOf(id)
		a, parsed := hadoop.ParseAttempt(id)
		if parsed && (!ok || n != a.Attempt || task != id[:strings.LastIndexByte(id, '_')+1]) {
			t.Errorf("%q: taskOf %q %d %v, ParseAttempt %+v", id, task, n, ok, a)
		}
		if ok && (!strings.HasPrefix(id, task) || !strings.HasPrefix(task, "attempt_")) {
			t.Errorf("%q: task %q", id, task)
		}
	})
}
