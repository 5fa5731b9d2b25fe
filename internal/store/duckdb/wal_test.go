package duckdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestWALBesideAnalyses: with the analyser storing analyses all the time
// beside ingest, every Maintain's checkpoint succeeds and leaves the WAL
// nearly empty. Before, a CHECKPOINT met an analysis' UPDATE most of the
// time and failed ("there are other write transactions active"), and the
// WAL kept every compaction since the last one that had not.
func TestWALBesideAnalyses(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		body := json.RawMessage(`{"heuristic":"skew"}`)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a := &store.Analysis{JobID: fmt.Sprintf("job_1700000000000_%04d", i%50), Name: "wordcount", User: "alice",
				Queue: "etl", Worst: store.SeverityCritical, Report: json.RawMessage(`{}`),
				Findings:      []store.StoredFinding{{Heuristic: "skew", Severity: store.SeverityCritical, Body: body}},
				AnalysisStamp: store.AnalysisStamp{Evaluated: store.Time(i), Version: "1+test", Settings: "{}"}}
			// One at a time, and several in a transaction (PutAnalyses).
			put := func() error { return s.PutAnalysis(ctx, a) }
			if i%2 == 1 {
				b := *a
				b.JobID += "b"
				put = func() error { return s.PutAnalyses(ctx, []*store.Analysis{a, &b}) }
			}
			if err := put(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	start := time.Now().Add(-24 * time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 5, Seed: 1, Start: start})
	for m := 0; m < 8; m++ {
		for r := 0; r < 5; r++ {
			storetest.Ingest(t, s, g.Next()...)
		}
		// The fresh chunks are a day old: every Maintain compacts and
		// checkpoints.
		if err := s.Maintain(ctx, time.Now()); err != nil {
			t.Fatalf("maintenance %d beside the analyses: %v", m, err)
		}
		// Analyses stored since the checkpoint are a few kB.
		if wal := s.walBytes(); wal > 1<<20 {
			t.Fatalf("after maintenance %d the WAL holds %d B", m, wal)
		}
	}
}

// TestCheckpointOwed: a Maintain whose checkpoint fails says so, and the
// next one checkpoints even when it has nothing else to do.
func TestCheckpointOwed(t *testing.T) {
	s, c := fedStore(t)
	ctx := context.Background()
	// A transaction that updated a row and is still open (as no write of
	// the store's own leaves one) makes DuckDB refuse the checkpoint.
	for _, q := range []string{"BEGIN TRANSACTION", "UPDATE meta SET value = value WHERE key = 'schema_version'"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Maintain(ctx, time.Now()); err == nil || !strings.Contains(err.Error(), "cannot checkpoint") {
		t.Fatalf("a checkpoint beside an open update: %v", err)
	}
	wal := s.walBytes()
	if wal == 0 {
		t.Fatalf("the WAL holds only %d B: nothing to check", wal)
	}
	if _, err := c.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Nothing to compact nor to drop: the checkpoint is still owed.
	if err := s.Maintain(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if after := s.walBytes(); after > 0 {
		t.Errorf("the WAL holds %d B after the checkpoint owed (%d B before)", after, wal)
	}
}

// TestCheckpointBesideOldReads: an update committed while an older read
// is still open keeps DuckDB's checkpoint lock until that read ends (its
// transaction is kept for the read): Maintain's checkpoint waits for it
// rather than fail.
func TestCheckpointBesideOldReads(t *testing.T) {
	s, c := fedStore(t)
	ctx := context.Background()
	var n int
	if _, err := c.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM attempts").Scan(&n); err != nil {
		t.Fatal(err)
	}
	a := &store.Analysis{JobID: "job_1700000000000_0001", Worst: store.SeverityNone, Report: json.RawMessage(`{}`),
		AnalysisStamp: store.AnalysisStamp{Evaluated: 1, Version: "1+test", Settings: "{}"}}
	if err := s.PutAnalysis(ctx, a); err != nil {
		t.Fatal(err)
	}
	// The read ends once a checkpoint was refused.
	refused := 0
	s.refused = func() {
		if refused++; refused == 1 {
			if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
				t.Error(err)
			}
		}
	}
	if err := s.Maintain(ctx, time.Now()); err != nil {
		t.Fatalf("maintenance beside a read older than an update: %v", err)
	}
	if refused == 0 {
		t.Error("no checkpoint was refused: the read did not keep the update's lock")
	}
	if wal := s.walBytes(); wal > 0 {
		t.Errorf("the WAL holds %d B after maintenance", wal)
	}
}

// fedStore opens a store in a new directory holding 5 rounds of 20
// loadgen nodes' batches (a day old: the next Maintain compacts them),
// and a connection of the test's own to its database; both are closed
// when the test ends.
func fedStore(t *testing.T) (*Store, *sql.Conn) {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 5, Seed: 1, Start: time.Now().Add(-24 * time.Hour)})
	for r := 0; r < 5; r++ {
		storetest.Ingest(t, s, g.Next()...)
	}
	c, err := s.DB().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

// TestFreshChunksUncompressed: a commit of more than a row group of
// chunks (which DuckDB writes to the file at once) stores the fresh
// chunks' data without DuckDB's compression, also in the fresh table a
// compaction makes again, and they read back as stored.
func TestFreshChunksUncompressed(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 200, Slots: 8, BatchTicks: 5, Seed: 1, Start: time.Now().Add(-time.Hour)})
	check := func(table string) {
		t.Helper()
		var segments int
		var kinds []string
		rows, err := s.handle().QueryContext(ctx, `SELECT DISTINCT compression, count(*) OVER () FROM pragma_storage_info('`+table+`')
			WHERE column_name = 'data' AND segment_type = 'BLOB'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k, &segments); err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if segments == 0 || len(kinds) != 1 || kinds[0] != "Uncompressed" {
			t.Fatalf("%s: the data's segments (%d) are compressed as %v, want Uncompressed only", table, segments, kinds)
		}
	}
	for range 2 {
		fresh := freshName(s.current())
		round := append(g.Next(), g.Next()...)
		storetest.Ingest(t, s, round...)
		var n int
		if err := s.handle().QueryRowContext(ctx, `SELECT count(*) FROM `+fresh).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n < rowGroupSize {
			t.Fatalf("%d chunks in %s, want a row group (%d) at least", n, fresh, rowGroupSize)
		}
		check(fresh)
		// Every chunk decodes to its samples.
		rows, err := s.handle().QueryContext(ctx, `SELECT n, data FROM `+fresh)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n int
			var data []byte
			if err := rows.Scan(&n, &data); err != nil {
				t.Fatal(err)
			}
			if c, err := chunk.Decode(data); err != nil || len(c.Times) != n {
				t.Fatalf("a chunk of %d samples read back: %v, %v", n, c, err)
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
