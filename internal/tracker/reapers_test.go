package tracker

import (
	"fmt"
	"testing"

	"github.com/taskscope/taskscope/internal/procfs"
)

// The reapers' ledger, on a fake process table: what a reaper's cutime
// grew by, less its other children's exit records and the zombies it
// reaped, is charged to the attempts of the processes it reaped, the
// estimates' error split in proportion to their doubt; a growth beyond a
// factor of two of the estimates leaves them standing.
func TestReaperLedger(t *testing.T) {
	const nm = 100
	for _, tc := range []struct {
		name             string
		grownMs, otherMs int64 // the reaper's cutime growth; its other children's records
		zombieMs         int64 // a zombie it reaped, charged before
		wantA, wantB     int64 // charged to the two attempts
		wantCorrection   int64
		partA            int64 // the part of A's life that is A's (0: all)
		// guessB: B's estimate holds a guess (its exit record lost); same:
		// B's process is A's attempt's too. wantDoubt: both attempts'
		// CPUDoubtMs after (what was split, |extra|, and the doubts).
		guessB, same bool
		wantDoubt    int64
	}{
		// Estimates 1000 (doubt 120: a tail of 100, its last sample's
		// clock ticks) and 300 (doubt 20); the growth less the others
		// says 1400: 100 more, split 120:20.
		{name: "split", grownMs: 1500, otherMs: 100, wantA: 1085, wantB: 315, wantCorrection: -100},
		// The same, B's exit record lost: the split is a guess, each
		// attempt's CPU may be off by the 100 split and the doubts' 140.
		{name: "split by a guess", grownMs: 1500, otherMs: 100, guessB: true, wantA: 1085, wantB: 315, wantCorrection: -100,
			wantDoubt: 240},
		{name: "less, by a guess", grownMs: 1200, guessB: true, wantA: 915, wantB: 285, wantCorrection: 100, wantDoubt: 240},
		// One attempt's two processes: how the growth splits between them
		// does not change its sum.
		{name: "one attempt, a guess", grownMs: 1500, guessB: true, same: true, wantA: 1500, wantCorrection: -200},
		// The estimates stand: nothing split.
		{name: "too much, a guess", grownMs: 5000, guessB: true, wantA: 1000, wantB: 300},
		{name: "zombie reaped", grownMs: 1500, zombieMs: 100, wantA: 1085, wantB: 315, wantCorrection: -100},
		{name: "less", grownMs: 1200, wantA: 915, wantB: 285, wantCorrection: 100},
		// Reaped between the listing and the read, or a reaper that
		// ignores SIGCHLD: the growth means nothing.
		{name: "too much", grownMs: 5000, wantA: 1000, wantB: 300},
		{name: "too little", grownMs: 600, wantA: 1000, wantB: 300},
		// A reused unit's process: its earlier attempt had 400 of it.
		{name: "part", grownMs: 1300, partA: 600, wantA: 600, wantB: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newFakeTable()
			tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 100}
			var st Stats
			l := newReaperLedger(tab, &st)
			l.mark(nm, 2000, tab.cycle)
			if len(l.byPID) != 1 || l.charge(nm, &attempt{}, 1, 1, 0, false) {
				t.Fatalf("a new reaper: %d reapers, or charged before its growth is known", len(l.byPID))
			}
			tab.cycle++
			tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 100 + uint64(tc.grownMs/10)}
			l.read()
			l.otherExit(exitRecord(4000, nm, tc.otherMs, 0))
			l.otherExit(exitRecord(4001, 1, 5000, 0)) // another's child
			if tc.zombieMs > 0 {
				l.reaped(nm, tc.zombieMs)
			}
			a, b := &attempt{}, &attempt{}
			if tc.same {
				b = a
			}
			part := int64(1000)
			if tc.partA > 0 {
				part = tc.partA
			}
			if !l.charge(nm, a, 1000, part, 120, false) || !l.charge(nm, b, 300, 300, 20, tc.guessB) {
				t.Fatal("not charged to the reaper")
			}
			if l.charge(200, a, 1, 1, 0, false) {
				t.Error("charged to a process that is no reaper")
			}
			l.settle()
			gotB := b.exitedCPU
			if tc.same {
				gotB = 0
			}
			if a.exitedCPU != tc.wantA || gotB != tc.wantB || st.ExitCorrectionMs != tc.wantCorrection {
				t.Errorf("charged %d and %d (correction %d), want %d and %d (%d)", a.exitedCPU, gotB,
					st.ExitCorrectionMs, tc.wantA, tc.wantB, tc.wantCorrection)
			}
			if a.info.CPUDoubtMs != tc.wantDoubt || b.info.CPUDoubtMs != tc.wantDoubt {
				t.Errorf("CPU doubt %d and %d ms, want %d", a.info.CPUDoubtMs, b.info.CPUDoubtMs, tc.wantDoubt)
			}
			if wantGuesses := uint64(min(tc.wantDoubt, 1)); st.SplitGuesses != wantGuesses {
				t.Errorf("%d splits by a guess counted, want %d", st.SplitGuesses, wantGuesses)
			}
			// Settled: the next tick starts afresh.
			if r := l.byPID[nm]; len(r.items) != 0 || r.other != 0 {
				t.Errorf("left after settling: %+v", r)
			}
		})
	}
}

// A reaper is read once a tick; one whose pid names another process now,
// or that cannot be read, is dropped; one that no tracked process has as
// parent any more is forgotten.
func TestReaperLedgerKeeps(t *testing.T) {
	tab := newFakeTable()
	tab.stats[100] = procfs.Stat{StartTime: 5}
	tab.stats[101] = procfs.Stat{StartTime: 6}
	tab.stats[102] = procfs.Stat{StartTime: 7}
	var st Stats
	l := newReaperLedger(tab, &st)
	for _, pid := range []int32{100, 101, 102, 103} { // 103: no stat
		l.mark(pid, 2000, tab.cycle)
	}
	if len(l.byPID) != 3 {
		t.Fatalf("%d reapers, want 3", len(l.byPID))
	}
	tab.cycle++
	tab.stats[101] = procfs.Stat{StartTime: 60} // pid reused
	tab.statErr[102] = procfs.ErrUnavailable
	reads := tab.reads
	l.read()
	if tab.reads-reads != 3 {
		t.Errorf("%d reads of stat for 3 reapers", tab.reads-reads)
	}
	if len(l.byPID) != 1 || l.byPID[100] == nil || l.byPID[100].grown != 0 {
		t.Errorf("after the read: %v", l.byPID)
	}
	l.mark(100, 2000, tab.cycle)
	l.sweep(tab.cycle)
	if l.byPID[100] == nil {
		t.Error("a reaper still a parent was forgotten")
	}
	tab.cycle++
	l.sweep(tab.cycle)
	if len(l.byPID) != 0 {
		t.Errorf("a reaper no longer a parent kept: %v", l.byPID)
	}
}

// A reaper's cutime that moved across the listing: its children the
// listing showed that are gone now were reaped before its read (taken out
// of the listing), those still there were not, once a read after the check
// shows it still. One that keeps reaping leaves its growth unknown at this
// tick and the next.
func TestReaperLedgerResolve(t *testing.T) {
	const nm = 100
	setup := func() (*fakeTable, *reaperLedger, *Stats) {
		tab := newFakeTable()
		tab.fakeProc(nm, 1, 5)
		for _, pid := range []int32{2000, 2100, 2200} {
			tab.fakeProc(pid, nm, 50)
		}
		tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 100}
		var st Stats
		l := newReaperLedger(tab, &st)
		l.mark(nm, 2000, tab.cycle)
		l.mark(nm, 2100, tab.cycle)
		l.mark(nm, 2200, tab.cycle)
		return tab, l, &st
	}
	t.Run("still", func(t *testing.T) {
		tab, l, st := setup()
		tab.next(nm, 2000, 2100, 2200)
		l.readBefore()
		if l.read() {
			t.Fatal("moved, though its cutime did not")
		}
		if r := l.byPID[nm]; r.grown != 0 {
			t.Errorf("grown %d, want 0", r.grown)
		}
		if st.ReapedAfterListing != 0 {
			t.Errorf("reaped after the listing: %d", st.ReapedAfterListing)
		}
	})
	t.Run("reaped after the listing", func(t *testing.T) {
		tab, l, st := setup()
		tab.next(nm, 2000, 2100, 2200)
		tab.fakeProc(2300, nm, 60) // new at this tick
		tab.newKids = map[int32][]int32{nm: {2300}}
		tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 150} // 2200 reaped before the listing
		l.readBefore()
		// Between the listing and the read: 2100 and the new 2300 reaped.
		tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 180}
		tab.gonePIDs[2100], tab.gonePIDs[2300], tab.gonePIDs[2200] = true, true, true
		tab.procs[2200].seen = 0 // not in the listing
		if !l.read() {
			t.Fatal("not moved")
		}
		l.resolve(tab)
		if r := l.byPID[nm]; r.grown != 800 {
			t.Errorf("grown %d ms, want 800", r.grown)
		}
		if fmt.Sprint(tab.unlisted) != "[2100 2300]" || st.ReapedAfterListing != 2 {
			t.Errorf("unlisted %v (%d counted), want [2100 2300]", tab.unlisted, st.ReapedAfterListing)
		}
		if tab.procs[2000].seen != tab.cycle {
			t.Error("a child still there was taken out of the listing")
		}
	})
	t.Run("reaping on", func(t *testing.T) {
		tab, l, st := setup()
		tab.next(nm, 2000, 2100, 2200)
		l.readBefore()
		// A reap at every read.
		tab.onStat = func(pid int32) {
			s := tab.stats[pid]
			s.CUTime++
			tab.stats[pid] = s
		}
		if !l.read() {
			t.Fatal("not moved")
		}
		reads := tab.reads
		l.resolve(tab)
		if n := tab.reads - reads; n != maxRereads {
			t.Errorf("%d reads, want %d", n, maxRereads)
		}
		if r := l.byPID[nm]; r.grown >= 0 || st.ReapersUnsettled != 1 || l.charge(nm, &attempt{}, 1, 1, 0, false) {
			t.Errorf("grown %d, unsettled %d: want its growth unknown", r.grown, st.ReapersUnsettled)
		}
		// The next tick's growth holds what it reaped after its last read
		// here: unknown too. The one after is known again.
		tab.onStat = nil
		tab.next(nm, 2000, 2100, 2200)
		l.readBefore()
		l.read()
		if r := l.byPID[nm]; r.grown >= 0 {
			t.Errorf("the next tick: grown %d, want unknown", r.grown)
		}
		tab.next(nm, 2000, 2100, 2200)
		tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: tab.stats[nm].CUTime + 7}
		l.readBefore()
		l.read()
		if r := l.byPID[nm]; r.grown != 70 {
			t.Errorf("the tick after: grown %d, want 70", r.grown)
		}
	})
}
