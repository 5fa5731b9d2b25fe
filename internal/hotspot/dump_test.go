package hotspot

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// parsed is a thread of a dump as the tests compare it.
type parsed struct {
	Name    string
	TID     int32
	Daemon  bool
	Java    bool
	State   JavaState
	Wait    Wait
	Frames  []string
	Dropped int
}

func parseAll(t testing.TB, b []byte, lim Limits) ([]parsed, error) {
	t.Helper()
	var out []parsed
	err := ParseThreadDump(b, lim, func(th *Thread) error {
		p := parsed{Name: string(th.Name), TID: th.TID, Daemon: th.Daemon, Java: th.Java, State: th.State, Wait: th.Wait, Dropped: th.Dropped}
		for _, f := range th.Frames {
			p.Frames = append(p.Frames, string(f))
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

func find(ts []parsed, name string) *parsed {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseThreadDumpJDK17(t *testing.T) {
	ts, err := parseAll(t, readFixture(t, "jdk17.txt"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 21 {
		t.Errorf("%d threads, want 21", len(ts))
	}
	main := find(ts, "main")
	if main == nil || main.TID != 0x78a || !main.Java || main.State != StateRunnable || main.Daemon ||
		strings.Join(main.Frames, ";") != "L.hot;L.main" {
		t.Errorf("main: %+v", main)
	}
	w := find(ts, "waiter")
	if w == nil || w.State != StateBlocked || w.Wait != WaitMonitor || len(w.Frames) != 3 ||
		w.Frames[0] != "L.lambda$main$1" || w.Frames[1] != "L$$Lambda$2.run" {
		t.Errorf("waiter: %+v", w)
	}
	h := find(ts, "holder")
	if h == nil || h.State != StateTimedWaiting || h.Wait != WaitSleeping || h.Frames[0] != "java.lang.Thread.sleep" {
		t.Errorf("holder: %+v", h)
	}
	f := find(ts, "Finalizer")
	if f == nil || !f.Daemon || f.State != StateWaiting || f.Wait != WaitMonitor || f.Frames[0] != "java.lang.Object.wait" {
		t.Errorf("Finalizer: %+v", f)
	}
	vm := find(ts, "VM Thread")
	if vm == nil || vm.Java || vm.State != StateNone || vm.TID != 0x7b5 || len(vm.Frames) != 0 {
		t.Errorf("VM Thread: %+v", vm)
	}
	if gc := find(ts, "GC Thread#0"); gc == nil || gc.TID != 0x795 {
		t.Errorf("GC Thread#0: %+v", gc)
	}
}

func TestParseThreadDumpJDK8(t *testing.T) {
	ts, err := parseAll(t, readFixture(t, "jdk8.txt"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 7 {
		t.Fatalf("%d threads, want 7: %+v", len(ts), ts)
	}
	main := find(ts, "main")
	if main == nil || main.TID != 0x5df0 || main.State != StateWaiting || main.Wait != WaitParking || len(main.Frames) != 11 ||
		main.Frames[0] != "sun.misc.Unsafe.park" || main.Frames[10] != "org.apache.hadoop.mapred.YarnChild.main" {
		t.Errorf("main: %+v", main)
	}
	f := find(ts, "fetcher#3")
	if f == nil || f.State != StateRunnable || !f.Daemon || len(f.Frames) != 6 || f.Frames[0] != "java.net.SocketInputStream.socketRead0" {
		t.Errorf("fetcher#3: %+v", f)
	}
	if gc := find(ts, "GC task thread#0 (ParallelGC)"); gc == nil || gc.Java || gc.TID != 0x5df2 {
		t.Errorf("GC: %+v", gc)
	}
}

func TestParseThreadDumpJDK21(t *testing.T) {
	ts, err := parseAll(t, readFixture(t, "jdk21.txt"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("%d threads, want 3: %+v", len(ts), ts)
	}
	// nid in decimal; a hidden class's address left out.
	if m := ts[0]; m.Name != "main" || m.TID != 48211 || strings.Join(m.Frames, ";") != "Hot.spin;Hot$$Lambda.run;Hot.main" {
		t.Errorf("main: %+v", m)
	}
	// A name with quotes and " nid=" in it.
	if o := ts[1]; o.Name != `odd "name" nid=0x1` || o.TID != 48299 || !o.Daemon || o.State != StateBlocked {
		t.Errorf("odd name: %+v", o)
	}
	if g := ts[2]; g.Name != "G1 Conc#0" || g.TID != 48214 || g.Java {
		t.Errorf("G1: %+v", g)
	}
}

func TestParseThreadDumpLimits(t *testing.T) {
	b := readFixture(t, "jdk8.txt")
	ts, err := parseAll(t, b, Limits{MaxFrames: 2})
	if err != nil {
		t.Fatal(err)
	}
	main := find(ts, "main")
	if len(main.Frames) != 2 || main.Dropped != 9 || main.Frames[0] != "sun.misc.Unsafe.park" {
		t.Errorf("main with 2 frames: %+v", main)
	}
	if _, err := parseAll(t, readFixture(t, "jdk8.txt"), Limits{MaxThreads: 3}); !errors.Is(err, ErrDump) {
		t.Errorf("7 threads over a limit of 3: %v", err)
	}
	for _, bad := range []string{"", "hello\nworld\n", "Full thread dump\n\nJNI global refs: 1\n"} {
		if _, err := parseAll(t, []byte(bad), Limits{}); !errors.Is(err, ErrDump) {
			t.Errorf("%q: %v, want ErrDump", bad, err)
		}
	}
	stop := errors.New("stop")
	n := 0
	err = ParseThreadDump(readFixture(t, "jdk8.txt"), Limits{}, func(*Thread) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("callback error: %v after %d threads", err, n)
	}
}

func TestParseThreadDumpAllocs(t *testing.T) {
	b := readFixture(t, "jdk17.txt")
	buf := make([]byte, len(b))
	n := testing.AllocsPerRun(20, func() {
		copy(buf, b)
		ParseThreadDump(buf, Limits{}, func(*Thread) error { return nil })
	})
	// The frame list of the parse (one), the closure: not one per thread.
	if n > 4 {
		t.Errorf("%.0f allocations for a dump of 21 threads", n)
	}
}

func BenchmarkParseThreadDump(b *testing.B) {
	d := readFixture(b, "jdk17.txt")
	buf := make([]byte, len(d))
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, d)
		ParseThreadDump(buf, Limits{}, func(*Thread) error { return nil })
	}
}
