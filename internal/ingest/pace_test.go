package ingest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// pacedStore is a store that wants no commit before next (unix nanos;
// store.CommitPacer), and counts its transactions.
type pacedStore struct {
	*gatedStore
	next  atomic.Int64
	begun atomic.Int64
}

func (s *pacedStore) NextCommit() time.Time { return time.Unix(0, s.next.Load()) }

func (s *pacedStore) Begin(ctx context.Context) (store.Appender, error) {
	s.begun.Add(1)
	return s.gatedStore.Begin(ctx)
}

// TestPipelinePaced: the pipeline waits for a paced store's next commit
// before it takes the batches waiting, so those that arrive while it
// waits go into that commit, not the one after.
func TestPipelinePaced(t *testing.T) {
	r := newRig(t, rigOptions{})
	ps := &pacedStore{gatedStore: r.gs}
	ps.next.Store(time.Now().Add(time.Hour).UnixNano())
	p := NewPipeline(ps, PipelineOptions{})
	defer p.Close()
	results := make(chan Result, 5)
	submit := func(i int) {
		go func() { results <- p.Submit(context.Background(), batch(fmt.Sprintf("agent-%d", i), 1, "node1")) }()
	}
	submit(0)
	// The writer has taken the first batch and waits for the store.
	testsrv.WaitUntil(t, "the writer to take the first batch", 10*time.Second,
		func() bool { return p.queued.Load() > 0 && len(p.q) == 0 })
	for i := 1; i < 5; i++ {
		submit(i)
	}
	testsrv.WaitUntil(t, "4 batches queued", 10*time.Second, func() bool { return len(p.q) == 4 })
	if n := ps.begun.Load(); n != 0 {
		t.Fatalf("%d commits began before the store's time", n)
	}
	ps.next.Store(time.Now().UnixNano())
	for range 5 {
		if res := <-results; res.Err != nil || res.Duplicate {
			t.Fatalf("result %+v", res)
		}
	}
	if n := ps.begun.Load(); n != 1 {
		t.Errorf("%d commits, want the 5 batches in 1", n)
	}
	if u := r.samples(t); u.Samples != 5*10 {
		t.Errorf("%d samples stored, want 50", u.Samples)
	}
}
