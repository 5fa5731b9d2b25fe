// Package storetest is the conformance suite every store.Store passes. A
// backend's test calls Run with a factory that opens an empty store (and
// reopens one on the same data, to check durability and restarts), telling
// time by the store.Clock the suite passes it (Clock).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Factory opens stores for the suite.
type Factory struct {
	// Open returns a new, empty store that tells time by c (its Now, and
	// its StaleAfter for lost attempts); the suite closes it.
	Open func(t *testing.T, c store.Clock) store.Store
	// Reopen closes s and opens the same data again, telling time by c
	// (nil: not supported).
	Reopen func(t *testing.T, s store.Store, c store.Clock) store.Store
}

// T0 is the time the suite's data starts at.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Clock is what the suite gives the stores it opens (Factory): it is T0 +
// 1 minute, and an attempt not heard of for 2 minutes is lost. The suite's
// data, and what it expects of running, lost and finished attempts and
// jobs, are made for it.
var Clock = store.Clock{Now: func() time.Time { return T0.Add(time.Minute) }, StaleAfter: 2 * time.Minute}

// Run runs every conformance test.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f Factory)
	}{
		{"IngestAndSummaries", testIngestAndSummaries},
		{"ExactlyOnce", testExactlyOnce},
		{"Rollback", testRollback},
		{"IncrementsAcrossBatches", testIncrementsAcrossBatches},
		{"JobsListFiltersAndPaging", testJobsList},
		{"JobAttemptsAcrossCommits", testJobAcrossCommits},
		{"JobDescribedInAnyOrder", testJobDescribedInAnyOrder},
		{"ProcessSeriesInAttempt", testProcessSeriesInAttempt},
		{"ExtraMetrics", testExtraMetrics},
		{"JVMReuseMemberships", testJVMReuse},
		{"RoleAfterExec", testRoleAfterExec},
		{"JobSeriesSumsAttempts", testJobSeries},
		{"EventsAndHosts", testEventsAndHosts},
		{"HostileText", testHostileText},
		{"MaintainKeepsResults", testMaintain},
		{"NotFound", testNotFound},
		{"Owners", testOwners},
		{"Restart", testRestart},
		{"BatchReads", testBatchReads},
		{"JobsTogether", testJobsTogether},
		{"JobEventsTogether", testJobEventsTogether},
		{"Outcomes", testOutcomes},
		{"Profiles", testProfiles},
	}
	tests = append(tests, findingTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// Gen builds realistic batches for tests: one agent, attempts with processes
// sampled every second.
type Gen struct {
	Agent string
	Host  string
	seq   uint64
}

// ProcSpec describes a process of a generated attempt.
type ProcSpec struct {
	PID      int32
	Role     string
	Cmdline  string
	CPUPerS  int64 // ms of CPU per second
	RSS      int64 // bytes
	StartSec int   // seconds after the attempt's start
}

// AttemptSpec describes a generated attempt.
type AttemptSpec struct {
	ID, JobID, Type, Container string
	JobName, User, Queue       string
	MemoryMB, VCores           int64
	CPUDoubtMs                 int64 // told when it ends, as an agent tells it
	Start                      time.Time
	Procs                      []ProcSpec
}

// Key is the process key of spec p on the generator's host.
func (g *Gen) Key(a *AttemptSpec, p ProcSpec) uint64 {
	return wire.ProcessKey(g.Host, p.PID, a.Start.Add(time.Duration(p.StartSec)*time.Second).UnixMilli())
}

var metricNames = []string{wire.CPUUserMs, wire.CPUSysMs, wire.RSSBytes, wire.VMSBytes, wire.Threads, wire.ReadBytes, "x_custom"}
var attMetricNames = []string{wire.AttemptCPUMs, wire.AttemptRSSBytes, wire.AttemptProcesses}

// Batch makes the batch for seconds [from, to) of the attempts' lives. Each
// process uses CPUPerS ms per second (90% user); the attempt series sums them.
func (g *Gen) Batch(atts []*AttemptSpec, from, to int, ended bool) *wire.Batch {
	g.seq++
	b := &wire.Batch{Version: wire.Version, AgentID: g.Agent, Seq: g.seq, Host: g.Host}
	b.Metrics = append(append([]string{}, metricNames...), attMetricNames[0])
	// rss_bytes is shared between process and attempt series; processes is
	// new, and x_att a metric of attempts with no column of its own.
	b.Metrics = append(b.Metrics, wire.AttemptProcesses, "x_att")
	idx := func(m string) uint32 {
		for i, n := range b.Metrics {
			if n == m {
				return uint32(i)
			}
		}
		panic(m)
	}
	for _, a := range atts {
		first := from == 0
		if first {
			b.Attempts = append(b.Attempts, wire.Attempt{AttemptID: a.ID, JobID: a.JobID, ContainerID: a.Container,
				Type: a.Type, Framework: "mapreduce", FirstMs: a.Start.UnixMilli(), LastMs: a.Start.UnixMilli(),
				JobName: a.JobName, User: a.User, Queue: a.Queue, MemoryMB: a.MemoryMB, VCores: a.VCores})
		}
		var at wire.Series
		at.AttemptID = a.ID
		cols := [4][]int64{}
		for sec := from; sec < to; sec++ {
			ms := a.Start.Add(time.Duration(sec+1) * time.Second).UnixMilli()
			var cpu, rss, n int64
			for _, p := range a.Procs {
				if sec < p.StartSec {
					continue
				}
				cpu += p.CPUPerS * int64(sec+1-p.StartSec)
				rss += p.RSS
				n++
			}
			at.Times = append(at.Times, ms)
			cols[0], cols[1], cols[2] = append(cols[0], cpu), append(cols[1], rss), append(cols[2], n)
			cols[3] = append(cols[3], 2*int64(sec+1))
		}
		at.Columns = []wire.Column{{Metric: idx(wire.AttemptCPUMs), Values: cols[0]},
			{Metric: idx(wire.AttemptRSSBytes), Values: cols[1]}, {Metric: idx(wire.AttemptProcesses), Values: cols[2]},
			{Metric: idx("x_att"), Values: cols[3]}}
		if len(at.Times) > 0 {
			b.AttemptSeries = append(b.AttemptSeries, at)
		}
		for _, p := range a.Procs {
			key := g.Key(a, p)
			start := a.Start.Add(time.Duration(p.StartSec) * time.Second).UnixMilli()
			if from <= p.StartSec && p.StartSec < to || (first && p.StartSec == 0) {
				b.Processes = append(b.Processes, wire.Process{Key: key, PID: p.PID, PPID: 1, StartMs: start,
					Cmdline: p.Cmdline, Comm: "java", Role: p.Role, User: a.User})
				b.Members = append(b.Members, wire.Membership{Process: key, AttemptID: a.ID, FromMs: start, Role: p.Role})
			}
			if ended {
				b.Processes = append(b.Processes, wire.Process{Key: key, PID: p.PID, PPID: 1, StartMs: start,
					Cmdline: p.Cmdline, Comm: "java", Role: p.Role, User: a.User,
					EndMs: a.Start.Add(time.Duration(to) * time.Second).UnixMilli()})
			}
			var s wire.Series
			s.Key = key
			var c [7][]int64
			for sec := max(from, p.StartSec); sec < to; sec++ {
				age := int64(sec + 1 - p.StartSec)
				s.Times = append(s.Times, a.Start.Add(time.Duration(sec+1)*time.Second).UnixMilli())
				cpu := p.CPUPerS * age
				c[0] = append(c[0], cpu*9/10)
				c[1] = append(c[1], cpu-cpu*9/10)
				c[2] = append(c[2], p.RSS)
				c[3] = append(c[3], 4<<30)
				c[4] = append(c[4], 20)
				c[5] = append(c[5], 4096*age)
				c[6] = append(c[6], age)
			}
			if len(s.Times) == 0 {
				continue
			}
			for i := range c {
				s.Columns = append(s.Columns, wire.Column{Metric: uint32(i), Values: c[i]})
			}
			b.ProcSeries = append(b.ProcSeries, s)
		}
		if ended {
			e := b.Attempts
			e = append(e, wire.Attempt{AttemptID: a.ID, JobID: a.JobID, ContainerID: a.Container, Type: a.Type,
				Framework: "mapreduce", FirstMs: a.Start.UnixMilli(),
				LastMs: a.Start.Add(time.Duration(to) * time.Second).UnixMilli(), Ended: true,
				JobName: a.JobName, User: a.User, Queue: a.Queue, MemoryMB: a.MemoryMB, VCores: a.VCores,
				CPUDoubtMs: a.CPUDoubtMs})
			b.Attempts = e
		}
	}
	if err := wire.Validate(b); err != nil {
		panic(err)
	}
	return b
}

// Ingest appends batches in one transaction, commits, and flushes the
// summaries.
func Ingest(t testing.TB, s store.Store, batches ...*wire.Batch) []bool {
	t.Helper()
	dups := Commit(t, s, batches...)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return dups
}

// Commit appends batches in one transaction and commits (the summaries
// are written when the store writes them: Flush).
func Commit(t testing.TB, s store.Store, batches ...*wire.Batch) []bool {
	t.Helper()
	ctx := context.Background()
	app, err := s.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	var dups []bool
	for _, b := range batches {
		dup, err := app.Append(b)
		if err != nil {
			app.Rollback()
			t.Fatalf("Append seq %d: %v", b.Seq, err)
		}
		dups = append(dups, dup)
	}
	if err := app.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return dups
}

func open(t *testing.T, f Factory) store.Store {
	s := f.Open(t, Clock)
	t.Cleanup(func() { s.Close() })
	return s
}

func mapAttempt(id, job string, start time.Time, procs ...ProcSpec) *AttemptSpec {
	return &AttemptSpec{ID: id, JobID: job, Type: "map", Container: "container_1700000000000_0001_01_000002",
		JobName: "wordcount", User: "alice", Queue: "default", MemoryMB: 2048, VCores: 2, Start: start, Procs: procs}
}

const (
	job1 = "job_1700000000000_0001"
	att1 = "attempt_1700000000000_0001_m_000000_0"
	att2 = "attempt_1700000000000_0001_m_000001_0"
)

func testIngestAndSummaries(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-a", Host: "node1"}
	a := mapAttempt(att1, job1, T0,
		ProcSpec{PID: 100, Role: wire.RoleWrapper, Cmdline: "/bin/bash -c java", CPUPerS: 0, RSS: 3 << 20},
		ProcSpec{PID: 101, Role: wire.RoleTaskJVM, Cmdline: "java org.apache.hadoop.mapred.YarnChild", CPUPerS: 800, RSS: 500 << 20},
		ProcSpec{PID: 150, Role: wire.RoleStreaming, Cmdline: "python mapper.py", CPUPerS: 200, RSS: 100 << 20, StartSec: 2})
	// Its CPU was split from a NodeManager's cutime by a guess (told at its
	// end); a later description that tells less lowers nothing.
	a.CPUDoubtMs = 240
	later := &wire.Batch{Version: wire.Version, AgentID: g.Agent, Seq: 1000, Host: g.Host, Attempts: []wire.Attempt{{
		AttemptID: a.ID, JobID: a.JobID, Ended: true, LastMs: a.Start.Add(10 * time.Second).UnixMilli(), CPUDoubtMs: 90}}}
	Ingest(t, s, g.Batch([]*AttemptSpec{a}, 0, 5, false), g.Batch([]*AttemptSpec{a}, 5, 10, true))
	Ingest(t, s, later)
	ctx := context.Background()
	j, err := s.Job(ctx, job1)
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "wordcount" || j.User != "alice" || j.Queue != "default" || j.Attempts != 1 {
		t.Errorf("job = %+v", j.Job)
	}
	if len(j.AttemptList) != 1 {
		t.Fatalf("attempts = %d", len(j.AttemptList))
	}
	// A job's summary alone is what Job says of it (but the count of
	// attempts by type, which takes the attempts).
	{
		sum, err := store.ReadJobSummary(ctx, s, job1)
		want := j.Job
		want.ByType = nil
		if err != nil || !reflect.DeepEqual(*sum, want) {
			t.Errorf("JobSummary = %+v, %v; Job says %+v", sum, err, j.Job)
		}
		if _, err := store.ReadJobSummary(ctx, s, "job_0_0"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobSummary of an unknown job: %v", err)
		}
	}
	at := j.AttemptList[0]
	// CPU: 800*10 + 200*8 = 9600 ms; peak of the summed RSS: 603 MiB.
	if at.CPUMs != 9600 {
		t.Errorf("attempt cpu_ms = %d, want 9600", at.CPUMs)
	}
	if at.PeakRSS != 603<<20 {
		t.Errorf("peak_rss = %d, want %d", at.PeakRSS, 603<<20)
	}
	if at.Processes != 3 || at.Host != "node1" || at.MemoryMB != 2048 || at.VCores != 2 || at.State != store.StateFinished {
		t.Errorf("attempt = %+v", at)
	}
	if at.CPUDoubtMs != 240 {
		t.Errorf("attempt cpu_doubt_ms = %d, want 240 (told at its end; a later 90 lowers nothing)", at.CPUDoubtMs)
	}
	if at.Start != store.Time(T0.UnixMilli()) || at.End != store.Time(T0.Add(10*time.Second).UnixMilli()) {
		t.Errorf("start %v end %v", at.Start, at.End)
	}
	if j.CPUMs != 9600 || j.PeakRSS != 603<<20 || j.State != store.StateFinished {
		t.Errorf("job cpu %d peak %d state %s", j.CPUMs, j.PeakRSS, j.State)
	}
	if j.MemGBHours <= 0 || j.UsedGBHours <= 0 || j.UsedGBHours >= j.MemGBHours {
		t.Errorf("GB-hours: allocated %g used %g", j.MemGBHours, j.UsedGBHours)
	}
	d, err := s.Attempt(ctx, att1)
	if err != nil {
		t.Fatal(err)
	}
	if d.CPUDoubtMs != 240 {
		t.Errorf("the attempt's page: cpu_doubt_ms = %d, want 240", d.CPUDoubtMs)
	}
	if len(d.ProcessList) != 3 {
		t.Fatalf("processes = %d", len(d.ProcessList))
	}
	byPID := map[int32]store.Process{}
	for _, p := range d.ProcessList {
		byPID[p.PID] = p
	}
	jvm := byPID[101]
	if jvm.CPUMs != 8000 || jvm.PeakRSS != 500<<20 || jvm.Role != wire.RoleTaskJVM || jvm.Samples != 10 || jvm.End == 0 {
		t.Errorf("jvm = %+v", jvm)
	}
	if byPID[150].CPUMs != 1600 || byPID[150].Samples != 8 {
		t.Errorf("streaming = %+v", byPID[150])
	}
	// The CPU of the JVM over time: 80% of a core.
	ser, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeProcess, Process: jvm.Key,
		Metrics: []string{"cpu_percent", "rss_bytes", "read_bytes_per_s"},
		From:    T0.UnixMilli(), To: T0.Add(10 * time.Second).UnixMilli(), Step: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if len(ser.Times) != 5 {
		t.Fatalf("buckets = %d", len(ser.Times))
	}
	for i := range ser.Times {
		if c := float64(ser.Series[0].Values[i]); math.Abs(c-80) > 0.01 {
			t.Errorf("cpu_percent[%d] = %g, want 80", i, c)
		}
		if r := float64(ser.Series[1].Values[i]); r != 500<<20 {
			t.Errorf("rss[%d] = %g", i, r)
		}
		if r := float64(ser.Series[2].Values[i]); math.Abs(r-4096) > 0.01 {
			t.Errorf("read_bytes_per_s[%d] = %g, want 4096", i, r)
		}
	}
	as, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: att1,
		Metrics: []string{"cpu_percent", "processes"}, From: T0.UnixMilli(), To: T0.Add(10 * time.Second).UnixMilli(), Step: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// Seconds 3.. have all three processes: 100% of a core.
	if c := float64(as.Series[0].Values[5]); math.Abs(c-100) > 0.01 {
		t.Errorf("attempt cpu_percent at 5s = %g, want 100", c)
	}
	if n := float64(as.Series[1].Values[5]); n != 3 {
		t.Errorf("attempt processes at 5s = %g", n)
	}
	if !math.IsNaN(float64(as.Series[0].Values[0])) {
		t.Errorf("bucket before the first sample should be null, is %g", as.Series[0].Values[0])
	}
}

func testExactlyOnce(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-b", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20})
	b1 := g.Batch([]*AttemptSpec{a}, 0, 5, false)
	b2 := g.Batch([]*AttemptSpec{a}, 5, 10, false)
	if d := Ingest(t, s, b1); d[0] {
		t.Fatal("first batch reported as duplicate")
	}
	// A retry of b1 (its answer was lost), in a transaction with b2, then b2 again alone.
	d := Ingest(t, s, b1, b2)
	if !d[0] || d[1] {
		t.Fatalf("dups = %v, want [true false]", d)
	}
	if d := Ingest(t, s, b2); !d[0] {
		t.Fatal("repeated b2 not reported as duplicate")
	}
	u, err := s.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if u.Samples != 10 || u.AttemptSamples != 10 {
		t.Errorf("samples = %d, attempt samples = %d, want 10 and 10", u.Samples, u.AttemptSamples)
	}
	at, err := s.Attempt(context.Background(), att1)
	if err != nil {
		t.Fatal(err)
	}
	if at.CPUMs != 5000 || at.ProcessList[0].Samples != 10 {
		t.Errorf("cpu %d samples %d, want 5000 and 10", at.CPUMs, at.ProcessList[0].Samples)
	}
	// Another agent (a restarted one) starts again at seq 1.
	g2 := &Gen{Agent: "node1-c", Host: "node1"}
	a2 := mapAttempt(att2, job1, T0.Add(time.Minute), ProcSpec{PID: 202, Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20})
	if d := Ingest(t, s, g2.Batch([]*AttemptSpec{a2}, 0, 3, false)); d[0] {
		t.Fatal("new agent's seq 1 reported as duplicate")
	}
	// A store that says which sequence it stored last says what Append
	// decided, also once its summaries are written.
	if _, can, _ := store.ReadAgentSeq(context.Background(), s, "node1-b"); can {
		check := func(when string) {
			for agent, want := range map[string]uint64{"node1-b": b2.Seq, "node1-c": 1, "node9-none": 0} {
				if got, _, err := store.ReadAgentSeq(context.Background(), s, agent); err != nil || got != want {
					t.Errorf("%s: AgentSeq(%s) = %d, %v; want %d", when, agent, got, err, want)
				}
			}
		}
		check("after the commits")
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		check("after a flush")
	}
}

func testRollback(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-d", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20})
	b := g.Batch([]*AttemptSpec{a}, 0, 5, false)
	app, err := s.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = app.Append(b)
	app.Rollback()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(context.Background(), job1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after rollback Job = %v, want ErrNotFound", err)
	}
	// The same batch can still be stored, and counts once.
	if d := Ingest(t, s, b); d[0] {
		t.Fatal("batch after rollback reported as duplicate")
	}
	at, _ := s.Attempt(context.Background(), att1)
	if at == nil || at.CPUMs != 2500 {
		t.Fatalf("attempt after re-ingest = %+v", at)
	}
}

func testIncrementsAcrossBatches(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-e", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 250, RSS: 8 << 20})
	// One batch per second, each in its own transaction.
	for sec := 0; sec < 20; sec++ {
		Ingest(t, s, g.Batch([]*AttemptSpec{a}, sec, sec+1, false))
	}
	key := g.Key(a, a.Procs[0])
	ser, err := s.Series(context.Background(), store.SeriesQuery{Scope: store.ScopeProcess, Process: store.Key(key),
		Metrics: []string{"cpu_percent"}, From: T0.UnixMilli(), To: T0.Add(20 * time.Second).UnixMilli(), Step: 5000})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range ser.Series[0].Values {
		if math.Abs(float64(v)-25) > 0.01 {
			t.Errorf("bucket %d: cpu_percent %g, want 25", i, v)
		}
	}
	// A window that starts mid-way still sees the rate, not the total.
	ser, err = s.Series(context.Background(), store.SeriesQuery{Scope: store.ScopeProcess, Process: store.Key(key),
		Metrics: []string{"cpu_percent"}, From: T0.Add(10 * time.Second).UnixMilli(), To: T0.Add(20 * time.Second).UnixMilli(), Step: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if v := float64(ser.Series[0].Values[0]); math.Abs(v-25) > 0.01 {
		t.Errorf("late window cpu_percent %g, want 25", v)
	}
	// After a gap of 40 s (an agent down, say), a window that starts at
	// the first sample after it has its rate from the sample before the
	// gap, in every scope: what the whole life's buckets show there. The
	// counter after the gap is that of 500 ms/s from the start: 50 % after
	// it, 62 % across it, and 50 % since the start (what a first bucket
	// with no sample before it would show).
	a.Procs[0].CPUPerS = 500
	for sec := 60; sec < 80; sec++ {
		Ingest(t, s, g.Batch([]*AttemptSpec{a}, sec, sec+1, false))
	}
	// windowAfter asks q (From: the start) whole and from `from` on, which
	// must give the whole's last buckets; it returns those.
	windowAfter := func(q store.SeriesQuery, from int64, what string) []store.Float {
		t.Helper()
		whole, err := s.Series(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		skip := int((from - q.From) / q.Step)
		q.From = from
		tail, err := s.Series(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		want := whole.Series[0].Values[skip:]
		if got := tail.Series[0].Values; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %s %s: %v, the whole life's buckets %v", q.Scope, what, q.Metrics[0], got, want)
		}
		return want
	}
	for _, q := range []store.SeriesQuery{
		{Scope: store.ScopeProcess, Process: store.Key(key)},
		{Scope: store.ScopeAttempt, AttemptID: att1},
		{Scope: store.ScopeJob, JobID: job1},
	} {
		q.Metrics, q.From, q.To, q.Step = []string{"cpu_percent"}, T0.UnixMilli(), T0.Add(80*time.Second).UnixMilli(), 10000
		want := windowAfter(q, T0.Add(60*time.Second).UnixMilli(), "the window after a gap")
		if v := float64(want[1]); math.Abs(v-50) > 0.01 {
			t.Errorf("%s: cpu_percent %g after the gap, want 50", q.Scope, v)
		}
	}
	// A metric the agent sends in some samples only (context switches are
	// read every few ticks): read_bytes is missing from 80 s to 100 s while
	// the CPU goes on, and then counts twice as fast from the start; the
	// window from 100 s takes read_bytes' first rate from its value at 80 s.
	for sec := 80; sec < 120; sec++ {
		b := g.Batch([]*AttemptSpec{a}, sec, sec+1, false)
		for i := range b.ProcSeries {
			for j := range b.ProcSeries[i].Columns {
				if c := &b.ProcSeries[i].Columns[j]; b.Metrics[c.Metric] == wire.ReadBytes {
					if sec < 100 {
						c.Absent = []byte{0xff}
					} else {
						c.Values[0] *= 2
					}
				}
			}
		}
		Ingest(t, s, b)
	}
	windowAfter(store.SeriesQuery{Scope: store.ScopeProcess, Process: store.Key(key), Metrics: []string{"read_bytes_per_s"},
		From: T0.UnixMilli(), To: T0.Add(120 * time.Second).UnixMilli(), Step: 10000},
		T0.Add(100*time.Second).UnixMilli(), "after its values were missing")
}

func testJobsList(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-f", Host: "node1"}
	var all []*AttemptSpec
	users := []string{"alice", "bob", "carol"}
	for i := 0; i < 12; i++ {
		job := "job_1700000000000_" + pad4(i+1)
		a := &AttemptSpec{ID: "attempt_1700000000000_" + pad4(i+1) + "_m_000000_0", JobID: job, Type: "map",
			JobName: "etl-" + users[i%3], User: users[i%3], Queue: "q" + pad4(i%2), MemoryMB: 1024,
			Start: T0.Add(time.Duration(5*i) * time.Second),
			Procs: []ProcSpec{{PID: int32(1000 + i), Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20}}}
		all = append(all, a)
	}
	// Jobs 0..9 finish; 10 and 11 are running (seen recently).
	var batches []*wire.Batch
	for i, a := range all {
		batches = append(batches, g.Batch([]*AttemptSpec{a}, 0, 5, i < 10))
	}
	Ingest(t, s, batches...)
	ctx := context.Background()
	page, err := s.Jobs(ctx, store.JobFilter{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 12 || len(page.Jobs) != 5 {
		t.Fatalf("total %d, page %d", page.Total, len(page.Jobs))
	}
	if page.Jobs[0].JobID != "job_1700000000000_0012" || page.Jobs[4].JobID != "job_1700000000000_0008" {
		t.Errorf("not newest first: %s .. %s", page.Jobs[0].JobID, page.Jobs[4].JobID)
	}
	if page.Jobs[0].ByType["map"] != 1 {
		t.Errorf("by type = %v", page.Jobs[0].ByType)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{Limit: 5, Offset: 10})
	if len(page.Jobs) != 2 || page.Total != 12 {
		t.Errorf("last page: %d jobs, total %d", len(page.Jobs), page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{User: "bob", Offset: 100})
	if len(page.Jobs) != 0 || page.Total != 4 {
		t.Errorf("past the end of user bob's jobs: %d jobs, total %d, want 0 of 4", len(page.Jobs), page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{User: "bob"})
	if page.Total != 4 {
		t.Errorf("user bob: %d jobs, want 4", page.Total)
	}
	for _, j := range page.Jobs {
		if j.User != "bob" {
			t.Errorf("user filter let %s through", j.User)
		}
	}
	page, _ = s.Jobs(ctx, store.JobFilter{Name: "ETL-CAR"})
	if page.Total != 4 {
		t.Errorf("name ETL-CAR: %d jobs, want 4 (substring, any case)", page.Total)
	}
	// The runs of a recurring job before one of them (package analysis):
	// user, queue, name, state and time together.
	for _, c := range []struct {
		to   time.Duration
		want []string
	}{{40 * time.Second, []string{"job_1700000000000_0008", "job_1700000000000_0002"}}, {30 * time.Second, []string{"job_1700000000000_0002"}}} {
		page, err = s.Jobs(ctx, store.JobFilter{User: "bob", Queue: "q0001", Name: "etl-", State: store.StateFinished, To: T0.Add(c.to).UnixMilli()})
		var got []string
		for _, j := range page.Jobs {
			got = append(got, j.JobID)
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) || page.Total != len(c.want) {
			t.Errorf("bob's finished etl- jobs in q0001 before %s: %v (total %d, %v), want %v", c.to, got, page.Total, err, c.want)
		}
	}
	page, _ = s.Jobs(ctx, store.JobFilter{State: store.StateRunning})
	if page.Total != 2 {
		t.Errorf("running: %d jobs, want 2", page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{State: store.StateFinished})
	if page.Total != 10 {
		t.Errorf("finished: %d jobs, want 10", page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{From: T0.Add(15 * time.Second).UnixMilli(), To: T0.Add(25 * time.Second).UnixMilli()})
	if page.Total != 3 {
		t.Errorf("time window: %d jobs, want 3 (active in 10-15 s, 15-20 s and 20-25 s)", page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{Name: "000_0012"})
	if page.Total != 1 {
		t.Errorf("name 000_0012: %d jobs, want 1 (an underscore matches itself)", page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{Name: `etl-\`})
	if page.Total != 0 {
		t.Errorf("name with a backslash: %d jobs, want 0", page.Total)
	}
	page, _ = s.Jobs(ctx, store.JobFilter{Name: "100%_"})
	if page.Total != 0 {
		t.Errorf("LIKE wildcards must match literally: %d", page.Total)
	}
	if _, err := s.Jobs(ctx, store.JobFilter{State: "bogus"}); err == nil {
		t.Error("bogus state accepted")
	}
	// What a reader may see: their own jobs, or their queues' (users
	// alternate alice, bob, carol; queues q0000, q0001).
	for _, c := range []struct {
		name  string
		f     store.JobFilter
		total int
		ok    func(j store.Job) bool
	}{
		{"own", store.JobFilter{Visible: &store.Visible{Users: []string{"bob"}}}, 4, func(j store.Job) bool { return j.User == "bob" }},
		{"own or queue", store.JobFilter{Visible: &store.Visible{Users: []string{"bob"}, Queues: []string{"q0000"}}}, 8,
			func(j store.Job) bool { return j.User == "bob" || j.Queue == "q0000" }},
		{"two users", store.JobFilter{Visible: &store.Visible{Users: []string{"alice", "carol"}}}, 8, func(j store.Job) bool { return j.User != "bob" }},
		{"nothing", store.JobFilter{Visible: &store.Visible{}}, 0, nil},
		{"unknown user", store.JobFilter{Visible: &store.Visible{Users: []string{"mallory"}}}, 0, nil},
		{"and the user filter", store.JobFilter{User: "alice", Visible: &store.Visible{Users: []string{"bob"}, Queues: []string{"q0000"}}}, 2,
			func(j store.Job) bool { return j.User == "alice" && j.Queue == "q0000" }},
		{"paged", store.JobFilter{Limit: 3, Offset: 3, Visible: &store.Visible{Queues: []string{"q0001"}}}, 6, func(j store.Job) bool { return j.Queue == "q0001" }},
	} {
		page, err := s.Jobs(ctx, c.f)
		if err != nil {
			t.Fatalf("visible %s: %v", c.name, err)
		}
		if page.Total != c.total {
			t.Errorf("visible %s: total %d, want %d", c.name, page.Total, c.total)
		}
		for _, j := range page.Jobs {
			if c.ok == nil || !c.ok(j) {
				t.Errorf("visible %s: job %s of %s in %s let through", c.name, j.JobID, j.User, j.Queue)
			}
		}
	}
}

// testJobAcrossCommits: three jobs whose attempts start one by one over 45
// commits, interleaved, with maintenance between them; each job lists
// exactly its attempts, by type.
// testJobDescribedInAnyOrder: a job's name and queue are those of its
// latest description that says them (by the attempt's last sighting),
// whichever of two nodes' batches comes first, and also when the job had
// ended and been written before the other node's older description came
// (a store that let the job go from memory must not take the older one).
func testJobDescribedInAnyOrder(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	for i, lateFirst := range []bool{true, false} {
		job := "job_1700000000000_" + pad4(200+i)
		early := &AttemptSpec{ID: "attempt_1700000000000_" + pad4(200+i) + "_m_000000_0", JobID: job, Type: "map",
			JobName: "early name", User: "erin", Queue: "early-q", Start: T0,
			Procs: []ProcSpec{{PID: int32(4000 + i), Role: wire.RoleTaskJVM, CPUPerS: 10, RSS: 1 << 20}}}
		late := &AttemptSpec{ID: "attempt_1700000000000_" + pad4(200+i) + "_m_000001_0", JobID: job, Type: "map",
			JobName: "late name", User: "erin", Queue: "late-q", Start: T0.Add(20 * time.Second),
			Procs: []ProcSpec{{PID: int32(4100 + i), Role: wire.RoleTaskJVM, CPUPerS: 10, RSS: 1 << 20}}}
		batches := []*wire.Batch{(&Gen{Agent: "node6-d" + pad4(i), Host: "node6"}).Batch([]*AttemptSpec{early}, 0, 5, true),
			(&Gen{Agent: "node7-d" + pad4(i), Host: "node7"}).Batch([]*AttemptSpec{late}, 0, 5, true)}
		if lateFirst {
			batches[0], batches[1] = batches[1], batches[0]
		}
		for _, b := range batches {
			Ingest(t, s, b)
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		page, err := s.Jobs(ctx, store.JobFilter{User: "erin", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.Job(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.JobID != job {
				continue
			}
			if j.Name != "late name" || j.Queue != "late-q" {
				t.Errorf("late first %v: jobs list: %s, name %q, queue %q; want the later description's", lateFirst, job, j.Name, j.Queue)
			}
		}
		if d.Name != "late name" || d.Queue != "late-q" {
			t.Errorf("late first %v: job %s: name %q, queue %q; want the later description's", lateFirst, job, d.Name, d.Queue)
		}
		if o, err := store.ReadJobOwner(ctx, s, job); err != nil || o != (store.Owner{User: "erin", Queue: "late-q"}) {
			t.Errorf("late first %v: job %s: owner %+v, %v; want the later description's", lateFirst, job, o, err)
		}
	}
}

func testJobAcrossCommits(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	g := &Gen{Agent: "node4-a", Host: "node4"}
	types := []string{"map", "reduce", "map"}
	want := map[string]map[string]int{}
	for i := 0; i < 45; i++ {
		job := "job_1700000000000_" + pad4(100+i%3)
		typ := types[i/3%3]
		a := &AttemptSpec{ID: "attempt_1700000000000_" + pad4(100+i%3) + "_" + typ[:1] + "_" + pad4(i) + "_0", JobID: job,
			Type: typ, JobName: "interleaved", User: "dave", Queue: "default", MemoryMB: 1024,
			Start: T0.Add(time.Duration(i) * time.Second),
			Procs: []ProcSpec{{PID: int32(3000 + i), Role: wire.RoleTaskJVM, CPUPerS: 10, RSS: 1 << 20}}}
		Ingest(t, s, g.Batch([]*AttemptSpec{a}, 0, 2, i%2 == 0))
		if want[job] == nil {
			want[job] = map[string]int{}
		}
		want[job][typ]++
		if i%10 == 9 {
			if err := s.Maintain(ctx, T0.Add(24*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	page, err := s.Jobs(ctx, store.JobFilter{User: "dave"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 3 {
		t.Fatalf("jobs = %d, want 3", len(page.Jobs))
	}
	for _, j := range page.Jobs {
		if j.Attempts != 15 || j.ByType["map"] != want[j.JobID]["map"] || j.ByType["reduce"] != want[j.JobID]["reduce"] {
			t.Errorf("job %s in the list: %d attempts, by type %v, want 15, %v", j.JobID, j.Attempts, j.ByType, want[j.JobID])
		}
		d, err := s.Job(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.AttemptList) != 15 || d.ByType["map"] != want[j.JobID]["map"] {
			t.Errorf("job %s: %d attempts, by type %v, want 15, %v", j.JobID, len(d.AttemptList), d.ByType, want[j.JobID])
		}
		for _, a := range d.AttemptList {
			if a.JobID != j.JobID {
				t.Errorf("job %s lists attempt %s of job %s", j.JobID, a.AttemptID, a.JobID)
			}
		}
		res, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeJob, JobID: j.JobID, Metrics: []string{store.JobAttemptsMetric},
			From: T0.UnixMilli(), To: T0.Add(60 * time.Second).UnixMilli(), Step: 60000})
		if err != nil {
			t.Fatal(err)
		}
		if v := float64(res.Series[0].Values[0]); v != 15 {
			t.Errorf("job %s series: %g attempts with data, want 15", j.JobID, v)
		}
	}
}

// testProcessSeriesInAttempt: a process's series asked with an attempt it
// ran in (as the UI asks) is its series; with an attempt it did not run in,
// not found; without an attempt, over a window with no sample of it, nulls.
func testProcessSeriesInAttempt(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	g := &Gen{Agent: "node5-a", Host: "node5"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 300, RSS: 1 << 20})
	b := mapAttempt(att2, job1, T0, ProcSpec{PID: 102, Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20})
	Ingest(t, s, g.Batch([]*AttemptSpec{a, b}, 0, 10, true))
	key := store.Key(g.Key(a, a.Procs[0]))
	q := store.SeriesQuery{Scope: store.ScopeProcess, Process: key, AttemptID: att1, Metrics: []string{"cpu_percent"},
		From: T0.UnixMilli(), To: T0.Add(10 * time.Second).UnixMilli(), Step: 5000}
	res, err := s.Series(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range res.Series[0].Values {
		if math.Abs(float64(v)-30) > 0.01 {
			t.Errorf("in its attempt: cpu_percent[%d] = %g, want 30", i, v)
		}
	}
	q.AttemptID = att2
	if _, err := s.Series(ctx, q); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("in an attempt it did not run in: %v, want not found", err)
	}
	q.AttemptID, q.From, q.To = "", T0.Add(time.Hour).UnixMilli(), T0.Add(time.Hour+10*time.Second).UnixMilli()
	res, err = s.Series(ctx, q)
	if err != nil {
		t.Fatalf("a window without its samples: %v", err)
	}
	for i, v := range res.Series[0].Values {
		if !math.IsNaN(float64(v)) {
			t.Errorf("a window without its samples: cpu_percent[%d] = %g, want null", i, v)
		}
	}
}

// testExtraMetrics: metrics an agent sends with no column of their own are
// stored and served by name: NAME, their largest value in each bucket, and
// NAME_per_s, their increase per second; a job's sum its attempts'. Names
// no agent sent are series of nulls. Maintenance and a restart keep them.
// (Gen sends x_custom, a process's age in seconds, and x_att, twice an
// attempt's.)
func testExtraMetrics(t *testing.T, f Factory) {
	s := f.Open(t, Clock)
	defer func() { s.Close() }()
	ctx := context.Background()
	g := &Gen{Agent: "node6-a", Host: "node6"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20})
	b := mapAttempt(att2, job1, T0, ProcSpec{PID: 102, Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20})
	Ingest(t, s, g.Batch([]*AttemptSpec{a, b}, 0, 5, false), g.Batch([]*AttemptSpec{a, b}, 5, 10, false))
	key := store.Key(g.Key(a, a.Procs[0]))
	window := func(q store.SeriesQuery) store.SeriesQuery {
		q.From, q.To, q.Step = T0.UnixMilli(), T0.Add(10*time.Second).UnixMilli(), 2000
		return q
	}
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			q      store.SeriesQuery
			value  func(b int) float64 // of bucket b (2 s from T0: samples at 2b and 2b+1 s)
			metric string
		}{
			{store.SeriesQuery{Scope: store.ScopeProcess, Process: key, AttemptID: att1}, func(b int) float64 { return float64(2*b + 1) }, "x_custom"},
			{store.SeriesQuery{Scope: store.ScopeProcess, Process: key}, func(int) float64 { return 1 }, "x_custom_per_s"},
			{store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: att1}, func(b int) float64 { return float64(4*b + 2) }, "x_att"},
			{store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: att1}, func(int) float64 { return 2 }, "x_att_per_s"},
			{store.SeriesQuery{Scope: store.ScopeJob, JobID: job1}, func(int) float64 { return 4 }, "x_att_per_s"},
		} {
			q := window(c.q)
			q.Metrics = []string{"cpu_percent", c.metric}
			res, err := s.Series(ctx, q)
			if err != nil {
				t.Errorf("%s: %s of a %s: %v", when, c.metric, q.Scope, err)
				continue
			}
			if len(res.Series) != 2 || res.Series[1].Metric != c.metric {
				t.Fatalf("%s: series %+v", when, res.Series)
			}
			for bi := 1; bi < len(res.Times); bi++ { // (bucket 0 has the first sample only: no rate from the attempt's start)
				if v := float64(res.Series[1].Values[bi]); math.Abs(v-c.value(bi)) > 1e-9 {
					t.Errorf("%s: %s of a %s, bucket %d: %g, want %g", when, c.metric, q.Scope, bi, v, c.value(bi))
				}
			}
		}
		// A name no agent sent, and an attempt's metric asked of a
		// process, are series without data (not errors: whether an agent
		// sent a name for others' processes is not a reader's to learn).
		nulls := func(what string, q store.SeriesQuery) {
			t.Helper()
			res, err := s.Series(ctx, window(q))
			if err != nil || len(res.Series) != 1 || len(res.Series[0].Values) == 0 {
				t.Errorf("%s: %s of a %s: %+v, %v; want a series of nulls", when, what, q.Scope, res, err)
				return
			}
			for _, v := range res.Series[0].Values {
				if !math.IsNaN(float64(v)) {
					t.Errorf("%s: %s of a %s: %v, want nulls", when, what, q.Scope, res.Series[0].Values)
					break
				}
			}
		}
		for _, q := range []store.SeriesQuery{{Scope: store.ScopeProcess, Process: key, AttemptID: att1}, {Scope: store.ScopeAttempt, AttemptID: att1},
			{Scope: store.ScopeJob, JobID: job1}} {
			q.Metrics = []string{"x_nobody_sent"}
			nulls("a metric no agent sent", q)
		}
		nulls("x_att", store.SeriesQuery{Scope: store.ScopeProcess, Process: key, AttemptID: att1, Metrics: []string{"x_att"}})
	}
	check("after ingest")
	if err := s.Maintain(ctx, T0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("after maintenance")
	if f.Reopen != nil {
		s = f.Reopen(t, s, Clock)
		check("after a restart")
	}
}

func pad4(i int) string {
	s := "0000" + itoa(i)
	return s[len(s)-4:]
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func testJVMReuse(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	key := wire.ProcessKey("node2", 500, T0.UnixMilli())
	b := &wire.Batch{Version: wire.Version, AgentID: "node2-a", Seq: 1, Host: "node2", Metrics: []string{wire.CPUUserMs, wire.CPUSysMs}}
	b.Processes = []wire.Process{{Key: key, PID: 500, PPID: 1, StartMs: T0.UnixMilli(), Cmdline: "java org.apache.hadoop.mapred.Child", Role: wire.RoleTaskJVM}}
	b.Attempts = []wire.Attempt{
		{AttemptID: att1, JobID: job1, Type: "map", FirstMs: T0.UnixMilli(), LastMs: T0.Add(5 * time.Second).UnixMilli(), Ended: true},
		{AttemptID: att2, JobID: job1, Type: "map", FirstMs: T0.Add(5 * time.Second).UnixMilli(), LastMs: T0.Add(9 * time.Second).UnixMilli()},
	}
	b.Members = []wire.Membership{
		{Process: key, AttemptID: att1, FromMs: T0.UnixMilli(), ToMs: T0.Add(5 * time.Second).UnixMilli(), Role: wire.RoleTaskJVM},
		{Process: key, AttemptID: att2, FromMs: T0.Add(5 * time.Second).UnixMilli(), CPUBaseMs: 4000, Role: wire.RoleTaskJVM},
	}
	b.ProcSeries = []wire.Series{{Key: key, Times: []int64{T0.Add(5 * time.Second).UnixMilli(), T0.Add(9 * time.Second).UnixMilli()},
		Columns: []wire.Column{{Metric: 0, Values: []int64{4000, 7000}}, {Metric: 1, Values: []int64{0, 0}}}}}
	if err := wire.Validate(b); err != nil {
		t.Fatal(err)
	}
	Ingest(t, s, b)
	for _, id := range []string{att1, att2} {
		d, err := s.Attempt(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.ProcessList) != 1 || d.ProcessList[0].PID != 500 {
			t.Fatalf("%s processes = %+v", id, d.ProcessList)
		}
		p := d.ProcessList[0]
		if id == att2 && (p.CPUBaseMs != 4000 || p.From != store.Time(T0.Add(5*time.Second).UnixMilli()) || p.To != 0) {
			t.Errorf("second membership = %+v", p)
		}
		if id == att1 && p.To != store.Time(T0.Add(5*time.Second).UnixMilli()) {
			t.Errorf("first membership = %+v", p)
		}
	}
	j, _ := s.Job(ctx, job1)
	if j.Attempts != 2 || j.Running != 1 {
		t.Errorf("job attempts %d running %d", j.Attempts, j.Running)
	}
}

// testRoleAfterExec: a process the agent saw between fork and exec joins
// its attempt as a child; described again once it exec'd (the task JVM, in
// a later commit, or in the batch it joined in: the agent's batch keeps a
// process's latest description, beside the membership that says the role
// it joined with), the attempt lists it with its new role.
func testRoleAfterExec(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-x", Host: "node1"}
	spec := ProcSpec{PID: 101, Role: wire.RoleChild, Cmdline: "/bin/bash -c java YarnChild", CPUPerS: 500, RSS: 1 << 20}
	a := mapAttempt(att1, job1, T0, spec)
	Ingest(t, s, g.Batch([]*AttemptSpec{a}, 0, 5, false))
	b := g.Batch([]*AttemptSpec{a}, 5, 10, false)
	b.Processes = append(b.Processes, wire.Process{Key: g.Key(a, spec), PID: 101, PPID: 1, StartMs: T0.UnixMilli(),
		Cmdline: "java org.apache.hadoop.mapred.YarnChild", Comm: "java", Role: wire.RoleTaskJVM, User: a.User})
	Ingest(t, s, b)
	d, err := s.Attempt(context.Background(), att1)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.ProcessList) != 1 || d.ProcessList[0].Role != wire.RoleTaskJVM || !strings.Contains(d.ProcessList[0].Cmdline, "YarnChild") {
		t.Errorf("after the exec: %+v, want one process, role %s", d.ProcessList, wire.RoleTaskJVM)
	}

	spec2 := ProcSpec{PID: 201, Role: wire.RoleChild, Cmdline: "/bin/bash -c java YarnChild", CPUPerS: 500, RSS: 1 << 20}
	a2 := mapAttempt(att2, job1, T0, spec2)
	b = g.Batch([]*AttemptSpec{a2}, 0, 5, false)
	for i := range b.Processes {
		if p := &b.Processes[i]; p.Key == g.Key(a2, spec2) {
			p.Cmdline, p.Comm, p.Role = "java org.apache.hadoop.mapred.YarnChild", "java", wire.RoleTaskJVM
		}
	}
	Ingest(t, s, b)
	if d, err = s.Attempt(context.Background(), att2); err != nil {
		t.Fatal(err)
	}
	if len(d.ProcessList) != 1 || d.ProcessList[0].Role != wire.RoleTaskJVM {
		t.Errorf("joined as a child and described as the task JVM in one batch: %+v, want role %s", d.ProcessList, wire.RoleTaskJVM)
	}
}

func testJobSeries(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-g", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 100 << 20})
	b := mapAttempt(att2, job1, T0, ProcSpec{PID: 102, Role: wire.RoleTaskJVM, CPUPerS: 1000, RSS: 200 << 20})
	Ingest(t, s, g.Batch([]*AttemptSpec{a, b}, 0, 10, false))
	res, err := s.Series(context.Background(), store.SeriesQuery{Scope: store.ScopeJob, JobID: job1,
		Metrics: []string{"cpu_percent", "rss_bytes", store.JobAttemptsMetric},
		From:    T0.Add(time.Second).UnixMilli(), To: T0.Add(11 * time.Second).UnixMilli(), Step: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Times) != 2 {
		t.Fatalf("buckets %d", len(res.Times))
	}
	for i := range res.Times {
		if v := float64(res.Series[0].Values[i]); math.Abs(v-150) > 0.01 {
			t.Errorf("job cpu_percent[%d] = %g, want 150", i, v)
		}
		if v := float64(res.Series[1].Values[i]); v != 300<<20 {
			t.Errorf("job rss[%d] = %g", i, v)
		}
		if v := float64(res.Series[2].Values[i]); v != 2 {
			t.Errorf("job attempts[%d] = %g", i, v)
		}
	}
	// (A well-formed name outside the catalogs is an agent's metric: see
	// testExtraMetrics.)
	for _, name := range []string{"No pe", "majflt_per_s"} {
		if _, err := s.Series(context.Background(), store.SeriesQuery{Scope: store.ScopeJob, JobID: job1, Metrics: []string{name},
			From: 1, To: 2, Step: 1}); !errors.Is(err, store.ErrUnknownMetric) {
			t.Errorf("unknown job metric %q: %v", name, err)
		}
	}
}

func testEventsAndHosts(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node3-a", Host: "node3"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20})
	b := g.Batch([]*AttemptSpec{a}, 0, 5, false)
	key := g.Key(a, a.Procs[0])
	b.Events = []wire.Event{
		{Ms: T0.Add(2 * time.Second).UnixMilli(), Kind: wire.EventOrphan, AttemptID: att1, JobID: job1, Message: "launcher gone"},
		{Ms: T0.Add(3 * time.Second).UnixMilli(), Kind: wire.EventProcessExit, PID: 999, Message: "unrelated"},
	}
	b.Stats.DroppedSamples = 7
	Ingest(t, s, b)
	ctx := context.Background()
	evs, err := s.Events(ctx, store.EventFilter{AttemptID: att1})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Kind != wire.EventOrphan || evs[0].Host != "node3" {
		t.Fatalf("attempt events = %+v", evs)
	}
	// The attempt's page also shows its processes' starts (from the process records).
	d, err := s.Attempt(ctx, att1)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Events) != 2 || d.Events[0].Kind != wire.EventProcessStart || d.Events[0].Process != store.Key(key) ||
		d.Events[1].Kind != wire.EventOrphan {
		t.Errorf("attempt page events = %+v", d.Events)
	}
	evs, _ = s.Events(ctx, store.EventFilter{Host: "node3", Kind: wire.EventProcessExit})
	if len(evs) != 1 || evs[0].PID != 999 {
		t.Errorf("host+kind events = %+v", evs)
	}
	hosts, err := s.Hosts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0].Host != "node3" || hosts[0].Attempts != 1 || hosts[0].Running != 1 ||
		hosts[0].DroppedSamples != 7 || hosts[0].Orphans != 1 {
		t.Errorf("hosts = %+v", hosts)
	}
	ha, err := s.HostAttempts(ctx, "node3", T0.UnixMilli(), T0.Add(time.Hour).UnixMilli())
	if err != nil || len(ha) != 1 || ha[0].AttemptID != att1 {
		t.Errorf("host attempts = %+v, %v", ha, err)
	}
	ha, _ = s.HostAttempts(ctx, "node3", T0.Add(time.Hour).UnixMilli(), T0.Add(2*time.Hour).UnixMilli())
	if len(ha) != 0 {
		t.Errorf("host attempts outside the window = %d", len(ha))
	}
}

func testHostileText(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-h", Host: "node1"}
	evil := `python -c "<script>alert('x')</script>" \xff ` + "日本語 'quote' \"dq\" %_\\"
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleStreaming, Cmdline: evil, CPUPerS: 10, RSS: 1 << 20})
	a.JobName = `<img src=x onerror=alert(1)>`
	Ingest(t, s, g.Batch([]*AttemptSpec{a}, 0, 2, false))
	d, err := s.Attempt(context.Background(), att1)
	if err != nil {
		t.Fatal(err)
	}
	if d.ProcessList[0].Cmdline != evil {
		t.Errorf("cmdline changed: %q", d.ProcessList[0].Cmdline)
	}
	j, _ := s.Job(context.Background(), job1)
	if j.Name != a.JobName {
		t.Errorf("job name changed: %q", j.Name)
	}
}

func testMaintain(t *testing.T, f Factory) {
	s := open(t, f)
	g := &Gen{Agent: "node1-i", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 300, RSS: 64 << 20},
		ProcSpec{PID: 102, Role: wire.RoleStreaming, CPUPerS: 100, RSS: 32 << 20})
	Ingest(t, s, g.Batch([]*AttemptSpec{a}, 0, 30, false))
	q := store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: att1, Metrics: []string{"cpu_percent", "rss_bytes"},
		From: T0.UnixMilli(), To: T0.Add(30 * time.Second).UnixMilli(), Step: 3000}
	ctx := context.Background()
	before, err := s.Series(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// Far in the future: everything is old enough to compact.
	if err := s.Maintain(ctx, T0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	after, err := s.Series(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	for m := range before.Series {
		for i := range before.Times {
			b, a := float64(before.Series[m].Values[i]), float64(after.Series[m].Values[i])
			if !(b == a || math.IsNaN(a) && math.IsNaN(b)) {
				t.Errorf("%s[%d]: %g before Maintain, %g after", before.Series[m].Metric, i, b, a)
			}
		}
	}
	u, _ := s.Usage(ctx)
	if u.Samples != 60 {
		t.Errorf("samples after Maintain = %d, want 60", u.Samples)
	}
	// More data after compaction continues the same series.
	Ingest(t, s, g.Batch([]*AttemptSpec{a}, 30, 40, false))
	at, _ := s.Attempt(ctx, att1)
	if at.CPUMs != 400*40 {
		t.Errorf("cpu after more data = %d, want %d", at.CPUMs, 400*40)
	}
}

func testNotFound(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	if _, err := s.Job(ctx, "job_1_0001"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job: %v", err)
	}
	if _, err := s.Attempt(ctx, "attempt_1_0001_m_000000_0"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Attempt: %v", err)
	}
	if _, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeProcess, Process: 42, From: 1, To: 1000, Step: 10}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Series: %v", err)
	}
	page, err := s.Jobs(ctx, store.JobFilter{})
	if err != nil || page.Total != 0 || page.Jobs == nil {
		t.Errorf("empty Jobs = %+v, %v", page, err)
	}
}

// testOwners: whose a job is and which job an attempt is in, as Job and
// Attempt say them (the API checks them before it reads anything else);
// unknown ones are ErrNotFound.
func testOwners(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	g := &Gen{Agent: "node8-o", Host: "node8"}
	var specs []*AttemptSpec
	for i, u := range []struct{ user, queue string }{{"olga", "etl"}, {"otto", "adhoc"}, {"olga", "adhoc"}} {
		job := "job_1700000000000_" + pad4(300+i)
		specs = append(specs, &AttemptSpec{ID: "attempt_1700000000000_" + pad4(300+i) + "_m_000000_0", JobID: job, Type: "map",
			JobName: "owned", User: u.user, Queue: u.queue, Start: T0,
			Procs: []ProcSpec{{PID: int32(5000 + i), Role: wire.RoleTaskJVM, CPUPerS: 10, RSS: 1 << 20}}})
	}
	Ingest(t, s, g.Batch(specs, 0, 5, false))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range specs {
		d, err := s.Job(ctx, a.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if o, err := store.ReadJobOwner(ctx, s, a.JobID); err != nil || o != (store.Owner{User: d.User, Queue: d.Queue}) || o.User != a.User {
			t.Errorf("owner of %s: %+v, %v; Job says %s in %s", a.JobID, o, err, d.User, d.Queue)
		}
		if j, err := store.ReadAttemptJob(ctx, s, a.ID); err != nil || j != a.JobID {
			t.Errorf("job of %s: %q, %v; want %s", a.ID, j, err, a.JobID)
		}
	}
	for _, id := range []string{"job_1700000000000_0399", "", "job_1700000000000_0300x"} {
		if o, err := store.ReadJobOwner(ctx, s, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("owner of unknown job %q: %+v, %v; want ErrNotFound", id, o, err)
		}
	}
	for _, id := range []string{"attempt_1700000000000_0399_m_000000_0", "", specs[0].JobID} {
		if j, err := store.ReadAttemptJob(ctx, s, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("job of unknown attempt %q: %q, %v; want ErrNotFound", id, j, err)
		}
	}
}

func testRestart(t *testing.T, f Factory) {
	if f.Reopen == nil {
		t.Fatal("the store must support reopening its data")
	}
	s := f.Open(t, Clock)
	g := &Gen{Agent: "node1-j", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 400, RSS: 1 << 20})
	b1 := g.Batch([]*AttemptSpec{a}, 0, 10, false)
	Ingest(t, s, b1)
	s = f.Reopen(t, s, Clock)
	defer func() { s.Close() }()
	// The agent retries b1 (answer lost before the restart), then goes on.
	if d := Ingest(t, s, b1, g.Batch([]*AttemptSpec{a}, 10, 20, false)); !d[0] || d[1] {
		t.Fatalf("after restart dups = %v", d)
	}
	ctx := context.Background()
	at, err := s.Attempt(ctx, att1)
	if err != nil {
		t.Fatal(err)
	}
	if at.CPUMs != 8000 || at.ProcessList[0].Samples != 20 {
		t.Errorf("after restart cpu %d samples %d", at.CPUMs, at.ProcessList[0].Samples)
	}
	ser, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeProcess, Process: at.ProcessList[0].Key,
		Metrics: []string{"cpu_percent"}, From: T0.UnixMilli(), To: T0.Add(20 * time.Second).UnixMilli(), Step: 10000})
	if err != nil {
		t.Fatal(err)
	}
	vals := []float64{float64(ser.Series[0].Values[0]), float64(ser.Series[0].Values[1])}
	sort.Float64s(vals)
	if math.Abs(vals[0]-40) > 0.01 || math.Abs(vals[1]-40) > 0.01 {
		t.Errorf("cpu_percent across the restart = %v, want 40 and 40 (increments continue)", vals)
	}
	if !strings.HasPrefix(at.AttemptID, "attempt_") {
		t.Error("bad id")
	}
	// After another restart, a commit with an attempt stored before it and
	// a new one: the first goes on from its summary, the second starts.
	s = f.Reopen(t, s, Clock)
	b := mapAttempt(att2, job1, T0.Add(20*time.Second), ProcSpec{PID: 102, Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20})
	g2 := &Gen{Agent: "node2-j", Host: "node2"}
	Ingest(t, s, g.Batch([]*AttemptSpec{a}, 20, 30, false), g2.Batch([]*AttemptSpec{b}, 0, 10, false))
	for id, want := range map[string]int64{att1: 12000, att2: 1000} {
		at, err := s.Attempt(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if at.CPUMs != want {
			t.Errorf("%s: cpu %d after a commit with both, want %d", id, at.CPUMs, want)
		}
	}
}
