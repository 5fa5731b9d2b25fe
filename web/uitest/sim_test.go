package uitest

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestSimulatedJob: the real agent samples a Hadoop Streaming job that the
// simulator runs with real processes (YARN container launch scripts, a task
// JVM, bash and python3 streaming processes and their short-lived
// children). The jobs page shows the job appear while it runs, without a
// reload; the job and attempt pages show what the agent saw.
func TestSimulatedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts JVMs")
	}
	e := startServer(t)
	tb := newTab(t, e.url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := simulator.Start(ctx, simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 1, Kind: simulator.NodeYARN, MapSlots: 2, ReduceSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() {
		_, err := agent.Run(actx, agent.Config{Servers: []string{e.url}, Interval: 250 * time.Millisecond, FlushInterval: 500 * time.Millisecond,
			MaxTicks: -1, PSSEvery: 4, SpoolDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
		agentDone <- err
	}()
	t.Cleanup(func() {
		stopAgent()
		if err := <-agentDone; err != nil && ctx.Err() == nil {
			t.Logf("agent: %v", err)
		}
	})

	tb.open("/jobs", `[data-table=jobs]`)
	eval[bool](tb, `window.__marker = 1, true`)
	j, err := c.Submit(ctx, simulator.JobSpec{Kind: simulator.JobStreaming, Name: "ui-streaming", User: "alice", Maps: 2, Reduces: 1,
		TaskCPU: time.Second, StreamCPU: 1500 * time.Millisecond, ShortLivedChildren: 20, Hold: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The job appears on the open jobs page by itself.
	tb.waitJS("the job appears", `document.querySelector('[data-table=jobs] a[href="/jobs/`+j.ID+`"]')`, 60*time.Second)
	if !eval[bool](tb, `window.__marker === 1`) {
		t.Error("the jobs page reloaded")
	}
	tb.click(`[data-table=jobs] a[href="/jobs/`+j.ID+`"]`, `[data-table=attempts] .vt-row a`)
	tb.shot("13-sim-job-running")
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the agent to ship the end, and the store to see every attempt end.
	testsrv.WaitUntil(t, "the job's attempts end", time.Minute, func() bool {
		d, err := e.st.Job(ctx, j.ID)
		if err != nil || len(d.AttemptList) < len(res.Attempts) {
			return false
		}
		for _, a := range d.AttemptList {
			if a.State == store.StateRunning {
				return false
			}
		}
		return true
	})
	d := e.job(j.ID)
	t.Logf("simulated job %s: %d attempts, %d ms CPU, state %s", j.ID, len(d.AttemptList), d.CPUMs, d.State)
	// The open page follows without a reload.
	tb.waitJS("attempts on the page end", `[...document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden]) .badge.state-running')].length === 0`, 20*time.Second)
	tb.waitJS("charts", chartsSettled(8), 20*time.Second)
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("simulated job page: chart %s is empty (%d pixels)", name, px)
		}
	}
	types := eval[string](tb, `[...document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden]) .badge[class*=type-]')].map(e => e.textContent).sort().join(',')`)
	for _, ty := range []string{"am", "map", "reduce"} {
		if !strings.Contains(types, ty) {
			t.Errorf("no %s attempt on the job page: %s", ty, types)
		}
	}
	tb.shot("14-sim-job")
	tb.checkClean("simulated job page")

	// A map attempt: the container's process tree as the agent saw it.
	var mapID string
	for _, a := range d.AttemptList {
		if a.Type == "map" && (mapID == "" || a.Processes > 0 && a.AttemptID < mapID) {
			mapID = a.AttemptID
		}
	}
	tb.click(`[data-table=attempts] a[href$="/attempts/`+mapID+`"]`, `[data-section=processes] td.cmd`)
	tb.waitJS("attempt charts", chartsSettled(7), 20*time.Second)
	roles := eval[string](tb, `[...document.querySelectorAll('[data-section=processes] .badge')].map(e => e.textContent).join(',')`)
	for _, r := range []string{"wrapper", "task-jvm", "streaming"} {
		if !strings.Contains(roles, r) {
			t.Errorf("role %s missing from the simulated attempt's tree: %s", r, roles)
		}
	}
	if !eval[bool](tb, `[...document.querySelectorAll('[data-section=processes] td.cmd')].some(e => e.textContent.includes('org.apache.hadoop.mapred.YarnChild'))`) {
		t.Error("no YarnChild command line on the attempt page")
	}
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("simulated attempt page: chart %s is empty (%d pixels)", name, px)
		}
	}
	tb.shot("15-sim-attempt")
	tb.checkClean("simulated attempt page")
}
