package analysis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestStoredFindings: a finished job's page stores the report it made,
// and the next page (of any server of the same version and settings)
// reads it without reading the job's series; late data, another version
// or other settings make it again (lazily, when it is read), and a
// running job's report is not stored by its page.
func TestStoredFindings(t *testing.T) {
	start := time.Now().Add(-40 * time.Minute).Truncate(time.Second)
	st, _, clock := filledStore(t, start, 20*60)
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	ctx := context.Background()
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var fin, run store.Job // a finished job with findings, a running job
	for _, j := range page.Jobs {
		switch {
		case j.State == store.StateFinished && fin.JobID == "":
			if r, err := analysis.New(st).Report(ctx, j.JobID); err != nil {
				t.Fatal(err)
			} else if len(r.Findings) > 0 {
				fin = j
			}
		case j.State == store.StateRunning && run.JobID == "":
			run = j
		}
	}
	if fin.JobID == "" || run.JobID == "" {
		t.Fatalf("no finished or no running job among %d", len(page.Jobs))
	}
	c := &counting{Store: st, keep: true}
	findings := func(o analysis.Options, id string) (*analysis.Report, int64) {
		t.Helper()
		o.Now = now
		n := c.reads()
		r, err := analysis.NewWith(c, o).Findings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*analysis.Report), c.reads() - n
	}
	stored := func(id string) *store.Analysis {
		t.Helper()
		s, err := st.Analysis(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return s
	}
	v1 := analysis.Options{Build: "v1"}
	version := func(build string) string { return fmt.Sprintf("%d+%s", analysis.Revision, build) }
	first, n := findings(v1, fin.JobID)
	if n == 0 {
		t.Fatal("the first report read nothing")
	}
	if s := stored(fin.JobID); s.Version != version("v1") || !s.Ended || s.Mark != analysis.Mark(&fin) || s.Settings != "{}" ||
		len(s.Findings) != len(first.Findings) || s.Worst != first.Worst {
		t.Errorf("stored: %+v; made %d findings, worst %s", s.AnalysisStamp, len(first.Findings), first.Worst)
	}
	again, n := findings(v1, fin.JobID)
	if n != 0 || canonical(again) != canonical(first) || again.Version != version("v1") {
		t.Errorf("read again: %d reads, %s\nwant %s", n, canonical(again), canonical(first))
	}
	// Another version: made again when read, and stored.
	v2, n := findings(analysis.Options{Build: "v2"}, fin.JobID)
	if n == 0 || v2.Version != version("v2") || stored(fin.JobID).Version != version("v2") {
		t.Errorf("another version: %d reads, version %s, stored %s", n, v2.Version, stored(fin.JobID).Version)
	}
	// Other settings: made again, without the heuristics skipped.
	skip := analysis.Settings{Skip: []string{first.Findings[0].Heuristic}}
	r, n := findings(analysis.Options{Build: "v2", Settings: skip}, fin.JobID)
	for _, f := range r.Findings {
		if f.Heuristic == skip.Skip[0] {
			t.Errorf("settings %s: a %s finding", skip.Text(), f.Heuristic)
		}
	}
	if n == 0 || stored(fin.JobID).Settings != skip.Text() {
		t.Errorf("other settings: %d reads, stored settings %s", n, stored(fin.JobID).Settings)
	}
	// Late data for one of its attempts: made again, and stored.
	d, err := st.Job(ctx, fin.JobID)
	if err != nil {
		t.Fatal(err)
	}
	x := d.AttemptList[0]
	ingest(t, st, att{x.AttemptID, fin.JobID, x.Type, x.Host, time.UnixMilli(int64(x.End)), 3, 900, 0, 64 << 30, 0, 0})
	before := stored(fin.JobID).Mark
	if _, n := findings(analysis.Options{Build: "v2", Settings: skip}, fin.JobID); n == 0 || stored(fin.JobID).Mark == before {
		t.Errorf("late data: %d reads, the stored mark %d as before", n, before)
	}
	// A running job's page does not store its report.
	findings(v1, run.JobID)
	if _, err := st.Analysis(ctx, run.JobID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("running job %s: stored by its page (%v)", run.JobID, err)
	}
	if err := (analysis.Settings{Skip: []string{"no_such"}}).Check(); err == nil {
		t.Error("settings skipping an unknown heuristic pass the check")
	}
}

// TestStoredFindingsWithoutNeighbours: for a reader the access file hides
// the neighbours from, the stored findings that name what else ran on a
// job's hosts (made looking at them) are stored restricted and left out
// of the list and its total, and the job's worst severity is that of the
// others; the rest is as for anyone. A finding stored before restrictions
// (Revision 1) is left out of the list too.
func TestStoredFindingsWithoutNeighbours(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	noisy := analysis.Finding{Heuristic: "noisy_neighbour", Severity: store.SeveritySevere, AttemptIDs: []string{"attempt_1_0001_m_000000_0", "attempt_1_0002_m_000000_0"},
		Message: "On node1 meanwhile 1 other attempts of 1 jobs ran", Numbers: []analysis.Number{{"neighbours", 1, "count"}}}
	gc := analysis.Finding{Heuristic: "gc", Severity: store.SeverityModerate, AttemptIDs: []string{"attempt_1_0001_m_000000_0"},
		Message: "GC took 30% of the CPU", Numbers: []analysis.Number{{"gc_percent", 30, "percent"}}}
	a := analysis.New(st)
	now := store.Time(time.Now().UnixMilli())
	sa, err := a.ToStored(&analysis.Report{JobID: "job_1_0001", State: store.StateFinished, Evaluated: now, Worst: store.SeveritySevere,
		Findings: []analysis.Finding{noisy, gc}})
	if err != nil {
		t.Fatal(err)
	}
	if !sa.Findings[0].Restricted || sa.Findings[1].Restricted {
		t.Fatalf("stored: %+v", sa.Findings)
	}
	sa.User, sa.Queue, sa.Start = "u", "q", now
	if err := st.PutAnalysis(ctx, sa); err != nil {
		t.Fatal(err)
	}
	// The same findings stored by Revision 1, unrestricted, in an older job.
	old := *sa
	old.JobID, old.Start, old.Version = "job_1_0000", now-1, "1+old"
	old.Findings = []store.StoredFinding{sa.Findings[0], sa.Findings[1]}
	old.Findings[0].Restricted = false
	if err := st.PutAnalysis(ctx, &old); err != nil {
		t.Fatal(err)
	}
	for _, hide := range []bool{false, true} {
		v, err := a.StoredFindings(ctx, store.FindingFilter{Limit: 100}, hide)
		if err != nil {
			t.Fatal(err)
		}
		p := v.(analysis.FindingPage)
		var got []string
		for _, f := range p.Findings {
			got = append(got, f.JobID+"/"+f.Heuristic)
		}
		want, total := "[job_1_0001/noisy_neighbour job_1_0001/gc job_1_0000/noisy_neighbour job_1_0000/gc]", 4
		if hide {
			want, total = "[job_1_0001/gc job_1_0000/gc]", 3
		}
		if fmt.Sprint(got) != want || p.Total != total {
			t.Errorf("without neighbours %v: %v, total %d; want %s, %d", hide, got, p.Total, want, total)
		}
	}
}

// filledStore is a DuckDB store with the first seconds of a loadgen
// cluster of 8 nodes from start, and its clock (the store's, settable):
// at the data's last second, so that running jobs run. More of the same
// cluster is g's (storetest.Fill it again).
func filledStore(t *testing.T, start time.Time, seconds int) (*duckdb.Store, *loadgen.Generator, *atomic.Int64) {
	t.Helper()
	clock := new(atomic.Int64)
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: func() time.Time { return time.UnixMilli(clock.Load()) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 8, Slots: 8, BatchTicks: 5, Seed: 5, Start: start})
	clock.Store(storetest.FillAt(t, st, g, start, seconds, func(t time.Time) { clock.Store(t.UnixMilli()) }).UnixMilli())
	return st, g, clock
}
