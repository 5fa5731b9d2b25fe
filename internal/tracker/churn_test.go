package tracker

import (
	"fmt"
	"testing"
)

// trackerSizes is how much state the tracker keeps.
type trackerSizes struct {
	procs, units, recs, orphanRecs, again, reapers, members, reused, newProcs int
}

func sizesOf(tr *Tracker) trackerSizes {
	s := trackerSizes{procs: len(tr.procs), units: len(tr.attr.units), recs: len(tr.records.held), orphanRecs: len(tr.records.orphans),
		again: len(tr.attr.again), reapers: len(tr.ledger.byPID), reused: len(tr.reused), newProcs: len(tr.newProcs)}
	for _, u := range tr.attr.units {
		s.members += len(u.members)
	}
	return s
}

// TestChurnKeepsNothing runs a node through many short-lived processes,
// task ones and others, with their exit records, and checks that the
// tracker's state returns to what it was: nothing is kept for dead pids.
func TestChurnKeepsNothing(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	r := f.tracker(true)
	r.tick()
	r.tick()
	base := sizesOf(r.tr)
	pid := int32(10_000)
	var prev []int32
	for tick := 0; tick < 40; tick++ {
		// Last tick's processes exit (their records arrive), new ones start.
		for _, p := range prev {
			fp := f.procs[p]
			r.exits.exitAt(p, fp.ppid, 10, 500, int64(fp.start)*10+500, 0)
		}
		f.remove(prev...)
		prev = prev[:0]
		for i := 0; i < 30; i++ {
			pid++
			start := uint64(100_100 + tick*100 + i)
			switch i % 3 {
			case 0: // a Streaming child of the JVM
				f.add(fproc{pid: pid, ppid: 2003, sid: 2002, start: start, argv: []string{"/usr/bin/python3", "mapper.py"}, env: streamingEnv(c2, m0)})
			case 1: // something of sshd's
				f.add(fproc{pid: pid, ppid: 50, start: start, argv: []string{"/bin/sh", "-c", fmt.Sprint("echo ", i)}})
			case 2: // the NodeManager's fork before exec
				f.add(fproc{pid: pid, ppid: fxNMPID, start: start, argv: f.procs[fxNMPID].argv})
			}
			prev = append(prev, pid)
		}
		// And some that live less than a tick: records only.
		for i := 0; i < 10; i++ {
			pid++
			ppid := int32(2003)
			if i%2 == 1 {
				ppid = 50
			}
			r.exits.exit(pid, ppid, 3, 2, 0)
		}
		r.tick()
	}
	for _, p := range prev {
		r.exits.exit(p, f.procs[p].ppid, 10, 500, 0)
	}
	f.remove(prev...)
	for i := 0; i < 5; i++ {
		r.tick()
	}
	if got := sizesOf(r.tr); got != base {
		t.Errorf("after churn the tracker keeps %+v, before it kept %+v", got, base)
	}
	if st := r.tr.Stats(); st.Exited < 400 || st.ShortLived < 200 {
		t.Errorf("stats %+v: the churn was not seen", st)
	}
	// Buffers reused, not grown without bound.
	if c := cap(r.tr.entries); c > 4*len(r.tr.entries)+64 {
		t.Errorf("listing buffer of capacity %d for %d entries", c, len(r.tr.entries))
	}
}

// TestSteadyTickAllocates nothing: a tick over processes that neither start
// nor exit reuses every buffer.
func TestSteadyTickAllocates(t *testing.T) {
	f := newFixture(t)
	fxYARNNode(f)
	for i := 0; i < 10; i++ {
		c := fxContainer(i + 2)
		yarnContainer(f, int32(2001+100*i), c, yarnChild(c, fxAttempt("m", i, 0)))
		f.add(fproc{pid: int32(2010 + 100*i), ppid: int32(2003 + 100*i), sid: int32(2002 + 100*i), argv: []string{"python3", "m.py"},
			env: streamingEnv(c, fxAttempt("m", i, 0))})
	}
	for _, exact := range []bool{false, true} {
		r := f.tracker(exact)
		for i := 0; i < 30; i++ { // past the wrappers' rechecks
			r.tick()
		}
		allocs := testing.AllocsPerRun(50, func() {
			if err := r.tr.Tick(r.now(), NopSink{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("exact %v: a steady tick allocates %.1f times", exact, allocs)
		}
	}
}

// staleEntries counts what the tracker keeps for pids that are gone: procs
// not seen at the last listing, exit records of processes it no longer
// knows, records past their expiry, reapers no tracked process has as
// parent, and unit members it no longer knows. Between ticks it is 0.
func staleEntries(tr *Tracker) int {
	n := 0
	for _, p := range tr.procs {
		if p.seen != tr.cycle {
			n++
		}
	}
	for pid := range tr.records.held {
		if p := tr.procs[pid]; p == nil || p.t == nil {
			n++
		}
	}
	for _, h := range tr.records.orphans {
		if tr.cycle-h.cycle >= 3 {
			n++
		}
	}
	parents := map[int32]bool{}
	for _, u := range tr.attr.units {
		for _, p := range u.members {
			if tr.procs[p.pid] != p {
				n++
			}
			parents[p.ppid] = true
		}
	}
	for pid := range tr.ledger.byPID {
		if !parents[pid] {
			n++
		}
	}
	return n
}
