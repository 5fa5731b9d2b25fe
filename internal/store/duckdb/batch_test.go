package duckdb

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// Attempt reads its processes' chunks in one scan; each process's summary
// is the one a read of that process's chunks alone gives (its life, with
// the lookback on both sides), over fresh and compacted chunks.
func TestAttemptProcessesReadOnce(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now().Add(-40 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 12, Start: start})
	storetest.Fill(t, s, g, start, 40*60)
	page, err := s.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range page.Jobs {
		d, err := s.Job(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range d.AttemptList {
			ad, err := s.Attempt(ctx, a.AttemptID)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ad.ProcessList {
				from, to := int64(0), int64(1<<62)
				if p.Start > 0 {
					from = int64(p.Start) - lookback
				}
				if p.End > 0 {
					to = int64(p.End) + lookback
				}
				pts, err := s.points(ctx, kindProcess, uint64(p.Key), from, to)
				if err != nil {
					t.Fatal(err)
				}
				want := p
				store.ProcessSummary(pts, &want)
				if !reflect.DeepEqual(p, want) {
					t.Errorf("%s process %d:\n read together %+v\n read alone    %+v", a.AttemptID, p.PID, p, want)
				}
				n++
			}
		}
	}
	if n < 50 {
		t.Fatalf("%d processes compared: want more", n)
	}
}
