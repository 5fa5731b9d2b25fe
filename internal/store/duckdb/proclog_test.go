package duckdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

const (
	plJob  = "job_1700000000000_0011"
	plAtt1 = "attempt_1700000000000_0011_m_000001_0"
	plAtt2 = "attempt_1700000000000_0011_m_000002_0"
)

func t0ms(sec int) int64 { return storetest.T0.Add(time.Duration(sec) * time.Second).UnixMilli() }

// plBatch is a batch of node9's agent at second sec with the given records
// and a sample of every process in procs.
func plBatch(seq uint64, sec int, procs []wire.Process, members []wire.Membership, atts []wire.Attempt, sampled ...uint64) *wire.Batch {
	b := &wire.Batch{Version: wire.Version, AgentID: "node9-a", Seq: seq, Host: "node9", SentMs: t0ms(sec),
		Metrics: []string{wire.CPUUserMs, wire.AttemptCPUMs}, Processes: procs, Members: members, Attempts: atts}
	for _, k := range sampled {
		b.ProcSeries = append(b.ProcSeries, wire.Series{Key: k, Times: []int64{t0ms(sec)},
			Columns: []wire.Column{{Metric: 0, Values: []int64{int64(sec) * 100}}}})
	}
	for _, a := range atts {
		if !a.Ended {
			b.AttemptSeries = append(b.AttemptSeries, wire.Series{AttemptID: a.AttemptID, Times: []int64{t0ms(sec)},
				Columns: []wire.Column{{Metric: 1, Values: []int64{int64(sec) * 100}}}})
		}
	}
	if err := wire.Validate(b); err != nil {
		panic(err)
	}
	return b
}

func plAttempt(id string, sec int, ended bool) wire.Attempt {
	return wire.Attempt{AttemptID: id, JobID: plJob, Type: "map", Framework: "mapreduce", FirstMs: t0ms(0), LastMs: t0ms(sec),
		Ended: ended}
}

func plOpen(t *testing.T, dir string) *Store {
	s, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func procByPID(t *testing.T, s *Store, att string, pid int32) store.Process {
	t.Helper()
	d, err := s.Attempt(context.Background(), att)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.ProcessList {
		if p.PID == pid {
			return p
		}
	}
	t.Fatalf("%s has no process %d: %+v", att, pid, d.ProcessList)
	return store.Process{}
}

// longCmd is a task JVM's command line of the attempt with this number.
func longCmd(n int) string {
	return fmt.Sprintf("/usr/lib/jvm/java-17/bin/java -Xmx820m -Djava.io.tmpdir=/data/yarn/local/usercache/alice/appcache/"+
		"application_1700000000000_0011/container_e01_1700000000000_0011_01_%06d/tmp org.apache.hadoop.mapred.YarnChild "+
		"10.0.0.17 40123 attempt_1700000000000_0011_m_%06d_0 %d", n+1, n, n)
}

// TestProcLogRecords: what the attempt page shows of its processes as
// their records come: a command line changed by an exec (a record without
// a membership beside it), the exit, long command lines stored against
// templates, and a reused JVM's second attempt, after a restart too.
func TestProcLogRecords(t *testing.T) {
	dir := t.TempDir()
	s := plOpen(t, dir)
	jvm := wire.ProcessKey("node9", 700, t0ms(0))
	wrap := wire.ProcessKey("node9", 699, t0ms(0))
	child := wire.ProcessKey("node9", 701, t0ms(1))
	pre := wire.Process{Key: jvm, PID: 700, PPID: 699, StartMs: t0ms(0), Cmdline: "/bin/bash /tmp/taskjvm.sh", Comm: "bash"}
	post := pre
	post.Cmdline, post.Comm = longCmd(1), "java"
	wr := wire.Process{Key: wrap, PID: 699, PPID: 1, StartMs: t0ms(0), Cmdline: "/bin/bash -c " + longCmd(1), Comm: "bash",
		Role: wire.RoleWrapper}
	ch := wire.Process{Key: child, PID: 701, PPID: 700, StartMs: t0ms(1), Cmdline: "python mapper.py", Comm: "python"}
	storetest.Ingest(t, s, plBatch(1, 1, []wire.Process{pre, wr},
		[]wire.Membership{{Process: jvm, AttemptID: plAtt1, FromMs: t0ms(0)}, {Process: wrap, AttemptID: plAtt1, FromMs: t0ms(0)}},
		[]wire.Attempt{plAttempt(plAtt1, 1, false)}, jvm, wrap))
	// The exec: a record alone.
	storetest.Ingest(t, s, plBatch(2, 2, []wire.Process{post}, nil, []wire.Attempt{plAttempt(plAtt1, 2, false)}, jvm, wrap))
	if p := procByPID(t, s, plAtt1, 700); p.Cmdline != longCmd(1) || p.Comm != "java" {
		t.Errorf("after the exec: %q %q", p.Comm, p.Cmdline)
	}
	// A child joins and exits within one batch; the JVM goes on.
	chEnd := ch
	chEnd.EndMs = t0ms(3)
	storetest.Ingest(t, s, plBatch(3, 3, []wire.Process{ch, chEnd},
		[]wire.Membership{{Process: child, AttemptID: plAtt1, FromMs: t0ms(1)}, {Process: child, AttemptID: plAtt1, FromMs: t0ms(1), ToMs: t0ms(3)}},
		[]wire.Attempt{plAttempt(plAtt1, 3, false)}, jvm))
	if p := procByPID(t, s, plAtt1, 701); p.End != store.Time(t0ms(3)) || p.To != store.Time(t0ms(3)) || p.Cmdline != "python mapper.py" {
		t.Errorf("the child: %+v", p)
	}
	if p := procByPID(t, s, plAtt1, 699); p.Cmdline != wr.Cmdline || p.Role != wire.RoleWrapper {
		t.Errorf("the wrapper: %q %q", p.Role, p.Cmdline)
	}
	// The JVM is reused: attempt 1 ends, attempt 2 starts in it. Then a
	// restart, and the JVM is reused again (attempt 3) with no record of
	// it beside: its description comes from the attempts before.
	storetest.Ingest(t, s, plBatch(4, 4, nil, []wire.Membership{
		{Process: jvm, AttemptID: plAtt1, FromMs: t0ms(0), ToMs: t0ms(4)},
		{Process: jvm, AttemptID: plAtt2, FromMs: t0ms(4), CPUBaseMs: 400}},
		[]wire.Attempt{plAttempt(plAtt1, 4, true), plAttempt(plAtt2, 4, false)}, jvm))
	if p := procByPID(t, s, plAtt2, 700); p.Cmdline != longCmd(1) || p.CPUBaseMs != 400 || p.From != store.Time(t0ms(4)) {
		t.Errorf("the reused JVM in its second attempt: %+v", p)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = plOpen(t, dir)
	defer s.Close()
	att3 := "attempt_1700000000000_0011_m_000003_0"
	a3 := plAttempt(att3, 6, false)
	storetest.Ingest(t, s, &wire.Batch{Version: wire.Version, AgentID: "node9-b", Seq: 1, Host: "node9", SentMs: t0ms(6),
		Members: []wire.Membership{{Process: jvm, AttemptID: plAtt2, FromMs: t0ms(4), ToMs: t0ms(6)},
			{Process: jvm, AttemptID: att3, FromMs: t0ms(6), CPUBaseMs: 600}},
		Attempts: []wire.Attempt{plAttempt(plAtt2, 6, true), a3}})
	if p := procByPID(t, s, att3, 700); p.Cmdline != longCmd(1) || p.Start != store.Time(t0ms(0)) || p.CPUBaseMs != 600 {
		t.Errorf("the JVM reused after a restart: %+v", p)
	}
	// It exits: the record goes to the rows of the attempt it is in now,
	// and of the one before (still known from the memberships).
	postEnd := post
	postEnd.EndMs = t0ms(8)
	storetest.Ingest(t, s, &wire.Batch{Version: wire.Version, AgentID: "node9-b", Seq: 2, Host: "node9", SentMs: t0ms(8),
		Processes: []wire.Process{postEnd}, Members: []wire.Membership{{Process: jvm, AttemptID: att3, FromMs: t0ms(6), ToMs: t0ms(8), CPUBaseMs: 600}},
		Attempts: []wire.Attempt{plAttempt(att3, 8, true)}})
	for _, att := range []string{plAtt2, att3} {
		if p := procByPID(t, s, att, 700); p.End != store.Time(t0ms(8)) {
			t.Errorf("%s: the JVM's end %v, want %v", att, p.End, store.Time(t0ms(8)))
		}
	}
}

// TestProcLogTemplates: many task JVMs whose command lines differ by their
// numbers, over compactions and a restart, read back exactly.
func TestProcLogTemplates(t *testing.T) {
	dir := t.TempDir()
	s := plOpen(t, dir)
	ctx := context.Background()
	for n := 0; n < 40; n++ {
		att := fmt.Sprintf("attempt_1700000000000_0011_m_%06d_0", n)
		k := wire.ProcessKey("node9", int32(1000+n), t0ms(n))
		p := wire.Process{Key: k, PID: int32(1000 + n), PPID: 1, StartMs: t0ms(n), Cmdline: longCmd(n), Comm: "java"}
		a := plAttempt(att, n, false)
		a.FirstMs = t0ms(n)
		storetest.Ingest(t, s, plBatch(uint64(n+1), n, []wire.Process{p}, []wire.Membership{{Process: k, AttemptID: att, FromMs: t0ms(n)}},
			[]wire.Attempt{a}, k))
		if n == 20 {
			if err := s.Maintain(ctx, storetest.T0.Add(24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = plOpen(t, dir)
		}
	}
	defer s.Close()
	var templates, texts int
	if err := s.DB().QueryRow(`SELECT (SELECT count(*) FROM cmd_templates), (SELECT count(*) FROM proc_log WHERE cmdline IS NOT NULL)`).
		Scan(&templates, &texts); err != nil {
		t.Fatal(err)
	}
	if templates != 1 || texts != 0 {
		t.Errorf("%d templates and %d command lines as text, want 1 and 0", templates, texts)
	}
	for n := 0; n < 40; n++ {
		att := fmt.Sprintf("attempt_1700000000000_0011_m_%06d_0", n)
		if p := procByPID(t, s, att, int32(1000+n)); p.Cmdline != longCmd(n) {
			t.Errorf("%s: %q, want %q", att, p.Cmdline, longCmd(n))
		}
	}
}

// TestProcessSeriesKnown: a process's series with its attempt is found
// through the attempt (another attempt's: not found); without one, by its
// samples, or by its records when the window has none.
func TestProcessSeriesKnown(t *testing.T) {
	s := plOpen(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	k := wire.ProcessKey("node9", 800, t0ms(0))
	other := wire.ProcessKey("node9", 801, t0ms(0))
	p := wire.Process{Key: k, PID: 800, PPID: 1, StartMs: t0ms(0), Cmdline: "java", Comm: "java"}
	storetest.Ingest(t, s, plBatch(1, 2, []wire.Process{p}, []wire.Membership{{Process: k, AttemptID: plAtt1, FromMs: t0ms(0)}},
		[]wire.Attempt{plAttempt(plAtt1, 2, false), plAttempt(plAtt2, 2, false)}, k))
	q := store.SeriesQuery{Scope: store.ScopeProcess, Process: store.Key(k), Metrics: []string{"cpu_percent"},
		From: t0ms(0), To: t0ms(10), Step: 10000}
	for _, c := range []struct {
		name      string
		att       string
		proc      uint64
		from      int64
		notFound  bool
		wantValue bool
	}{
		{"its attempt", plAtt1, k, t0ms(0), false, true},
		{"without attempt", "", k, t0ms(0), false, true},
		{"another attempt", plAtt2, k, t0ms(0), true, false},
		{"an unknown attempt", "attempt_1_1_m_1_1", k, t0ms(0), true, false},
		{"no samples in the window", "", k, t0ms(3600), false, false},
		{"no samples in the window, its attempt", plAtt1, k, t0ms(3600), false, false},
		{"an unknown process", "", other, t0ms(0), true, false},
	} {
		q := q
		q.AttemptID, q.Process, q.From, q.To = c.att, store.Key(c.proc), c.from, c.from+10000
		res, err := s.Series(ctx, q)
		if c.notFound {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: %v, want not found", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		// 200 ms of CPU in the 2 s since the start: 10 %.
		v := float64(res.Series[0].Values[0])
		if c.wantValue && math.Abs(v-10) > 0.01 || !c.wantValue && !math.IsNaN(v) {
			t.Errorf("%s: cpu_percent %g", c.name, v)
		}
	}
}
