package uitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/report"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// ingest appends batches straight into the store and makes the summaries visible.
func (e *env) ingest(batches ...*wire.Batch) {
	e.t.Helper()
	storetest.Ingest(e.t, e.st, batches...)
}

// post sends a batch through the HTTP ingest endpoint, as an agent does (so
// that the live stream announces it).
func (e *env) post(b *wire.Batch) {
	e.t.Helper()
	body := wire.Marshal(nil, b)
	resp, err := http.Post(e.url+"/api/v1/ingest", wire.ContentType, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e.t.Fatalf("ingest: %s", resp.Status)
	}
}

// loadgenData feeds minutes of a simulated cluster from loadgen's generator.
func (e *env) loadgenData(nodes int, d time.Duration) {
	e.t.Helper()
	start := time.Now().Add(-d)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: nodes, Slots: 4, Seed: 7, Start: start})
	var all []*wire.Batch
	for ticks := 0; ticks < int(d/time.Second); ticks += 5 {
		all = append(all, g.Next()...)
		if len(all) > 400 {
			e.ingest(all...)
			all = all[:0]
		}
	}
	e.ingest(all...)
}

// Hostile text: what a command line can hold. The invalid UTF-8 bytes are
// escaped as \xNN by the agent (wire.SanitizeText).
var (
	hostileCmd = "python3 -c <script>alert(1)</script> <img src=x onerror=alert(2)> " +
		wire.SanitizeText([]byte{0xff, 0xfe, 'o', 'k'}) + ` "quoted" & done`
	hostileJob = "job_1700000000000_0666"
	hostileAtt = "attempt_1700000000000_0666_m_000000_0"
	// hostileDiag is the NodeManager's diagnostics of the hostile job's
	// first attempt, killed over its memory (retried as hostileRetry).
	hostileDiag  = "Container [pid=4000] is running 1B beyond the 'PHYSICAL' memory limit. <script>alert(4)</script> <b>dump</b>"
	hostileRetry = "attempt_1700000000000_0666_m_000000_1"
)

// hostileData is a finished streaming job whose command lines and names
// carry markup and escaped bytes, with an orphan event on its host.
func (e *env) hostileData() {
	e.t.Helper()
	g := &storetest.Gen{Agent: "agent-hostile", Host: "node-hostile.sim"}
	start := time.Now().Add(-10 * time.Minute)
	var atts []*storetest.AttemptSpec
	for i := 0; i < 6; i++ {
		typ, letter := "map", "m"
		if i == 5 {
			typ, letter = "reduce", "r"
		}
		a := &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1700000000000_0666_%s_%06d_0", letter, i%5), JobID: hostileJob, Type: typ,
			Container: fmt.Sprintf("container_1700000000000_0666_01_%06d", i+2), JobName: `<b>bold</b> "name" <script>alert(3)</script>`,
			User: "mallory<i>", Queue: "default", MemoryMB: 1024, Start: start.Add(time.Duration(i) * 3 * time.Second),
			Procs: []storetest.ProcSpec{
				{PID: int32(4000 + 10*i), Role: wire.RoleWrapper, Cmdline: "/bin/bash -c java ... 1>stdout 2>stderr", CPUPerS: 5, RSS: 3 << 20},
				{PID: int32(4001 + 10*i), Role: wire.RoleTaskJVM, Cmdline: "/usr/lib/jvm/bin/java -Xmx800m org.apache.hadoop.mapred.YarnChild 10.0.0.1 4011", CPUPerS: 400, RSS: 300 << 20},
				{PID: int32(4002 + 10*i), Role: wire.RoleStreaming, Cmdline: hostileCmd, CPUPerS: 600, RSS: 80 << 20, StartSec: 2},
			}}
		atts = append(atts, a)
	}
	b1 := g.Batch(atts, 0, 20, false)
	b2 := g.Batch(atts, 20, 40, true)
	// How they ended: the first killed over its memory (and retried, a
	// moment later), the second failed; the rest succeeded.
	for i := range b2.Attempts {
		a := &b2.Attempts[i]
		end := wire.ExitStatus{Status: 0, Ms: a.LastMs}
		switch a.AttemptID {
		case atts[0].ID:
			a.RootExit, a.NMExit, a.ExitDiagnostics = wire.ExitStatus{Status: 143 << 8, Ms: a.LastMs}, wire.ExitStatus{Status: -104, Ms: a.LastMs}, hostileDiag
			continue
		case atts[1].ID:
			end.Status = 1 << 8
		}
		a.JVMExit, a.RootExit = end, end
	}
	retry := &storetest.AttemptSpec{ID: hostileRetry, JobID: hostileJob, Type: "map", Container: "container_1700000000000_0666_01_000099",
		JobName: atts[0].JobName, User: atts[0].User, Queue: "default", MemoryMB: 2048, Start: start.Add(45 * time.Second),
		Procs: []storetest.ProcSpec{{PID: 4900, Role: wire.RoleTaskJVM, Cmdline: "/usr/lib/jvm/bin/java -Xmx1600m org.apache.hadoop.mapred.YarnChild", CPUPerS: 400, RSS: 300 << 20}}}
	r1, r2 := g.Batch([]*storetest.AttemptSpec{retry}, 0, 10, false), g.Batch([]*storetest.AttemptSpec{retry}, 10, 20, true)
	r2.Attempts[len(r2.Attempts)-1].JVMExit = wire.ExitStatus{Status: 0, Ms: r2.Attempts[len(r2.Attempts)-1].LastMs}
	// The tree: bash -> java -> python.
	for _, b := range []*wire.Batch{b1, b2} {
		for i := range b.Processes {
			if pid := b.Processes[i].PID; pid%10 > 0 {
				b.Processes[i].PPID = pid - 1
			}
		}
	}
	p := atts[0].Procs[2]
	b2.Events = append(b2.Events, wire.Event{Ms: start.Add(41 * time.Second).UnixMilli(), Kind: "orphan", Process: g.Key(atts[0], p), PID: p.PID,
		AttemptID: atts[0].ID, JobID: hostileJob, Message: "still running after its container ended: " + hostileCmd})
	e.ingest(b1, b2, r1, r2)
}

// bigJob makes a job of n attempts over many hosts, each a JVM with a few
// seconds of samples; a handful are stragglers (storetest.BigJob).
func (e *env) bigJob(jobID string, n, hosts int) {
	e.t.Helper()
	storetest.BigJob(e.t, e.st, jobID, n, hosts, time.Now().Add(-30*time.Minute))
}

// runningJob is a job whose attempts are still running; step adds seconds.
type runningJob struct {
	g    *storetest.Gen
	atts []*storetest.AttemptSpec
	sec  int
}

func newRunningJob(jobID string) *runningJob {
	g := &storetest.Gen{Agent: "agent-live", Host: "node-live.sim"}
	start := time.Now().Add(-30 * time.Second)
	var atts []*storetest.AttemptSpec
	for i := 0; i < 3; i++ {
		atts = append(atts, &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1700000000000_0888_m_%06d_0", i), JobID: jobID, Type: "map",
			Container: fmt.Sprintf("container_1700000000000_0888_01_%06d", i+2), JobName: "live-wordcount", User: "alice", Queue: "default",
			MemoryMB: 1024, Start: start, Procs: []storetest.ProcSpec{{PID: int32(7000 + i), Role: wire.RoleTaskJVM, Cmdline: "java YarnChild", CPUPerS: 900, RSS: 200 << 20}}})
	}
	return &runningJob{g: g, atts: atts}
}

func (r *runningJob) next(secs int) *wire.Batch {
	b := r.g.Batch(r.atts, r.sec, r.sec+secs, false)
	r.sec += secs
	return b
}

// report is what `taskscope report JOB` prints: the API's JSON through
// internal/report, as internal/cli does it.
func (e *env) report(job string) string {
	e.t.Helper()
	var j store.JobDetail
	var r analysis.Report
	for u, v := range map[string]any{"/api/v1/jobs/" + job: &j, "/api/v1/jobs/" + job + "/findings": &r} {
		resp, err := http.Get(e.url + u)
		if err != nil {
			e.t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(v)
		resp.Body.Close()
		if err != nil {
			e.t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if err := report.Job(&b, &j, &r); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

func (e *env) job(id string) *store.JobDetail {
	e.t.Helper()
	j, err := e.st.Job(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// jobCPU is a job's CPU so far, 0 until the store lists the job (its
// summary is written within a second of the batch).
func (e *env) jobCPU(id string) int64 {
	e.t.Helper()
	j, err := e.st.Job(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return j.CPUMs
}
