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

// TestOlderStorageVersion: a file written in DuckDB's oldest format, as
// the store wrote it before storageVersion, opens, reads the same, takes
// more data (in the new format from then on) and reads it after reopening.
func TestOlderStorageVersion(t *testing.T) {
	dir := t.TempDir()
	was := storageVersion
	t.Cleanup(func() { storageVersion = was })
	storageVersion = ""
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if v := fileStorageVersion(t, s); v != "v1.0.0+" {
		t.Fatalf("the file before was written in %q", v)
	}
	start := time.Now().Add(-2 * time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 7, Start: start})
	storetest.Fill(t, s, g, start, 12*60)
	before := readAll(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	storageVersion = was
	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("cannot open a file of the older format: %v", err)
	}
	if got := readAll(t, s); !sameRead(got, before) {
		t.Errorf("the older file reads otherwise once opened again")
	}
	if v := fileStorageVersion(t, s); v != was+"+" {
		t.Errorf("the file is now in %q, want %s+", v, was)
	}
	storetest.Fill(t, s, g, start, 24*60)
	if err := s.Maintain(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	more := readAll(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := readAll(t, s); !sameRead(got, more) {
		t.Errorf("what was written in the new format reads otherwise once opened again")
	}
	if len(more.series) <= len(before.series) {
		t.Errorf("%d series read, %d before more data", len(more.series), len(before.series))
	}
}

// fileStorageVersion is the storage format DuckDB says the file is in.
func fileStorageVersion(t *testing.T, s *Store) string {
	t.Helper()
	var v string
	if err := s.DB().QueryRow(`SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = 'ts'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

type readBack struct {
	attempts []store.Attempt
	series   []store.SeriesResult
	procs    [][]store.Process
}

// readAll reads every attempt, its series and processes and theirs.
func readAll(t *testing.T, s *Store) readBack {
	t.Helper()
	ctx := context.Background()
	var r readBack
	r.attempts = storetest.Attempts(t, s)
	for _, a := range r.attempts {
		from := int64(a.Start)
		to := max(int64(a.End), int64(a.LastSeen), from+a.DurationMs) + 1
		res, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID,
			Metrics: []string{"cpu_percent", "rss_bytes"}, From: from, To: to, Step: max(1000, (to-from)/60)})
		if err != nil {
			t.Fatal(err)
		}
		r.series = append(r.series, *res)
		d, err := s.Attempt(ctx, a.AttemptID)
		if err != nil {
			t.Fatal(err)
		}
		r.procs = append(r.procs, d.ProcessList)
		for _, p := range d.ProcessList {
			res, err := s.Series(ctx, store.SeriesQuery{Scope: store.ScopeProcess, Process: p.Key,
				Metrics: []string{"cpu_percent", "rss_bytes"}, From: from, To: to, Step: max(1000, (to-from)/60)})
			if err != nil {
				t.Fatal(err)
			}
			r.series = append(r.series, *res)
		}
	}
	return r
}

// sameRead compares two reads, empty buckets (NaN) alike.
func sameRead(a, b readBack) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}
