package tracker

import (
	"testing"

	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
)

// newFakeRecords is the exit records part over a fake table, with a
// reapers' ledger over the same table.
func newFakeRecords(tab *fakeTable) (*exitRecords, *fakeExits, *Stats) {
	src := &fakeExits{}
	st := &Stats{}
	errs := &readErrors{stats: st, bySource: map[string]uint64{}}
	return newExitRecords(src, tab, newReaperLedger(tab, st), st, errs), src, st
}

// The records of a tracked process's threads add up; its end is known
// once its leader's is in, and taken once.
func TestExitRecordsHeld(t *testing.T) {
	tab := newFakeTable()
	u, _ := tab.fakeUnit("c1", "a1")
	tab.fakeMember(u, 2000, 1000, 100, 0, 0)
	x, src, st := newFakeRecords(tab)
	thread := *exitRecord(2000, 1000, 30, 0)
	thread.TID = 2001
	src.recs = []taskstats.Record{thread}
	x.drain(tab.cycle)
	if x.leaderIn(2000) {
		t.Error("a thread's record taken for the process's end")
	}
	leader := *exitRecord(2000, 1000, 100, 9)
	leader.ReadBytes = 4096
	src.recs = []taskstats.Record{leader}
	x.drain(tab.cycle)
	if !x.leaderIn(2000) {
		t.Fatal("the leader's record is in, the end not known")
	}
	end, threads := x.take(2000)
	if end == nil || end.CPUMs() != 130 || end.ExitCode != 9 || end.ReadBytes != 4096 || end.PPID != 1000 || threads != 2 {
		t.Errorf("the process's end: %+v, %d records", end, threads)
	}
	if again, _ := x.take(2000); again != nil || x.leaderIn(2000) || len(x.held) != 0 {
		t.Error("an end taken twice")
	}
	if st.ExitRecords != 2 {
		t.Errorf("%d records counted, want 2", st.ExitRecords)
	}
}

// A process that lived less than a tick (never listed) is charged to the
// attempt of its nearest tracked ancestor, through the records of the
// processes between: certain when that ancestor will be sampled again
// and everything between is gone (its next cutime shows them), pending
// otherwise, with their IO when the ancestor's counters will not show it.
func TestExitRecordsShortLived(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		parentGone           bool // the member above them left /proc
		childLingers         bool // the grandchild is still in /proc (a zombie)
		certain, pending, io int64
	}{
		{name: "reaped into a live member", certain: 50},
		{name: "under a member that left", parentGone: true, pending: 50, io: 3 << 20},
		{name: "one not reaped yet", childLingers: true, certain: 40, pending: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newFakeTable()
			u, a := tab.fakeUnit("c1", "a1")
			m := tab.fakeMember(u, 2000, 1000, 100, 0, 0)
			x, src, st := newFakeRecords(tab)
			tab.next(2000)
			if tc.parentGone {
				m.seen = 0
			}
			// 3000, a child of the member, and 3001, its child: neither listed.
			child, grandchild := *exitRecord(3000, 2000, 40, 0), *exitRecord(3001, 3000, 10, 0)
			child.ReadBytes, grandchild.ReadBytes = 1<<20, 2<<20
			tab.gonePIDs[3000], tab.gonePIDs[3001] = true, !tc.childLingers
			src.recs = []taskstats.Record{grandchild, child}
			x.drain(tab.cycle)
			if m.t.certain != tc.certain || m.t.pending != tc.pending || m.t.pendRead != tc.io {
				t.Errorf("the member: certain %d pending %d read %d, want %d %d %d", m.t.certain, m.t.pending,
					m.t.pendRead, tc.certain, tc.pending, tc.io)
			}
			if a.shortLived != 2 || st.ShortLived != 2 || a.exitedCPU != 0 || len(x.orphans) != 0 {
				t.Errorf("attempt %+v, stats %+v, %d records left", a.attemptTotals, st, len(x.orphans))
			}
		})
	}
}

// Records of processes the tracker knows that are no task's go to their
// reaper's ledger; records whose ancestry is no task's, or of processes
// that did not exit, are dropped after a few ticks, counted.
func TestExitRecordsUnclaimed(t *testing.T) {
	tab := newFakeTable()
	tab.fakeProc(1000, 1, 50) // a NodeManager
	tab.fakeProc(1500, 1000, 60)
	tab.stats[1000] = procfs.Stat{StartTime: 50}
	x, src, st := newFakeRecords(tab)
	x.ledger.mark(1000, 1500, tab.cycle)
	tab.next(1000, 1500)
	tab.stats[1000] = procfs.Stat{StartTime: 50, CUTime: 10}
	x.ledger.read()
	thread := *exitRecord(4000, 1, 5, 0)
	thread.TID = 4001 // of a process still running
	src.recs = []taskstats.Record{
		*exitRecord(1500, 1000, 70, 0), // the NodeManager's helper, which it reaped
		*exitRecord(3000, 1500, 20, 0), // a child of a process that is no task's
		thread,
	}
	x.drain(tab.cycle)
	if r := x.ledger.byPID[1000]; r.other != 70 {
		t.Errorf("the NodeManager's other children: %d ms, want 70", r.other)
	}
	for i := 0; i < 3; i++ {
		tab.next(1000)
		x.drain(tab.cycle)
		x.expire(tab.cycle)
	}
	if st.Unclaimed != 2 || len(x.orphans) != 0 {
		t.Errorf("%d unclaimed, %d left", st.Unclaimed, len(x.orphans))
	}
}
