package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// Options configure the store.
type Options struct {
	// URL is the server's: http://HOST:8123/?database=NAME (in a cluster,
	// any server of it; settings in the URL go with every request).
	URL string
	// Cluster names the cluster of the servers' remote_servers: the
	// tables are made ON CLUSTER, replicated, under Distributed tables.
	Cluster string
	// Retention is how long raw samples are kept (0: forever); rollups,
	// events, attempts, processes and jobs are kept RollupRetention.
	Retention       time.Duration
	RollupRetention time.Duration
	Clock           store.Clock
	// InsertEvery is how often a table is inserted into at most (default
	// 1 s): the ingest pipeline waits for it (NextCommit) and takes the
	// batches of that second into one commit, one block per table. It is
	// counted from the start of the last commit that inserted (when the
	// pipeline took its batches), so its inserts come about InsertEvery
	// apart, and never more often on average (after an idle period, two
	// commits may come in a row: nextCommit).
	InsertEvery time.Duration
	// JobsEvery is how often a job's figures are added up again at most
	// while its attempts keep changing (FlushDue, the server's periodic
	// flush; default 5 s, the agents' batch period; <0: at every flush):
	// each time, every attempt row of the job is read. A job not written
	// in the last JobsEvery is written at the next flush.
	JobsEvery time.Duration
	// JobsInsertEvery is how often the periodic flush (FlushDue) inserts
	// into jobs and job_changes at most (default 2 s; <0: at every
	// flush): each insert is a part of each table, merged again and
	// again as its partition grows, for a few rows (with short tasks,
	// 250 a second). Jobs due meanwhile wait (FlushDue says so); Flush
	// writes at once.
	JobsInsertEvery time.Duration
	// AnalysesEvery is how often analyses are inserted at most (default
	// 0: a group as soon as the last is inserted; analysisgroup.go).
	// PutAnalysis waits for its group, and the analyser's workers with
	// it: a pace of a second halved the jobs a second BenchmarkKeepUp
	// analysed.
	AnalysesEvery time.Duration
	Log           *slog.Logger
	Client        ClientOptions

	// legacyChunks: merges write chunks as stores before 2026-12-07 did
	// (format 2): tests make data of then with it.
	legacyChunks bool
}

// The capabilities the store has (package store).
var (
	_ store.Store               = (*Store)(nil)
	_ store.BatchPreparer       = (*Store)(nil)
	_ store.SeqReader           = (*Store)(nil)
	_ store.ProcessLister       = (*Store)(nil)
	_ store.AttemptSummarizer   = (*Store)(nil)
	_ store.AttemptSeriesReader = (*Store)(nil)
	_ store.SharedData          = (*Store)(nil)
	_ store.CommitPacer         = (*Store)(nil)
	_ store.PacedFlusher        = (*Store)(nil)
	_ store.GroupAppender       = (*tx)(nil)
	_ store.PipelinedAppender   = (*tx)(nil)
)

// Store is the ClickHouse store.
type Store struct {
	opt    Options
	c      *Client
	schema *Schema

	// fmu: one jobs' flush at a time (flushJobs); taken before wmu. It
	// guards the jobs' flush's own fields below (jobsRead, jobsLooked).
	fmu        sync.Mutex
	wmu        sync.Mutex // one transaction at a time; guards what follows
	fold       *store.Fold[chRow]
	lastInsert time.Time // the start (Begin) of the last commit that inserted
	prevInsert time.Time // and of the one before it (nextCommit)
	inflight   *inflight // the last commit started whose inserts are under way
	// indexFirst: the tables were made by a version that inserts a
	// commit's attempt_index rows before its attempts' (meta's
	// index_first): an attempt with rows has its index row, and a commit
	// does not look for attempts off the index (stored).
	indexFirst bool
	// membersApart: a commit writes each membership in a row of its own,
	// as versions before 2026-12-07 (session 28) did (tests of the rows
	// they left: writeSet.Member).
	membersApart bool
	// foldReads is how long the fold's reads of the commit under way took
	// (commitTrace).
	foldReads time.Duration
	// lookedUp counts the attempts the fold looked up (loadAttempts).
	lookedUp int
	// spares are the write sets of commits that inserted, for the next
	// ones to build their rows in (their blocks' memory kept: megabytes a
	// commit; putSpare). spareMu guards them, not wmu: a commit hands its
	// blocks back once inserted, while the next one may hold wmu.
	spareMu sync.Mutex
	spares  []*writeSet
	// perBatch is the bytes a batch took in each of a write set's blocks
	// (writeSet.blocks), the most of the last commits' (notePerBatch),
	// that a commit makes room for before its fold (sizeBlocks).
	perBatch [nBlocks]float64
	largest  [nBlocks]int
	// beforeInsert, if set, is called before a commit's inserts (tests:
	// inserts held, or failed).
	beforeInsert func() error
	// afterFold, if set, is called by a commit once its batches are
	// folded and its rows made, before it waits for the agents read
	// again meanwhile (tests: the recheck held until the fold is done).
	afterFold func()
	// seqsHeld, if set, is called as the agents' sequences are read
	// (agentSeqs; tests).
	seqsHeld func()
	// seqsRead is how long the last read of agents' sequences took (ns;
	// agentSeqs: the commit's recheck, read while it folds; 0 when none).
	seqsRead atomic.Int64
	// flushHeld, if set, is called by the jobs' flush once it took the
	// jobs due and what it needs of the cache, before its reads (tests: a
	// flush held).
	flushHeld func()
	// maintainDropping, if set, is called by Maintain once it dropped the
	// jobs' cache, before it drops partitions (tests: a flush meanwhile).
	maintainDropping func()
	closed           bool
	// jobsWritten is when each job was last written (FlushDue), of the
	// jobs written in the last JobsEvery.
	jobsWritten map[string]time.Time
	// jobsInserted is when the periodic flush last inserted jobs.
	jobsInserted time.Time
	// jobDays are the earliest day of the attempts' rows this replica
	// stored since their job was last written, by job (writeJobs).
	jobDays map[string]uint16
	// jobCache holds the rows the jobs' flush adds jobs up from
	// (jobcache.go).
	jobCache jobCache
	// jobsRead counts the jobs the flush read from ClickHouse (tests).
	jobsRead int
	// jobsLooked counts the jobs the flush looked up narrow (notOwnOnly).
	jobsLooked int
	// ownSeqs is how much this replica's commits moved the sum of the
	// agents' last sequences (Changes): each agent's sequence it stored
	// less the one stored before (as its commit checked it), counted
	// once its insert of the agents' rows ended. ownInserts are those
	// inserts in flight (ownIdle is closed when none is left), ownEnded
	// counts those ended: Changes takes a read of the agents' rows only
	// if no such insert was in flight or ended while it read (else it
	// might find a commit's rows without their count, and take them for
	// another replica's). ownMu guards them. (Not wmu: Changes does not
	// wait for a transaction.)
	ownMu      sync.Mutex
	ownSeqs    uint64
	ownInserts int
	ownEnded   uint64
	ownIdle    chan struct{}
	// agentsInserted, if set, is called by a commit once its agents'
	// rows are inserted, before it counts their sequences (tests: a
	// Changes meanwhile); changesWait, by Changes when it waits for
	// that count (tests).
	agentsInserted, changesWait func()

	ext store.ExtNames // ext_metrics

	puts analysisPuts // PutAnalysis's groups
}

// Open connects, checks the server's version and makes the schema (if it
// is not there).
func Open(ctx context.Context, opt Options) (*Store, error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	opt.Clock = opt.Clock.WithDefaults()
	if opt.InsertEvery == 0 {
		opt.InsertEvery = time.Second
	}
	if opt.JobsEvery == 0 {
		opt.JobsEvery = 5 * time.Second
	}
	if opt.JobsInsertEvery == 0 {
		opt.JobsInsertEvery = 2 * time.Second
	}
	c, err := NewClient(opt.URL, opt.Client)
	if err != nil {
		return nil, err
	}
	if opt.Cluster != "" && !validIdent(opt.Cluster) {
		return nil, fmt.Errorf("cluster %q: letters, digits and _ only", opt.Cluster)
	}
	v, err := c.ServerVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot reach ClickHouse: %w", err)
	}
	s := &Store{opt: opt, c: c, jobsWritten: map[string]time.Time{}, jobDays: map[string]uint16{}, schema: &Schema{Database: c.Database(), Cluster: opt.Cluster, Features: FeaturesOf(v)}}
	s.fold = s.newFold()
	// The tables are made once: ON CLUSTER, each statement waits for every
	// server (13 s for the schema on 2 x 2 servers).
	have, err := s.tablesHere(ctx)
	if err != nil {
		return nil, err
	}
	if have < s.schema.Tables() {
		fill, err := s.hostIndexMissing(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.schema.Create(ctx, c); err != nil {
			return nil, err
		}
		if fill {
			if err := s.fillHostIndex(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := s.schema.Migrate(ctx, c); err != nil {
		return nil, err
	}
	if err := s.checkSchemaVersion(ctx); err != nil {
		return nil, err
	}
	ttl := map[retentionKind]int{keepRaw: days(opt.Retention), keepRollup: days(opt.RollupRetention),
		keepChanges: days(changesRetention)}
	for _, q := range s.schema.TTL(ttl) {
		if err := c.Exec(ctx, q, nil); err != nil {
			return nil, fmt.Errorf("cannot set the tables' TTL: %w", err)
		}
	}
	if err := s.loadExt(ctx); err != nil {
		return nil, err
	}
	opt.Log.Info("ClickHouse store", "server", c.Host(), "version", v.String(), "database", c.Database(), "cluster", opt.Cluster)
	return s, nil
}

// ErrSchemaVersion is a database whose tables another version of the
// schema made (a newer taskscope's, or one that needs a migration).
var ErrSchemaVersion = errors.New("tables of another schema version")

// checkSchemaVersion reads the schema's version from meta, and writes it
// there when the tables are new: a store does not write into tables of
// another version. (Replicas starting together may each write it: the
// same row, kept once.) New tables are marked index_first too (a store
// made before has no such row: indexFirst).
func (s *Store) checkSchemaVersion(ctx context.Context) error {
	rows, err := s.query(ctx, "SELECT key, value FROM "+s.read("meta")+" FINAL WHERE key IN ('schema_version', 'index_first')")
	if err != nil {
		return fmt.Errorf("cannot read the schema's version: %w", err)
	}
	v, found := "", false
	for rows.Next() {
		switch key, value := rows.String(), rows.String(); key {
		case "schema_version":
			v, found = value, true
		case "index_first":
			s.indexFirst = value == "1"
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read the schema's version: %w", err)
	}
	if found {
		if v != SchemaVersion {
			return fmt.Errorf("ClickHouse database %s: %w: version %q, and this taskscope writes version %q (see docs/scaling.md, Upgrades)",
				s.c.Database(), ErrSchemaVersion, v, SchemaVersion)
		}
		return nil
	}
	var b Block
	for _, kv := range [][2]string{{"index_first", "1"}, {"schema_version", SchemaVersion}} {
		b.Row()
		b.String(kv[0])
		b.String(kv[1])
	}
	if err := s.insert(ctx, "meta", []string{"key", "value"}, &b); err != nil {
		return fmt.Errorf("cannot write the schema's version: %w", err)
	}
	s.indexFirst = true
	return nil
}

// tablesHere counts the store's tables on the server it talks to.
func (s *Store) tablesHere(ctx context.Context) (int, error) {
	rows, err := s.c.WithDatabase("system").Query(ctx, "SELECT count() FROM system.tables WHERE database = "+Quote(s.c.Database()), nil)
	if err != nil {
		return 0, fmt.Errorf("cannot list tables: %w", err)
	}
	n := int(rows.UInt64())
	return n, rows.Err()
}

// days is d in whole days, rounded up (0 for 0).
func days(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + 24*time.Hour - 1) / (24 * time.Hour))
}

// Close writes what waits to be written. The data is in ClickHouse: a
// store opened again on it goes on.
func (s *Store) Close() error {
	s.waitWrites()
	err := s.Flush(context.Background())
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.closed = true
	return err
}

var errClosed = errors.New("store is closed")

// Client is the store's ClickHouse client (tools and tests).
func (s *Store) Client() *Client { return s.c }

// Schema is the store's schema (tools and tests).
func (s *Store) Schema() *Schema { return s.schema }

func (s *Store) read(name string) string { return s.schema.Read(name) }

// query runs a read.
func (s *Store) query(ctx context.Context, q string) (*Rows, error) {
	return s.c.Query(ctx, q, nil)
}

// insert writes a block into a table (nothing if it is empty).
func (s *Store) insert(ctx context.Context, name string, cols []string, b *Block) error {
	if b.Rows() == 0 {
		return nil
	}
	err := s.c.Insert(ctx, s.schema.Write(name), cols, b.Bytes(), s.schema.InsertSettings())
	if err != nil {
		return diskFull(fmt.Errorf("cannot insert into %s: %w", name, err))
	}
	return nil
}

// diskFull marks an error of a server whose disk is full (NOT_ENOUGH_SPACE,
// or the errno's text in its message) as store.ErrDiskFull.
func diskFull(err error) error {
	var ex *Exception
	if errors.As(err, &ex) && (ex.Code == CodeNotEnoughSpace || strings.Contains(strings.ToLower(ex.Message), "no space left on device")) {
		return store.DiskFullError(err)
	}
	return err
}

// Usage reports rows, and the bytes of the database's parts on the server
// (on every server of the cluster).
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	// A series' samples of a slot: its merged chunks' once there are.
	slots := `(SELECT sum(s) FROM (SELECT if(max(level) = 1, sumIf(n, level = 1), sumIf(n, level = 0)) AS s
		FROM %[4]s FINAL WHERE kind = %[5]d AND level < 2 GROUP BY job_key, key, slot))`
	rows, err := s.query(ctx, fmt.Sprintf(`SELECT
		(SELECT sum(n) FROM %[1]s FINAL WHERE kind = 0 AND level < 2) + `+slots+`,
		(SELECT sum(n) FROM %[1]s FINAL WHERE kind = 1 AND level < 2) + `+strings.ReplaceAll(slots, "%[5]d", "%[6]d")+`,
		(SELECT count() FROM %[2]s FINAL), (SELECT uniqExact(attempt_id) FROM %[3]s),
		(SELECT uniqExact(job_id) FROM %[3]s WHERE job_id != '')`, s.read("chunks"), s.read("procs"), s.read("attempts"),
		s.read("series_chunks"), store.KindProcess, store.KindAttempt))
	if err != nil {
		return u, fmt.Errorf("cannot read usage: %w", err)
	}
	u.Samples, u.AttemptSamples = rows.Int64(), rows.Int64()
	u.Processes, u.Attempts, u.Jobs = int64(rows.UInt64()), int64(rows.UInt64()), int64(rows.UInt64())
	if err := rows.Err(); err != nil {
		return u, err
	}
	q := "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = " + Quote(s.c.Database()) + " AND active"
	if s.schema.Cluster != "" {
		// Every replica of every shard: 18.16 has no clusterAllReplicas,
		// so each server is asked through remote().
		hosts, err := s.clusterHosts(ctx)
		if err != nil {
			return u, err
		}
		var parts []string
		for _, h := range hosts {
			parts = append(parts, "SELECT bytes_on_disk FROM remote("+Quote(h)+", system.parts) WHERE database = "+
				Quote(s.c.Database())+" AND active")
		}
		q = "SELECT sum(bytes_on_disk) FROM (" + strings.Join(parts, " UNION ALL ") + ")"
	}
	rows, err = s.query(ctx, q)
	if err != nil {
		return u, fmt.Errorf("cannot read the parts' sizes: %w", err)
	}
	u.Bytes = int64(rows.UInt64())
	return u, rows.Err()
}

// clusterHosts lists the servers of the cluster (host:port of their native
// protocol, as remote() takes them).
func (s *Store) clusterHosts(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, "SELECT host_address, port FROM system.clusters WHERE cluster = "+Quote(s.schema.Cluster))
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		h, p := rows.String(), rows.UInt16()
		out = append(out, fmt.Sprintf("%s:%d", h, p))
	}
	return out, rows.Err()
}

// Maintain merges the chunks of the slots that ended (merge.go), and
// drops the partitions past their retention: raw samples past Retention
// (after their per-minute rollups are made), everything else past
// RollupRetention.
func (s *Store) Maintain(ctx context.Context, now time.Time) (err error) {
	defer store.WrapErr(&err, "cannot maintain the store")
	if _, err := s.mergeSlots(ctx); err != nil {
		return err
	}
	type part struct {
		table string
		day   uint16
		expr  string // of DROP PARTITION
	}
	var drop []part
	rolled := map[uint16]bool{}
	for _, t := range tables {
		var keep time.Duration
		switch t.retention {
		case keepRaw:
			keep = s.opt.Retention
		case keepRollup:
			keep = s.opt.RollupRetention
		case keepChanges:
			keep = changesRetention
		}
		if keep <= 0 || !t.byDay() {
			continue
		}
		cut := DayOf(now.Add(-keep).UnixMilli())
		if t.retention == keepChanges {
			// By the clock that stamps them.
			cut = DayOf(s.opt.Clock.Now().Add(-keep).UnixMilli())
		}
		// (By the last day of each: a table's partitions may be days or
		// months, by the version that made it: attempt_index.)
		rows, err := s.query(ctx, "SELECT partition, max(max_date) FROM system.parts WHERE database = "+
			Quote(s.c.Database())+" AND table = "+Quote(s.schema.localName(t.name))+" AND active GROUP BY partition")
		if err != nil {
			return fmt.Errorf("cannot list partitions: %w", err)
		}
		for rows.Next() {
			p, last := rows.String(), rows.UInt16()
			d, expr, err := partitionDay(p)
			if err != nil {
				return fmt.Errorf("table %s: %w", t.name, err)
			}
			if d = max(d, last); d < cut {
				drop = append(drop, part{t.name, d, expr})
				if t.retention == keepRaw {
					rolled[d] = false
				}
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cannot list partitions: %w", err)
		}
	}
	// The jobs' cache holds attempts' rows that may go: it is dropped
	// before the partitions, so that no flush meanwhile adds jobs up from
	// it, and again after them, for the rows a flush meanwhile read before
	// they went (a flush whose read spans a drop does not hold what it
	// read: jobRows).
	dropCache := func() {
		s.wmu.Lock()
		s.jobCache.drop()
		s.wmu.Unlock()
	}
	if len(drop) > 0 {
		dropCache()
		defer dropCache()
		if s.maintainDropping != nil {
			s.maintainDropping()
		}
	}
	for _, p := range drop {
		if done, raw := rolled[p.day]; raw && !done && (p.table == "chunks" || p.table == "series_chunks") {
			if err := s.rollup(ctx, p.day); err != nil {
				return fmt.Errorf("cannot roll up day %d: %w", p.day, err)
			}
			rolled[p.day] = true
		}
		if err := s.c.Exec(ctx, "ALTER TABLE "+s.schema.Local(p.table)+s.schema.On()+" DROP PARTITION "+p.expr, nil); err != nil {
			return fmt.Errorf("cannot drop %s's partition %s: %w", p.table, p.expr, err)
		}
	}
	return nil
}

// partitionDay is the day of a partition of a table partitioned by day
// first (system.parts' partition: 2026-03-01, or ('2026-03-01',5)), and
// how DROP PARTITION names it.
func partitionDay(p string) (uint16, string, error) {
	expr := Quote(p)
	ds := p
	if strings.HasPrefix(p, "(") {
		expr = p
		ds = strings.TrimPrefix(strings.TrimPrefix(p, "("), "'")
	}
	if len(ds) < 10 {
		return 0, "", fmt.Errorf("partition %q: not of a day", p)
	}
	t, err := time.Parse("2006-01-02", ds[:10])
	if err != nil {
		return 0, "", fmt.Errorf("partition %q: not of a day: %w", p, err)
	}
	return DayOf(t.UnixMilli()), expr, nil
}

// Changes is a number that changes whenever another server (another
// replica of taskscope on this ClickHouse) stores a batch: the sum of the
// agents' last sequences (FINAL: merges do not move it), less what this
// replica's own commits added to it (ownSeqs), which its server tells its
// browsers of itself. The server polls it every second to tell them of
// data another replica stored; a number that moved at each of its own
// commits had it list the running jobs every second for nothing (the
// jobs list, FINAL, the most of what a replica alone read between its
// commits).
func (s *Store) Changes(ctx context.Context) (_ uint64, err error) {
	defer store.WrapErr(&err, "cannot read the agents' last batches")
	for {
		s.ownMu.Lock()
		inserts, idle, ended, own := s.ownInserts, s.ownIdle, s.ownEnded, s.ownSeqs
		s.ownMu.Unlock()
		if inserts > 0 {
			if s.changesWait != nil {
				s.changesWait()
			}
			select {
			case <-idle:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		rows, err := s.query(ctx, "SELECT sum(seq) FROM "+s.read("agents")+" FINAL")
		if err != nil {
			return 0, err
		}
		v := rows.UInt64()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		s.ownMu.Lock()
		still := s.ownInserts == 0 && s.ownEnded == ended
		s.ownMu.Unlock()
		if still {
			return v - own, nil
		}
	}
}

// ownInsertBegins says a commit's insert of the agents' rows begins
// (Changes).
func (s *Store) ownInsertBegins() {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	if s.ownInserts == 0 {
		s.ownIdle = make(chan struct{})
	}
	s.ownInserts++
}

// ownInsertEnds says it ended, having moved the agents' sequences by
// seqs (0: it failed).
func (s *Store) ownInsertEnds(seqs uint64) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	s.ownSeqs += seqs
	s.ownEnded++
	if s.ownInserts--; s.ownInserts == 0 {
		close(s.ownIdle)
	}
}

// NextCommit is when the next commit may begin (store.CommitPacer,
// nextCommit).
func (s *Store) NextCommit() time.Time {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.nextCommit()
}

// nextCommit is when the next commit may begin (wmu held): InsertEvery
// after the last one that inserted began; but at once after the first
// commit of a wave, the commit that began 2 × InsertEvery or more after
// the one before it (an idle period: the server's start, agents coming
// back with their spools). The ingest pipeline gathers that commit's
// batches as it gathered the first's: a wave split between two commits
// (its requests came with a gap, or came back answered a second time
// before the next second) would otherwise wait a whole InsertEvery
// behind the first part. Tables still take a block every InsertEvery on
// average (two in a row at most after each idle period of 2 ×
// InsertEvery).
func (s *Store) nextCommit() time.Time {
	if s.opt.InsertEvery <= 0 {
		return time.Time{}
	}
	if !s.lastInsert.IsZero() && s.lastInsert.Sub(s.prevInsert) >= 2*s.opt.InsertEvery {
		return s.lastInsert
	}
	return s.lastInsert.Add(s.opt.InsertEvery)
}

// SetClock sets the store's clock (tests that compare it with another
// store on the same clock).
func (s *Store) SetClock(c store.Clock) { s.opt.Clock = c.WithDefaults() }
