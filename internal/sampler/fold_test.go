package sampler

import (
	"fmt"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

func frames(fs ...string) [][]byte {
	out := make([][]byte, len(fs))
	for i, f := range fs {
		out[i] = []byte(f)
	}
	return out
}

func TestThreadName(t *testing.T) {
	for in, want := range map[string]string{"fetcher#3": "fetcher#N", "GC Thread#12": "GC Thread#N", "pool-1-thread-22": "pool-N-thread-N",
		"main": "main", "": "?", "42": "N"} {
		if got := string(ThreadName(nil, []byte(in))); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestFolder(t *testing.T) {
	f := NewFolder(Limits{})
	// Innermost first in, outermost first out; threads of a pool share.
	f.Add([]byte("fetcher#1"), wire.ThreadRunnable, frames("read", "fetch", "run"), 0, 10, 90, 0)
	f.Add([]byte("fetcher#2"), wire.ThreadRunnable, frames("read", "fetch", "run"), 0, 20, 80, 0)
	f.Add([]byte("fetcher#2"), wire.ThreadBlocked, frames("read", "fetch", "run"), 0, 0, 100, 0)
	f.Add([]byte("main"), wire.ThreadRunnable, frames("spin", "main"), 2, 100, 0, 0)
	var p wire.Profile
	f.Fill(&p)
	p.ID, p.AttemptID, p.Status = "x", "a", wire.ProfileComplete
	if err := wire.ValidateProfile(&p); err != nil {
		t.Fatal(err)
	}
	ss := stacksOf(&p)
	if len(ss) != 3 {
		t.Fatalf("%d stacks: %+v", len(ss), ss)
	}
	if s := ss[0]; s.thread != "fetcher#N" || fmt.Sprint(s.frames) != "[run fetch read]" || s.cpu != 30 || s.wait != 170 || p.Stacks[0].Samples != 2 {
		t.Errorf("fetchers: %+v", s)
	}
	if s := ss[1]; s.state != wire.ThreadBlocked || s.wait != 100 {
		t.Errorf("blocked: %+v", s)
	}
	if s := ss[2]; fmt.Sprint(s.frames) != "["+DeeperFrame+" main spin]" {
		t.Errorf("deep: %+v", s)
	}
	// Strings once each.
	seen := map[string]bool{}
	for _, s := range p.Strings {
		if seen[s] {
			t.Errorf("%q twice", s)
		}
		seen[s] = true
	}
}

func TestFolderLimits(t *testing.T) {
	f := NewFolder(Limits{MaxStacks: 2, MaxStrings: 6, MaxFrames: 2})
	for i := 0; i < 10; i++ {
		f.Add([]byte("main"), wire.ThreadRunnable, frames(fmt.Sprint("f", i), "main"), 0, 1, 1, 0)
	}
	f.Add([]byte("main"), wire.ThreadRunnable, frames("a", "b", "c", "d"), 0, 1, 1, 0)
	var p wire.Profile
	f.Fill(&p)
	p.ID, p.AttemptID, p.Status = "x", "a", wire.ProfileComplete
	if err := wire.ValidateProfile(&p); err != nil {
		t.Fatal(err)
	}
	if len(p.Stacks) != 3 || len(p.Strings) > 7 || p.DroppedSamples != 9 {
		t.Errorf("%d stacks, %d strings, %d dropped: %+v", len(p.Stacks), len(p.Strings), p.DroppedSamples, stacksOf(&p))
	}
	var total, other int64
	for _, s := range stacksOf(&p) {
		total += int64(s.cpu)
		if s.leaf() == wire.OtherFrame {
			other += int64(s.cpu)
		}
	}
	if total != 11 || other != 9 {
		t.Errorf("time %d (want 11, none lost), %d in %s (want 9)", total, other, wire.OtherFrame)
	}
}

func BenchmarkFolderAdd(b *testing.B) {
	f := NewFolder(Limits{})
	fs := frames("java.net.SocketInputStream.socketRead0", "java.net.SocketInputStream.read", "org.apache.hadoop.mapreduce.task.reduce.Fetcher.copyFromHost",
		"org.apache.hadoop.mapreduce.task.reduce.Fetcher.run")
	name := []byte("fetcher#3")
	b.ReportAllocs()
	for b.Loop() {
		f.Add(name, wire.ThreadRunnable, fs, 0, 1000, 199000, 0)
	}
}
