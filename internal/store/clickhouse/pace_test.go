package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestCommitsPacedFromTheirStart: the next commit is due InsertEvery
// after the last one that inserted began (Begin, when the pipeline took
// its batches), not after its fold ended: a batch that came just after a
// commit began waits InsertEvery and one commit, not also the fold of the
// commit before (issue 25's acknowledgement p99). A commit of duplicates
// only does not move it.
func TestCommitsPacedFromTheirStart(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	const every = time.Hour
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=pace", Clock: storetest.Clock, InsertEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &storetest.Gen{Agent: "node1-pace", Host: "node1"}
	att := []*storetest.AttemptSpec{{ID: "attempt_1800000000000_0001_m_000001_0", JobID: "job_1800000000000_0001", Type: "map",
		Start: storetest.T0, Procs: []storetest.ProcSpec{{PID: 1000, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}}}
	b := g.Batch(att, 0, 5, false)
	commit := func() *tx {
		app, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(b); err != nil {
			t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		return app.(*tx)
	}
	first := commit()
	if got, want := s.NextCommit(), first.began.Add(every); !got.Equal(want) {
		t.Fatalf("next commit at %s, want the commit's start + InsertEvery, %s", got.Format(time.StampMicro), want.Format(time.StampMicro))
	}
	// The same batch again: a duplicate, nothing inserted, no wait.
	dup := commit()
	if dup.began.Before(first.began) || !s.NextCommit().Equal(first.began.Add(every)) {
		t.Errorf("a commit of duplicates moved the next commit to %s", s.NextCommit().Format(time.StampMicro))
	}
}
