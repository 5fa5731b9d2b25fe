package tracker

import (
	"testing"
	"time"
)

// CPU accounting of exits on fixture trees. Fixture CPU is in clock ticks
// (10 ms); exit records carry milliseconds as the kernel's clock-tick
// accounting counts them, which differs from the scheduler's runtime that
// stat and wait4 (hence a reaper's cutime) report: the tests give records
// that are off, as they are under load, and expect the reapers' figures.

// exitAt is the life of a process of the fixture that exits at d after the
// tick at boot+1000 s+n s.
func exitAt(f *fixture, pid int32, n int, d time.Duration) int64 {
	start := time.Duration(f.procs[pid].start) * 10 * time.Millisecond
	return (1000*time.Second + time.Duration(n)*time.Second + d - start).Milliseconds()
}

// exit queues the exit record of a fixture process that exits d after the
// tick at boot+1000 s+n s.
func exit(r *fixtureRun, pid, ppid int32, cpuMs int64, n int, d time.Duration) {
	start := int64(r.f.procs[pid].start) * 10
	life := exitAt(r.f, pid, n, d)
	r.exits.exitAt(pid, ppid, cpuMs, life, start+life, 0)
}

// container lays out c2 running m0 with a JVM of 3200 ms so far.
func accountingFixture(t *testing.T, exact bool) (*fixture, *fixtureRun) {
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, fxContainer(2), yarnChild(fxContainer(2), fxAttempt("m", 0, 0)))
	r := f.tracker(exact)
	r.tick()
	if got := r.sink.lastCPU[fxAttempt("m", 0, 0)]; got != 3200 {
		t.Fatalf("attempt CPU at the first tick: %d ms", got)
	}
	return f, r
}

// A child reaped by a live parent costs what the parent's cutime shows,
// not what its exit records say.
func TestExitReapedByLiveParent(t *testing.T) {
	m0 := fxAttempt("m", 0, 0)
	for _, exact := range []bool{true, false} {
		f, r := accountingFixture(t, exact)
		if exact {
			exit(r, 2003, 2002, 3500, 0, 500*time.Millisecond)
		}
		f.remove(2003)
		f.set(2002, func(p *fproc) { p.cutime = 330 })
		r.tick()
		if got := r.sink.lastCPU[m0]; got != 3300 {
			t.Errorf("exact %v: attempt CPU %d ms, want the parent's cutime, 3300", exact, got)
		}
		// And nothing is left pending for later.
		r.tick()
		if got := r.sink.lastCPU[m0]; got != 3300 {
			t.Errorf("exact %v: attempt CPU one tick later: %d ms", exact, got)
		}
	}
}

// A whole container that exits within one interval is reaped by the
// NodeManager, whose cutime tells what it cost.
func TestExitWholeTreeReapedByDaemon(t *testing.T) {
	m0 := fxAttempt("m", 0, 0)
	for _, exact := range []bool{true, false} {
		f, r := accountingFixture(t, exact)
		if exact {
			exit(r, 2003, 2002, 3500, 0, 300*time.Millisecond)
			exit(r, 2002, 2001, 50, 0, 310*time.Millisecond)
			exit(r, 2001, fxNMPID, 20, 0, 320*time.Millisecond)
			// A helper of the NodeManager's exits too.
			r.exits.exit(150, fxNMPID, 25, 100, 0)
		}
		f.remove(2003, 2002, 2001)
		f.set(fxNMPID, func(p *fproc) { p.cutime = 336 + 2 })
		r.tick()
		got := r.sink.lastCPU[m0]
		want := int64(3360)
		if !exact {
			want += 20 // the helper's CPU: no record tells it apart
		}
		if got < want-5 || got > want+5 {
			t.Errorf("exact %v: attempt CPU %d ms, want the NodeManager's cutime less its helper, %d", exact, got, want)
		}
		if a := r.sink.attempts[m0]; !a.Ended {
			t.Errorf("exact %v: the attempt did not end", exact)
		}
	}
}

// Two containers reaped in the same interval share the NodeManager's cutime
// growth in proportion to their estimates.
func TestExitTwoTreesReapedByDaemon(t *testing.T) {
	m0, m1 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, fxContainer(2), yarnChild(fxContainer(2), m0))
	yarnContainer(f, 2101, fxContainer(3), yarnChild(fxContainer(3), m1))
	f.set(2103, func(p *fproc) { p.utime, p.stime = 100, 0 })
	r := f.tracker(true)
	r.tick()
	exit(r, 2003, 2002, 3500, 0, 300*time.Millisecond)
	exit(r, 2103, 2102, 1300, 0, 300*time.Millisecond)
	f.remove(2003, 2002, 2001, 2103, 2102, 2101)
	f.set(fxNMPID, func(p *fproc) { p.cutime = 336 + 115 })
	r.tick()
	a, b := r.sink.lastCPU[m0], r.sink.lastCPU[m1]
	if a+b != 4510 {
		t.Errorf("the attempts have %d + %d ms, want the NodeManager's 4510 in all", a, b)
	}
	if a < 3360*9/10 || a > 3360*11/10 || b < 1150*9/10 || b > 1150*11/10 {
		t.Errorf("split %d / %d ms, want about 3360 / 1150", a, b)
	}
}

// A reaper's cutime that does not match the estimates (a child reaped
// between the listing and the read, or one of a parent that ignores
// SIGCHLD) is not used: the estimates stand.
func TestExitReaperOutOfBounds(t *testing.T) {
	m0 := fxAttempt("m", 0, 0)
	f, r := accountingFixture(t, true)
	exit(r, 2003, 2002, 3300, 0, 300*time.Millisecond)
	f.remove(2003, 2002, 2001)
	f.set(fxNMPID, func(p *fproc) { p.cutime = 10_000 }) // 100 s: someone else's
	r.tick()
	if got := r.sink.lastCPU[m0]; got != 3300 {
		t.Errorf("attempt CPU %d ms, want the estimate 3300", got)
	}
	// A parent whose cutime does not move: its child stays pending.
	f2, r2 := accountingFixture(t, true)
	exit(r2, 2003, 2002, 3300, 0, 300*time.Millisecond)
	f2.remove(2003)
	r2.tick()
	if got := r2.sink.lastCPU[m0]; got != 3300 {
		t.Errorf("with a parent that accrued nothing: %d ms, want 3300", got)
	}
}

// Exit records of processes that lived less than a tick are charged to the
// nearest tracked ancestor: exactly its cutime growth when it is their
// parent and they are gone; records of unknown ancestry expire unclaimed.
func TestExitShortLivedRecords(t *testing.T) {
	m0 := fxAttempt("m", 0, 0)
	f, r := accountingFixture(t, true)
	r.exits.exit(2050, 2003, 40, 50, 0)   // the JVM's child, reaped
	r.exits.exit(2060, 2050, 12, 20, 256) // its grandchild, through it
	r.exits.exit(9050, 9049, 500, 50, 0)  // nobody's
	f.set(2003, func(p *fproc) { p.cutime = 3 + 1 })
	r.tick()
	if got := r.sink.lastCPU[m0]; got != 3240 {
		t.Errorf("attempt CPU %d ms, want 3200 + the JVM's cutime 40", got)
	}
	if st := r.tr.Stats(); st.ShortLived != 2 {
		t.Errorf("short-lived processes: %d, want 2", st.ShortLived)
	}
	for i := 0; i < 3; i++ {
		r.tick()
	}
	if st := r.tr.Stats(); st.Unclaimed != 1 || len(r.tr.records.orphans) != 0 {
		t.Errorf("unclaimed %d, left %d", st.Unclaimed, len(r.tr.records.orphans))
	}
	if got := r.sink.lastCPU[m0]; got != 3240 {
		t.Errorf("attempt CPU later: %d ms", got)
	}
}

// tezContainerFixture lays out a YARN node running container c2, a Tez
// container (TezChild, pid 2003) that has begun no attempt yet, whose log
// directory is logs.
func tezContainerFixture(t *testing.T) (f *fixture, c2, logs string) {
	c2 = fxContainer(2)
	f = newFixture(t)
	fxYARNNode(f)
	_, logs = yarnPaths(c2)
	yarnContainer(f, 2001, c2, yarnJVMArgv(c2, "org.apache.tez.runtime.task.TezChild", fxAMHost, "41000", c2, fxApp, "1"))
	return f, c2, logs
}

// A reused unit: a child reaped after its JVM switched attempts shows in
// the parent's cutime with all its life; the earlier attempt keeps its
// part, the later one gets the rest.
func TestExitAfterAttemptSwitch(t *testing.T) {
	f, c2, logs := tezContainerFixture(t)
	f.set(2003, func(p *fproc) { p.utime, p.stime = 100, 0 })
	r := f.tracker(true)
	r.tick()
	a := fxTezAttempt(0, 0, 0)
	f.file(2003, "root"+logs+"/syslog_"+a, "", fixtureT0.Add(time.Second))
	f.set(2003, func(p *fproc) { p.utime = 150 })
	r.tick()
	f.set(2003, func(p *fproc) { p.utime = 250 })
	r.tick()
	exit(r, 2003, 2002, 2600, 2, 500*time.Millisecond)
	f.remove(2003)
	f.set(2002, func(p *fproc) { p.cutime = 255 })
	r.tick()
	if got := r.sink.lastCPU[c2]; got != 1500 {
		t.Errorf("the container before its attempt: %d ms, want 1500", got)
	}
	if got := r.sink.lastCPU[a]; got != 1050 {
		t.Errorf("the attempt: %d ms, want the JVM's 2550 less the 1500 before it", got)
	}
}

// A process born under the tracker whose exit records give its threads'
// scheduler runtime is charged what they say, not its last rate carried to
// its exit: at work until its last sample, it ran 30 ms more before it
// exited 0.8 s later (800 ms at its last rate). A process older than the
// tracker, or one whose records may have been dropped (the socket
// overflowed since it was found), keeps the bound: at least its last rate.
func TestExitExactRecordTail(t *testing.T) {
	for _, c := range []struct {
		name            string
		bornUnder, lost bool
		want            int64
	}{
		{"born under", true, false, 2030},
		{"older", false, false, 2800},
		{"overflowed", true, true, 2800},
	} {
		t.Run(c.name, func(t *testing.T) {
			m0 := fxAttempt("m", 0, 0)
			f := newFixture(t)
			fxYARNNode(f)
			r := f.tracker(true)
			r.tick() // the node before the container
			yarnContainer(f, 2001, fxContainer(2), yarnChild(fxContainer(2), m0))
			if c.bornUnder {
				for pid := int32(2001); pid <= 2003; pid++ {
					f.set(pid, func(p *fproc) { p.start = 100_050 + uint64(pid) - 2000 }) // 1000.5 s: after the tracker was made
				}
			}
			f.set(2003, func(p *fproc) { p.utime, p.stime = 100, 0 })
			r.tick()
			f.set(2003, func(p *fproc) { p.utime = 200 }) // 1 s of CPU in 1 s
			if c.lost {
				r.exits.lost++
			}
			r.tick()
			exit(r, 2003, 2002, 2030, 2, 800*time.Millisecond)
			r.exits.recs[len(r.exits.recs)-1].RunNs = 2030_000_000
			exit(r, 2002, 2001, 0, 2, 810*time.Millisecond)
			exit(r, 2001, fxNMPID, 0, 2, 820*time.Millisecond)
			f.remove(2003, 2002, 2001) // the NodeManager's cutime does not move: the estimate stands
			r.tick()
			if got := r.sink.lastCPU[m0]; got != c.want {
				t.Errorf("attempt CPU %d ms, want %d", got, c.want)
			}
		})
	}
}

// A zombie's stat holds all it used, its exit too, but in clock ticks:
// its exit records' runtime, exact, is the better figure where it is more
// (a JVM born under the tracker read 2,150 ms as a zombie, its records
// 2,158; its parent's wait4 more). For a process older than the tracker
// the stat stands.
func TestExitZombieExactRecord(t *testing.T) {
	for _, c := range []struct {
		name      string
		bornUnder bool
		want      int64
	}{
		{"born under", true, 3418},
		{"older", false, 3410},
	} {
		t.Run(c.name, func(t *testing.T) {
			m0 := fxAttempt("m", 0, 0)
			f := newFixture(t)
			fxYARNNode(f)
			r := f.tracker(true)
			r.tick()                                                              // the node before the container
			yarnContainer(f, 2001, fxContainer(2), yarnChild(fxContainer(2), m0)) // JVM 2003: 3200 ms
			if c.bornUnder {
				for pid := int32(2001); pid <= 2003; pid++ {
					f.set(pid, func(p *fproc) { p.start = 100_050 + uint64(pid) - 2000 }) // 1000.5 s: after the tracker was made
				}
			}
			r.tick()
			r.tick()
			// The JVM exits; its parent, bash -c, has not reaped it yet.
			exit(r, 2003, 2002, 3418, 2, 300*time.Millisecond)
			r.exits.recs[len(r.exits.recs)-1].RunNs = 3418_000_000
			f.set(2003, func(p *fproc) { p.state, p.utime, p.stime, p.threads = 'Z', 321, 20, 1 })
			r.tick()
			if got := r.sink.lastCPU[m0]; got != c.want {
				t.Errorf("attempt CPU %d ms, want %d", got, c.want)
			}
		})
	}
}

// The tail of a long-lived process is bounded by the time between its last
// sample and its exit: its records' error over its whole life is not.
func TestExitTailBound(t *testing.T) {
	m0 := fxAttempt("m", 0, 0)
	f, r := accountingFixture(t, true)
	f.set(2003, func(p *fproc) { p.utime = 400 }) // 1 s of CPU per 1 s tick
	r.tick()
	// Records say 2 s more than the last sample: impossible in the 0.1 s
	// between that sample and the exit, on one CPU (one thread).
	f.set(2003, func(p *fproc) { p.threads = 1 })
	r.tick() // the sample that the exit follows (no change in CPU)
	exit(r, 2003, 2002, 6200, 2, 100*time.Millisecond)
	f.remove(2003, 2002, 2001)
	f.set(fxNMPID, func(p *fproc) { p.cutime = 100_000 }) // a cutime to ignore (out of bounds)
	r.tick()
	got := r.sink.lastCPU[m0]
	if got < 4200 || got > 4200+100 {
		t.Errorf("attempt CPU %d ms, want 4200 and at most 0.1 s more", got)
	}
}

// A Tez container's JVM first seen in the tick where its first attempt has
// begun (it started and wrote the attempt's syslog between two ticks): all
// it used goes to that attempt. Carried over from the container's own
// pseudo-attempt, which never counted it, it would be lost.
func TestSwitchCountsANewJVMFromItsStart(t *testing.T) {
	f, c2, logs := tezContainerFixture(t)
	jvm := *f.procs[2003]
	f.remove(2003)
	r := f.tracker(true)
	r.tick()
	if _, ok := r.sink.attempts[c2]; !ok {
		t.Fatalf("the container without its JVM is not its own pseudo-attempt: %v", r.sink.attempts)
	}
	jvm.utime, jvm.stime = 20, 2 // 220 ms of start-up, then the attempt's first 0.1 s
	jvm.start += 50
	f.add(jvm)
	a := fxTezAttempt(0, 0, 0)
	f.file(2003, "root"+logs+"/syslog_"+a, "", fixtureT0.Add(time.Second))
	r.tick()
	if got := r.sink.lastCPU[c2] + r.sink.lastCPU[a]; got != 220 {
		t.Errorf("container %d ms + attempt %d ms = %d, want the JVM's 220", r.sink.lastCPU[c2], r.sink.lastCPU[a], got)
	}
	f.set(2003, func(p *fproc) { p.utime = 120 })
	r.tick()
	if got := r.sink.lastCPU[a]; got != 1220 {
		t.Errorf("attempt %d ms, want 1220", got)
	}
}

// A container reaped by the NodeManager between the listing and the
// NodeManager's read right after it (a window that grows with the load):
// the listing shows it, the NodeManager's cutime holds it. Its growth must
// settle it at that tick, not another container's that ended in the same
// interval: taken so, the other map was charged the CPU of both (live,
// under load: 4,360 ms for a map of 2,181, its neighbours 19% and 41%
// short the tick after).
func TestExitReapedBetweenListingAndRead(t *testing.T) {
	m0, m1 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
	for _, tc := range []struct {
		name  string
		other bool // the NodeManager reaps a helper of its own too
	}{{"container", false}, {"and a helper", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			fxYARNNode(f)
			yarnContainer(f, 2001, fxContainer(2), yarnChild(fxContainer(2), m0))
			yarnContainer(f, 2101, fxContainer(3), yarnChild(fxContainer(3), m1))
			f.set(2003, func(p *fproc) { p.utime, p.stime = 150, 10 })   // 1600 ms so far
			f.set(2103, func(p *fproc) { p.utime, p.stime = 200, 0 })    // 2000 ms so far
			f.set(fxNMPID, func(p *fproc) { p.cutime, p.cstime = 0, 0 }) // it reaped nothing yet
			r := f.tracker(true)
			r.tick()
			// Before the next listing, m1's container ended and was reaped:
			// 2400 ms, of which its JVM's records tell 2390 (its exit costs
			// the rest after them).
			exit(r, 2103, 2102, 2390, 0, 300*time.Millisecond)
			exit(r, 2102, 2101, 0, 0, 310*time.Millisecond)
			exit(r, 2101, fxNMPID, 0, 0, 320*time.Millisecond)
			f.remove(2103, 2102, 2101)
			nm := uint64(240)
			// m0's container ended too, 2000 ms (its records 1990), but was
			// reaped right after the listing, before the NodeManager's read.
			exit(r, 2003, 2002, 1990, 0, 600*time.Millisecond)
			exit(r, 2002, 2001, 0, 0, 610*time.Millisecond)
			exit(r, 2001, fxNMPID, 0, 0, 620*time.Millisecond)
			if tc.other {
				// A helper of its own, 30 ms, reaped in the window too.
				r.exits.exit(150, fxNMPID, 30, 100, 0)
				nm += 3
			}
			r.tr.debugListed = func() {
				f.remove(2003, 2002, 2001)
				f.set(fxNMPID, func(p *fproc) { p.cutime = nm + 200 })
			}
			r.tick()
			r.tr.debugListed = nil
			r.tick()
			if a, b := r.sink.lastCPU[m0], r.sink.lastCPU[m1]; a != 2000 || b != 2400 {
				t.Errorf("m0 %d ms, m1 %d ms; want 2000 and 2400, as the NodeManager's cutime says", a, b)
			}
			for _, id := range []string{m0, m1} {
				if !r.sink.attempts[id].Ended {
					t.Errorf("%s did not end", id)
				}
			}
			if st := r.tr.Stats(); st.ReapedAfterListing != 1 || st.ReapersUnsettled != 0 {
				t.Errorf("reaped after the listing %d, unsettled %d; want 1 and 0", st.ReapedAfterListing, st.ReapersUnsettled)
			}
		})
	}
}
