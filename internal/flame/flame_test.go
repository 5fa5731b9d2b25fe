package flame

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/taskscope/taskscope/internal/wire"
)

// prof is a profile of a reduce: its main thread burns 6 s in spin and
// waits 1 s in a lock, a fetcher reads from a socket for 10 s, GC uses 1
// s, the finalizer waits (and is left out of the waiting view).
func prof() *wire.Profile {
	return &wire.Profile{ID: "p", AttemptID: "a", StartMs: 1_000, EndMs: 11_000, IntervalMs: 200, Status: wire.ProfileComplete,
		Strings: []string{"main", "org.apache.hadoop.mapred.YarnChild.main", "my.Job.spin", "my.Job.lock", "fetcher#N",
			"org.apache.hadoop.mapreduce.task.reduce.Fetcher.run", "java.net.SocketInputStream.socketRead0", "GC Thread#N", "Finalizer",
			"java.lang.Object.wait", "my;odd\nname"},
		Stacks: []wire.ProfileStack{
			{Thread: 0, State: wire.ThreadRunnable, Frames: []uint32{1, 2}, CPUNs: 6e9, WaitNs: 0.5e9, Samples: 30, QueuedNs: 2e9},
			{Thread: 0, State: wire.ThreadBlocked, Frames: []uint32{1, 3}, CPUNs: 0, WaitNs: 1e9, Samples: 5},
			{Thread: 4, State: wire.ThreadRunnable, Frames: []uint32{5, 6}, CPUNs: 0.2e9, WaitNs: 9.8e9, Samples: 50},
			{Thread: 7, State: wire.ThreadVM, CPUNs: 1e9, Samples: 50},
			{Thread: 8, State: wire.ThreadWaiting, Frames: []uint32{9}, WaitNs: 10e9, Samples: 50},
			{Thread: 0, State: wire.ThreadRunnable, Frames: []uint32{10}, CPUNs: 1e6, Samples: 1},
		}}
}

func find(n *Node, path ...string) *Node {
	for _, p := range path {
		var next *Node
		for _, c := range n.Children {
			if c.Name == p {
				next = c
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

func TestGroup(t *testing.T) {
	for name, want := range map[string]string{"main": GroupTask, "fetcher#N": GroupShuffle, "GC Thread#N": GroupGC, "G1 Conc#N": GroupGC,
		"CN CompilerThreadN": GroupJIT, "VM Thread": GroupJVM, "Finalizer": GroupJVM, "IPC Client (N) connection to x": GroupIPC,
		"Executor task launch worker for task N": GroupTask, "nioEventLoopGroup-N-N": GroupNetty, "DataStreamer for file /x": GroupHDFS,
		"my-pool-N": GroupOther} {
		if got := Group(name); got != want {
			t.Errorf("%q: %s, want %s", name, got, want)
		}
	}
}

func TestTree(t *testing.T) {
	p := prof()
	cpu := Tree(p, CPU)
	if cpu.Value != 7.201e9 {
		t.Errorf("cpu total %d", cpu.Value)
	}
	if n := find(cpu, "[task]", "main", "org.apache.hadoop.mapred.YarnChild.main", "my.Job.spin"); n == nil || n.Value != 6e9 {
		t.Errorf("spin: %+v", n)
	}
	if n := find(cpu, "[gc]", "GC Thread#N"); n == nil || n.Value != 1e9 || len(n.Children) != 0 {
		t.Errorf("gc: %+v", n)
	}
	wait := Tree(p, Wait)
	if wait.Value != 13.3e9 || find(wait, "[jvm]") != nil {
		t.Errorf("wait total %d (the finalizer left out: %v)", wait.Value, find(wait, "[jvm]"))
	}
	if n := find(wait, "[task]", "main", "org.apache.hadoop.mapred.YarnChild.main", "my.Job.lock", "[blocked on a monitor]"); n == nil || n.Value != 1e9 {
		t.Errorf("lock: %+v", n)
	}
	if n := find(wait, "[shuffle]", "fetcher#N", "org.apache.hadoop.mapreduce.task.reduce.Fetcher.run", "java.net.SocketInputStream.socketRead0",
		"[IO or native code]"); n == nil || n.Value != 9.8e9 {
		t.Errorf("fetch: %+v", n)
	}
	if n := find(wait, "[task]", "main", "org.apache.hadoop.mapred.YarnChild.main", "my.Job.spin", QueuedFrame); n == nil || n.Value != 2e9 {
		t.Errorf("waiting for a CPU: %+v", n)
	}
	// Children in name order.
	if len(cpu.Children) != 3 || cpu.Children[0].Name != "[gc]" || cpu.Children[2].Name != "[task]" {
		t.Errorf("root's children: %v", cpu.Children)
	}
}

func TestDiff(t *testing.T) {
	slow, base := prof(), prof()
	// The sibling spun a third as long, over a window twice as long.
	base.Stacks[0].CPUNs = 4e9
	base.EndMs = 21_000
	d := Diff(slow, base, CPU)
	spin := find(d, "[task]", "main", "org.apache.hadoop.mapred.YarnChild.main", "my.Job.spin")
	if spin == nil || spin.Value != 6e9 || spin.Delta != 4e9 {
		t.Errorf("spin: %+v (want 6e9, delta 6e9-4e9/2)", spin)
	}
	if gc := find(d, "[gc]"); gc == nil || gc.Delta != 0.5e9 {
		t.Errorf("gc: %+v", gc)
	}
	only := prof()
	only.Stacks = only.Stacks[:1]
	d = Diff(only, base, CPU)
	if gc := find(d, "[gc]"); gc == nil || gc.Value != 0 || gc.Delta != -0.5e9 {
		t.Errorf("what only the baseline did: %+v", gc)
	}
}

func TestCollapsed(t *testing.T) {
	var b bytes.Buffer
	if err := Collapsed(&b, prof(), CPU); err != nil {
		t.Fatal(err)
	}
	want := `[gc];GC Thread#N 1000000
[shuffle];fetcher#N;org.apache.hadoop.mapreduce.task.reduce.Fetcher.run;java.net.SocketInputStream.socketRead0 200000
[task];main;my:odd name 1000
[task];main;org.apache.hadoop.mapred.YarnChild.main;my.Job.spin 6000000
`
	if b.String() != want {
		t.Errorf("collapsed:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestPProf(t *testing.T) {
	var b bytes.Buffer
	if err := WritePProf(&b, prof()); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(pp.Sample) != 6 || len(pp.SampleType) != 4 || pp.SampleType[1].Type != "wait" || pp.SampleType[2].Type != "queued" || pp.DurationNanos != 10e9 {
		t.Errorf("pprof: %d samples, types %v, duration %d", len(pp.Sample), pp.SampleType, pp.DurationNanos)
	}
	s := pp.Sample[0]
	var names []string
	for _, l := range s.Location {
		names = append(names, l.Line[0].Function.Name)
	}
	if strings.Join(names, ";") != "my.Job.spin;org.apache.hadoop.mapred.YarnChild.main;main;[task]" || s.Value[0] != 6e9 ||
		s.Label["state"][0] != wire.ThreadRunnable || s.Label["thread_group"][0] != GroupTask {
		t.Errorf("first sample: %v %v %v", names, s.Value, s.Label)
	}
}

func TestHottest(t *testing.T) {
	h := Hottest(prof(), CPU, 2)
	if len(h) != 2 || h[0].Name != "my.Job.spin" || h[0].Thread != GroupTask || h[1].Name != "[GC Thread#N]" {
		t.Errorf("hottest on a CPU: %+v", h)
	}
	// Waiting: the fetcher's socket read is named by its job code.
	w := Hottest(prof(), Wait, 3)
	if len(w) != 3 || w[0].Name != "org.apache.hadoop.mapreduce.task.reduce.Fetcher.run" || w[1].Name != "my.Job.lock" || w[2].Name != "my.Job.spin" {
		t.Errorf("hottest waiting: %+v", w)
	}
	if w[0].Share < 0.86 || w[0].Share > 0.87 {
		t.Errorf("share %v", w[0].Share)
	}
}

func TestMore(t *testing.T) {
	slow, base := prof(), prof()
	base.Stacks[0].CPUNs = 4e9 // the sibling spun 2 s less
	base.Stacks[1].WaitNs = 0  // and did not wait on the lock
	m := More(slow, base, CPU, 5)
	if len(m) != 1 || m[0].Name != "my.Job.spin" || m[0].SelfNs != 2e9 {
		t.Errorf("more on a CPU: %+v", m)
	}
	w := More(slow, base, Wait, 5)
	if len(w) != 1 || w[0].Name != "my.Job.lock" || w[0].SelfNs != 1e9 {
		t.Errorf("more waiting: %+v", w)
	}
}
