package clickhouse

import (
	"context"
	"testing"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestAnalysesBeforeRestrictions: an analysis stored before its findings
// could be restricted reads as one with none restricted. Its row is
// stored, the restricted columns dropped, and the store opened again: Open
// adds them back with their defaults (none, empty), as to a row stored
// before them.
func TestAnalysesBeforeRestrictions(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	o := Options{URL: srv.URL() + "?database=old_analyses", Clock: storetest.Clock, InsertEvery: -1}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	job := storetest.PutOneAnalysis(t, s)
	for _, c := range []string{"worst_open", "heuristics_open", "heuristic_worst_open", "f_restricted"} {
		if err := s.Client().Exec(ctx, "ALTER TABLE analyses DROP COLUMN "+c, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(ctx, o); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckUnrestricted(t, s, job)
}
