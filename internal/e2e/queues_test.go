package e2e

import (
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestEveryJobInItsQueue: Tez and Spark jobs count in their queue and
// their allocation as MapReduce's do (issue 22: the demo's Tez jobs had no
// queue and 0 GB·h allocated): the agent reads tez-conf.pb and
// __spark_conf__, and what the NodeManager allocated to each container;
// the job's queue is its own and its allocation more than nothing, so the
// queue's waste report counts it. Each attempt carries its container's
// vcores as YARN says them (the NodeManager's totalVCoresNeeded, or its
// job's configuration): the Spark executors of 2 cores, 2.
func TestEveryJobInItsQueue(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, simulator.NodeYARN)
	h.startAgent("e2e-queues", nil)
	specs := []simulator.JobSpec{
		{Kind: simulator.JobTez, Name: "tez-in-etl", Queue: "etl", Maps: 2, Reduces: 1, TaskCPU: 300 * time.Millisecond},
		{Kind: simulator.JobSpark, Name: "spark-in-etl", Queue: "etl", Executors: 1, Cores: 2, Maps: 2, TaskCPU: 300 * time.Millisecond},
		{Kind: simulator.JobSpark, Name: "spark-no-queue", Executors: 1, Maps: 1, TaskCPU: 300 * time.Millisecond},
	}
	want := map[string]string{}
	for _, s := range specs {
		res := run(t, c, s)
		want[res.JobID] = s.Queue
		if s.Queue == "" {
			want[res.JobID] = "default"
		}
	}
	for id, queue := range want {
		var j store.JobDetail
		if !testsrv.Poll(30*time.Second, func() bool {
			j = store.JobDetail{}
			return h.get("/api/v1/jobs/"+id, &j) == nil && j.Running == 0 && j.Queue != "" && j.MemGBHours > 0
		}) {
			t.Errorf("job %s (%s): queue %q, %.4f GB·h allocated, %d running", id, j.Name, j.Queue, j.MemGBHours, j.Running)
			continue
		}
		if j.Queue != queue {
			t.Errorf("job %s (%s) in queue %q, want %q", id, j.Name, j.Queue, queue)
		}
		for _, a := range j.AttemptList {
			if a.MemoryMB <= 0 {
				t.Errorf("job %s (%s): attempt %s (%s) without a size", id, j.Name, a.AttemptID, a.Type)
			}
			want := int64(1)
			if j.Name == "spark-in-etl" && a.Type == "executor" {
				want = 2
			}
			if a.VCores != want {
				t.Errorf("job %s (%s): attempt %s (%s) of %d vcores, want %d", id, j.Name, a.AttemptID, a.Type, a.VCores, want)
			}
		}
	}
	var w analysis.WasteReport
	if err := h.get("/api/v1/waste?by=queue", &w); err != nil {
		t.Fatal(err)
	}
	etl := false
	for _, g := range w.Groups {
		if g.Key == "etl" {
			etl = true
			if g.Jobs != 2 || g.MemGBHours <= 0 {
				t.Errorf("queue etl: %d jobs, %.4f GB·h allocated; want the Tez and the Spark job's", g.Jobs, g.MemGBHours)
			}
		}
	}
	if !etl {
		t.Errorf("no queue etl in the waste report: %+v", w.Groups)
	}
}
