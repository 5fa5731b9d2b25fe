package sampler

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testjvm"
	"github.com/taskscope/taskscope/internal/wire"
)

func startWork(t testing.TB, exitMs, idle int) *testjvm.JVM {
	t.Helper()
	return testjvm.Start(t, testjvm.Options{Classes: testjvm.Classes(t, "testdata/Work.java"), Class: "Work",
		Args: []string{strconv.Itoa(exitMs), strconv.Itoa(idle)}})
}

// stack is a profile's stack with its strings.
type stack struct {
	thread, state     string
	frames            []string // outermost first
	cpu, wait, queued time.Duration
}

func stacksOf(p *wire.Profile) []stack {
	var out []stack
	for _, s := range p.Stacks {
		st := stack{thread: p.Strings[s.Thread], state: s.State, cpu: time.Duration(s.CPUNs), wait: time.Duration(s.WaitNs),
			queued: time.Duration(s.QueuedNs)}
		for _, f := range s.Frames {
			st.frames = append(st.frames, p.Strings[f])
		}
		out = append(out, st)
	}
	return out
}

func (s stack) leaf() string {
	if len(s.frames) == 0 {
		return ""
	}
	return s.frames[len(s.frames)-1]
}

// byLeaf adds up the CPU and the waiting of a thread's stacks by leaf
// frame (the innermost frame of the job's code: JDK frames skipped).
func byLeaf(ss []stack, thread string) (cpu, wait map[string]time.Duration) {
	cpu, wait = map[string]time.Duration{}, map[string]time.Duration{}
	for _, s := range ss {
		if s.thread != thread {
			continue
		}
		leaf := ""
		for i := len(s.frames) - 1; i >= 0; i-- {
			if f := s.frames[i]; !strings.HasPrefix(f, "java.") && !strings.HasPrefix(f, "jdk.") {
				leaf = f
				break
			}
		}
		cpu[leaf] += s.cpu
		wait[leaf] += s.wait
	}
	return cpu, wait
}

func top(m map[string]time.Duration) (string, time.Duration) {
	best, v := "", time.Duration(-1)
	for k, d := range m {
		if d > v {
			best, v = k, d
		}
	}
	return best, v
}

func TestProfileKnownMethods(t *testing.T) {
	j := startWork(t, 0, 0)
	window := 3 * time.Second
	start := time.Now()
	ps := Profile(context.Background(), Config{Interval: 100 * time.Millisecond, Window: window},
		[]Target{{ProfileID: "p1", AttemptID: "attempt_1_0001_m_000000_0", PID: j.PID, Process: 42}})
	took := time.Since(start)
	if len(ps) != 1 {
		t.Fatalf("%d profiles", len(ps))
	}
	p := &ps[0]
	if err := wire.ValidateProfile(p); err != nil {
		t.Fatal(err)
	}
	if p.Status != wire.ProfileComplete || p.Error != "" {
		t.Errorf("status %s: %s", p.Status, p.Error)
	}
	// At 100 ms, or less often when the dumps stop the JVM for more than
	// PauseShare of the time (a loaded machine).
	maxDumps := int(window/(100*time.Millisecond)) + 1
	if wantMin := min(maxDumps, int(float64(window)/(float64(p.MaxPauseUs)*1000/PauseShare))) / 2; int(p.Dumps) < wantMin || int(p.Dumps) > maxDumps ||
		p.PausedUs <= 0 || p.MaxPauseUs <= 0 || p.MaxPauseUs > p.PausedUs {
		t.Errorf("%d dumps in %v at 100 ms, paused %d µs (longest %d)", p.Dumps, window, p.PausedUs, p.MaxPauseUs)
	}
	if p.PausedUs > int64(float64(took.Microseconds())*PauseShare)+p.MaxPauseUs {
		t.Errorf("paused %d µs in %v: more than %.0f%% of the time", p.PausedUs, took, 100*PauseShare)
	}
	if took > window+5*time.Second {
		t.Errorf("a profile of %v took %v", window, took)
	}
	if p.ID != "p1" || p.PID != j.PID || p.Process != 42 || p.EndMs <= p.StartMs {
		t.Errorf("profile %+v", p)
	}
	ss := stacksOf(p)
	// On a CPU: the main thread in hotLoop, whatever share of a CPU the
	// machine gave it; and each thread's time adds up to the window, on a
	// CPU, waiting for one, or waiting.
	cpu, wait := byLeaf(ss, "main")
	var mainCPU, mainAll time.Duration
	for f := range cpu {
		mainCPU += cpu[f]
		mainAll += cpu[f] + wait[f]
	}
	for _, s := range ss {
		if s.thread == "main" {
			mainAll += s.queued
		}
	}
	if f, d := top(cpu); f != "Work.hotLoop" || d < mainCPU*9/10 || d <= 0 {
		t.Errorf("main's top CPU frame: %s with %v of its %v (%v)", f, d, mainCPU, cpu)
	}
	// (From the attach, which may take long on a loaded machine, to the
	// last dump: never more than the profile.)
	if span := time.Duration(p.EndMs-p.StartMs) * time.Millisecond; mainAll <= 0 || mainAll > span+100*time.Millisecond {
		t.Errorf("main's CPU and waiting add up to %v over a profile of %v", mainAll, span)
	}
	// Waiting: the waiter blocked in awaitLock, the reader asleep in
	// readInput, the holder in holdLock; each most of the time the dumps
	// covered (main's time: from the attach to the last dump; the reader
	// wakes every 50 ms, and on a loaded machine waits for a CPU then:
	// that time is not waiting).
	span := mainAll
	for _, w := range []struct{ thread, frame, state string }{
		{"waiter", "Work.awaitLock", wire.ThreadBlocked},
		{"reader", "Work.readInput", wire.ThreadSleeping},
		{"holder", "Work.holdLock", wire.ThreadSleeping},
	} {
		_, wait := byLeaf(ss, w.thread)
		if f, d := top(wait); f != w.frame || d < span/2 {
			t.Errorf("%s's top waiting frame: %s with %v of %v (%v)", w.thread, f, d, span, wait)
		}
		for _, s := range ss {
			if s.thread == w.thread && s.leaf() != "" && s.wait > span/2 && s.state != w.state {
				t.Errorf("%s in state %s, want %s", w.thread, s.state, w.state)
			}
		}
	}
	// The JVM's own threads: CPU, no waiting.
	vm := false
	for _, s := range ss {
		if s.state == wire.ThreadVM {
			vm = true
			if s.wait != 0 || len(s.frames) != 0 {
				t.Errorf("a JVM thread %q with frames %v waited %v", s.thread, s.frames, s.wait)
			}
		}
		if strings.ContainsAny(s.thread, "0123456789") {
			t.Errorf("thread name %q with digits", s.thread)
		}
	}
	if !vm {
		t.Error("no JVM thread")
	}
	j.Running(t)
}

// A JVM that exits mid-profile: the profile ends then, partial, with what
// it had; nothing is left of the attach.
func TestProfileJVMExits(t *testing.T) {
	j := startWork(t, 1500, 0)
	start := time.Now()
	ps := Profile(context.Background(), Config{Interval: 100 * time.Millisecond, Window: 20 * time.Second},
		[]Target{{ProfileID: "p", AttemptID: "a", PID: j.PID, Process: 1}})
	p := &ps[0]
	if p.Status != wire.ProfilePartial || p.Error != "the JVM exited" || p.Dumps == 0 || len(p.Stacks) == 0 {
		t.Errorf("status %s (%s), %d dumps, %d stacks", p.Status, p.Error, p.Dumps, len(p.Stacks))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the profile went on %v after its JVM exited", took)
	}
	if err := wire.ValidateProfile(p); err != nil {
		t.Error(err)
	}
}

// The pause budget ends a profile; a JVM whose budget is spent is not
// attached to again.
func TestProfileBudget(t *testing.T) {
	j := startWork(t, 0, 0)
	b := NewBudget(time.Microsecond)
	ps := Profile(context.Background(), Config{Interval: 50 * time.Millisecond, Window: 5 * time.Second, Budget: b},
		[]Target{{ProfileID: "p", AttemptID: "a", PID: j.PID, Process: 7}})
	if p := ps[0]; p.Status != wire.ProfilePartial || !strings.Contains(p.Error, "pause budget") || p.Dumps != 1 {
		t.Errorf("status %s (%s) after %d dumps", p.Status, p.Error, p.Dumps)
	}
	ps = Profile(context.Background(), Config{Budget: b}, []Target{{ProfileID: "q", AttemptID: "a", PID: j.PID, Process: 7}})
	if p := ps[0]; p.Status != wire.ProfileFailed || p.Dumps != 0 {
		t.Errorf("spent budget: status %s (%s) after %d dumps", p.Status, p.Error, p.Dumps)
	}
	b.Forget(7)
	if b.Left(7) != time.Microsecond {
		t.Errorf("forgotten: %v left", b.Left(7))
	}
	j.Running(t)
}

// A process that is not the target (another start time) or cannot be
// attached to without harm fails at once.
func TestProfileFails(t *testing.T) {
	j := startWork(t, 0, 0)
	for name, tg := range map[string]Target{
		"another process of the pid": {ProfileID: "p", AttemptID: "a", PID: j.PID, StartMs: time.Now().Add(-time.Hour).UnixMilli()},
		"no such pid":                {ProfileID: "p", AttemptID: "a", PID: 1 << 30},
	} {
		ps := Profile(context.Background(), Config{Window: time.Second}, []Target{tg})
		if p := ps[0]; p.Status != wire.ProfileFailed || p.Error == "" || len(p.Stacks) != 0 {
			t.Errorf("%s: status %s (%s), %d stacks", name, p.Status, p.Error, len(p.Stacks))
		} else if err := wire.ValidateProfile(&p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	j.Running(t)
}

func TestClamp(t *testing.T) {
	c := Config{Interval: time.Millisecond, Window: time.Hour}
	c.Clamp()
	if c.Interval != MinInterval || c.Window != MaxWindow || c.Budget == nil || c.ProcFS != "/proc" {
		t.Errorf("clamped: %+v", c)
	}
	c = Config{}
	c.Clamp()
	if c.Interval != DefaultInterval || c.Window != DefaultWindow {
		t.Errorf("defaults: %+v", c)
	}
}
