package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
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

// TestAnalysesGrouped: analyses put within AnalysesEvery of the last
// group's insert go in one insert per table (the server's query log counts
// them); a put whose context ends while its group waits returns that
// error, and its analysis is not stored.
func TestAnalysesGrouped(t *testing.T) {
	srv := chtest.StartWith(t, chtest.Options{QueryLog: true})
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=grouped", Clock: storetest.Clock, InsertEvery: -1, AnalysesEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	jobs := storetest.TwelveJobs(t, s)
	ms := storetest.T0.UnixMilli() + 60_000
	analysis := func(j store.Job) *store.Analysis {
		return &store.Analysis{JobID: j.JobID, Name: j.Name, User: j.User, Queue: j.Queue, Start: j.Start,
			Report: json.RawMessage(`{}`), AnalysisStamp: store.AnalysisStamp{Evaluated: store.Time(ms), Version: "1+test", Mark: 1,
				LastSeen: j.LastSeen, Ended: true}}
	}
	// The first goes at once; the next ten wait for the second's time,
	// together.
	if err := s.PutAnalysis(ctx, analysis(jobs[0])); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, j := range jobs[1:11] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.PutAnalysis(ctx, analysis(j)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// One whose context ends first (its group waits a second).
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.PutAnalysis(short, analysis(jobs[11])); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a put whose context ended: %v", err)
	}
	if err := s.PutAnalysis(ctx, analysis(jobs[0])); err != nil { // (its group, or a later one)
		t.Fatal(err)
	}
	for i, j := range jobs {
		_, err := s.Analysis(ctx, j.JobID)
		if i < 11 && err != nil || i == 11 && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the analysis of %s (put %d) reads %v", j.JobID, i, err)
		}
	}
	if err := s.Client().Exec(ctx, "SYSTEM FLUSH LOGS", nil); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"analyses", "analysis_stamps"} {
		rows, err := s.Client().Query(ctx, "SELECT count() FROM system.query_log WHERE type = 2 AND query LIKE 'INSERT INTO grouped."+table+" %'", nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := rows.UInt64(); n != 3 {
			t.Errorf("%d inserts into %s, want 3 (the first put, the ten together, the last)", n, table)
		}
	}
}
