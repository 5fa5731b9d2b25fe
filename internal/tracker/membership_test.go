package tracker

import (
	"testing"

	"github.com/taskscope/taskscope/internal/procfs"
)

func newFakeAccountant(tab *fakeTable) (*accountant, *Stats) {
	st := &Stats{}
	return newAccountant(tab, newReaperLedger(tab, st), fakeIdx, st, true, 4), st
}

// An exited process's CPU goes where the kernel puts it: into its parent's
// cutime when a member reaped it (certain when the parent is sampled
// again, pending when the parent exited too or has not reaped it), into
// its reaper's when its parent is no task's (charged through the ledger
// when the reaper's growth is known, at once otherwise).
func TestAccountantExits(t *testing.T) {
	const nm = 1000
	for _, tc := range []struct {
		name                     string
		parentGone, nmIsReaper   bool
		leaving                  int32 // 2000: the top process, 2001: its child
		certain, pending, exited int64
		parentRead               int64
	}{
		{name: "child of a live member", leaving: 2001, certain: 300},
		{name: "child of a member that left", leaving: 2001, parentGone: true, pending: 300, parentRead: 1 << 20},
		{name: "top, its reaper unknown", leaving: 2000, exited: 800},
		{name: "top, charged through its reaper", leaving: 2000, nmIsReaper: true, exited: 750},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newFakeTable()
			tab.fakeProc(nm, 1, 10)
			tab.stats[nm] = procfs.Stat{StartTime: 10}
			u, a := tab.fakeUnit("c1", "a1")
			top := tab.fakeMember(u, 2000, nm, 100, 500, 300) // 300: children it reaped before
			child := tab.fakeMember(u, 2001, 2000, 110, 250, 50)
			child.t.vals[fakeIdx.read] = 1 << 20
			c, _ := newFakeAccountant(tab)
			sink := newRecSink()
			if tc.nmIsReaper {
				c.ledger.mark(nm, 2000, tab.cycle)
			}
			tab.next(nm, 2000, 2001)
			tab.stats[nm] = procfs.Stat{StartTime: 10, CUTime: 75} // 750 ms: reaped the top
			c.ledger.read()
			leaving := tab.procs[tc.leaving]
			leaving.seen = 0
			if tc.parentGone {
				top.seen = 0
			}
			c.leave(leaving, nil, 0, 5000, sink)
			c.ledger.settle()
			if top.t.certain != tc.certain || top.t.pending != tc.pending || a.exitedCPU != tc.exited || top.t.pendRead != tc.parentRead {
				t.Errorf("parent certain %d pending %d read %d, attempt %d; want %d %d %d, %d", top.t.certain, top.t.pending,
					top.t.pendRead, a.exitedCPU, tc.certain, tc.pending, tc.parentRead, tc.exited)
			}
			if leaving.t.mem != nil || len(sink.members) != 1 || sink.members[0].ToMs != 5000 || sink.members[0].AttemptID != "a1" {
				t.Errorf("the membership's end: %+v", sink.members)
			}
		})
	}
}

// The children's CPU a parent's cutime shows replaces what their exits
// estimated: the certain part, when the growth covers it by half at
// least (the difference is the estimates' error), stays pending else; a
// growth that comes before the exit it stands for is credit.
func TestAccountantSettleChildren(t *testing.T) {
	for _, tc := range []struct {
		name                                    string
		certain, pending, credit, grown         int64
		wantPending, wantCredit, wantCorrection int64
	}{
		{name: "exact", certain: 100, grown: 100},
		{name: "estimate high", certain: 100, grown: 80, wantCorrection: 20},
		{name: "not reaped as said", certain: 100, grown: 30, wantPending: 70},
		{name: "pending arrives", pending: 60, grown: 100, wantCredit: 40},
		{name: "pending still", pending: 60, grown: 20, wantPending: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, st := newFakeAccountant(newFakeTable())
			ca := &cpuAccount{certain: tc.certain, pending: tc.pending, credit: tc.credit}
			c.settleChildren(ca, tc.grown)
			if ca.certain != 0 || ca.pending != tc.wantPending || ca.credit != tc.wantCredit || st.ExitCorrectionMs != tc.wantCorrection {
				t.Errorf("%+v, correction %d", *ca, st.ExitCorrectionMs)
			}
		})
	}
	// Credit pays for the exits that come after it.
	ca := &cpuAccount{credit: 50}
	ca.addPending(30)
	ca.addCertain(40)
	if ca.credit != 0 || ca.pending != 0 || ca.certain != 20 {
		t.Errorf("after credit: %+v", *ca)
	}
}

// A process that moves on to its unit's next attempt starts there from
// what it had used; an attempt's sample counts what its members used in
// it, and what its members that left used.
func TestAccountantCarry(t *testing.T) {
	tab := newFakeTable()
	u, first := tab.fakeUnit("c1", "a1")
	p := tab.fakeMember(u, 2000, 1000, 100, 700, 0)
	p.t.vals[fakeIdx.rss] = 1 << 30
	first.exitedCPU = 40
	c, _ := newFakeAccountant(tab)
	sink := newRecSink()
	c.leave(p, nil, 0, 5000, sink) // listed: it moves on, nothing of it is an exit
	second := &attempt{unit: u}
	second.info.AttemptID = "a2"
	u.cur = second
	c.join(p, second, true, 5000, sink)
	if first.exitedCPU != 740 || p.t.mem.cpuBase != 700 {
		t.Fatalf("first attempt %d ms, base %d", first.exitedCPU, p.t.mem.cpuBase)
	}
	p.t.vals[fakeIdx.cpuUser] = 1000
	c.attemptSample(second, 6000, sink)
	if got := sink.lastCPU["a2"]; got != 300 {
		t.Errorf("the second attempt's CPU: %d, want 300", got)
	}
	if m := sink.members[len(sink.members)-1]; m.AttemptID != "a2" || m.FromMs != 5000 || m.CPUBaseMs != 700 {
		t.Errorf("the new membership: %+v", m)
	}
}
