package clickhouse

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestAnalysesBeforeRestrictions: an analysis stored before its findings
// could be restricted (its row has the _open columns' and f_restricted's
// defaults: none, empty) reads as one with none restricted.
func TestAnalysesBeforeRestrictions(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=old_analyses", Clock: storetest.Clock, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := storetest.TwelveJobs(t, s)[0]
	// The row as PutAnalysis wrote it before: its first 19 columns.
	var b Block
	b.UInt64(jobKey(j.JobID))
	b.String(j.JobID)
	b.Int64(int64(j.LastSeen))
	b.String(j.Name)
	b.String(j.User)
	b.String(j.Queue)
	b.Int64(int64(j.Start))
	b.Int64(int64(j.LastSeen))
	b.Bool(false)
	b.String("1+old")
	b.String("")
	b.UInt64(1)
	b.UInt8(uint8(store.SeveritySevere))
	b.Strings([]string{"skew"})
	b.Severities([]store.Severity{store.SeveritySevere})
	b.Strings([]string{"skew"})
	b.Severities([]store.Severity{store.SeveritySevere})
	b.buf = binary.AppendUvarint(b.buf, 1)
	b.Blob([]byte(`{"n":1}`))
	b.Blob(nil)
	b.Row()
	if err := s.insert(ctx, "analyses", analysisColumns[:19], &b); err != nil {
		t.Fatal(err)
	}
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
