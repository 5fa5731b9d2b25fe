package agent

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

func TestParseProfiling(t *testing.T) {
	for in, want := range map[string]Profiling{
		"":                  {OnDemand: true, Auto: true},
		"on-demand,auto":    {OnDemand: true, Auto: true},
		"on-demand":         {OnDemand: true},
		"auto":              {Auto: true},
		" auto , on-demand": {OnDemand: true, Auto: true},
		"off":               {},
	} {
		if got, err := ParseProfiling(in); err != nil || got != want {
			t.Errorf("ParseProfiling(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"on", "auto,never", "ondemand"} {
		if _, err := ParseProfiling(bad); err == nil {
			t.Errorf("ParseProfiling(%q): no error", bad)
		}
	}
}

// testProfiler is a profiler whose node has the JVM pid 100 of attempt
// a1 and pid 200 of attempt a2 (a wrapper pid 300 of a2 too).
func testProfiler(mode Profiling) *profiler {
	p := newProfiler(mode, "/proc", time.Second, slog.New(slog.DiscardHandler))
	for i, m := range []struct {
		pid     int32
		role    string
		attempt string
	}{{100, wire.RoleTaskJVM, "a1"}, {200, wire.RoleTaskJVM, "a2"}, {300, wire.RoleWrapper, "a2"}} {
		key := uint64(i + 1)
		p.jvms.process(&wire.Process{Key: key, PID: m.pid, Role: m.role, StartMs: 1000})
		p.jvms.member(&wire.Membership{Process: key, AttemptID: m.attempt, Role: m.role, FromMs: 1000})
	}
	return p
}

func ord(id, attempt string, pid int32, trigger, group string) wire.ProfileOrder {
	return wire.ProfileOrder{ID: id, AttemptID: attempt, PID: pid, WindowMs: 1000, IntervalMs: 200, Trigger: trigger, Group: group}
}

// A node's operator has the last word (--profiling): an order the node
// does not take gets a failed profile saying why, at once; so does one
// for a process that is not a JVM of the attempt on the node now.
func TestProfilerRefuses(t *testing.T) {
	for _, c := range []struct {
		mode           Profiling
		onDemand, auto string // "" taken, else the refusal's words
	}{
		{Profiling{OnDemand: true, Auto: true}, "", ""},
		{Profiling{OnDemand: true}, "", "automatic profiles are off on this node"},
		{Profiling{Auto: true}, "profiles on demand are off on this node", ""},
		{Profiling{}, "profiles on demand are off on this node", "automatic profiles are off on this node"},
	} {
		p := testProfiler(c.mode)
		p.take([]wire.ProfileOrder{ord("d1", "a1", 100, "request", ""), ord("s1", "a2", 200, "straggler", "")})
		done := map[string]string{}
		for _, pr := range p.profiles() {
			if pr.Status != wire.ProfileFailed {
				t.Errorf("%+v: profile %s is %s before it was taken", c.mode, pr.ID, pr.Status)
			}
			done[pr.ID] = pr.Error
		}
		for id, want := range map[string]string{"d1": c.onDemand, "s1": c.auto} {
			got, refused := done[id]
			switch {
			case want == "" && refused:
				t.Errorf("%+v: %s refused: %s", c.mode, id, got)
			case want != "" && !strings.Contains(got, want):
				t.Errorf("%+v: %s answered %q, want %q", c.mode, id, got, want)
			}
		}
		if queued := len(p.queue); queued != 2-len(done) {
			t.Errorf("%+v: %d sessions queued, %d refused", c.mode, queued, len(done))
		}
	}
	p := testProfiler(Profiling{OnDemand: true, Auto: true})
	p.take([]wire.ProfileOrder{ord("x1", "a1", 200, "request", ""), ord("x2", "a2", 300, "request", ""),
		ord("x3", "a9", 100, "request", "")})
	if got := p.profiles(); len(got) != 3 || len(p.queue) != 0 {
		t.Fatalf("orders for other attempts' JVMs or a wrapper: %d answered, %d queued", len(got), len(p.queue))
	} else {
		for _, pr := range got {
			if pr.Status != wire.ProfileFailed || !strings.Contains(pr.Error, "is not a JVM of attempt") {
				t.Errorf("%s: %s %q", pr.ID, pr.Status, pr.Error)
			}
		}
	}
}

// Orders are taken once (the server sends one until its profile comes);
// a straggler and its sibling (one group) are one session; no more than
// maxSessions wait, the rest are answered failed.
func TestProfilerQueue(t *testing.T) {
	p := testProfiler(Profiling{OnDemand: true, Auto: true})
	p.take([]wire.ProfileOrder{ord("sib", "a2", 200, "sibling", "g1"), ord("str", "a1", 100, "straggler", "g1")})
	p.take([]wire.ProfileOrder{ord("str", "a1", 100, "straggler", "g1")})
	if len(p.queue) != 1 || len(p.queue[0]) != 2 || len(p.done) != 0 {
		t.Fatalf("a straggler and its sibling, sent twice: %d sessions (%v), %d answered", len(p.queue), p.queue, len(p.done))
	}
	var more []wire.ProfileOrder
	for i := 0; i < maxSessions+2; i++ {
		more = append(more, ord(fmt.Sprintf("r%d", i), "a1", 100, "request", ""))
	}
	p.take(more)
	if len(p.queue) != maxSessions {
		t.Errorf("%d sessions wait, at most %d", len(p.queue), maxSessions)
	}
	full := p.profiles()
	if len(full) != 3 {
		t.Fatalf("%d answered at once, want the 3 beyond the queue", len(full))
	}
	for _, pr := range full {
		if pr.Status != wire.ProfileFailed || pr.Error != "the node's queue of profiles is full" {
			t.Errorf("%s: %s %q", pr.ID, pr.Status, pr.Error)
		}
	}
	// Stopping answers what still waits.
	p.stopped()
	if got := p.profiles(); len(got) != maxSessions+1 {
		t.Errorf("%d answered when the agent stopped, want %d", len(got), maxSessions+1)
	}
}
