package e2e

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/tracker"
)

// TestOneAgentPerNode runs a simulated cluster of three nodes on this one
// kernel (two NodeManagers and a TaskTracker) with an agent per node, as
// the demo does: each agent is scoped to its node's daemon by the daemon's
// pid file and reports under the node's name. Every attempt shows on the
// host it ran on, every node is a host, and every application is one job.
func TestOneAgentPerNode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	h := newHarness(t)
	c, err := simulator.Start(context.Background(), simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 3,
		Kind: simulator.NodeMixed, MapSlots: 2, ReduceSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var names []string
	for _, n := range c.Nodes() {
		names = append(names, n.Name)
		h.startAgent(n.Name, func(cfg *agent.Config) { cfg.Scope = tracker.Scope{DaemonPIDFile: n.PIDFile} })
	}
	var yarn, h1 []string
	for _, n := range c.Nodes() {
		if n.Kind == simulator.NodeYARN {
			yarn = append(yarn, n.Name)
		} else {
			h1 = append(h1, n.Name)
		}
	}
	if len(yarn) < 2 || len(h1) < 1 {
		t.Fatalf("mixed nodes: YARN %v, Hadoop 1 %v", yarn, h1)
	}
	specs := []simulator.JobSpec{
		{Kind: simulator.JobMapReduce, Name: "mr-spread", Maps: 6, Reduces: 1, TaskCPU: 300 * time.Millisecond, Hold: 2 * time.Second},
		{Kind: simulator.JobSpark, Name: "spark-spread", Executors: 3, Maps: 3, TaskCPU: 300 * time.Millisecond},
		{Kind: simulator.JobHadoop1, Name: "h1-job", Maps: 2, Reduces: 1, TaskCPU: 300 * time.Millisecond},
	}
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			res := run(t, c, spec)
			want := map[string]string{} // attempt (or container) -> node
			nodes := map[string]bool{}
			for _, a := range res.Attempts {
				id := a.AttemptID
				if id == "" || a.Type == "executor" {
					id = a.ContainerID
				}
				want[id] = a.Node
				nodes[a.Node] = true
			}
			var j store.JobDetail
			testsrv.WaitUntil(t, "every attempt of "+res.JobID+" stored and ended", 60*time.Second, func() bool {
				j = store.JobDetail{}
				if h.get("/api/v1/jobs/"+res.JobID, &j) != nil || j.Running != 0 {
					return false
				}
				got := map[string]bool{}
				for _, a := range j.AttemptList {
					got[a.AttemptID] = true
				}
				for id := range want {
					if !got[id] {
						return false
					}
				}
				return true
			})
			for _, a := range j.AttemptList {
				if node, ok := want[a.AttemptID]; ok && a.Host != node {
					t.Errorf("%s ran on %s, shown on %s", a.AttemptID, node, a.Host)
				}
				if a.JobID != res.JobID {
					t.Errorf("%s in job %s, want %s", a.AttemptID, a.JobID, res.JobID)
				}
			}
			if j.Name != spec.Name {
				t.Errorf("job %s named %q, want %q", res.JobID, j.Name, spec.Name)
			}
			t.Logf("%s: %d attempts over nodes %v", res.JobID, len(res.Attempts), keys(nodes))
			// The application is one job: not also under its other name.
			other := strings.Replace(res.JobID, "job_", "application_", 1)
			if other == res.JobID {
				other = strings.Replace(res.JobID, "application_", "job_", 1)
			}
			var o store.JobDetail
			if err := h.get("/api/v1/jobs/"+other, &o); err == nil && len(o.AttemptList) > 0 {
				t.Errorf("application %s is also job %s with %d attempts", res.JobID, other, len(o.AttemptList))
			}
		})
	}
	var hosts struct {
		Hosts []store.Host `json:"hosts"`
	}
	if err := h.get("/api/v1/hosts", &hosts); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, hs := range hosts.Hosts {
		if hs.Attempts > 0 {
			got = append(got, hs.Host)
		}
	}
	sort.Strings(got)
	sort.Strings(names)
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("hosts with attempts %v, want every node %v", got, names)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
