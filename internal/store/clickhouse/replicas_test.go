package clickhouse

import (
	"context"
	"fmt"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
)

// TestReplicaBeats: the replicas' beats are read back, the latest of each
// (a leaving beat of the same second included), in the server's clock.
func TestReplicaBeats(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=beats", InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now, rs, err := s.Replicas(ctx)
	if err != nil || len(rs) != 0 || now < 1_700_000_000 {
		t.Fatalf("no replica yet: %d, %v, %v", now, rs, err)
	}
	for _, r := range []store.Replica{{ID: "a", Since: now - 10, Beat: now - 10}, {ID: "a", Since: now - 10, Beat: now - 2},
		{ID: "b", Since: now - 5, Beat: now - 1}, {ID: "b", Since: now - 5, Beat: now - 1, Left: true}} {
		if err := s.Beat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	now2, rs, err := s.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rs)
	want := fmt.Sprint([]store.Replica{{ID: "a", Since: now - 10, Beat: now - 2}, {ID: "b", Since: now - 5, Beat: now - 1, Left: true}})
	if got != want || now2 < now || now2 > now+60 {
		t.Errorf("replicas at %d: %s, want %s", now2-now, got, want)
	}
}
