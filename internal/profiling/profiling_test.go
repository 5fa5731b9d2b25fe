package profiling

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

const job = "job_1700000000000_0007"

func att(i string) string { return "attempt_1700000000000_0007_m_00000" + i + "_0" }

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// runningJob makes a store with four running maps of one job, two on each of
// node1 and node2; map 3 started 10 s after the others.
func runningJob(t *testing.T) (*duckdb.Store, *storetest.Gen) {
	t.Helper()
	now := storetest.T0.Add(time.Minute)
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: -1, Clock: store.Clock{Now: func() time.Time { return now }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := &storetest.Gen{Agent: "n1", Host: "node1"}
	g2 := &storetest.Gen{Agent: "n2", Host: "node2"}
	mk := func(i string, pid int32, late time.Duration) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: att(i), JobID: job, Type: "map", User: "u", Start: storetest.T0.Add(late),
			Procs: []storetest.ProcSpec{{PID: pid, Role: wire.RoleTaskJVM, CPUPerS: 500}}}
	}
	storetest.Ingest(t, st, g.Batch([]*storetest.AttemptSpec{mk("0", 10, 0), mk("1", 11, 0)}, 0, 50, false),
		g2.Batch([]*storetest.AttemptSpec{mk("2", 20, 0), mk("3", 21, 10*time.Second)}, 0, 50, false))
	return st, g
}

// Two servers share a store: a request made on one is handed out by the
// other once it has read the store; handed out again only after a while;
// not any more once its profile is stored, or once it is too old.
func TestDeliveryAcrossServers(t *testing.T) {
	st, g := runningJob(t)
	ck := &clock{t: storetest.T0.Add(time.Minute)}
	a := New(st, Config{OnDemand: true, Now: ck.now})
	b := New(st, Config{OnDemand: true, Now: ck.now})
	ctx := context.Background()
	d, err := st.Attempt(ctx, att("0"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Request(ctx, "zoe", d, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.WindowMs != DefaultWindow.Milliseconds() || r.IntervalMs != DefaultInterval.Milliseconds() || r.PID != 10 {
		t.Errorf("request %+v", r)
	}
	if o := b.Orders("node1"); len(o) != 0 {
		t.Errorf("b knew at once: %+v", o)
	}
	if err := b.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if o := b.Orders("node1"); len(o) != 1 || o[0].ID != r.ID {
		t.Fatalf("b after its poll: %+v", o)
	}
	ck.add(5 * time.Second)
	if o := b.Orders("node1"); len(o) != 0 {
		t.Errorf("handed out again after 5 s: %+v", o)
	}
	ck.add(resendAfter)
	if o := b.Orders("node1"); len(o) != 1 {
		t.Errorf("not handed out again after %v: %+v", resendAfter, o)
	}
	// The profile comes (through a): no server hands it out any more.
	pb := g.Batch(nil, 50, 51, false)
	pb.Profiles = []wire.Profile{{ID: r.ID, AttemptID: r.AttemptID, PID: 10, StartMs: 1, EndMs: 2, Status: wire.ProfileFailed, Error: "x"}}
	storetest.Ingest(t, st, pb)
	ck.add(resendAfter)
	for _, c := range []*Control{a, b} {
		if err := c.poll(ctx); err != nil {
			t.Fatal(err)
		}
		if o := c.Orders("node1"); len(o) != 0 {
			t.Errorf("handed out after its profile came: %+v", o)
		}
	}
	// A request nobody took is no longer handed out after deliverFor.
	d3, _ := st.Attempt(ctx, att("3"))
	r3, err := a.Request(ctx, "zoe", d3, time.Hour, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r3.WindowMs != MaxWindow.Milliseconds() || r3.IntervalMs != MinInterval.Milliseconds() {
		t.Errorf("bounds: %+v", r3)
	}
	ck.add(deliverFor + time.Second)
	if o := a.Orders("node2"); len(o) != 0 {
		t.Errorf("a stale request handed out: %+v", o)
	}
}

// Automatic profiles: one at a time per node, AutoPerHour per node.
func TestAutoBounds(t *testing.T) {
	st, _ := runningJob(t)
	ck := &clock{t: storetest.T0.Add(time.Minute)}
	c := New(st, Config{Auto: true, AutoPerHour: 2, AutoWindow: 10 * time.Second, Now: ck.now})
	ctx := context.Background()
	auto := func(ids ...string) []store.ProfileRequest {
		t.Helper()
		m, err := c.Auto(ctx, Named{JobID: job, Attempts: ids})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// att0 on node1, with a sibling on node2 (another node first), the
	// one that started last (the most of the window left to run).
	m := auto(att("0"))
	if len(m) != 2 || m[0].AttemptID != att("3") || m[1].AttemptID != att("0") || m[1].Baseline != m[0].ID {
		t.Fatalf("first: %+v", m)
	}
	// Both nodes busy for the window.
	if m := auto(att("1")); len(m) != 0 {
		t.Errorf("while busy: %+v", m)
	}
	ck.add(11 * time.Second)
	// att1 on node1; its siblings: att0 named before (not named now,
	// but profiled lately: still a sibling), att2/att3 on node2.
	m = auto(att("1"), att("0"))
	if len(m) != 2 || m[1].AttemptID != att("1") {
		t.Fatalf("second: %+v", m)
	}
	ck.add(11 * time.Second)
	// Each node has had two in the hour.
	if m := auto(att("2")); len(m) != 0 {
		t.Errorf("over the hour's bound: %+v", m)
	}
	ck.add(time.Hour)
	if m := auto(att("2")); len(m) != 2 {
		t.Errorf("an hour later: %+v", m)
	}
}

// A profile asked for once the last one of the attempt has come (an
// automatic one, say) is taken at once, before any poll of the store; one
// asked for while another waits is refused, on this server and on another
// that shares the store (which has not polled it yet).
func TestRequestAfterProfileCame(t *testing.T) {
	st, g := runningJob(t)
	ck := &clock{t: storetest.T0.Add(time.Minute)}
	a := New(st, Config{OnDemand: true, Auto: true, Now: ck.now})
	b := New(st, Config{OnDemand: true, Now: ck.now})
	ctx := context.Background()
	made, err := a.Auto(ctx, Named{JobID: job, Attempts: []string{att("0")}})
	if err != nil || len(made) != 2 {
		t.Fatalf("automatic: %+v %v", made, err)
	}
	d, err := st.Attempt(ctx, att("0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Control{a, b} {
		if _, err := c.Request(ctx, "zoe", d, 0, 0); !errors.Is(err, ErrPending) {
			t.Errorf("asked for while the automatic one waits: %v, want ErrPending", err)
		}
	}
	pb := g.Batch(nil, 50, 51, false)
	for _, r := range made {
		pb.Profiles = append(pb.Profiles, wire.Profile{ID: r.ID, AttemptID: r.AttemptID, PID: r.PID, StartMs: 1, EndMs: 2,
			Status: wire.ProfileFailed, Error: "x"})
	}
	storetest.Ingest(t, st, pb)
	ck.add(time.Second)
	r, err := a.Request(ctx, "zoe", d, 0, 0)
	if err != nil {
		t.Fatalf("asked for once the automatic one came: %v", err)
	}
	if _, err := b.Request(ctx, "yan", d, 0, 0); !errors.Is(err, ErrPending) {
		t.Errorf("asked for on another server while %s waits: %v, want ErrPending", r.ID, err)
	}
}

// The operators' switches: automatic profiles off cluster-wide take none;
// a node off takes none, on demand or on its own, and gives no sibling
// (the straggler's is then one of its own node); on demand off refuses.
func TestSwitches(t *testing.T) {
	st, _ := runningJob(t)
	ctx := context.Background()
	ck := &clock{t: storetest.T0.Add(time.Minute)}
	// none checks that c takes no automatic profile of attempt, and
	// refuses one asked for.
	none := func(what string, c *Control, attempt string) {
		t.Helper()
		if m, err := c.Auto(ctx, Named{JobID: job, Attempts: []string{attempt}}); err != nil || len(m) != 0 {
			t.Errorf("%s: automatic %+v %v", what, m, err)
		}
		d, err := st.Attempt(ctx, attempt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Request(ctx, "zoe", d, 0, 0); !errors.Is(err, ErrOff) {
			t.Errorf("%s: asked for: %v, want ErrOff", what, err)
		}
	}
	none("profiles off", New(st, Config{OnDemand: false, Auto: false, Now: ck.now}), att("0"))
	if ps, err := st.Profiles(ctx, att("0")); err != nil || len(ps) != 0 {
		t.Errorf("stored with profiles off: %+v %v", ps, err)
	}
	c := New(st, Config{OnDemand: true, Auto: true, OffHosts: []string{"node2"}, Now: ck.now})
	none("a node off", c, att("2"))
	m, err := c.Auto(ctx, Named{JobID: job, Attempts: []string{att("0")}})
	if err != nil || len(m) != 2 || m[0].Host != "node1" || m[0].AttemptID != att("1") || m[1].AttemptID != att("0") {
		t.Errorf("a straggler beside a node off: its sibling %+v %v, want %s on node1", m, err, att("1"))
	}
}
