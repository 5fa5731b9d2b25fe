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

// exitThreads queues the exit records of a fixture process born under the
// tracker that exits d after the tick at boot+1000 s+n s: threads records
// (its leader's and threads-1 others') whose scheduler runtime adds up to
// cpuMs.
func exitThreads(r *fixtureRun, pid, ppid int32, cpuMs int64, threads int, n int, d time.Duration) {
	exit(r, pid, ppid, cpuMs, n, d)
	leader := &r.exits.recs[len(r.exits.recs)-1]
	per := cpuMs * 1_000_000 / int64(threads)
	leader.RunNs = uint64(cpuMs*1_000_000 - per*int64(threads-1))
	for i := 1; i < threads; i++ {
		th := *leader
		th.TID, th.RunNs, th.UTimeUs = 900_000+pid*100+int32(i), uint64(per), uint64(per/1000)
		r.exits.recs = append(r.exits.recs, th)
	}
}

// Issue 25's CI failure: a Streaming map and its job's ApplicationMaster
// ended in the same interval, reaped by the NodeManager, whose cutime said
// what the two cost together (exact over all: wait4 62,640 ms, the tracker
// 62,640), but the ApplicationMaster was charged 779 ms where wait4 said
// 737. Every exit record falls short of wait4 by what its thread ran after
// it (recordLagMs): the map's estimate folded its mapper's last short
// children (from their records alone: the mapper and its JVM exited in the
// same interval, before any cutime of theirs showed them), so it was far
// more short than the ApplicationMaster's JVM and shells; the growth was
// split evenly between the two all the same, a doubt of 50 ms each, and
// gave the ApplicationMaster half of the map's shortfall. The split must
// follow the records each estimate folds.
func TestExitReaperSplitFollowsRecords(t *testing.T) {
	f, r, c1, c2, m0 := amBesideMap(t)
	work, _ := yarnPaths(c2)
	f.add(fproc{pid: 2104, ppid: 2103, sid: 2102, argv: []string{"/bin/bash", work + "/mapper.sh"}, env: streamingEnv(c2, m0)})
	for _, pid := range []int32{2001, 2002, 2003, 2101, 2102, 2103, 2104} {
		// Born under the tracker (1000.5 s), children after their parents.
		f.set(pid, func(p *fproc) { p.start = 100_050 + uint64(pid%100) })
	}
	f.set(2003, func(p *fproc) { p.utime, p.stime = 50, 0 })  // the ApplicationMaster's JVM: 500 ms
	f.set(2103, func(p *fproc) { p.utime, p.stime = 100, 0 }) // the map's JVM: 1000 ms
	f.set(2104, func(p *fproc) { p.utime, p.stime, p.threads = 1000, 0, 1 })
	r.tick()
	r.tick()
	// In the next interval the map's mapper forks its last 40 children
	// (5 ms each by their records) and exits (10,054 ms by its records),
	// then its JVM (1,020 ms, 20 threads) and the two shells above it; the
	// ApplicationMaster's JVM (520 ms, 20 threads) and shells too. Each
	// process's records are short of wait4 by 2 ms, a JVM's by 16 (live, a
	// JVM's container was 17-28 ms short).
	for i := int32(0); i < 40; i++ {
		r.exits.exit(3000+i, 2104, 5, 20, 0)
		r.exits.recs[len(r.exits.recs)-1].RunNs = 5_000_000
	}
	exitThreads(r, 2104, 2103, 10_054, 1, 2, 500*time.Millisecond)
	endContainers(r, f, 520)
	// wait4: the map 10,054 + 1,020 + 200 (its children) + 2 (the shells)
	// by the records, and 80 + 2 + 16 + 4 short of wait4 = 11,378 ms; the
	// ApplicationMaster 522 + 16 + 4 = 542 ms. The NodeManager's cutime
	// grows by both, 11,920 ms (1,192 clock ticks). The estimates, 11,276
	// and 522, are 102 and 20 short: split evenly (a doubt of 50 ms and
	// 60), the ApplicationMaster got 577 ms.
	f.set(fxNMPID, func(p *fproc) { p.cutime = 1192 })
	r.tick()
	gotMap, gotAM := r.sink.lastCPU[m0], r.sink.lastCPU[c1]
	if gotMap+gotAM != 11_920 {
		t.Errorf("map %d + ApplicationMaster %d ms = %d, want the NodeManager's 11,920 in all", gotMap, gotAM, gotMap+gotAM)
	}
	// Within 10 ms of wait4 (live, the ApplicationMasters' floor is 30 ms).
	if gotAM < 542-10 || gotAM > 542+10 || gotMap < 11_378-10 || gotMap > 11_378+10 {
		t.Errorf("ApplicationMaster %d ms (wait4 542), map %d ms (wait4 11,378)", gotAM, gotMap)
	}
	// Every record came: the split follows them, no guess to tell.
	for _, id := range []string{m0, c1} {
		if a := r.sink.attempts[id]; !a.Ended || a.CPUDoubtMs != 0 {
			t.Errorf("%s: ended %v, CPU doubt %d ms; want ended and no doubt told", id, a.Ended, a.CPUDoubtMs)
		}
	}
	if st := r.tr.Stats(); st.SplitGuesses != 0 {
		t.Errorf("%d splits by a guess counted, want none", st.SplitGuesses)
	}
}

// A container's top shell that reaped its child (the rest of the tree,
// counted from exit records: certain, its next stat would show it) but was
// reaped by the NodeManager itself before that stat was read: its estimate
// holds its children's, as unsure as theirs, when the NodeManager's cutime
// settles it beside another container. Live, such a map (its doubt 4 ms:
// its children's left out) beside its ApplicationMaster (51) left its
// shortfall to it: the map 21 ms short, the ApplicationMaster 22 over.
func TestExitCertainKeepsItsDoubt(t *testing.T) {
	f, r, c1, _, m0 := amBesideMap(t)
	for _, pid := range []int32{2001, 2002, 2003, 2101, 2102, 2103} {
		f.set(pid, func(p *fproc) { p.start = 100_050 + uint64(pid%100) }) // born under the tracker
	}
	f.set(2003, func(p *fproc) { p.utime, p.stime = 50, 0 })  // the ApplicationMaster's JVM: 500 ms
	f.set(2103, func(p *fproc) { p.utime, p.stime = 200, 0 }) // the map's JVM: 2000 ms
	r.tick()
	r.tick()
	// The map's JVM (2,000 ms by its 20 records) and bash -c exit before
	// the listing; the top shell reaps them and is listed, but exits and
	// is reaped by the NodeManager before its stat is read.
	exitThreads(r, 2103, 2102, 2000, 20, 2, 300*time.Millisecond)
	exitThreads(r, 2102, 2101, 2, 1, 2, 310*time.Millisecond)
	f.remove(2103, 2102)
	r.tr.debugListed = func() {
		exitThreads(r, 2101, fxNMPID, 2, 1, 2, 320*time.Millisecond)
		f.remove(2101)
		r.tr.debugListed = nil
	}
	r.tick()
	// The ApplicationMaster's container (520 ms by its JVM's 20 records)
	// exits before the next listing. Each container is 20 ms short of
	// wait4 (the JVM's 16, the shells' 2 each): the NodeManager's cutime
	// grows by 2,024 and 544.
	exitThreads(r, 2003, 2002, 520, 20, 3, 300*time.Millisecond)
	exitThreads(r, 2002, 2001, 1, 1, 3, 310*time.Millisecond)
	exitThreads(r, 2001, fxNMPID, 1, 1, 3, 320*time.Millisecond)
	f.remove(2003, 2002, 2001)
	f.set(fxNMPID, func(p *fproc) { p.cutime = 257 }) // 2,570 ms (2,568 in clock ticks)
	r.tick()
	gotMap, gotAM := r.sink.lastCPU[m0], r.sink.lastCPU[c1]
	if gotMap+gotAM != 2570 {
		t.Errorf("map %d + ApplicationMaster %d ms = %d, want the NodeManager's 2,570", gotMap, gotAM, gotMap+gotAM)
	}
	if gotAM < 544-5 || gotAM > 546+5 {
		t.Errorf("ApplicationMaster %d ms, map %d: want about 545 and 2,025 (wait4 544 and 2,024)", gotAM, gotMap)
	}
}

// endContainers ends amBesideMap's two containers, each process with its
// records, once the mapper (2104) has exited: the map's JVM (1,020 ms, 20
// threads) and its shells, then the ApplicationMaster's JVM (amMs, 20
// threads) and its shells; and takes the whole tree off /proc.
func endContainers(r *fixtureRun, f *fixture, amMs int64) {
	exitThreads(r, 2103, 2102, 1020, 20, 2, 600*time.Millisecond)
	exitThreads(r, 2102, 2101, 1, 1, 2, 610*time.Millisecond)
	exitThreads(r, 2101, fxNMPID, 1, 1, 2, 620*time.Millisecond)
	exitThreads(r, 2003, 2002, amMs, 20, 2, 650*time.Millisecond)
	exitThreads(r, 2002, 2001, 1, 1, 2, 660*time.Millisecond)
	exitThreads(r, 2001, fxNMPID, 1, 1, 2, 670*time.Millisecond)
	f.remove(2104, 2103, 2102, 2101, 2003, 2002, 2001)
}

// amBesideMap is a YARN node whose tracker (exact exits) ticked once
// before two containers started: an ApplicationMaster's (c1, its JVM
// 2003 under 2001-2002) and map m0's (c2, its JVM 2103 under 2101-2102).
func amBesideMap(t *testing.T) (f *fixture, r *fixtureRun, c1, c2, m0 string) {
	c1, c2 = fxContainer(1), fxContainer(2)
	m0 = fxAttempt("m", 0, 0)
	f = newFixture(t)
	fxYARNNode(f)
	r = f.tracker(true)
	r.tick() // the node before the containers
	yarnContainer(f, 2001, c1, yarnJVMArgv(c1, "org.apache.hadoop.mapreduce.v2.app.MRAppMaster"))
	yarnContainer(f, 2101, c2, yarnChild(c2, m0))
	return f, r, c1, c2, m0
}

// Issue 25's TestLiveChurn/drops: a Streaming map's mapper forks short
// children, known by their exit records alone (a tick's CPU of them shows
// in its cutime only once it reaped them and was sampled). In the interval
// it exits, with its JVM, beside its job's ApplicationMaster, the records'
// socket overflows: the records of its last children and its own are
// lost; the rest come. The NodeManager's cutime, right in sum, is split by
// each estimate's doubt. The lost children's CPU was in no estimate and
// carried no doubt, so the ApplicationMaster took most of it (+80 ms of
// its 546). The children's rate in the last whole interval, carried to
// the mapper's exit, is now the map's doubt (half of it its estimate: the
// mapper's own record is lost too, so when it exited is not known); and
// records that came stand for what they say (the JVMs' and shells' tails
// are no more than their records), with no clock ticks of doubt.
func TestExitLostChildrenDoubt(t *testing.T) {
	f, r, c1, m0 := endWithRecordsLost(t)
	// wait4: the map 1,036 + 1,002 + 400 (its children) + 6 = 2,444 ms,
	// the ApplicationMaster 540 + 6 = 546; the NodeManager's cutime grows
	// by both, 2,990 ms.
	f.set(fxNMPID, func(p *fproc) { p.cutime = 299 })
	r.tick()
	gotMap, gotAM := r.sink.lastCPU[m0], r.sink.lastCPU[c1]
	if gotMap+gotAM != 2990 {
		t.Errorf("map %d + ApplicationMaster %d ms = %d, want the NodeManager's 2,990 in all", gotMap, gotAM, gotMap+gotAM)
	}
	if gotAM < 546-15 || gotAM > 546+15 {
		t.Errorf("ApplicationMaster %d ms (wait4 546), map %d ms (wait4 2,444)", gotAM, gotMap)
	}
	if st := r.tr.Stats(); st.ExitsWithoutRecord != 1 || st.ExitOverflows != 1 || st.SplitGuesses != 1 || st.StandingGuesses != 0 {
		t.Errorf("exits without their record %d, overflows %d, splits by a guess %d, standing guesses %d; want 1, 1, 1 and 0",
			st.ExitsWithoutRecord, st.ExitOverflows, st.SplitGuesses, st.StandingGuesses)
	}
	// The split is a guess: both attempts say their CPU is an estimate,
	// and by how much it may be off, which covers how far off it is. The
	// ApplicationMaster's records came: its estimate's doubt bounds how
	// far off it was, and its error is the map's, so both are told a few
	// tens of ms (292 each, when every doubt of the two and what was
	// split were told).
	for _, at := range []struct {
		id        string
		got, want int64
	}{{m0, gotMap, 2444}, {c1, gotAM, 546}} {
		a := r.sink.attempts[at.id]
		if !a.Ended || a.CPUDoubtMs <= 0 {
			t.Errorf("%s: ended %v, CPU doubt %d ms; want ended, its CPU told as an estimate", at.id, a.Ended, a.CPUDoubtMs)
		}
		t.Logf("%s: CPU %d ms, wait4 %d, doubt told %d ms", at.id, at.got, at.want, a.CPUDoubtMs)
		if off := max(at.got-at.want, at.want-at.got); off > a.CPUDoubtMs || a.CPUDoubtMs > 100 {
			t.Errorf("%s: CPU %d ms, wait4 %d: off by %d, the doubt told %d ms (want it within 100)", at.id, at.got, at.want, off,
				a.CPUDoubtMs)
		}
	}
}

// TestExitLostChildrenDoubt's containers, where no growth of the
// NodeManager's cutime settles their estimates: they stand, and the map's,
// with its mapper's record and its last children's lost, is a guess that
// it tells (wire.Attempt.CPUDoubtMs), as far off as its estimate's doubt;
// the ApplicationMaster's records came, its CPU is no guess.
func TestExitLostGuessStands(t *testing.T) {
	for _, tc := range []struct {
		name string
		nm   func(p *fproc)
	}{
		// Its pid names another process now: no reaper to settle them.
		{name: "reaper gone", nm: func(p *fproc) { p.start += 100 }},
		// A growth far beyond the estimates means nothing (reapers.go).
		{name: "growth out of reach", nm: func(p *fproc) { p.cutime = 1000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, r, c1, m0 := endWithRecordsLost(t)
			f.set(fxNMPID, tc.nm)
			r.tick()
			st := r.tr.Stats()
			if st.ExitsWithoutRecord != 1 || st.SplitGuesses != 0 || st.StandingGuesses != 1 {
				t.Errorf("exits without their record %d, splits by a guess %d, standing guesses %d; want 1, 0 and 1",
					st.ExitsWithoutRecord, st.SplitGuesses, st.StandingGuesses)
			}
			gotMap, gotAM := r.sink.lastCPU[m0], r.sink.lastCPU[c1]
			am, mp := r.sink.attempts[c1], r.sink.attempts[m0]
			t.Logf("map: CPU %d ms (wait4 2,444), doubt told %d ms; ApplicationMaster %d ms (wait4 546), doubt %d", gotMap,
				mp.CPUDoubtMs, gotAM, am.CPUDoubtMs)
			if !am.Ended || am.CPUDoubtMs != 0 {
				t.Errorf("ApplicationMaster: ended %v, CPU doubt %d ms; want ended, no doubt", am.Ended, am.CPUDoubtMs)
			}
			// Off by what its estimate guessed (its children's 200 ms, half
			// of them in it) and what exit records miss (2 ms a shell,
			// 16 a JVM).
			if off := max(gotMap-2444, 2444-gotMap); !mp.Ended || mp.CPUDoubtMs < off || mp.CPUDoubtMs > 250 {
				t.Errorf("map: ended %v, CPU %d ms, wait4 2,444: off by %d, the doubt told %d ms", mp.Ended, gotMap, off, mp.CPUDoubtMs)
			}
		})
	}
}

// endWithRecordsLost is TestExitLostChildrenDoubt's node up to the tick
// its containers end, the records of the map's mapper and of its last
// children lost, the NodeManager's cutime not grown yet: the map's (m0)
// wait4 is 2,444 ms, the ApplicationMaster's (c1) 546.
func endWithRecordsLost(t *testing.T) (f *fixture, r *fixtureRun, c1, m0 string) {
	f, r, c1, c2, m0 := amBesideMap(t)
	work, _ := yarnPaths(c2)
	f.add(fproc{pid: 2104, ppid: 2103, sid: 2102, argv: []string{"/bin/bash", work + "/mapper.sh"}, env: streamingEnv(c2, m0)})
	for _, pid := range []int32{2001, 2002, 2003, 2101, 2102, 2103, 2104} {
		f.set(pid, func(p *fproc) { p.start = 100_050 + uint64(pid%100) }) // born under the tracker (1000.5 s)
	}
	f.set(2003, func(p *fproc) { p.utime, p.stime = 50, 0 })  // the ApplicationMaster's JVM: 500 ms
	f.set(2103, func(p *fproc) { p.utime, p.stime = 100, 0 }) // the map's JVM: 1000 ms
	f.set(2104, func(p *fproc) { p.utime, p.stime, p.threads = 100, 0, 1 })
	r.tick()
	// A whole interval: the mapper's 40 children, 5 ms each, reaped.
	for i := int32(0); i < 40; i++ {
		r.exits.exit(3000+i, 2104, 5, 20, 0)
		r.exits.recs[len(r.exits.recs)-1].RunNs = 5_000_000
	}
	f.set(2104, func(p *fproc) { p.cutime = 20 })
	r.tick()
	// The next: the socket overflows. The mapper's next 40 children (200
	// ms) and the mapper (its own CPU 1,000 ms still, 1,002 with its exit)
	// exit without a record; the map's JVM (1,020 ms by its 20 records,
	// 1,036 by wait4) and shells, and the ApplicationMaster's container
	// (its JVM 524 by its records, 540 by wait4), exit with theirs. Each
	// shell is 2 ms short of wait4 by its record.
	r.exits.lost++
	endContainers(r, f, 524)
	return f, r, c1, m0
}
