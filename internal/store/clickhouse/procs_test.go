package clickhouse

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestMembersJoinDescriptions: a membership goes into the row of its
// process's description in the same batch and attempt (one row, not
// two), a membership without one into a row of its own; the rows of
// stores made before (a row each: membersApart), alone or followed by the
// new rows in the same store, read as the new rows do: the same process
// lists, and a process that joined as a child and was described, in the
// same batch, as the task JVM it exec'd into shows that role, as before.
func TestMembersJoinDescriptions(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	g := &storetest.Gen{Agent: "node1-procs", Host: "node1"}
	a := &storetest.AttemptSpec{ID: "attempt_1800000000000_0007_m_000001_0", JobID: "job_1800000000000_0007", Type: "map",
		Start: storetest.T0, Procs: []storetest.ProcSpec{
			{PID: 2000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28},
			{PID: 2001, Role: wire.RoleChild, CPUPerS: 100, RSS: 1 << 26, StartSec: 5},
		}}
	atts := []*storetest.AttemptSpec{a}
	bs := []*wire.Batch{g.Batch(atts, 0, 5, false), g.Batch(atts, 5, 10, false), g.Batch(atts, 10, 15, true)}
	// The JVM joined as the wrapper's child, and exec'd before its batch
	// went: described as the task JVM.
	jvm := g.Key(a, a.Procs[0])
	for i := range bs[0].Members {
		if bs[0].Members[i].Process == jvm {
			bs[0].Members[i].Role = wire.RoleChild
		}
	}
	// The last batch: each process leaves with its exit's description; and
	// a membership alone (a process joining with no description in its
	// batch: a reused JVM).
	child := g.Key(a, a.Procs[1])
	end := bs[2].Processes[0].EndMs
	for _, k := range []uint64{jvm, child} {
		bs[2].Members = append(bs[2].Members, wire.Membership{Process: k, AttemptID: a.ID,
			FromMs: storetest.T0.UnixMilli(), ToMs: end})
	}
	bs[1].Members = append(bs[1].Members, wire.Membership{Process: jvm, AttemptID: a.ID, FromMs: storetest.T0.UnixMilli()})
	// The JVM is described in the first batch alone (so that its role is
	// the one of that batch's rows); it leaves in the last, alone too.
	bs[2].Processes = slices.DeleteFunc(bs[2].Processes, func(p wire.Process) bool { return p.Key == jvm })
	var descs, members int
	for _, b := range bs {
		descs += len(b.Processes)
		members += len(b.Members)
	}

	open := func(db string, apart bool) *Store {
		s, err := Open(ctx, Options{URL: srv.URL() + "?database=" + db, Clock: storetest.Clock, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		s.membersApart = apart
		t.Cleanup(func() { s.Close() })
		return s
	}
	rows := func(s *Store) (all, both uint64) {
		n, err := s.uint64s(ctx, "SELECT count() FROM "+s.read("procs")+" FINAL")
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.uint64s(ctx, "SELECT count() FROM "+s.read("procs")+" FINAL WHERE member AND described")
		if err != nil {
			t.Fatal(err)
		}
		return n[0], m[0]
	}
	before, now, mixed := open("procs_before", true), open("procs_now", false), open("procs_mixed", true)
	for i, b := range bs {
		storetest.Ingest(t, before, b)
		storetest.Ingest(t, now, b)
		storetest.Ingest(t, mixed, b)
		if i == 0 {
			mixed.membersApart = false // (a store made before, opened by this version)
		}
	}
	if n, both := rows(before); n != uint64(descs+members) || both != 0 {
		t.Errorf("rows written apart: %d (%d both), want %d (0)", n, both, descs+members)
	}
	// Every description has its membership beside it but the JVM's of
	// the last two batches, alone.
	if n, both := rows(now); n != uint64(descs+2) || both != uint64(members-2) {
		t.Errorf("rows: %d (%d both a membership and a description), want %d (%d)", n, both, descs+2, members-2)
	}
	want, err := before.AttemptProcesses(ctx, []string{a.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(want[a.ID]) != 2 {
		t.Fatalf("processes of a store made before: %+v", want)
	}
	for _, p := range want[a.ID] {
		if p.Key == store.Key(jvm) && p.Role != wire.RoleTaskJVM {
			t.Errorf("the JVM's role: %q, want %q (its description's, later in the batch than its membership)",
				p.Role, wire.RoleTaskJVM)
		}
		if p.Key != store.Key(jvm) && p.End == 0 {
			t.Errorf("process %d not ended: %+v", p.PID, p)
		}
	}
	wantAtt, err := before.Attempt(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{now, mixed} {
		got, err := s.AttemptProcesses(ctx, []string{a.ID})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: processes\n%+v\nwant (as the rows written apart)\n%+v", s.c.Database(), got, want)
		}
		att, err := s.Attempt(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(att, wantAtt) {
			t.Errorf("%s: attempt\n%+v\nwant\n%+v", s.c.Database(), att, wantAtt)
		}
	}
}
