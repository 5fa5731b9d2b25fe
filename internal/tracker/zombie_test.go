package tracker

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/wire"
)

// An exited process is not alive: a container whose top process the
// NodeManager reaps late (it stays a zombie until then) ends when it
// exited, and its CPU is charged once, not again to the containers the
// NodeManager reaps in the same interval as the zombie (issue 14).
func TestTickZombie(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exits=%v", exact), func(t *testing.T) {
			c2, c3 := fxContainer(2), fxContainer(3)
			m0, m1 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
			f := newFixture(t)
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0)) // JVM 2003: 3200 ms
			yarnContainer(f, 3001, c3, yarnChild(c3, m1)) // JVM 3003: 3200 ms
			r := f.tracker(exact)
			r.tick()
			// Container 2's JVM exits and is reaped by its bash -c, which exits
			// and is reaped by default_container_executor.sh, which exits:
			// the NodeManager does not reap it (a zombie).
			exitAt := func(pid int32, tick float64) int64 { // its life until then, ms
				return int64((1000+tick)*1000) - r.tr.startMs(f.procs[pid].start) + fixtureBoot*1000
			}
			if exact {
				r.exits.exit(2003, 2002, 3200, exitAt(2003, 0.3), 0)
				r.exits.exit(2002, 2001, 0, exitAt(2002, 0.4), 0)
				r.exits.exit(2001, fxNMPID, 0, exitAt(2001, 0.5), 0)
			}
			f.remove(2003, 2002)
			f.set(2001, func(p *fproc) { p.state, p.cutime = 'Z', 320 })
			r.tick()
			end := fixtureT0.Add(1e9).UnixMilli()
			if exact {
				end = fixtureT0.Add(500e6).UnixMilli()
			}
			ended := endedProcesses(r.sink)
			if p, ok := ended[2001]; !ok || p.EndMs != end {
				t.Errorf("the zombie's end: %+v (ended %v), want %d", p, ok, end)
			}
			a := r.sink.attempts[m0]
			if !a.Ended || !hasEvent(r.sink, wire.EventAttemptEnd, m0) {
				t.Errorf("the attempt whose processes all exited is not ended: %+v", a)
			}
			if got := r.sink.lastCPU[m0]; got != 3200 {
				t.Errorf("the attempt's CPU: %d ms, want 3200", got)
			}
			if st := r.tr.Stats(); st.Tracked != 3 || st.Units != 1 {
				t.Errorf("running after the zombie: %d processes, %d units; want 3, 1", st.Tracked, st.Units)
			}
			// It stays a zombie for ticks: nothing more happens to it.
			for i := 0; i < 3; i++ {
				r.tick()
				if _, _, ok := viewOf(r.tr, 2001); ok {
					t.Fatal("the zombie is tracked again")
				}
				if len(r.sink.events) != 0 {
					t.Fatalf("events while it stays a zombie: %+v", r.sink.events)
				}
			}
			// The NodeManager reaps it late, and in the same interval
			// container 3, which ended at once: its cutime grows by both.
			if exact {
				r.exits.exit(3003, 3002, 3200, exitAt(3003, 4.3), 0)
				r.exits.exit(3002, 3001, 0, exitAt(3002, 4.4), 0)
				r.exits.exit(3001, fxNMPID, 0, exitAt(3001, 4.5), 0)
			}
			f.remove(2001, 3001, 3002, 3003)
			f.set(fxNMPID, func(p *fproc) { p.cutime += 320 + 320 })
			r.tick()
			if got := r.sink.lastCPU[m1]; got != 3200 {
				t.Errorf("the container reaped with the zombie: %d ms, want 3200", got)
			}
			if got := r.sink.lastCPU[m0]; got != 3200 {
				t.Errorf("the zombie's attempt after its reaping: %d ms, want 3200", got)
			}
			if st := r.tr.Stats(); st.Tracked != 0 || st.Units != 0 || st.Exited != 6 {
				t.Errorf("after both: %+v", st)
			}
		})
	}
}

// A task JVM its wrapper has not waited for yet ends when it exited; its
// CPU is the wrapper's once the wrapper's cutime shows it, not twice.
func TestTickZombieUnderWrapper(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	r := f.tracker(false)
	r.tick()
	// Its main thread exited, its other threads run: it lives.
	f.set(2003, func(p *fproc) { p.state = 'Z' })
	r.tick()
	if _, ok := endedProcesses(r.sink)[2003]; ok {
		t.Error("a JVM whose leader thread exited ended while its threads run")
	}
	f.set(2003, func(p *fproc) { p.state, p.utime, p.threads = 'Z', 400, 1 })
	r.tick()
	if p, ok := endedProcesses(r.sink)[2003]; !ok || p.EndMs != fixtureT0.Add(2e9).UnixMilli() {
		t.Errorf("the zombie JVM's end: %+v, %v", p, ok)
	}
	if r.sink.attempts[m0].Ended {
		t.Error("the attempt ended while its wrappers live")
	}
	if got := r.sink.lastCPU[m0]; got != 4200 {
		t.Errorf("with the zombie JVM: %d ms, want 4200", got)
	}
	// The wrapper reaps it: its cutime shows the JVM.
	f.remove(2003)
	f.set(2002, func(p *fproc) { p.cutime = 420 })
	r.tick()
	if got := r.sink.lastCPU[m0]; got != 4200 {
		t.Errorf("after the wrapper reaped it: %d ms, want 4200", got)
	}
}

// With daemons that reap late (each launched process stays a zombie for
// lateReap after it exited), every attempt lasts as long as its processes
// lived, not until they were reaped; CPU still adds up to wait4's.
func TestLiveLateReap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts JVMs")
	}
	const lateReap = 3 * time.Second
	interval := 200 * time.Millisecond
	for _, tc := range []struct {
		kind simulator.NodeKind
		spec simulator.JobSpec
	}{
		{simulator.NodeYARN, simulator.JobSpec{Kind: simulator.JobMapReduce, Maps: 3, NoReduces: true, Reduces: 0, TaskCPU: 1500 * time.Millisecond}},
		{simulator.NodeHadoop1, simulator.JobSpec{Kind: simulator.JobHadoop1, Maps: 2, NoReduces: true, Reduces: 0, TaskCPU: 1500 * time.Millisecond}},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			c, err := simulator.Start(context.Background(), simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 1,
				Kind: tc.kind, MapSlots: 3, ReduceSlots: 1, ReapDelay: lateReap})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			l := newLive(t, c, true)
			res := l.run(c, tc.spec, interval)
			l.check(res)
			l.checkCPU(res, 0.03)
			for _, a := range res.Attempts {
				if a.Type != "map" {
					continue
				}
				got, ok := l.sink.attempts[a.AttemptID]
				if !ok || !got.Ended {
					t.Errorf("%s: not reported ended: %+v", a.AttemptID, got)
					continue
				}
				// The tracker sees an exit at its next tick: within an
				// interval, and the time a tick takes, of the truth.
				slack := (interval + 150*time.Millisecond).Milliseconds()
				if raceEnabled {
					slack *= 3
				}
				life := a.End.Sub(a.Start).Milliseconds()
				shown := got.LastMs - got.FirstMs
				t.Logf("%s: lived %d ms (reaped %s later), shown %d ms", a.AttemptID, life, lateReap, shown)
				if d := got.LastMs - a.End.UnixMilli(); d < -slack || d > slack {
					t.Errorf("%s ended %d ms after its processes exited (reaped %s after), want within %d ms", a.AttemptID, d, lateReap, slack)
				}
				if d := got.FirstMs - a.Start.UnixMilli(); d < -slack || d > slack {
					t.Errorf("%s began %d ms from its launch", a.AttemptID, d)
				}
			}
		})
	}
}

// The top process ends as a zombie at a tick where its child, which it
// reaped before it exited, is still listed but gone when read: the child's
// exit, handled at the next tick, is in the zombie's last cutime already
// and is not charged again (seen under -race, twice an attempt's CPU).
func TestTickZombieChildAfter(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exits=%v", exact), func(t *testing.T) {
			c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
			f := newFixture(t)
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0)) // JVM 2003: 3200 ms
			r := f.tracker(exact)
			r.tick()
			// The JVM exits, reaped by bash -c.
			if exact {
				r.exits.exit(2003, 2002, 3200, 5000, 0)
			}
			f.remove(2003)
			f.set(2002, func(p *fproc) { p.cutime = 320 })
			r.tick()
			// bash -c exits, reaped by default_container_executor.sh (listed
			// still, gone when read: its pid names another process), which
			// exits: a zombie the NodeManager does not reap.
			if exact {
				r.exits.exit(2002, 2001, 0, 5000, 0)
				r.exits.exit(2001, fxNMPID, 0, 5000, 0)
			}
			f.set(2002, func(p *fproc) { p.start += 7 })
			f.set(2001, func(p *fproc) { p.state, p.cutime = 'Z', 320 })
			r.tick()
			f.remove(2002)
			r.tick()
			r.tick()
			if got := r.sink.lastCPU[m0]; got != 3200 {
				t.Errorf("the attempt's CPU: %d ms, want 3200", got)
			}
			if a := r.sink.attempts[m0]; !a.Ended {
				t.Errorf("not ended: %+v", a)
			}
		})
	}
}
