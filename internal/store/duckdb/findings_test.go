package duckdb

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestAnalysesBeforeRestrictions: an analysis stored before its findings
// could be restricted (no _open columns, no f_restricted) reads, once the
// store has added them, as one with none restricted.
func TestAnalysesBeforeRestrictions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	jobs := storetest.TwelveJobs(t, s)
	j := jobs[0]
	a := &store.Analysis{JobID: j.JobID, Name: j.Name, User: j.User, Queue: j.Queue, Start: j.Start, Worst: store.SeveritySevere,
		Findings:      []store.StoredFinding{{Heuristic: "skew", Severity: store.SeveritySevere, Body: json.RawMessage(`{"n":1}`)}},
		AnalysisStamp: store.AnalysisStamp{Evaluated: j.LastSeen, Version: "1+old", LastSeen: j.LastSeen}}
	if err := s.PutAnalysis(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"worst_open", "heuristics_open", "heuristic_worst_open", "f_restricted"} {
		if _, err := s.DB().Exec("ALTER TABLE analyses DROP COLUMN " + c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(testOptions(dir)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Analysis(ctx, j.JobID)
	if err != nil || len(got.Findings) != 1 || got.Findings[0].Restricted || got.Worst != store.SeveritySevere {
		t.Fatalf("the old analysis reads %+v, %v", got, err)
	}
	min := store.SeveritySevere
	page, err := s.Jobs(ctx, store.JobFilter{MinSeverity: &min, WithoutRestricted: true})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].WorstSeverity == nil || *page.Jobs[0].WorstSeverity != store.SeveritySevere ||
		len(page.Jobs[0].Heuristics) != 1 {
		t.Fatalf("jobs without restricted: %+v, %v", page.Jobs, err)
	}
	fp, err := s.Findings(ctx, store.FindingFilter{WithoutRestricted: true})
	if err != nil || len(fp.Findings) != 1 || fp.Total != 1 {
		t.Fatalf("findings without restricted: %+v, %v", fp, err)
	}
}
