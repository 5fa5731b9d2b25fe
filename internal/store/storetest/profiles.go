package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// testProfiles: requests are stored and listed pending until their
// profiles come in batches (exactly once, whatever retries); an attempt
// lists its profiles with who asked and what came of it, newest first; a
// profile's encoding comes back as it was sent; nothing of one attempt's
// is found under another; a request whose profile never came expires;
// all of it survives a restart.
func testProfiles(t *testing.T, f Factory) {
	s := f.Open(t, Clock)
	defer func() { s.Close() }()
	// Every backend keeps profiles; the plain run (RunPlain) checks them on
	// the store under its wrapper: without the capability there are none
	// to check, and nothing reads them.
	ps, ok := Unplain(s).(store.ProfileStore)
	if !ok {
		t.Fatal("the store keeps no profiles (store.ProfileStore)")
	}
	ctx := context.Background()
	g := &Gen{Agent: "node1-p", Host: "node1"}
	a := mapAttempt(att1, job1, T0, ProcSpec{PID: 101, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20})
	b := mapAttempt(att2, job1, T0, ProcSpec{PID: 102, Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20})
	Ingest(t, s, g.Batch([]*AttemptSpec{a, b}, 0, 10, false))
	jvm := g.Key(a, a.Procs[0])
	at := func(sec int) store.Time { return store.Time(T0.Add(time.Duration(sec) * time.Second).UnixMilli()) }
	reqs := []store.ProfileRequest{
		{ID: "p-demand", AttemptID: att1, Host: "node1", PID: 101, Process: store.Key(jvm), StartMs: T0.UnixMilli(),
			Trigger: store.TriggerRequest, RequestedBy: `alice "o'brien" ünïcode`, Requested: at(11), WindowMs: 30000, IntervalMs: 200},
		{ID: "p-straggler", AttemptID: att1, Host: "node1", PID: 101, Process: store.Key(jvm), Trigger: store.TriggerStraggler,
			Requested: at(20), Baseline: "p-sibling", BaselineAttempt: att2, WindowMs: 20000, IntervalMs: 200},
		{ID: "p-sibling", AttemptID: att2, Host: "node1", PID: 102, Trigger: store.TriggerSibling, Requested: at(20), WindowMs: 20000, IntervalMs: 200},
		// Asked for an hour before, and never taken.
		{ID: "p-lost", AttemptID: att1, Host: "node9", PID: 7, Trigger: store.TriggerRequest, RequestedBy: "bob",
			Requested: store.Time(T0.Add(-time.Hour).UnixMilli()), WindowMs: 30000, IntervalMs: 200},
	}
	for _, r := range reqs {
		if err := ps.RequestProfile(ctx, r); err != nil {
			t.Fatalf("RequestProfile %s: %v", r.ID, err)
		}
	}
	pending := func(since time.Time) []string {
		t.Helper()
		rs, err := ps.PendingProfiles(ctx, since.UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	if got := pending(T0); !reflect.DeepEqual(got, []string{"p-demand", "p-sibling", "p-straggler"}) {
		t.Errorf("pending since T0: %v (oldest first, then by id)", got)
	}
	rs, err := ps.PendingProfiles(ctx, T0.UnixMilli())
	if err != nil || len(rs) == 0 || !reflect.DeepEqual(rs[0], reqs[0]) {
		t.Errorf("the pending request as stored: %+v, %v\nwant %+v", rs, err, reqs[0])
	}

	// The agent sends two profiles (a batch it sends twice).
	done := wire.Profile{ID: "p-demand", AttemptID: att1, Process: jvm, PID: 101, StartMs: int64(at(12)), EndMs: int64(at(42)),
		IntervalMs: 200, Dumps: 150, PausedUs: 301000, MaxPauseUs: 4500, Status: wire.ProfileComplete,
		Strings: []string{"main", "Work.hotLoop", "Work.main", "GC Thread#N"},
		Stacks: []wire.ProfileStack{{Thread: 0, State: wire.ThreadRunnable, Frames: []uint32{2, 1}, CPUNs: 29e9, WaitNs: 1e9, Samples: 150},
			{Thread: 3, State: wire.ThreadVM, CPUNs: 2e9, Samples: 150}}}
	failed := wire.Profile{ID: "p-straggler", AttemptID: att1, Process: jvm, PID: 101, StartMs: int64(at(21)), EndMs: int64(at(21)),
		Status: wire.ProfileFailed, Error: `pid 101: it does not catch SIGQUIT "-Xrs"`}
	pb := g.Batch([]*AttemptSpec{a, b}, 10, 20, false)
	pb.Profiles = []wire.Profile{done, failed}
	if err := wire.Validate(pb); err != nil {
		t.Fatal(err)
	}
	if d := Ingest(t, s, pb, pb); d[0] || !d[1] {
		t.Fatalf("dups %v", d)
	}
	if got := pending(T0); !reflect.DeepEqual(got, []string{"p-sibling"}) {
		t.Errorf("pending after the profiles: %v", got)
	}
	if got := pending(T0.Add(21 * time.Second)); len(got) != 0 {
		t.Errorf("pending since after every request: %v", got)
	}

	check := func(s store.Store) {
		t.Helper()
		ps := Unplain(s).(store.ProfileStore)
		list, err := ps.Profiles(ctx, att1)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range list {
			ids = append(ids, p.ID)
		}
		if !reflect.DeepEqual(ids, []string{"p-straggler", "p-demand", "p-lost"}) {
			t.Fatalf("profiles of %s: %v, want the newest first", att1, ids)
		}
		st, dm, lost := list[0], list[1], list[2]
		if st.Status != wire.ProfileFailed || st.Error != failed.Error || st.Trigger != store.TriggerStraggler || st.Baseline != "p-sibling" || st.BaselineAttempt != att2 ||
			st.Stacks != 0 || st.WindowMs != 20000 {
			t.Errorf("the failed straggler's profile: %+v", st)
		}
		if dm.Status != wire.ProfileComplete || dm.RequestedBy != reqs[0].RequestedBy || dm.Trigger != store.TriggerRequest ||
			dm.Requested != at(11) || dm.Start != at(12) || dm.End != at(42) || dm.Dumps != 150 || dm.PausedMs != 301 ||
			dm.MaxPauseMs != 4.5 || dm.Stacks != 2 || dm.Host != "node1" || dm.PID != 101 || dm.Process != store.Key(jvm) || dm.Bytes <= 0 {
			t.Errorf("the complete profile: %+v", dm)
		}
		if lost.Status != store.ProfileExpired || lost.RequestedBy != "bob" {
			t.Errorf("a request never taken: %+v", lost)
		}
		sib, err := ps.Profiles(ctx, att2)
		if err != nil || len(sib) != 1 || sib[0].Status != store.ProfileRequested || sib[0].Trigger != store.TriggerSibling {
			t.Errorf("the sibling's: %+v, %v", sib, err)
		}
		info, data, err := ps.ProfileData(ctx, att1, "p-demand")
		if err != nil {
			t.Fatal(err)
		}
		if info.ID != "p-demand" || info.RequestedBy != reqs[0].RequestedBy || info.Bytes != len(data) {
			t.Errorf("ProfileData: %+v (%d bytes)", info, len(data))
		}
		back, err := wire.UnmarshalProfile(data, wire.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*back, done) {
			t.Errorf("the profile read back:\n%+v\nwant\n%+v", *back, done)
		}
		info, data, err = ps.ProfileData(ctx, att2, "p-sibling")
		if err != nil || info.Status != store.ProfileRequested || data != nil {
			t.Errorf("a requested profile's data: %+v, %d bytes, %v", info, len(data), err)
		}
		for _, k := range [][2]string{{att2, "p-demand"}, {att1, "p-none"}, {"attempt_1_0001_m_000009_0", "p-demand"}} {
			if _, _, err := ps.ProfileData(ctx, k[0], k[1]); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("ProfileData(%s, %s): %v, want ErrNotFound", k[0], k[1], err)
			}
		}
		if l, err := ps.Profiles(ctx, "attempt_1_0001_m_000009_0"); err != nil || len(l) != 0 {
			t.Errorf("an attempt without profiles: %v, %v", l, err)
		}
	}
	check(s)
	if f.Reopen != nil {
		s = f.Reopen(t, s, Clock)
		check(s)
	}
}
