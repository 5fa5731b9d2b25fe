// Package duckdb is the embedded store: one DuckDB file in the data
// directory. Ingest appends samples with DuckDB's appender into "hot"
// tables; Maintain moves them, sorted by series and time, into the main
// tables where they compress to a few bytes each. Summaries of processes,
// attempts and jobs are kept current at every commit.
package duckdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
)

// Options configure the store.
type Options struct {
	// Dir holds taskscope.duckdb. Empty: an in-memory database (tests).
	Dir string
	// Retention is how long raw samples are kept (0: forever). Minute
	// rollups are kept RollupRetention (0: forever).
	Retention       time.Duration
	RollupRetention time.Duration
	// CompactRows: Maintain moves hot samples once there are this many
	// (or they are older than CompactAge).
	CompactRows int64
	CompactAge  time.Duration
	// StaleAfter: an attempt that is not ended and not seen for this long is "lost".
	StaleAfter time.Duration
	// SummaryEvery is how often attempts' and jobs' summaries are written
	// (default 1 s): time series are visible at once, summaries within this.
	// Negative: at every commit.
	SummaryEvery time.Duration
	Threads      int
	MemoryLimit  string
	Log          *slog.Logger
	Now          func() time.Time
}

// Store is the DuckDB store.
type Store struct {
	opt  Options
	conn *duck.Connector
	db   *sql.DB
	path string

	wmu    sync.Mutex // one writer at a time
	wconn  *sql.Conn
	fresh  int // the fresh table ingest appends to (guarded by wmu)
	cache  *caches
	closed bool
}

// caches hold what ingest needs between batches: agents' sequences, and
// the running attempts' descriptions and summaries (written to the attempts
// table at most every SummaryEvery).
type caches struct {
	mu        sync.Mutex
	agentSeq  map[string]uint64
	atts      map[string]*attState
	lastFlush time.Time
}

type rssPoint struct{ ms, rss int64 }

// Open opens (or creates) the store.
func Open(opt Options) (*Store, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.CompactRows <= 0 {
		opt.CompactRows = 1 << 20
	}
	if opt.CompactAge <= 0 {
		opt.CompactAge = 5 * time.Minute
	}
	if opt.StaleAfter <= 0 {
		opt.StaleAfter = 2 * time.Minute
	}
	if opt.SummaryEvery == 0 {
		opt.SummaryEvery = time.Second
	}
	path := ""
	if opt.Dir != "" {
		if err := os.MkdirAll(opt.Dir, 0o750); err != nil {
			return nil, fmt.Errorf("cannot create data directory: %w", err)
		}
		path = filepath.Join(opt.Dir, "taskscope.duckdb")
	}
	c, err := duck.NewConnector(path, func(execer driver.ExecerContext) error {
		// Checkpoints run from Maintain (after compaction), not inside an
		// ingest commit whenever the WAL passes 16 MB.
		stmts := []string{"SET checkpoint_threshold = '1GB'"}
		if opt.Threads > 0 {
			stmts = append(stmts, fmt.Sprintf("SET threads = %d", opt.Threads))
		}
		if opt.MemoryLimit != "" {
			stmts = append(stmts, fmt.Sprintf("SET memory_limit = '%s'", opt.MemoryLimit))
		}
		for _, s := range stmts {
			if _, err := execer.ExecContext(context.Background(), s, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	db := sql.OpenDB(c)
	s := &Store{opt: opt, conn: c, db: db, path: path, cache: &caches{
		agentSeq: map[string]uint64{}, atts: map[string]*attState{},
	}}
	ctx := context.Background()
	for _, q := range schema() {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("cannot create schema: %w (%s)", err, q)
		}
	}
	var v string
	if err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v); err != nil || v != schemaVersion {
		db.Close()
		return nil, fmt.Errorf("data directory holds schema version %q; this server writes %q", v, schemaVersion)
	}
	var fresh string
	if err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'fresh'`).Scan(&fresh); err != nil {
		db.Close()
		return nil, err
	}
	if fresh == "1" {
		s.fresh = 1
	}
	s.wconn, err = db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	for _, q := range stagingSchema() {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("cannot create staging tables: %w", err)
		}
	}
	return s, nil
}

// Close writes pending summaries, checkpoints and closes the database.
func (s *Store) Close() error {
	if err := s.Flush(context.Background()); err != nil && !errors.Is(err, errClosed) {
		s.opt.Log.Error("cannot write summaries at close", "err", err)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.wconn.ExecContext(context.Background(), "CHECKPOINT")
	s.wconn.Close()
	return s.db.Close()
}

// DB exposes the database for tools and tests.
func (s *Store) DB() *sql.DB { return s.db }

// Path is the database file ("" in memory).
func (s *Store) Path() string { return s.path }

// Usage reports rows and the file size.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	err := s.db.QueryRowContext(ctx, `SELECT
		(SELECT coalesce(sum(n), 0) FROM series_all WHERE kind = 0 AND level < 2),
		(SELECT coalesce(sum(n), 0) FROM series_all WHERE kind = 1 AND level < 2),
		(SELECT count(*) FROM processes), (SELECT count(*) FROM attempts), (SELECT count(*) FROM jobs)`).
		Scan(&u.Samples, &u.AttemptSamples, &u.Processes, &u.Attempts, &u.Jobs)
	if err != nil {
		return u, err
	}
	if s.path != "" {
		for _, p := range []string{s.path, s.path + ".wal"} {
			if fi, err := os.Stat(p); err == nil {
				u.Bytes += fi.Size()
			}
		}
	}
	return u, nil
}

// Checkpoint writes the WAL into the database file.
func (s *Store) Checkpoint(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.wconn.ExecContext(ctx, "CHECKPOINT")
	return err
}

var errClosed = errors.New("store is closed")
