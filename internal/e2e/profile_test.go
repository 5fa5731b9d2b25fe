package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/taskscope/taskscope/internal/api"
	"github.com/taskscope/taskscope/internal/flame"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// post sends JSON to the server and decodes the answer into v.
func (h *harness) post(path, body string, v any) (int, error) {
	resp, err := h.c.Post(h.srv.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("POST %s: %s %s", path, resp.Status, b.String())
	}
	return resp.StatusCode, json.Unmarshal(b.Bytes(), v)
}

// profileOf asks for a profile of a running attempt and waits for it to
// come (any status).
func (h *harness) profileOf(t *testing.T, job, attempt, ask string) (store.ProfileInfo, *api.ProfileView) {
	t.Helper()
	base := "/api/v1/jobs/" + job + "/attempts/" + attempt + "/profiles"
	// The server knows the attempt's JVM once the agent has reported it.
	var req store.ProfileInfo
	var last error
	// Each answer that differs from the one before, with when it came: a
	// failure says how the attempt's state went.
	var seen []string
	prev, asked := "", time.Now()
	if !testsrv.Poll(30*time.Second, func() bool {
		var code int
		code, last = h.post(base, ask, &req)
		if s := fmt.Sprint(code, last, h.processesOf(job, attempt)); s != prev {
			prev, seen = s, append(seen, fmt.Sprintf("%.1fs: %s", time.Since(asked).Seconds(), s))
		}
		return code == http.StatusAccepted
	}) {
		t.Fatalf("cannot ask for a profile of %s; the answers, and the attempt's processes then:\n%s", attempt, strings.Join(seen, "\n"))
	}
	var v api.ProfileView
	if !testsrv.Poll(90*time.Second, func() bool {
		v = api.ProfileView{}
		last = h.get(base+"/"+req.ID, &v)
		return last == nil && v.Profile.Status != store.ProfileRequested
	}) {
		t.Fatalf("profile %s of %s did not come: %v (%+v)", req.ID, attempt, last, v.Profile)
	}
	return req, &v
}

// processesOf is what the server says of an attempt's processes: pid,
// role, start and end of each.
func (h *harness) processesOf(job, attempt string) string {
	var d store.AttemptDetail
	if err := h.get("/api/v1/jobs/"+job+"/attempts/"+attempt, &d); err != nil {
		return err.Error()
	}
	var ps []string
	for _, p := range d.ProcessList {
		ps = append(ps, fmt.Sprintf("%d %s %d-%d (seen %d)", p.PID, p.Role, p.Start, p.End, p.LastSeen))
	}
	return fmt.Sprintf(" [%s, %s]", d.State, strings.Join(ps, "; "))
}

// top is the hottest frame of a view in a group (the task's main thread,
// say), from the profile's trees: the leaf of the job's code (AppFrame)
// with the most time (waiting for a CPU left out: on this shared machine
// the hot loop waits for one too).
func top(n *flame.Node, group string) (string, int64) {
	sums := map[string]int64{}
	var walk func(n *flame.Node, path []string)
	walk = func(n *flame.Node, path []string) {
		self := n.Value
		for _, c := range n.Children {
			self -= c.Value
			if c.Name != flame.QueuedFrame {
				walk(c, append(path, c.Name))
			}
		}
		if self > 0 && len(path) > 2 && path[0] == "["+group+"]" {
			sums[flame.AppFrame(path[2:])] += self
		}
	}
	walk(n, nil)
	best, v := "", int64(0)
	for f, x := range sums {
		if x > v {
			best, v = f, x
		}
	}
	return best, v
}

// TestProfileKnownMethods: a map whose time goes, in turn, to a sleep
// standing for slow input (Work.readInput), to a lock a thread of its own
// holds (Work.awaitLock) and to a hot loop (Work.burnUntil), profiled on
// demand through the API: the agent gets the order in the answer to one
// of its batches, takes the profile, and sends it back; the hottest frame
// on a CPU of the task's main thread is the hot loop, its hottest waiting
// one the lock; pprof and collapsed downloads read. A JVM started with
// -Xrs and no attach listener is refused and its task goes on.
func TestProfileKnownMethods(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	h := newHarness(t)
	c := startCluster(t, simulator.NodeYARN)
	h.startAgent("e2e-prof", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	j, att := started(ctx, t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "profiled", Maps: 1, NoReduces: true,
		TaskCPU: 4 * time.Second, InputWait: 3 * time.Second, LockWait: 6 * time.Second, Threads: 20}, "map")
	// The window covers the task's life (it ends the profile when it exits).
	req, v := h.profileOf(t, j.ID, att.AttemptID, `{"window_s": 40, "interval_ms": 100}`)
	p := v.Profile
	if p.Status != wire.ProfileComplete && p.Status != wire.ProfilePartial || p.Dumps < 10 || p.RequestedBy == "" || int(p.PID) != att.JVMPID {
		t.Fatalf("profile %+v", p)
	}
	if p.Status == wire.ProfilePartial && p.Error != "the JVM exited" {
		t.Errorf("cut short: %s", p.Error)
	}
	if f, d := top(v.CPU, flame.GroupTask); f != "taskscope.sim.Work.burnUntil" {
		t.Errorf("the task's hottest frame on a CPU: %s (%v)", f, time.Duration(d))
	}
	if f, d := top(v.Wait, flame.GroupTask); f != "taskscope.sim.Work.awaitLock" || time.Duration(d) < 3*time.Second {
		t.Errorf("the task's hottest waiting frame: %s (%v)", f, time.Duration(d))
	}
	// The slow input is there too, second.
	if n := find(v.Wait, "taskscope.sim.Work.readInput"); n == nil || time.Duration(n.Value) < time.Second {
		t.Errorf("the input wait: %+v", n)
	}
	// The JVM's 20 idle threads share one stack (their names' digits as N).
	if n := find(v.Wait, "sim-idle-N"); n != nil && len(n.Children) != 1 {
		t.Errorf("idle threads: %+v", n)
	}
	base := "/api/v1/jobs/" + j.ID + "/attempts/" + att.AttemptID + "/profiles/" + req.ID
	resp, err := h.c.Get(h.srv.URL() + base + "?format=pprof")
	if err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(resp.Body)
	resp.Body.Close()
	if err != nil || len(pp.Sample) == 0 {
		t.Errorf("pprof: %v", err)
	}
	resp, err = h.c.Get(h.srv.URL() + base + "?format=collapsed")
	if err != nil {
		t.Fatal(err)
	}
	var col bytes.Buffer
	col.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(col.String(), "[task];main;") || !strings.Contains(col.String(), "taskscope.sim.Work.burnUntil") {
		t.Errorf("collapsed: %.300s", col.String())
	}
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// -Xrs without an attach listener: refused, and the task succeeds.
	j2, att2 := started(ctx, t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "xrs", Maps: 1, NoReduces: true,
		TaskCPU: time.Second, InputWait: 10 * time.Second, JavaOpts: "-Xrs -XX:+DisableAttachMechanism"}, "map")
	_, v2 := h.profileOf(t, j2.ID, att2.AttemptID, `{"window_s": 5}`)
	if v2.Profile.Status != wire.ProfileFailed || !strings.Contains(v2.Profile.Error, "SIGQUIT") {
		t.Errorf("-Xrs: %+v", v2.Profile)
	}
	res, err := j2.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Attempts {
		if a.AttemptID == att2.AttemptID && a.ExitCode != 0 {
			t.Errorf("the -Xrs task ended with %d", a.ExitCode)
		}
	}
}

// find is the first node of the tree named name, depth first.
func find(n *flame.Node, name string) *flame.Node {
	if n.Name == name {
		return n
	}
	for _, c := range n.Children {
		if f := find(c, name); f != nil {
			return f
		}
	}
	return nil
}
