package clickhouse

import (
	"reflect"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestFreshHostsNotLookedUp: a commit does not look up the attempts that
// only batches of hosts with no agent stored touch (store.FoldOptions'
// HostsStored), and does look up those of a host whose earlier agent
// stored: an agent started again (a new agent id, on the same host)
// through another replica, which must read what the first one stored of
// its running attempt. Both replicas then answer what one embedded store
// answers of the same batches. (Were the new agent's attempts taken for
// new, as its sequence alone would say, its attempt's row would hold only
// its own batch, under no job.)
func TestFreshHostsNotLookedUp(t *testing.T) {
	srv := chtest.Start(t)
	rs := replicas(t, srv, "fresh", 2)
	a, b := rs[0], rs[1]
	ref, err := duckdb.Open(duckdb.Options{Clock: storetest.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	spec := func(n int, host string) (*storetest.Gen, []*storetest.AttemptSpec) {
		at := &storetest.AttemptSpec{ID: "attempt_1700000000000_0001_m_00000" + string(rune('0'+n)) + "_0",
			JobID: "job_1700000000000_0001", Type: "map", Start: storetest.T0.Add(-time.Minute), MemoryMB: 1024,
			JobName: "fresh", User: "u", Queue: "q",
			Procs: []storetest.ProcSpec{{PID: int32(100 + n), Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 20}}}
		return &storetest.Gen{Agent: host + "-a", Host: host}, []*storetest.AttemptSpec{at}
	}
	g1, x := spec(1, "node1")
	g2, y := spec(2, "node2")
	first := []*wire.Batch{g1.Batch(x, 0, 5, false), g2.Batch(y, 0, 5, false)}
	storetest.Ingest(t, a, first...)
	storetest.Ingest(t, ref, first...)
	if a.lookedUp != 0 {
		t.Errorf("the first commit of two new hosts looked up %d attempts, want none", a.lookedUp)
	}
	// node1's agent starts again (a new id, its sequence from 1) and
	// sends its attempt's next seconds through b.
	again := &storetest.Gen{Agent: "node1-b", Host: "node1"}
	b1 := again.Batch(x, 5, 10, false)
	// A new host's first batch in the same commit: not looked up.
	g3, z := spec(3, "node3")
	b3 := g3.Batch(z, 0, 5, false)
	storetest.Ingest(t, b, b1, b3)
	storetest.Ingest(t, ref, b1, b3)
	if b.lookedUp != 1 {
		t.Errorf("b's commit of node1's new agent and node3 looked up %d attempts, want 1 (node1's)", b.lookedUp)
	}
	same(t, rs, ref, x[0], 3)
	// a again (it holds x as node1's earlier agent left it): stale.
	b2 := again.Batch(x, 10, 15, false)
	storetest.Ingest(t, a, b2)
	storetest.Ingest(t, ref, b2)
	same(t, rs, ref, x[0], 3)
}

// same checks that the replicas answer what the embedded store ref does of
// the same batches: its n attempts, and attempt x in detail.
func same(t *testing.T, rs []*Store, ref store.Store, x *storetest.AttemptSpec, n int) {
	t.Helper()
	want := storetest.Attempts(t, ref)
	if len(want) != n {
		t.Fatalf("the embedded store holds %d attempts, want %d", len(want), n)
	}
	w, err := ref.Attempt(t.Context(), x.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range rs {
		if err := s.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := storetest.Attempts(t, s)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("replica %d:\n clickhouse %+v\n embedded   %+v", i, got, want)
		}
		st, err := s.Attempt(t.Context(), x.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.JobID != x.JobID || st.RSSByteMs != w.RSSByteMs || st.CPUMs != w.CPUMs || len(st.ProcessList) != 1 {
			t.Errorf("replica %d: %s: job %q, %v RSS byte-ms, %d ms CPU, %d processes; want %q, %v, %d, 1", i, x.ID, st.JobID,
				st.RSSByteMs, st.CPUMs, len(st.ProcessList), x.JobID, w.RSSByteMs, w.CPUMs)
		}
	}
}
