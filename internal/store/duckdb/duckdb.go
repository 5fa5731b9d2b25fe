// Package duckdb is the embedded store: one DuckDB file in the data
// directory (docs/storage.md). Ingest appends, by DuckDB's appender, one
// chunk per series per batch into a fresh table, and the records of
// processes, memberships, attempts and events into logs; Maintain merges the
// fresh chunks into compressed ones, makes per-minute rollups of what
// outlives the raw retention, and drops what outlives the rollups'.
// Summaries of attempts, jobs and agents are kept in memory and written at
// most every second; after a crash Open rebuilds them from what was
// committed.
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// CompactRows: Maintain merges fresh chunks once there are this many
	// rows of them (default 4 Mi), or once the oldest is older than
	// CompactAge (default 10 minutes).
	CompactRows int64
	CompactAge  time.Duration
	// Clock: what time it is, and when an attempt that has not ended is
	// lost (store.Clock; zero: the machine's time, store.DefaultStaleAfter).
	Clock store.Clock
	// SummaryEvery is how often attempts' and jobs' summaries are written
	// (default 1 s): time series are visible at once, summaries within this.
	// Negative: at every commit.
	SummaryEvery time.Duration
	// Threads are DuckDB's (default 1; negative: DuckDB's own default,
	// one a core). With more than one, a query's tasks may run on
	// DuckDB's workers while the calling thread waits for them by spinning
	// (PendingQueryResult::ExecuteInternal, DuckDB 1.5): on 2 cores a
	// commit then took 1.4–2× the CPU (BenchmarkCommitSize -bench.threads,
	// 2026-12-07), for reads that are faster in parallel only when large.
	Threads     int
	MemoryLimit string
	Log         *slog.Logger

	// CommitGather and CommitGatherMax: before each commit the ingest
	// pipeline gathers the requests on their way, until none came for
	// CommitGather (default 10 ms) once none is on its way, or for
	// CommitGatherMax at most (default 100 ms); store.CommitGatherer.
	// Negative CommitGather: each commit takes what is queued, at once.
	CommitGather, CommitGatherMax time.Duration

	// legacyChunks: compaction writes chunks as stores before 2026-12-07
	// did (format 2, zstd): tests make data directories of then with it.
	legacyChunks bool
	// PlainAttempts: compaction writes attempts' merged chunks as their
	// own samples, not as residuals of their processes' where those are
	// shorter (residual.go, docs/storage.md), the default since 2026-12-07
	// (late): 2.8 B a sample less on loadgen's hour, 3.3 B at 6 hours. A
	// store reads both either way: the plain chunks of a store made
	// before stay as they are, and compaction writes residuals from then
	// on.
	PlainAttempts bool
}

// The store's contract and the capabilities it offers (package store).
var (
	_ store.Store             = (*Store)(nil)
	_ store.SeqReader         = (*Store)(nil)
	_ store.SeriesBatcher     = (*Store)(nil)
	_ store.ProcessLister     = (*Store)(nil)
	_ store.JobSummarizer     = (*Store)(nil)
	_ store.AttemptSummarizer = (*Store)(nil)
	_ store.LocalData         = (*Store)(nil)
	_ store.CommitGatherer    = (*Store)(nil)
)

// Store is the DuckDB store.
type Store struct {
	opt  Options
	db   atomic.Pointer[sql.DB] // replaced when the database is reopened (reopen.go)
	path string

	wmu        sync.Mutex // one writer at a time; guards what follows
	wconn      *sql.Conn
	apps       appenders // the writer's, on wconn (appenders.go)
	fresh      int       // the fresh table ingest appends to
	fold       *store.Fold[noRow]
	gen        uint64 // commits so far (attempt_log rows carry theirs)
	flushedGen uint64 // the last commit that wrote the summaries
	lastFlush  time.Time
	closed     bool
	logged     bool // attempt_log holds rows the summaries have not taken in
	fault      atomic.Pointer[func() error]
	// broken is the fatal error that invalidated the database, while it
	// is being reopened; writes fail at once meanwhile (reopen.go).
	broken    error
	reopening bool
	stop      chan struct{} // closed by Close: stops a reopening
	stopOnce  sync.Once
	bg        sync.WaitGroup
	tmpls     *templates
	ext       store.ExtNames // ext_metrics
	// pendingFirst: after a crash, the first commit that logged rows of
	// an attempt the store has no row of yet (by attempt key; recover).
	pendingFirst map[uint64]uint64
	// recountFrom: while recover counts jobs again, the first commit of
	// the attempts it recovered (loadJobAttempts reads from there).
	recountFrom uint64

	mmu sync.Mutex // one maintenance at a time
	// ckptOwed: a checkpoint Maintain was due to make failed; the next
	// Maintain makes it, even if nothing changed meanwhile (mmu held).
	ckptOwed bool

	// ckmu keeps checkpoints apart from the writes made outside the
	// writer's lock (PutAnalysis), which hold it shared; a checkpoint holds
	// it alone (after wmu). DuckDB refuses a CHECKPOINT while another
	// transaction has updated a row ("there are other write transactions
	// active"): with the analyser storing beside ingest, most checkpoints
	// failed, and the WAL kept every compaction since the last that had
	// not (106-274 MB at the end of BenchmarkHTTPIngestSustained).
	ckmu sync.RWMutex
	// anmu keeps the writers of analyses apart (PutAnalysis, PutAnalyses):
	// a job's page storing its analysis beside the background analyser
	// storing the same job's met DuckDB's optimistic concurrency ("Conflict
	// on tuple deletion", or a duplicate key for a job new to both), and
	// the page answered 500. Taken before ckmu.
	anmu sync.Mutex
	// refused, if set, is called when DuckDB refused a checkpoint that
	// is tried again (tests).
	refused func()

	layout   attemptLayout // where the columns of the tables of attempts are (attempts.go)
	stmts    stmts         // the API's reads, prepared (stmt.go)
	procAggs procAggs      // processes' summaries made by earlier reads (batch.go)
	wholes   wholes        // residuals made whole by earlier reads (residual.go)
}

// rowGroupSize is the rows of a row group of the store's tables (DuckDB's
// default: 122,880). DuckDB 1.5 starts a new row group at the first append
// after a checkpoint, and a checkpoint merges a table's consecutive row
// groups that fit in fewer ("vacuum"): each compaction's chunks were a row
// group of their own, merged again with the next ones every few
// compactions until 122,880 rows, each merge writing them all again and
// freeing the blocks they were in: up to a whole row group of
// series_chunks free in the file (1,095 free blocks of 2,295 used, 7.2 B
// a sample, at the end of loadgen's 6 hours). With row groups of 4,096
// rows a compaction's chunks are whole row groups but the last, and a
// merge writes a few of them again (docs/storage.md: 16,384 still left
// up to 339 free blocks in 2 hours of 100 nodes, 4,096 up to 95).
const rowGroupSize = 4096

// attach are the statements that attach the database file at path (a
// database in memory if "") with the store's row group size, as ts, the
// connection's default; with path's temporary directory, as DuckDB names
// it for a file opened as its main database.
func attach(path string) []string {
	if path == "" {
		return []string{fmt.Sprintf("ATTACH IF NOT EXISTS ':memory:' AS ts (ROW_GROUP_SIZE %d)", rowGroupSize), "USE ts"}
	}
	q := strings.ReplaceAll(path, "'", "''")
	return []string{"SET temp_directory = '" + q + ".tmp'",
		fmt.Sprintf("ATTACH IF NOT EXISTS '%s' AS ts (ROW_GROUP_SIZE %d)", q, rowGroupSize), "USE ts"}
}

// handle is the database (the one open now).
func (s *Store) handle() *sql.DB { return s.db.Load() }

// Open opens (or creates) the store. After a crash (the store was not
// closed), it first brings the summaries up to date with what was committed.
func Open(opt Options) (*Store, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	opt.Clock = opt.Clock.WithDefaults()
	if opt.CompactRows <= 0 {
		opt.CompactRows = 4 << 20
	}
	if opt.CompactAge <= 0 {
		opt.CompactAge = 10 * time.Minute
	}
	if opt.SummaryEvery == 0 {
		opt.SummaryEvery = time.Second
	}
	if opt.Threads == 0 {
		opt.Threads = 1
	}
	if opt.CommitGather == 0 {
		opt.CommitGather = 10 * time.Millisecond
	}
	if opt.CommitGatherMax <= 0 {
		opt.CommitGatherMax = 100 * time.Millisecond
	}
	path := ""
	if opt.Dir != "" {
		if err := os.MkdirAll(opt.Dir, 0o750); err != nil {
			return nil, fmt.Errorf("cannot create data directory: %w", err)
		}
		path = filepath.Join(opt.Dir, "taskscope.duckdb")
	}
	// The file is attached to an instance in memory, which no table is in,
	// rather than opened as its main database: only ATTACH takes a row
	// group size (attach).
	c, err := duck.NewConnector("", func(execer driver.ExecerContext) error {
		// Checkpoints run from Maintain (after compaction), not inside an
		// ingest commit whenever the WAL passes 16 MB. And not when the
		// instance shuts down: that checkpoint has no client context, and
		// writes an index not yet used since the WAL was replayed as it was
		// before the WAL, without the rows it brought back (DuckDB 1.5,
		// duckdb/duckdb#23788). Close checkpoints itself; an instance closed
		// otherwise (an Open that failed, a reopening) keeps its WAL.
		stmts := []string{"PRAGMA disable_checkpoint_on_shutdown", "SET checkpoint_threshold = '1GB'"}
		stmts = append(stmts, attach(path)...)
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
	db.SetMaxIdleConns(maxIdleConns)
	s := &Store{opt: opt, path: path, stop: make(chan struct{}), tmpls: newTemplates(), pendingFirst: map[uint64]uint64{}}
	s.fold = s.newFold()
	s.db.Store(db)
	if err := s.open(context.Background()); err != nil {
		// The writer's connection too: a connection left open keeps the
		// DuckDB instance alive, and the next Open of the same file in this
		// process waits for it forever (DuckDB's instance cache spins).
		if s.wconn != nil {
			s.apps.close()
			s.wconn.Close()
		}
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	for _, q := range schema() {
		if _, err := s.handle().ExecContext(ctx, q); err != nil {
			return fmt.Errorf("cannot create schema: %w (%s)", err, q)
		}
	}
	meta := map[string]string{}
	rows, err := s.handle().QueryContext(ctx, `SELECT key, value FROM meta`)
	if err != nil {
		return fmt.Errorf("cannot read meta: %w", err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return fmt.Errorf("cannot read meta: %w", err)
		}
		meta[k] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read meta: %w", err)
	}
	switch v := meta["schema_version"]; v {
	case "8", "9", "10":
		for _, q := range before11 {
			if _, err := s.handle().ExecContext(ctx, q); err != nil {
				return fmt.Errorf("cannot migrate schema %s to %s: %w (%s)", v, schemaVersion, err, q)
			}
		}
	}
	// The tables of attempts get the columns of fields added since they
	// were made (attempts.go).
	if err := s.migrateColumns(ctx); err != nil {
		return fmt.Errorf("cannot migrate schema %s to %s: %w", meta["schema_version"], schemaVersion, err)
	}
	if err := s.migrateJobs(ctx); err != nil {
		return fmt.Errorf("cannot migrate schema %s to %s: %w", meta["schema_version"], schemaVersion, err)
	}
	if err := s.migrateChunkReaders(ctx); err != nil {
		return fmt.Errorf("cannot migrate schema %s to %s: %w", meta["schema_version"], schemaVersion, err)
	}
	if v := meta["schema_version"]; v == "8" || v == "9" || v == "10" {
		if _, err := s.handle().ExecContext(ctx, `UPDATE meta SET value = '`+schemaVersion+`' WHERE key = 'schema_version'`); err != nil {
			return fmt.Errorf("cannot migrate schema %s to %s: %w", v, schemaVersion, err)
		}
		meta["schema_version"] = schemaVersion
	}
	if err := s.readLayout(ctx); err != nil {
		return err
	}
	if v := meta["schema_version"]; v != schemaVersion {
		return fmt.Errorf("data directory holds schema version %q; this server writes %q", v, schemaVersion)
	}
	if meta["fresh"] == "1" {
		s.fresh = 1
	}
	s.flushedGen, _ = strconv.ParseUint(meta["flushed_gen"], 10, 64)
	// Commits after the last summary write left rows in the logs.
	var maxGen uint64
	err = s.handle().QueryRowContext(ctx, `SELECT greatest((SELECT coalesce(max(gen), 0) FROM attempt_log),
		(SELECT coalesce(max(gen), 0) FROM proc_log WHERE gen > ?::UBIGINT))`, s.flushedGen).Scan(&maxGen)
	if err != nil {
		return fmt.Errorf("cannot read the last commit: %w", err)
	}
	s.gen = max(s.flushedGen, maxGen)
	s.logged = true
	var next int32
	if err := s.handle().QueryRowContext(ctx, `SELECT coalesce(max(id) + 1, 0) FROM cmd_templates`).Scan(&next); err != nil {
		return fmt.Errorf("cannot read the command line templates: %w", err)
	}
	s.tmpls.nextID = next
	if err := s.loadExt(ctx); err != nil {
		return err
	}
	if s.wconn, err = s.handle().Conn(ctx); err != nil {
		return fmt.Errorf("cannot open the writer's connection: %w", err)
	}
	for _, q := range stagingSchema() {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("cannot create staging tables: %w", err)
		}
	}
	if err := s.loadAgents(ctx); err != nil {
		return err
	}
	if meta["clean"] != "1" {
		if err := s.recover(ctx); err != nil {
			return fmt.Errorf("cannot recover the summaries: %w", err)
		}
	}
	if _, err := s.wconn.ExecContext(ctx, `UPDATE meta SET value = '0' WHERE key = 'clean'`); err != nil {
		return fmt.Errorf("cannot mark the store open: %w", err)
	}
	s.lastFlush = time.Now()
	return nil
}

// SetFault makes every commit fail with what f returns, while it returns an
// error (nil f: no fault). For tests of what the server does when its store
// fails.
func (s *Store) SetFault(f func() error) {
	if f == nil {
		s.fault.Store(nil)
		return
	}
	s.fault.Store(&f)
}

func (s *Store) failure() error {
	if f := s.fault.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// Close writes pending summaries, checkpoints and closes the database.
// What it could not write is recovered at the next Open.
func (s *Store) Close() error {
	s.stopReopening()
	ferr := s.Flush(context.Background())
	if ferr != nil && !errors.Is(ferr, errClosed) {
		s.opt.Log.Error("cannot write summaries at close", "err", ferr)
	}
	s.mmu.Lock()
	defer s.mmu.Unlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.wconn == nil {
		return nil // a reopening that failed left nothing open
	}
	ctx := context.Background()
	var errs []error
	if ferr == nil {
		if _, err := s.wconn.ExecContext(ctx, `UPDATE meta SET value = '1' WHERE key = 'clean'`); err != nil {
			errs = append(errs, fmt.Errorf("cannot mark the store closed: %w", err))
		}
	}
	s.ckmu.Lock()
	if _, err := s.wconn.ExecContext(ctx, "CHECKPOINT"); err != nil {
		// What the WAL holds is replayed at the next Open.
		errs = append(errs, fmt.Errorf("cannot checkpoint at close: %w", err))
	}
	s.ckmu.Unlock()
	if err := s.apps.close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.wconn.Close(); err != nil {
		errs = append(errs, fmt.Errorf("cannot close the writer's connection: %w", err))
	}
	if err := s.handle().Close(); err != nil {
		errs = append(errs, fmt.Errorf("cannot close the database: %w", err))
	}
	err := errors.Join(errs...)
	if err != nil {
		// Said here too: a server's deferred Close has no one to tell.
		s.opt.Log.Error("cannot close the store cleanly", "err", err)
	}
	return err
}

// DB exposes the database for tools and tests.
func (s *Store) DB() *sql.DB { return s.handle() }

// Path is the database file ("" in memory).
func (s *Store) Path() string { return s.path }

// DataDir is the directory of the database's files ("" in memory): the
// store is store.LocalData.
func (s *Store) DataDir() string { return s.opt.Dir }

// Usage reports rows and the file size.
func (s *Store) Usage(ctx context.Context) (_ store.Usage, err error) {
	defer store.WrapErr(&err, "cannot read the store's usage")
	var u store.Usage
	err = s.handle().QueryRowContext(ctx, `SELECT
		(SELECT coalesce(sum(n), 0) FROM series_all WHERE kind = 0 AND level < 2),
		(SELECT coalesce(sum(n), 0) FROM series_all WHERE kind = 1 AND level < 2),
		(SELECT count(*) FROM proc_log), (SELECT count(*) FROM attempts), (SELECT count(*) FROM jobs)`).
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

var errClosed = errors.New("store is closed")
