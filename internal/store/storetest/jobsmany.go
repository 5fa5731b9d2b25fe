package storetest

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// testJobsTogether: many jobs read together (store.ReadJobs: by the
// store's JobReader where it has one) are what Job gives of each, running
// and finished, and an unknown job is absent.
func testJobsTogether(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	start := T0.Add(-15 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 2, Slots: 4, BatchTicks: 5, Seed: 7, Start: start})
	Fill(t, s, g, start, 15*60)
	page, err := s.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	states := map[string]bool{}
	for _, j := range page.Jobs {
		ids = append(ids, j.JobID)
		states[j.State] = true
	}
	if len(ids) < 4 || !states[store.StateRunning] || !states[store.StateFinished] {
		t.Fatalf("%d jobs (%v): want running and finished ones to compare", len(ids), states)
	}
	const unknown = "job_1700000000000_9999"
	got, err := store.ReadJobs(ctx, s, append([]string{unknown, ids[1]}, ids...)) // (one twice)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Errorf("%d jobs read together, want %d", len(got), len(ids))
	}
	if _, ok := got[unknown]; ok {
		t.Errorf("an unknown job was read: %+v", got[unknown])
	}
	for _, id := range ids {
		want, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[id], want) {
			t.Errorf("job %s:\n together   %+v\n one by one %+v", id, got[id], want)
		}
	}
	if m, err := store.ReadJobs(ctx, s, []string{unknown}); err != nil || len(m) != 0 {
		t.Errorf("an unknown job alone: %v, %v", m, err)
	}
}

// testJobEventsTogether: the events of many jobs read together
// (store.ReadJobEvents: by the store's JobEventsReader where it has one)
// are each job's of the kinds asked (all if none), oldest first, the first
// limit of each job, as Events gives them; a job without is absent.
func testJobEventsTogether(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	const job2, job3 = "job_1700000000000_0002", "job_1700000000000_0003"
	att21, att31 := "attempt_1700000000000_0002_m_000000_0", "attempt_1700000000000_0003_m_000000_0"
	g := &Gen{Agent: "node4-a", Host: "node4"}
	var atts []*AttemptSpec
	for i, id := range [][2]string{{att1, job1}, {att21, job2}, {att31, job3}} {
		atts = append(atts, mapAttempt(id[0], id[1], T0, ProcSpec{PID: int32(101 + i), Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20}))
	}
	b := g.Batch(atts, 0, 10, false)
	at := func(s int) int64 { return T0.Add(time.Duration(s) * time.Second).UnixMilli() }
	b.Events = []wire.Event{
		// job1: three kinds, two at one time (ordered by kind), one kind twice.
		{Ms: at(5), Kind: wire.EventReap, JobID: job1, AttemptID: att1, PID: 7, Message: "reaped"},
		{Ms: at(2), Kind: wire.EventOrphan, JobID: job1, AttemptID: att1, PID: 7, Message: "launcher gone"},
		{Ms: at(3), Kind: wire.EventProcessExit, JobID: job1, PID: 8, Message: "an exit"},
		{Ms: at(3), Kind: wire.EventLostJVM, JobID: job1, PID: 9, Message: "lost"},
		{Ms: at(4), Kind: wire.EventOrphan, JobID: job1, AttemptID: att1, PID: 10, Message: "launcher gone again"},
		// job2: an exit alone; job3: none.
		{Ms: at(6), Kind: wire.EventProcessExit, JobID: job2, PID: 11, Message: "another exit"},
		// No job.
		{Ms: at(1), Kind: wire.EventOrphan, PID: 12, Message: "no job"},
	}
	Ingest(t, s, b)
	ids := []string{job1, job2, job3, "job_1700000000000_9999"}
	kinds := []string{wire.EventOrphan, wire.EventLostJVM, wire.EventReap}
	for _, c := range []struct {
		name  string
		kinds []string
		limit int
		want  map[string][]string // kinds in order, by job
	}{
		{"all kinds", nil, 100, map[string][]string{
			job1: {wire.EventOrphan, wire.EventLostJVM, wire.EventProcessExit, wire.EventOrphan, wire.EventReap},
			job2: {wire.EventProcessExit}}},
		{"some kinds", kinds, 100, map[string][]string{
			job1: {wire.EventOrphan, wire.EventLostJVM, wire.EventOrphan, wire.EventReap}}},
		{"some kinds, two a job", kinds, 2, map[string][]string{job1: {wire.EventOrphan, wire.EventLostJVM}}},
		{"a kind no job has", []string{wire.EventOutlived}, 100, map[string][]string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := store.ReadJobEvents(ctx, s, ids, c.kinds, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			gotKinds := map[string][]string{}
			for id, evs := range got {
				for _, e := range evs {
					if e.JobID != id {
						t.Errorf("an event of %s among %s's: %+v", e.JobID, id, e)
					}
					gotKinds[id] = append(gotKinds[id], e.Kind)
				}
			}
			if !reflect.DeepEqual(gotKinds, c.want) {
				t.Errorf("kinds by job %v, want %v", gotKinds, c.want)
			}
			// Each job's as Events gives them, kind by kind.
			for id, evs := range got {
				var want []store.Event
				for _, k := range kindsOr(c.kinds, evs) {
					e, err := s.Events(ctx, store.EventFilter{JobID: id, Kind: k, Limit: 1000})
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, e...)
				}
				sort.SliceStable(want, func(x, y int) bool {
					if want[x].Time != want[y].Time {
						return want[x].Time < want[y].Time
					}
					return want[x].Kind < want[y].Kind
				})
				want = want[:min(len(want), c.limit)]
				if !reflect.DeepEqual(evs, want) {
					t.Errorf("%s: together %+v\n one by one %+v", id, evs, want)
				}
			}
		})
	}
}

// kindsOr is kinds, or the kinds of evs if none.
func kindsOr(kinds []string, evs []store.Event) []string {
	if len(kinds) > 0 {
		return kinds
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range evs {
		if !seen[e.Kind] {
			seen[e.Kind] = true
			out = append(out, e.Kind)
		}
	}
	return out
}
