package duckdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// A data directory whose chunks were compacted before format 3 (format 2
// with zstd) reads as it did once a store that packs its chunks opens it,
// and on as packed chunks are compacted beside the old ones, and once
// chunks of both formats are rolled up: every attempt's processes and
// series, every process's and every job's series read the same as from a
// store that wrote format 2 all along.
func TestChunksBeforePacked(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	start := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	clock := store.Clock{Now: func() time.Time { return start.Add(3 * time.Hour) }}
	open := func(dir string, legacy bool, retention time.Duration) *Store {
		s, err := Open(Options{Dir: dir, CompactAge: 2 * time.Minute, Clock: clock, legacyChunks: legacy, Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cfg := loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 21, Start: start}
	g, gRef := loadgen.NewGenerator(cfg), loadgen.NewGenerator(cfg)
	dir, refDir := t.TempDir(), t.TempDir()
	old, ref := open(dir, true, 0), open(refDir, true, 0)
	defer func() { ref.Close() }()
	storetest.Fill(t, old, g, start, 20*60)
	storetest.Fill(t, ref, gRef, start, 20*60)
	before := readEverything(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := open(dir, false, 0)
	defer func() { s.Close() }()
	if v := chunkVersions(t, s); v[3] != 0 || v[2] == 0 {
		t.Fatalf("the store made before holds chunks of formats %v", v)
	}
	compareReads(t, "opened again", before, readEverything(t, s))
	storetest.Fill(t, s, g, start, 40*60)
	storetest.Fill(t, ref, gRef, start, 40*60)
	if v := chunkVersions(t, s); v[3] == 0 || v[2] == 0 {
		t.Fatalf("compacted since: chunks of formats %v, want 2 and 3", v)
	}
	if v := chunkVersions(t, ref); v[3] != 0 {
		t.Fatalf("the reference store holds chunks of formats %v", v)
	}
	compareReads(t, "compacted since", readEverything(t, ref), readEverything(t, s))
	// Raw samples of the first 30 minutes past their retention: minute
	// rollups, made of format 2 chunks and of format 3 ones.
	for _, st := range []*Store{s, ref} {
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	later := start.Add(60 * time.Minute)
	s, ref = open(dir, false, 30*time.Minute), open(refDir, true, 30*time.Minute)
	for _, st := range []*Store{s, ref} {
		if err := st.Maintain(context.Background(), later); err != nil {
			t.Fatal(err)
		}
	}
	var rollups int
	if err := s.handle().QueryRow(`SELECT count(*) FROM series_chunks WHERE level = ?`, levelRollup).Scan(&rollups); err != nil {
		t.Fatal(err)
	}
	if rollups == 0 {
		t.Fatal("nothing was rolled up")
	}
	compareReads(t, "rolled up", readEverything(t, ref), readEverything(t, s))
}

// chunkVersions counts series_chunks' chunks by format (their first byte
// without the zstd flag).
func chunkVersions(t *testing.T, s *Store) map[int]int {
	t.Helper()
	rows, err := s.handle().Query(`SELECT data FROM series_chunks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	v := map[int]int{}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		v[int(data[0]&0x0f)]++
	}
	return v
}

// readEverything is what the store answers of every job, attempt and
// process it holds, by what was asked.
func readEverything(t *testing.T, s *Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	names := func(ms []store.SeriesMetric) []string {
		var n []string
		for _, m := range ms {
			n = append(n, m.Name)
		}
		return n
	}
	series := func(q store.SeriesQuery) {
		res, err := s.Series(ctx, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		out[fmt.Sprintf("series %s %s %s %v", q.Scope, q.JobID, q.AttemptID, q.Process)] = fmt.Sprint(*res)
	}
	jobs := map[string][2]int64{}
	for _, a := range storetest.Attempts(t, s) {
		d, err := s.Attempt(ctx, a.AttemptID)
		if err != nil {
			t.Fatal(err)
		}
		out["attempt "+a.AttemptID] = fmt.Sprintf("%+v", d.ProcessList)
		from, to := int64(a.Start)-60_000, int64(a.LastSeen)+60_000
		series(store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID, Metrics: names(store.AttemptSeriesMetrics),
			From: from, To: to, Step: 1000})
		for _, p := range d.ProcessList {
			series(store.SeriesQuery{Scope: store.ScopeProcess, Process: p.Key, Metrics: names(store.ProcessSeriesMetrics),
				From: from, To: to, Step: 1000})
		}
		j := jobs[a.JobID]
		if j[0] == 0 || from < j[0] {
			j[0] = from
		}
		j[1] = max(j[1], to)
		jobs[a.JobID] = j
	}
	for id, r := range jobs {
		series(store.SeriesQuery{Scope: store.ScopeJob, JobID: id, Metrics: names(store.AttemptSeriesMetrics),
			From: r[0], To: r[1], Step: 5000})
	}
	if len(jobs) < 3 || len(out) < 100 {
		t.Fatalf("%d jobs, %d answers: want more", len(jobs), len(out))
	}
	return out
}

func compareReads(t *testing.T, when string, want, got map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %s missing", when, k)
		} else if g != w {
			t.Errorf("%s: %s differs:\n want %.600s\n got  %.600s", when, k, w, g)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d answers, want %d", when, len(got), len(want))
	}
}
