package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

const (
	jobP   = "job_1700000000000_0042"
	attP0  = "attempt_1700000000000_0042_m_000000_0" // zoe's straggler, on node1
	attP1  = "attempt_1700000000000_0042_m_000001_0" // its sibling, on node2
	attEnd = "attempt_1700000000000_0042_m_000002_0" // ended
)

// profileFixture is a server with zoe's running job of three maps, and a
// profiling Control with everything on.
type profileFixture struct {
	st   *duckdb.Store
	ctl  *profiling.Control
	srv  *httptest.Server
	g1   *storetest.Gen
	g2   *storetest.Gen
	atts []*storetest.AttemptSpec
}

func newProfileFixture(t *testing.T) *profileFixture {
	t.Helper()
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: -1,
		Clock: store.Clock{Now: func() time.Time { return now }, StaleAfter: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &profileFixture{st: st, g1: &storetest.Gen{Agent: "node1-a", Host: "node1"}, g2: &storetest.Gen{Agent: "node2-a", Host: "node2"}}
	spec := func(id string, pid int32) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: id, JobID: jobP, Type: "map", JobName: "slow-join", User: "zoe", Queue: "etl", MemoryMB: 1024,
			Start: t0, Procs: []storetest.ProcSpec{{PID: pid - 1, Role: wire.RoleWrapper, Cmdline: "bash -c java"},
				{PID: pid, Role: wire.RoleTaskJVM, Cmdline: "java YarnChild", CPUPerS: 900, RSS: 100 << 20}}}
	}
	f.atts = []*storetest.AttemptSpec{spec(attP0, 101), spec(attP1, 201), spec(attEnd, 301)}
	storetest.Ingest(t, st, f.g1.Batch(f.atts[:1], 0, 50, false), f.g2.Batch(f.atts[1:2], 0, 50, false), f.g2.Batch(f.atts[2:], 0, 20, true))
	f.ctl = profiling.New(st, profiling.Config{OnDemand: true, Auto: true, Now: func() time.Time { return now }})
	policy, err := auth.ParsePolicy(strings.NewReader("operator @ops\nqueue etl @etl-team\n"))
	if err != nil {
		t.Fatal(err)
	}
	proxies, _ := auth.ParseProxies("127.0.0.1")
	authn := auth.New(auth.Options{UserHeader: "X-Forwarded-User", GroupsHeader: "X-Forwarded-Groups", Proxies: proxies, Policy: policy})
	a := New(st, nil, nil, authn).WithProfiles(f.ctl)
	a.now = func() time.Time { return now }
	mux := http.NewServeMux()
	a.Register(mux)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *profileFixture) do(t *testing.T, method, user, groups, path, ctype, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if user != "" {
		req.Header.Set("X-Forwarded-User", user)
	}
	if groups != "" {
		req.Header.Set("X-Forwarded-Groups", groups)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// answer is what the agent of a node sends for an order: a profile of a
// JVM that spins in hot (and waits in lock).
func answer(o wire.ProfileOrder, hot string, spinNs int64) wire.Profile {
	return wire.Profile{ID: o.ID, AttemptID: o.AttemptID, PID: o.PID, StartMs: now.UnixMilli(), EndMs: now.Add(20 * time.Second).UnixMilli(),
		IntervalMs: o.IntervalMs, Dumps: 100, PausedUs: 200000, MaxPauseUs: 3000, Status: wire.ProfileComplete,
		Strings: []string{"main", "org.apache.hadoop.mapred.YarnChild.main", hot, "my.Job.lock"},
		Stacks: []wire.ProfileStack{{Thread: 0, State: wire.ThreadRunnable, Frames: []uint32{1, 2}, CPUNs: spinNs, Samples: 90},
			{Thread: 0, State: wire.ThreadBlocked, Frames: []uint32{1, 3}, WaitNs: 20e9 - spinNs, Samples: 10}}}
}

func TestProfilesOnDemand(t *testing.T) {
	f := newProfileFixture(t)
	base := "/api/v1/jobs/" + jobP + "/attempts/" + attP0 + "/profiles"
	// Who may ask: the job's owner and operators; others who see the job
	// are refused, those who do not see it learn nothing.
	for _, c := range []struct {
		user, groups, ctype string
		code                int
	}{
		{"carol", "etl-team", "application/json", http.StatusForbidden},
		{"bob", "", "application/json", http.StatusNotFound},
		{"", "", "application/json", http.StatusUnauthorized},
		{"zoe", "", "text/plain", http.StatusUnsupportedMediaType},
		{"zoe", "", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
	} {
		if code, b := f.do(t, "POST", c.user, c.groups, base, c.ctype, `{}`); code != c.code {
			t.Errorf("%s (%s) asks with %s: %d %s, want %d", c.user, c.groups, c.ctype, code, b, c.code)
		}
	}
	code, b := f.do(t, "POST", "zoe", "", base, "application/json", `{"window_s": 10, "interval_ms": 100}`)
	if code != http.StatusAccepted {
		t.Fatalf("zoe asks: %d %s", code, b)
	}
	var req store.ProfileInfo
	json.Unmarshal(b, &req)
	if req.Status != store.ProfileRequested || req.RequestedBy != "zoe" || req.PID != 101 || req.Host != "node1" || req.WindowMs != 10000 ||
		req.IntervalMs != 100 || req.Trigger != store.TriggerRequest {
		t.Errorf("the request: %+v", req)
	}
	// One at a time per attempt; an ended attempt has no JVM to profile.
	if code, b := f.do(t, "POST", "ops-1", "ops", base, "application/json", ""); code != http.StatusConflict {
		t.Errorf("a second request: %d %s", code, b)
	}
	if code, b := f.do(t, "POST", "zoe", "", "/api/v1/jobs/"+jobP+"/attempts/"+attEnd+"/profiles", "application/json", ""); code != http.StatusConflict ||
		!strings.Contains(string(b), "not running") {
		t.Errorf("an ended attempt: %d %s", code, b)
	}
	// The order goes to node1's agent, in the answer to its next batch,
	// once (then again only after a while, if no profile came).
	orders := f.ctl.Orders("node1")
	if len(orders) != 1 || orders[0].ID != req.ID || orders[0].PID != 101 || orders[0].AttemptID != attP0 || orders[0].WindowMs != 10000 {
		t.Fatalf("orders for node1: %+v", orders)
	}
	if again := f.ctl.Orders("node1"); len(again) != 0 || len(f.ctl.Orders("node2")) != 0 {
		t.Errorf("orders handed out again at once: %+v", again)
	}
	// Listed while pending; carol sees it but may not ask.
	code, b = f.do(t, "GET", "carol", "etl-team", base, "", "")
	var l ProfileList
	json.Unmarshal(b, &l)
	if code != 200 || len(l.Profiles) != 1 || l.Profiles[0].Status != store.ProfileRequested || l.MayRequest || !strings.Contains(l.Why, "owner") {
		t.Errorf("carol's list: %d %s", code, b)
	}
	// The agent's profile comes in a batch.
	pb := f.g1.Batch(f.atts[:1], 50, 55, false)
	pb.Profiles = []wire.Profile{answer(orders[0], "my.Job.spin", 15e9)}
	storetest.Ingest(t, f.st, pb)
	code, b = f.do(t, "GET", "zoe", "", base, "", "")
	json.Unmarshal(b, &l)
	if code != 200 || len(l.Profiles) != 1 || l.Profiles[0].Status != wire.ProfileComplete || l.Profiles[0].RequestedBy != "zoe" ||
		l.Profiles[0].Dumps != 100 || !l.MayRequest {
		t.Errorf("zoe's list: %d %s", code, b)
	}
	code, b = f.do(t, "GET", "zoe", "", base+"/"+req.ID, "", "")
	var v ProfileView
	if err := json.Unmarshal(b, &v); code != 200 || err != nil {
		t.Fatalf("the profile: %d %v %s", code, err, b)
	}
	if v.CPU == nil || v.CPU.Value != 15e9 || v.Wait == nil || v.Wait.Value != 5e9 || len(v.Hottest["cpu"]) == 0 ||
		v.Hottest["cpu"][0].Name != "my.Job.spin" || v.Hottest["wait"][0].Name != "my.Job.lock" || v.Baseline != nil {
		t.Errorf("the profile's view: %s", b)
	}
	code, b = f.do(t, "GET", "zoe", "", base+"/"+req.ID+"?format=pprof", "", "")
	if pp, err := profile.Parse(bytes.NewReader(b)); code != 200 || err != nil || len(pp.Sample) != 2 {
		t.Errorf("pprof: %d, %v", code, err)
	}
	code, b = f.do(t, "GET", "zoe", "", base+"/"+req.ID+"?format=collapsed&view=wait", "", "")
	if code != 200 || string(b) != "[task];main;org.apache.hadoop.mapred.YarnChild.main;my.Job.lock;[blocked on a monitor] 5000000\n" {
		t.Errorf("collapsed: %d %q", code, b)
	}
	for path, want := range map[string]int{
		base + "/" + req.ID + "?format=svg": 400,
		base + "/" + req.ID + "?view=heap":  400,
		base + "/nope":                      404,
		"/api/v1/jobs/" + jobP + "/attempts/" + attP1 + "/profiles/" + req.ID: 404,
	} {
		if code, b := f.do(t, "GET", "zoe", "", path, "", ""); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, b, want)
		}
	}
	if code, _ := f.do(t, "GET", "bob", "", base+"/"+req.ID, "", ""); code != 404 {
		t.Errorf("bob reads zoe's profile: %d", code)
	}
}

// An outlier named while it runs is profiled with a healthy sibling over
// the same window: its view carries the sibling's and the differential.
func TestProfilesAuto(t *testing.T) {
	f := newProfileFixture(t)
	made, err := f.ctl.Auto(context.Background(), profiling.Named{JobID: jobP, Attempts: []string{attP0, attEnd}})
	if err != nil {
		t.Fatal(err)
	}
	if len(made) != 2 || made[0].AttemptID != attP1 || made[0].Trigger != store.TriggerSibling || made[0].Host != "node2" ||
		made[1].AttemptID != attP0 || made[1].Trigger != store.TriggerStraggler || made[1].Baseline != made[0].ID {
		t.Fatalf("automatic requests: %+v", made)
	}
	// Not again for the same attempt, nor on a node busy with one.
	if again, err := f.ctl.Auto(context.Background(), profiling.Named{JobID: jobP, Attempts: []string{attP0}}); err != nil || len(again) != 0 {
		t.Errorf("asked again: %+v %v", again, err)
	}
	o1, o2 := f.ctl.Orders("node1"), f.ctl.Orders("node2")
	if len(o1) != 1 || len(o2) != 1 || o1[0].Trigger != store.TriggerStraggler || o2[0].Trigger != store.TriggerSibling {
		t.Fatalf("orders %+v %+v", o1, o2)
	}
	b1 := f.g1.Batch(f.atts[:1], 50, 55, false)
	b1.Profiles = []wire.Profile{answer(o1[0], "my.Job.spin", 15e9)}
	b2 := f.g2.Batch(f.atts[1:2], 50, 55, false)
	b2.Profiles = []wire.Profile{answer(o2[0], "my.Job.spin", 5e9)}
	storetest.Ingest(t, f.st, b1, b2)
	code, b := f.do(t, "GET", "carol", "etl-team", "/api/v1/jobs/"+jobP+"/attempts/"+attP0+"/profiles/"+o1[0].ID, "", "")
	var v ProfileView
	if err := json.Unmarshal(b, &v); code != 200 || err != nil {
		t.Fatalf("the straggler's profile: %d %v %s", code, err, b)
	}
	if v.Baseline == nil || v.Baseline.AttemptID != attP1 || v.DiffCPU == nil || v.DiffCPU.Delta != 10e9 || v.DiffWait == nil || v.DiffWait.Delta != -10e9 ||
		len(v.More["cpu"]) != 1 || v.More["cpu"][0].Name != "my.Job.spin" || v.More["cpu"][0].SelfNs != 10e9 || len(v.More["wait"]) != 0 {
		t.Errorf("the differential: %s", b)
	}
	// With automatic profiles off, or the node off, nothing is asked.
	off := profiling.New(f.st, profiling.Config{OnDemand: true, Auto: false})
	if m, _ := off.Auto(context.Background(), profiling.Named{JobID: jobP, Attempts: []string{attP1}}); len(m) != 0 {
		t.Errorf("auto off: %+v", m)
	}
	hostOff := profiling.New(f.st, profiling.Config{Auto: true, OffHosts: []string{"node1", "node2"}, Now: func() time.Time { return now }})
	if m, _ := hostOff.Auto(context.Background(), profiling.Named{JobID: jobP, Attempts: []string{attP0}}); len(m) != 0 {
		t.Errorf("nodes off: %+v", m)
	}
}
