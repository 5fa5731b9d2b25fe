package simulator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestCommand runs `taskscope simulate` on a mixed cluster.
func TestCommand(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	var out, errb testsrv.SyncBuffer
	err := Command(ctx, []string{"--dir", t.TempDir(), "--nodes", "2", "--kind", "mixed", "--jobs", "3", "--scale", "0.1", "--seed", "5"}, &out, &errb)
	if err != nil {
		t.Fatalf("simulate: %v\n%s\n%s", err, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"cluster ", "node node1 yarn pid ", "node node2 hadoop1 pid ", "job ", " submitted\n", "started ", " finished\n", "stopped; no process left\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, " submitted\n"); n != 3 {
		t.Errorf("%d jobs submitted, want 3:\n%s", n, s)
	}
	if err := Command(ctx, []string{"--kind", "nope"}, &out, &errb); err == nil {
		t.Errorf("a bad --kind is accepted")
	}
	if err := Command(ctx, []string{"--job-kind", "nope"}, &out, &errb); err == nil {
		t.Errorf("a bad --job-kind is accepted")
	}
}

// TestRunStream runs a mix in which every job has an anomaly, on both kinds of node.
func TestRunStream(t *testing.T) {
	c := startCluster(t, Options{Nodes: 2, Kind: NodeMixed, Scale: 0.1})
	ctx := testCtx(t, 120*time.Second)
	var mu sync.Mutex
	kinds := map[JobKind]bool{}
	c.o.Notify = nil
	err := c.RunStream(ctx, StreamOptions{MaxJobs: 8, AnomalyRate: 1, Seed: 11, Concurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	for _, j := range c.jobs {
		mu.Lock()
		kinds[j.Spec.Kind] = true
		mu.Unlock()
		select {
		case <-j.done:
		default:
			t.Errorf("job %s still running after RunStream", j.ID)
		}
	}
	c.mu.Unlock()
	if len(kinds) < 3 {
		t.Errorf("the mix had only %v", kinds)
	}
	// Stops when ctx is done.
	ctx2, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := c.RunStream(ctx2, StreamOptions{}); err != nil {
		t.Errorf("RunStream after its ctx: %v", err)
	}
}
