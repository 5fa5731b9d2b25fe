package simulator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestYARNKillDaemon kills a NodeManager under a running container: the
// container lives on, orphaned, and the task is retried on the other node.
func TestYARNKillDaemon(t *testing.T) {
	c := startCluster(t, Options{Nodes: 2})
	ctx := testCtx(t, 120*time.Second)
	j, err := c.Submit(ctx, JobSpec{Kind: JobMapReduce, Maps: 1, NoReduces: true, TaskCPU: 400 * time.Millisecond, Hold: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a0 := attemptID(c.ts, j.seq, "m", 0, 0)
	ps, err := j.WaitFor(ctx, func(rs []AttemptResult) bool {
		_, ok := findProc(rs, func(r AttemptResult) bool { return r.AttemptID == a0 && r.JVMPID > 0 })
		return ok
	})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := findProc(ps, func(r AttemptResult) bool { return r.AttemptID == a0 })
	n := nodeOf(t, c, m.Node)
	if err := c.KillDaemon(m.Node); err != nil {
		t.Fatal(err)
	}
	testsrv.WaitUntil(t, "the launcher's reparenting", 2*time.Second, func() bool {
		st, err := statOf(m.LauncherPID)
		return err == nil && st.PPID != n.PID
	})
	jv := readProc(t, m.JVMPID)
	wantClassify(t, jv.Argv, hadoop.KindYarnChild)
	wantEnv(t, jv, map[string]string{EnvUnit: a0, "CONTAINER_ID": m.ContainerID})
	if _, err := c.Submit(ctx, JobSpec{Kind: JobMapReduce}); err != nil {
		t.Errorf("cannot submit with one node left: %v", err)
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := findProc(res.Attempts, func(r AttemptResult) bool { return r.AttemptID == a0 })
	retry, ok := findProc(res.Attempts, func(r AttemptResult) bool { return r.AttemptID == attemptID(c.ts, j.seq, "m", 0, 1) })
	if !first.Orphaned || first.ExitCode != -1 {
		t.Errorf("the first attempt: orphaned %v exit %d", first.Orphaned, first.ExitCode)
	}
	if !ok || retry.Node == m.Node || retry.ExitCode != 0 {
		t.Errorf("retry %+v", retry)
	}
	for _, ni := range c.Nodes() {
		if ni.Name == m.Node && ni.Alive {
			t.Errorf("node %s still alive", ni.Name)
		}
	}
}

// TestCloseMidJob closes a cluster under running jobs of both kinds.
func TestCloseMidJob(t *testing.T) {
	c := startCluster(t, Options{Nodes: 2, Kind: NodeMixed})
	ctx := testCtx(t, 120*time.Second)
	var jobs []*Job
	for _, k := range []JobKind{JobStreaming, JobHadoop1Streaming} {
		j, err := c.Submit(ctx, JobSpec{Kind: k, Maps: 2, Hold: time.Minute, StreamCPU: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.WaitProcesses(ctx, 2); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if len(c.Leftovers()) < 6 {
		t.Errorf("only %d processes before Close", len(c.Leftovers()))
	}
	t0 := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("Close took %v", d)
	}
	t.Logf("Close took %v", time.Since(t0))
	if left := c.Leftovers(); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	for _, j := range jobs {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := j.Wait(wctx)
		cancel()
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Wait after Close: %v", j.ID, err)
		}
	}
	if _, err := c.Submit(ctx, JobSpec{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}
