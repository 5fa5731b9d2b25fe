package analysis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/wire"
)

// side is one side of a crafted Streaming attempt: its CPU and its wait
// for a CPU over the attempt's 10 s (ms; a JVM's wait is its threads' sum).
type side struct{ cpu, wait int64 }

// streamingBatch is a Streaming map attempt of 10 s with a task JVM and a
// mapper, and the attempt's sums.
func streamingBatch(job, id string, start time.Time, jvm, script side) *wire.Batch {
	seq++
	b := &wire.Batch{Version: wire.Version, AgentID: "agent-s", Seq: seq, Host: "hs",
		Metrics: []string{wire.CPUUserMs, wire.SchedWaitNs, wire.AttemptCPUMs, wire.AttemptProcesses}} // an attempt's wait is sched_wait_ns too
	end := start.Add(10 * time.Second)
	b.Attempts = []wire.Attempt{{AttemptID: id, JobID: job, Type: "map", Framework: "mapreduce", FirstMs: start.UnixMilli(),
		LastMs: end.UnixMilli(), Ended: true, MemoryMB: 1024, XmxBytes: 800 << 20, Streaming: true}}
	att := wire.Series{AttemptID: id}
	var acols [3][]int64
	for pi, p := range []struct {
		role string
		s    side
	}{{wire.RoleTaskJVM, jvm}, {wire.RoleStreaming, script}} {
		key := seq*10 + uint64(pi)
		b.Processes = append(b.Processes, wire.Process{Key: key, PID: int32(key), PPID: 1, SID: 1, StartMs: start.UnixMilli(),
			EndMs: end.UnixMilli(), Cmdline: p.role, Comm: p.role, Role: p.role})
		b.Members = append(b.Members, wire.Membership{Process: key, AttemptID: id, FromMs: start.UnixMilli(), Role: p.role})
		s := wire.Series{Key: key}
		var cols [2][]int64
		for i := int64(1); i <= 10; i++ {
			s.Times = append(s.Times, start.Add(time.Duration(i)*time.Second).UnixMilli())
			cols[0] = append(cols[0], p.s.cpu*i/10)
			cols[1] = append(cols[1], p.s.wait*i/10*1e6)
		}
		s.Columns = []wire.Column{{Metric: 0, Values: cols[0]}, {Metric: 1, Values: cols[1]}}
		b.ProcSeries = append(b.ProcSeries, s)
	}
	for i := int64(1); i <= 10; i++ {
		att.Times = append(att.Times, start.Add(time.Duration(i)*time.Second).UnixMilli())
		acols[0] = append(acols[0], (jvm.cpu+script.cpu)*i/10)
		acols[1] = append(acols[1], 2)
		acols[2] = append(acols[2], (jvm.wait+script.wait)*i/10*1e6)
	}
	for i, m := range []uint32{2, 3, 1} {
		att.Columns = append(att.Columns, wire.Column{Metric: m, Values: acols[i]})
	}
	b.AttemptSeries = []wire.Series{att}
	if err := wire.Validate(b); err != nil {
		panic(err)
	}
	return b
}

// TestStreamingWaits: on a busy node each side's wait for a CPU counts as
// busy for that side; a JVM's threads' wait (its collector's and compiler's
// wait too) only up to what the JVM ran.
func TestStreamingWaits(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{SummaryEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name        string
		jvm, script side
		want        string // the finding's message start, "" for none
	}{
		// The JVM's threads waited 6 s on a busy node while it ran 2 s and
		// the mapper idled: not the framework's bottleneck.
		{"jvm-threads-wait", side{2000, 6000}, side{700, 100}, ""},
		// The mapper ran 5 s and waited 4: bound on a busy node.
		{"script-bound-busy", side{1000, 3000}, side{5000, 4000}, "the Streaming process"},
		// The JVM ran a third of the time and waited twice that on a
		// node overloaded: a healthy job's, not bound (it ran less than
		// half the wall time itself).
		{"jvm-third-busy-node", side{3600, 7200}, side{300, 100}, ""},
		// The JVM ran 5 s and waited as long: bound.
		{"jvm-bound-busy", side{5000, 5000}, side{500, 100}, "the task JVM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := "job_1700000000000_00" + map[string]string{"jvm-threads-wait": "11", "script-bound-busy": "12", "jvm-bound-busy": "13",
				"jvm-third-busy-node": "14"}[tc.name]
			app, err := st.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				id := "attempt" + job[3:] + "_m_00000" + string(rune('0'+i)) + "_0"
				if _, err := app.Append(streamingBatch(job, id, t0, tc.jvm, tc.script)); err != nil {
					t.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := st.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			r, err := analysis.New(st).Report(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for _, f := range r.Findings {
				if f.Heuristic == "streaming_bottleneck" {
					t.Logf("[%s] %s", f.Severity, f.Message)
					got = f.Message
				}
			}
			switch {
			case tc.want == "" && got != "":
				t.Errorf("a finding: %s", got)
			case tc.want != "" && (len(got) < 40 || !strings.Contains(got, "attempts "+tc.want)):
				t.Errorf("finding %q, want one on %s", got, tc.want)
			}
			if tc.want != "" && severityOf(r, "streaming_bottleneck") < analysis.Severe {
				t.Errorf("severity %s", severityOf(r, "streaming_bottleneck"))
			}
		})
	}
}
