package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// withExit sets what the node showed of attempt id's end in b's last
// description of it.
func withExit(b *wire.Batch, id string, set func(a *wire.Attempt)) *wire.Batch {
	for i := len(b.Attempts) - 1; i >= 0; i-- {
		if b.Attempts[i].AttemptID == id {
			set(&b.Attempts[i])
			return b
		}
	}
	panic("no description of " + id + " in the batch")
}

// describe appends a description of a (after it ended) that says only
// what set says: an exit-code file or a NodeManager's verdict read after
// the attempt's processes were gone.
func describe(b *wire.Batch, a *AttemptSpec, set func(a *wire.Attempt)) *wire.Batch {
	d := wire.Attempt{AttemptID: a.ID, JobID: a.JobID}
	set(&d)
	b.Attempts = append(b.Attempts, d)
	return b
}

// testOutcomes: what the node showed of each attempt's end is stored,
// merged across batches and commits (a later source more trusted than an
// earlier), kept across a restart, and read as store.Outcome says, in a
// job's attempts, an attempt's page and a host's attempts; retries and
// speculative copies are linked to the attempt they repeat.
func testOutcomes(t *testing.T, f Factory) {
	s := f.Open(t, Clock)
	defer func() { s.Close() }()
	const job = "job_1700000000000_0007"
	const p = "attempt_1700000000000_0007_m_"
	jvm := func(pid int32) ProcSpec {
		return ProcSpec{PID: pid, Role: wire.RoleTaskJVM, Cmdline: "java YarnChild", CPUPerS: 100, RSS: 1 << 20}
	}
	at := func(task, n string, startSec int, pid int32) *AttemptSpec {
		return mapAttempt(p+task+"_"+n, job, T0.Add(time.Duration(startSec)*time.Second), jvm(pid))
	}
	ms := func(sec int) int64 { return T0.Add(time.Duration(sec) * time.Second).UnixMilli() }
	g := &Gen{Agent: "node1-o", Host: "node1"}
	g2 := &Gen{Agent: "node2-o", Host: "node2"}
	failed, retry := at("000000", "0", -50, 200), at("000000", "1", -30, 201)
	slow, spec := at("000001", "0", -50, 210), at("000001", "1", -40, 211)
	pmem, kill9, oom := at("000002", "0", -50, 220), at("000003", "0", -50, 230), at("000004", "0", -50, 240)
	lost, running := at("000005", "0", -300, 250), at("000006", "0", -20, 260)
	// Hadoop 1: a Child whose task failed exits 0, its log says it failed;
	// a task that said it was done in its log, its JVM's exit (killed idle)
	// seen before or after that.
	h1fail, h1done, h1idle := at("000007", "0", -50, 270), at("000008", "0", -50, 280), at("000009", "0", -50, 290)
	Ingest(t, s,
		withExit(g.Batch([]*AttemptSpec{failed}, 0, 10, true), failed.ID, func(a *wire.Attempt) {
			a.JVMExit, a.RootExit = wire.ExitStatus{Status: 1 << 8, Ms: ms(-40)}, wire.ExitStatus{Status: 1 << 8, Ms: ms(-40)}
		}),
		withExit(g2.Batch([]*AttemptSpec{retry}, 0, 20, true), retry.ID, func(a *wire.Attempt) {
			a.JVMExit = wire.ExitStatus{Status: 0, Ms: ms(-10)}
		}),
		withExit(g.Batch([]*AttemptSpec{slow}, 0, 30, true), slow.ID, func(a *wire.Attempt) {
			a.RootExit = wire.ExitStatus{Status: 15, Ms: ms(-20)}
		}),
		withExit(g2.Batch([]*AttemptSpec{spec}, 0, 15, true), spec.ID, func(a *wire.Attempt) {
			a.RootExit, a.FileExit = wire.ExitStatus{Status: 0, Ms: ms(-25)}, wire.ExitStatus{Status: 0, Ms: ms(-25)}
		}),
		withExit(g.Batch([]*AttemptSpec{pmem}, 0, 20, true), pmem.ID, func(a *wire.Attempt) {
			a.RootExit = wire.ExitStatus{Status: 15, Ms: ms(-30)}
		}),
		withExit(g.Batch([]*AttemptSpec{kill9}, 0, 20, true), kill9.ID, func(a *wire.Attempt) {
			a.JVMExit, a.RootExit = wire.ExitStatus{Status: 9, Ms: ms(-30)}, wire.ExitStatus{Status: 137 << 8, Ms: ms(-30)}
		}),
		withExit(g.Batch([]*AttemptSpec{oom}, 0, 20, true), oom.ID, func(a *wire.Attempt) {
			a.JVMExit, a.OOMKills = wire.ExitStatus{Status: 9, Ms: ms(-30)}, 1
		}),
		withExit(g.Batch([]*AttemptSpec{h1fail}, 0, 20, true), h1fail.ID, func(a *wire.Attempt) {
			a.JVMExit, a.RootExit, a.TaskLog = wire.ExitStatus{Status: 0, Ms: ms(-30)}, wire.ExitStatus{Status: 0, Ms: ms(-30)}, wire.ExitStatus{Status: 1, Ms: ms(-30)}
		}),
		withExit(g.Batch([]*AttemptSpec{h1done}, 0, 20, true), h1done.ID, func(a *wire.Attempt) {
			a.RootExit = wire.ExitStatus{Status: 15, Ms: ms(-30)}
		}),
		withExit(g2.Batch([]*AttemptSpec{h1idle}, 0, 20, true), h1idle.ID, func(a *wire.Attempt) {
			a.TaskLog = wire.ExitStatus{Status: 0, Ms: ms(-31)}
		}),
		g.Batch([]*AttemptSpec{lost}, 0, 10, false),
		g2.Batch([]*AttemptSpec{running}, 0, 10, false),
	)
	type want struct {
		outcome, source string
		code            *int32
		retryOf         string
		spec            bool
	}
	c := func(v int32) *int32 { return &v }
	check := func(when string, wants map[string]want) {
		t.Helper()
		ctx := context.Background()
		j, err := s.Job(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]store.Attempt{}
		for _, a := range j.AttemptList {
			byID[a.AttemptID] = a
		}
		host := map[string]store.Attempt{}
		for _, h := range []string{"node1", "node2"} {
			hs, err := s.HostAttempts(ctx, h, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range hs {
				host[a.AttemptID] = a
			}
		}
		same := func(a store.Attempt, w want) bool {
			return a.Outcome == w.outcome && a.ExitSource == w.source && (a.ExitCode == nil) == (w.code == nil) &&
				(a.ExitCode == nil || *a.ExitCode == *w.code)
		}
		for id, w := range wants {
			a, ok := byID[id]
			if !ok {
				t.Errorf("%s: %s not in the job", when, id)
				continue
			}
			if !same(a, w) || a.RetryOf != w.retryOf || a.Speculative != w.spec {
				t.Errorf("%s: %s in the job: %q %v from %q, retry of %q speculative %v; want %+v", when, id, a.Outcome,
					code(a.ExitCode), a.ExitSource, a.RetryOf, a.Speculative, w)
			}
			d, err := s.Attempt(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !same(d.Attempt, w) || d.RetryOf != w.retryOf || d.Speculative != w.spec || d.ExitDiagnostics != a.ExitDiagnostics {
				t.Errorf("%s: %s's page: %q %v from %q, retry of %q speculative %v; want %+v", when, id, d.Outcome,
					code(d.ExitCode), d.ExitSource, d.RetryOf, d.Speculative, w)
			}
			{
				a, err := store.ReadAttemptSummary(ctx, s, id)
				if err != nil {
					t.Fatal(err)
				}
				if !same(*a, w) { // (not linked: the series endpoints need no more)
					t.Errorf("%s: %s's summary: %q %v; want %+v", when, id, a.Outcome, code(a.ExitCode), w)
				}
			}
			if h := host[id]; !same(h, w) {
				t.Errorf("%s: %s on its host: %q %v; want %+v", when, id, h.Outcome, code(h.ExitCode), w)
			}
		}
	}
	first := map[string]want{
		failed.ID:  {store.OutcomeFailed, store.ExitSourceContainerRoot, c(1), "", false},
		retry.ID:   {store.OutcomeSucceeded, store.ExitSourceTaskJVM, c(0), failed.ID, false},
		slow.ID:    {store.OutcomeKilled, store.ExitSourceContainerRoot, c(143), "", false},
		spec.ID:    {store.OutcomeSucceeded, store.ExitSourceExitCodeFile, c(0), slow.ID, true},
		pmem.ID:    {store.OutcomeKilled, store.ExitSourceContainerRoot, c(143), "", false},
		kill9.ID:   {store.OutcomeKilled, store.ExitSourceContainerRoot, c(137), "", false},
		oom.ID:     {store.OutcomeKilledMemory, store.ExitSourceTaskJVM, c(137), "", false},
		lost.ID:    {store.OutcomeLost, "", nil, "", false},
		running.ID: {"", "", nil, "", false},
		h1fail.ID:  {store.OutcomeFailed, store.ExitSourceTaskLog, c(1), "", false},
		h1done.ID:  {store.OutcomeKilled, store.ExitSourceContainerRoot, c(143), "", false},
		h1idle.ID:  {store.OutcomeSucceeded, store.ExitSourceTaskLog, c(0), "", false},
	}
	check("first commit", first)
	// The NodeManager's verdicts come later, in other batches and commits:
	// the pmem kill, and the exit-code file of the killed straggler.
	Ingest(t, s, describe(g.Batch(nil, 0, 0, false), pmem, func(a *wire.Attempt) {
		a.FileExit = wire.ExitStatus{Status: 143, Ms: ms(-29)}
	}))
	Ingest(t, s, describe(describe(g.Batch(nil, 0, 0, false), pmem, func(a *wire.Attempt) {
		a.NMExit = wire.ExitStatus{Status: store.YarnKilledExceededPmem, Ms: ms(-28)}
		a.ExitDiagnostics = "Container [pid=220,containerID=container_1] is running beyond physical memory limits. <b>Killing</b> container."
	}), slow, func(a *wire.Attempt) { a.FileExit = wire.ExitStatus{Status: 143, Ms: ms(-19)} }))
	// The task's log read after its JVM's exit; a JVM exit (the idle JVM
	// killed at the job's end) after the task's log: the log decides.
	Ingest(t, s, describe(describe(g.Batch(nil, 0, 0, false), h1done, func(a *wire.Attempt) {
		a.TaskLog = wire.ExitStatus{Status: 0, Ms: ms(-29)}
	}), h1idle, func(a *wire.Attempt) {
		a.JVMExit, a.RootExit = wire.ExitStatus{Status: 143 << 8, Ms: ms(-20)}, wire.ExitStatus{Status: 15, Ms: ms(-20)}
	}))
	later := first
	later[pmem.ID] = want{store.OutcomeKilledMemory, store.ExitSourceNodeManager, c(-104), "", false}
	later[slow.ID] = want{store.OutcomeKilled, store.ExitSourceExitCodeFile, c(143), "", false}
	later[h1done.ID] = want{store.OutcomeSucceeded, store.ExitSourceTaskLog, c(0), "", false}
	check("after the NodeManager's verdicts", later)
	d, err := s.Attempt(context.Background(), pmem.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.ExitDiagnostics != "Container [pid=220,containerID=container_1] is running beyond physical memory limits. <b>Killing</b> container." {
		t.Errorf("diagnostics %q", d.ExitDiagnostics)
	}
	if f.Reopen != nil {
		s = f.Reopen(t, s, Clock)
		check("after a restart", later)
	}
}

func code(p *int32) any {
	if p == nil {
		return nil
	}
	return *p
}
