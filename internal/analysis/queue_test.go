package analysis

import (
	"context"
	"fmt"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
)

// The queue gives ended jobs first, up to the batch and a share of those
// waiting for each worker waiting for jobs, and never with running ones;
// then running ones up to the batch.
func TestQueueTakesEndedTogether(t *testing.T) {
	q := newQueue(1000)
	add := func(n int, ended bool) {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("job_%t_%d", ended, i)
			if ok, full := q.add(job{Job: store.Job{JobID: id}, ended: ended}, q.poll()); !ok || full {
				t.Fatalf("%s not queued (full %t)", id, full)
			}
		}
		q.wake()
	}
	ctx := context.Background()
	take := func(batch int) (ended, running int) {
		js, ok := q.take(ctx, batch)
		if !ok {
			t.Fatal("nothing taken")
		}
		for _, j := range js {
			if j.ended {
				ended++
			} else {
				running++
			}
			q.done(j.JobID)
		}
		return ended, running
	}
	add(5, false)
	add(150, true)
	for _, want := range [][2]int{
		{64, 0}, // the batch
		{64, 0},
		{22, 0},
		{0, 5}, // then the running ones
	} {
		if e, r := take(64); e != want[0] || r != want[1] {
			t.Fatalf("took %d ended and %d running jobs, want %d and %d", e, r, want[0], want[1])
		}
	}
	add(3, true)
	add(100, false)
	if e, r := take(64); e != 3 || r != 0 {
		t.Fatalf("took %d ended and %d running jobs, want 3 ended alone", e, r)
	}
	if e, r := take(64); e != 0 || r != 64 {
		t.Fatalf("took %d ended and %d running jobs, want 64 running", e, r)
	}
	// Another worker waits for jobs: each takes a share of the ended
	// ones (7: 4, and 3 left once the other is busy).
	q.mu.Lock()
	q.takers++
	q.mu.Unlock()
	add(7, true)
	if e, r := take(64); e != 4 || r != 0 {
		t.Fatalf("took %d ended and %d running jobs, want 4 ended: a share of 7 for 2 workers", e, r)
	}
	q.mu.Lock()
	q.takers-- // (the other one is busy now)
	q.mu.Unlock()
	if e, r := take(64); e != 3 || r != 0 {
		t.Fatalf("took %d ended and %d running jobs, want the 3 ended left", e, r)
	}
	if e, r := take(64); e != 0 || r != 36 {
		t.Fatalf("took %d ended and %d running jobs, want the 36 running left", e, r)
	}
}
