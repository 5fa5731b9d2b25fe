package analysis_test

import (
	"context"
	"testing"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

// The overview: running jobs, the window's cost and waste by queue and by
// user, lost and orphaned task processes by host (distinct pids, those the
// agent ended); a reader who sees some jobs sees only theirs, and the
// lost processes of theirs.
func TestOverview(t *testing.T) {
	a, b := wasteful(1, "alice", "etl"), wasteful(2, "bob", "adhoc")
	run := job(3, "streaming", task{typ: "map", host: "h3", d: 10, cpu: 0.5})
	run.State, run.User, run.Queue = store.StateRunning, "bob", "adhoc"
	fs := newFake(a, b, run)
	fs.events = []store.Event{
		{Kind: "orphan", JobID: a.JobID, Host: "h1", PID: 1}, {Kind: "orphan", JobID: a.JobID, Host: "h1", PID: 1},
		{Kind: "lost_jvm", JobID: a.JobID, Host: "h1", PID: 2}, {Kind: "reap", JobID: a.JobID, Host: "h1", PID: 2},
		{Kind: "unknown_container", JobID: b.JobID, Host: "h2", PID: 3}, {Kind: "reap", JobID: b.JobID, Host: "h9", PID: 9},
	}
	an := analysis.New(fs)
	o, err := an.Overview(context.Background(), analysis.OverviewFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if o.RunningTotal != 1 || len(o.Running) != 1 || o.Running[0].JobID != run.JobID {
		t.Errorf("running %d: %+v", o.RunningTotal, o.Running)
	}
	cost := analysis.JobCost(a.AttemptList)
	groups := map[string]analysis.OverviewGroup{}
	for _, g := range o.Queues {
		groups["queue "+g.Key] = g
	}
	for _, g := range o.Users {
		groups["user "+g.Key] = g
	}
	etl := groups["queue etl"]
	if etl.Jobs != 1 || !near(etl.CPUHours, cost.CPUHours, 1e-9) || !near(etl.WastedShare, cost.WastedShare, 1e-9) ||
		!near(etl.WastedCPUHours, cost.Failed.CPUHours+cost.Killed.CPUHours+cost.Speculative.CPUHours, 1e-9) ||
		!near(etl.OverAllocatedGBHours, cost.OverAllocated.MemGBHours, 1e-9) {
		t.Errorf("queue etl %+v, want the cost %+v", etl, cost)
	}
	if groups["user alice"].Jobs != 1 || groups["queue adhoc"].Jobs != 2 || groups["user bob"].Jobs != 2 {
		t.Errorf("groups %+v", groups)
	}
	want := []analysis.LostOnHost{{Host: "h1", Lost: 1, Orphaned: 1, Reaped: 1, Jobs: 1}, {Host: "h2", Lost: 1, Jobs: 1}}
	if len(o.Hosts) != 2 || o.Hosts[0] != want[0] || o.Hosts[1] != want[1] {
		t.Errorf("hosts %+v, want %+v", o.Hosts, want)
	}

	// alice sees her job only.
	o, err = an.Overview(context.Background(), analysis.OverviewFilter{Visible: &store.Visible{Users: []string{"alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Running) != 0 || len(o.Queues) != 1 || o.Queues[0].Key != "etl" || len(o.Users) != 1 || len(o.Hosts) != 1 || o.Hosts[0].Host != "h1" {
		t.Errorf("alice's overview: running %v, queues %+v, users %+v, hosts %+v", o.Running, o.Queues, o.Users, o.Hosts)
	}
}
