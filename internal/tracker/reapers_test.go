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
		// B's process is A's attempt's too. wantDoubtA, wantDoubtB: the
		// attempts' CPUDoubtMs after (cpuBound); wantSplit: the split is
		// counted as a guess, wantStanding: B's guess stood, counted.
		guessB, same            bool
		wantDoubtA, wantDoubtB  int64
		wantSplit, wantStanding bool
	}{
		// Estimates 1000 (doubt 120: a tail of 100, its last sample's
		// clock ticks) and 300 (doubt 20); the growth less the others
		// says 1400: 100 more, split 120:20.
		{name: "split", grownMs: 1500, otherMs: 100, wantA: 1085, wantB: 315, wantCorrection: -100},
		// The same, B's exit record lost: the split is a guess. A's
		// estimate was off by at most its doubt, 120 either way, and got
		// 85: off by up to 205 now, and B, whose error is A's, too (the
		// 100 split and both doubts, 240, before).
		{name: "split by a guess", grownMs: 1500, otherMs: 100, guessB: true, wantA: 1085, wantB: 315, wantCorrection: -100,
			wantDoubtA: 205, wantDoubtB: 205, wantSplit: true},
		// 100 less than the estimates: B's was over by 20 at most (a
		// guessed tail is never below nothing), so A's by 80 at least,
		// and it was handed -85: off by -5 to +35, and B the other way.
		{name: "less, by a guess", grownMs: 1200, guessB: true, wantA: 915, wantB: 285, wantCorrection: 100,
			wantDoubtA: 35, wantDoubtB: 35, wantSplit: true},
		// One attempt's two processes: how the growth splits between them
		// does not change its sum.
		{name: "one attempt, a guess", grownMs: 1500, guessB: true, same: true, wantA: 1500, wantCorrection: -200},
		// The estimates stand: nothing split, and B's guess stands with
		// its doubt.
		{name: "too much, a guess", grownMs: 5000, guessB: true, wantA: 1000, wantB: 300, wantDoubtB: 20, wantStanding: true},
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
			l, st := grownReaper(t, nm, tc.grownMs)
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
			gotDoubtB := b.info.CPUDoubtMs
			if tc.same {
				gotDoubtB = 0
			}
			if a.info.CPUDoubtMs != tc.wantDoubtA || gotDoubtB != tc.wantDoubtB {
				t.Errorf("CPU doubt %d and %d ms, want %d and %d", a.info.CPUDoubtMs, gotDoubtB, tc.wantDoubtA, tc.wantDoubtB)
			}
			if st.SplitGuesses != b2u(tc.wantSplit) || st.StandingGuesses != b2u(tc.wantStanding) {
				t.Errorf("%d splits by a guess and %d standing guesses counted, want %d and %d", st.SplitGuesses,
					st.StandingGuesses, b2u(tc.wantSplit), b2u(tc.wantStanding))
			}
			// Settled: the next tick starts afresh.
			if r := l.byPID[nm]; len(r.items) != 0 || r.other != 0 {
				t.Errorf("left after settling: %+v", r)
			}
		})
	}
}

// grownReaper is a ledger whose one reaper, nm, was marked at a tick and
// whose cutime grew by grownMs at the next.
func grownReaper(t *testing.T, nm int32, grownMs int64) (*reaperLedger, *Stats) {
	t.Helper()
	tab := newFakeTable()
	tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 100}
	st := &Stats{}
	l := newReaperLedger(tab, st)
	l.mark(nm, 2000, tab.cycle)
	if len(l.byPID) != 1 || l.charge(nm, &attempt{}, 1, 1, 0, false) {
		t.Fatalf("a new reaper: %d reapers, or charged before its growth is known", len(l.byPID))
	}
	tab.cycle++
	tab.stats[nm] = procfs.Stat{StartTime: 5, CUTime: 100 + uint64(grownMs/10)}
	l.read()
	return l, st
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// The doubt a guessed split tells each attempt is a true bound, and as
// tight as one can be: three containers reaped in one tick, A's estimate
// 1,000 ms (doubt 120) and C's 500 (doubt 60) whole, B's 300 (doubt 20)
// holding a guess (its exit record lost). Every way the growth's error
// could lie among them (none over what it used by more than its doubt,
// A's and C's not under by more either, B's under by any amount) makes
// each attempt off by no more than it is told, and one of them by as
// much. Those with no guess are told their doubt and their share at
// most, not what was split and every doubt (|extra| + 200) as before.
func TestReaperLedgerDoubtBound(t *testing.T) {
	const nm = 100
	type item struct {
		life, doubt int64
		guess       bool
	}
	items := []item{{1000, 120, false}, {300, 20, true}, {500, 60, false}}
	for _, tc := range []struct {
		name    string
		grownMs int64
		want    [3]int64 // the doubts told A, B and C
	}{
		// 100 more than the estimates, handed out 60, 10 and 30: A's may
		// have been 120 under (off by +180 now), B's 280 under with the
		// others over by their doubts (-270), C's 60 under (+90). Before:
		// 300 each.
		{name: "more", grownMs: 1900, want: [3]int64{180, 270, 90}},
		// 100 less, handed out -60, -10 and -30: B's estimate was over by
		// 20 at most, so A's and C's by 80 together at least.
		{name: "less", grownMs: 1700, want: [3]int64{60, 90, 70}},
		// 400 more, handed out 240, 40 and 120: B's guess held 220 of it
		// at least, and up to 580.
		{name: "much more", grownMs: 2200, want: [3]int64{360, 540, 180}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, st := grownReaper(t, nm, tc.grownMs)
			var atts [3]*attempt
			var est, doubt int64
			for i, it := range items {
				atts[i] = &attempt{}
				if !l.charge(nm, atts[i], it.life, it.life, it.doubt, it.guess) {
					t.Fatal("not charged to the reaper")
				}
				est, doubt = est+it.life, doubt+it.doubt
			}
			l.settle()
			extra := tc.grownMs - est
			var share, told [3]int64
			for i, a := range atts {
				share[i], told[i] = a.exitedCPU-items[i].life, a.info.CPUDoubtMs
			}
			if told != tc.want || st.SplitGuesses != 1 {
				t.Errorf("doubts told %v (shares %v of %d), %d splits by a guess; want %v and 1", told, share, extra,
					st.SplitGuesses, tc.want)
			}
			// Every way the error could lie: A's and C's within their doubts,
			// B's the rest of extra, over by no more than its doubt.
			var worst [3]int64
			for ea := -items[0].doubt; ea <= items[0].doubt; ea++ {
				for ec := -items[2].doubt; ec <= items[2].doubt; ec++ {
					eb := extra - ea - ec
					if eb < -items[1].doubt {
						continue
					}
					for i, e := range [3]int64{ea, eb, ec} {
						off := max(share[i]-e, e-share[i])
						worst[i] = max(worst[i], off)
						if off > told[i] {
							t.Fatalf("attempt %d off by %d (estimates off by %d, %d, %d), told %d", i, off, ea, eb, ec, told[i])
						}
					}
				}
			}
			if worst != told {
				t.Errorf("the worst errors are %v, told %v: not as tight as a bound can be", worst, told)
			}
			for _, i := range []int{0, 2} {
				if old := max(extra, -extra) + doubt; told[i] >= old {
					t.Errorf("attempt %d, no guess in it, told %d ms, not less than |extra| and every doubt, %d", i, told[i], old)
				}
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
