package duckdb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Chunk levels.
const (
	levelFresh  = 0 // one batch's samples of a series
	levelMerged = 1 // merged by Maintain, zstd-compressed
	levelRollup = 2 // one point per minute, kept longer
)

// tx is one ingest transaction. Append checks sequences against the
// agents' high-water marks in memory (store.FoldTx); Commit folds the
// batches into the attempts' and jobs' states (store.FoldTx.Fold) and
// writes, in one DuckDB transaction by appenders, what the fold made of
// them (chunks, process and membership records, attempt descriptions,
// events: the sink) and each agent's new sequence; and (at most every
// SummaryEvery) the attempts', jobs' and agents' summaries by upsert.
type tx struct {
	s        *Store
	ctx      context.Context
	f        *store.FoldTx[noRow]
	flushed  bool // the summaries were written
	done     bool
	gen      uint64
	rows     sink
	newTmpls []*cmdShape // command line templates this commit stores
}

// CommitGather is how the ingest pipeline gathers batches before each
// commit (store.CommitGatherer): fewer, larger commits, until a row group
// of chunks. (Measured on 2026-12-07: a commit's BEGIN, appenders and
// COMMIT cost some milliseconds of CPU however few rows it writes,
// BenchmarkCommitSize; docs/storage.md.)
func (s *Store) CommitGather() store.Gathering {
	if s.opt.CommitGather < 0 {
		return store.Gathering{}
	}
	return store.Gathering{Gap: s.opt.CommitGather, Max: s.opt.CommitGatherMax, Enough: rowGroupSize}
}

// Begin starts an ingest transaction. It holds the store's writer lock
// until Commit or Rollback.
func (s *Store) Begin(ctx context.Context) (store.Appender, error) {
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return nil, errClosed
	}
	if err := s.unavailableLocked(); err != nil {
		s.wmu.Unlock()
		return nil, err
	}
	gen := s.gen + 1
	return &tx{s: s, ctx: ctx, gen: gen, f: s.fold.Begin(gen)}, nil
}

func (t *tx) Rollback() error {
	if !t.done {
		t.done = true
		t.s.wmu.Unlock()
	}
	return nil
}

// The store prepares batches (store.BatchPreparer): their chunks.
var (
	_ store.BatchPreparer    = (*Store)(nil)
	_ store.PreparedAppender = (*tx)(nil)
)

// preparers keep their buffers from one batch to the next.
var preparers = sync.Pool{New: func() any { return &store.Preparer{} }}

// Prepare encodes a batch's series as chunks and sums up what it says of
// each attempt (store.Prepare), with buffers kept between calls; the ingest
// pipeline calls it on the requests' goroutines, beside the writer.
func (s *Store) Prepare(b *wire.Batch) *store.Prepared {
	pr := preparers.Get().(*store.Preparer)
	defer preparers.Put(pr)
	return pr.Prepare(b)
}

// Append checks the batch's sequence; the batch is prepared here and
// written at Commit.
func (t *tx) Append(b *wire.Batch) (bool, error) {
	return t.AppendPrepared(store.Prepare(b))
}

// AppendPrepared is Append of a batch Prepare prepared.
func (t *tx) AppendPrepared(p *store.Prepared) (bool, error) {
	if t.done {
		return false, fmt.Errorf("append after commit or rollback")
	}
	return t.f.Append(t.ctx, p)
}

// sink takes what a commit stores of its batches (store.Sink), to
// append at Commit: chunks, process rows, attempt descriptions, events,
// metrics' names.
type sink struct {
	chunks []freshRow
	// The rows of proc_log, one per attempt and process (records of the
	// same attempt and process in this commit are merged into one).
	procRows  []*procRow
	rowIdx    map[rowKey]*procRow
	described []batchRec // each an attempt's description
	events    []batchRec
	newExt    []extName // metrics of ext_metrics this commit stores
}

// freshRow is a chunk to append: its kind and the value of its job_key.
type freshRow struct {
	kind int8
	c    *store.SeriesChunk
	job  int64
}

// batchRec is a record of a batch (its i-th of a kind).
type batchRec struct {
	b *wire.Batch
	i int
}

var _ store.Sink[noRow] = (*sink)(nil)

// Chunk keeps a chunk with its job_key: a process's start (0 when not
// known), the key of its attempt's job, of its metric of it (attempts'
// ext metrics), 0 (processes' ext metrics).
func (k *sink) Chunk(kind int, c *store.SeriesChunk, job string, start int64) {
	r := freshRow{int8(kind), c, 0}
	switch kind {
	case store.KindProcess:
		r.job = start
	case store.KindAttempt:
		r.job = keyValue(store.AttemptKey(job))
	case store.KindAttemptExt:
		r.job = keyValue(store.ExtKey(store.AttemptKey(job), c.Metric))
	}
	k.chunks = append(k.chunks, r)
}

func (k *sink) Described(b *wire.Batch, i int, _ *attState) {
	k.described = append(k.described, batchRec{b, i})
}

func (k *sink) Member(_ *wire.Batch, m *wire.Membership, a *attState, _ bool, _ int) {
	k.row(a.Meta.AttemptID, m.Process).addMember(m)
}

func (k *sink) Process(b *wire.Batch, p *wire.Process, a *attState, cmd bool, _ int) {
	id := ""
	if a != nil {
		id = a.Meta.AttemptID
	}
	k.row(id, p.Key).process(p, b.Host, cmd)
}

func (k *sink) Event(b *wire.Batch, i int, _ string) { k.events = append(k.events, batchRec{b, i}) }

func (k *sink) Ext(kind int, metric string) { k.newExt = append(k.newExt, extName{int8(kind), metric}) }

func (k *sink) Batch(*store.Prepared) {}

// Commit writes the transaction. A full disk is store.ErrDiskFull.
func (t *tx) Commit() error { return t.commit(false) }

// commit is Commit, writing the summaries (flush) whatever the time.
func (t *tx) commit(flush bool) (err error) {
	defer func() { err = mapErr(err) }()
	if t.done {
		return fmt.Errorf("commit after commit or rollback")
	}
	defer t.Rollback()
	s := t.s
	due := flush || s.opt.SummaryEvery < 0 || time.Since(s.lastFlush) >= s.opt.SummaryEvery
	if len(t.f.Prepared()) == 0 && (!due || !s.fold.Dirty()) {
		return nil
	}
	if err := s.failure(); err != nil {
		return err
	}
	if err := t.f.Fold(t.ctx, &t.rows, &s.ext); err != nil {
		s.failedLocked(err)
		return fmt.Errorf("cannot fold the batches: %w", err)
	}
	if err := t.describeMembers(); err != nil {
		s.failedLocked(err)
		return fmt.Errorf("cannot describe the processes of new members: %w", err)
	}
	err = s.wconn.Raw(func(dc any) error {
		conn := dc.(driver.Conn)
		ex := conn.(driver.ExecerContext)
		exec := func(q string) error {
			t0 := time.Now()
			_, err := ex.ExecContext(t.ctx, q, nil)
			if debugTiming {
				fmt.Fprintf(os.Stderr, "%8.2fms %.70s\n", float64(time.Since(t0).Microseconds())/1000, strings.Join(strings.Fields(q), " "))
			}
			if err != nil {
				return fmt.Errorf("%w (in %.60s)", err, strings.TrimSpace(q))
			}
			return nil
		}
		// A rollback runs even when t.ctx has ended (a server stopping
		// mid-commit): a connection left inside the transaction would
		// refuse every later BEGIN, the summaries' at Close among them.
		rollback := func() { ex.ExecContext(context.WithoutCancel(t.ctx), "ROLLBACK", nil) }
		if err := exec("BEGIN TRANSACTION"); err != nil {
			return fmt.Errorf("cannot begin: %w", err)
		}
		if err := t.write(conn); err != nil {
			rollback()
			return fmt.Errorf("cannot write the batches: %w", err)
		}
		if due {
			if err := t.writeSummaries(conn, exec); err != nil {
				rollback()
				return fmt.Errorf("cannot write the summaries: %w", err)
			}
		}
		if err := exec("COMMIT"); err != nil {
			rollback()
			return fmt.Errorf("cannot commit: %w", err)
		}
		return nil
	})
	if err != nil {
		s.failedLocked(err)
		return fmt.Errorf("cannot store batches: %w", err)
	}
	t.apply()
	return nil
}

var debugTiming = os.Getenv("TASKSCOPE_DEBUG_TIMING") != ""

// keyValue stores a 64-bit key in a BIGINT column.
func keyValue(k uint64) int64 { return int64(k) }

// write appends the transaction's records: chunks, processes, memberships,
// attempt descriptions, extra metrics, events, and the agents' sequences.
func (t *tx) write(conn driver.Conn) error {
	t0 := time.Now()
	k := &t.rows
	err := t.appendRows(conn, freshName(t.s.fresh), len(k.chunks), func(i int, a *duck.Appender) error {
		r := k.chunks[i]
		return a.AppendRow(r.kind, keyValue(r.c.Key), r.job, r.c.TMin, r.c.TMax, int32(r.c.N), int8(levelFresh), r.c.Data)
	})
	if err != nil {
		return err
	}
	if err := t.writeProcRows(conn); err != nil {
		return err
	}
	if err := t.writeProfiles(conn); err != nil {
		return err
	}
	if len(k.described) > 0 {
		t.s.logged = true
		err := t.appendRows(conn, "attempt_log", len(k.described), func(i int, a *duck.Appender) error {
			r := k.described[i]
			return a.AppendRow(t.s.logValues(t.gen, r.b.Host, &store.AttemptRow{Meta: r.b.Attempts[r.i]})...)
		})
		if err != nil {
			return err
		}
	}
	err = t.appendRows(conn, "ext_metrics", len(k.newExt), func(i int, a *duck.Appender) error {
		return a.AppendRow(k.newExt[i].kind, k.newExt[i].metric)
	})
	if err != nil {
		return err
	}
	err = t.appendRows(conn, "events", len(k.events), func(i int, a *duck.Appender) error {
		r := k.events[i]
		e := &r.b.Events[r.i]
		return a.AppendRow(e.Ms, r.b.Host, e.Kind, nullStr(e.JobID), nullStr(e.AttemptID), nullKey(e.Process),
			nullPID(e.PID), nullStr(e.Message), e.Value)
	})
	if err != nil {
		return err
	}
	// The exactly-once high-water marks, in the same transaction as the data.
	agents := t.f.StoredAgents()
	ids := slices.Collect(maps.Keys(agents))
	err = t.appendRows(conn, "agent_seqs", len(ids), func(i int, a *duck.Appender) error {
		return a.AppendRow(ids[i], agents[ids[i]].Seq)
	})
	if debugTiming {
		fmt.Fprintf(os.Stderr, "%8.2fms appenders (%d chunks)\n", float64(time.Since(t0).Microseconds())/1000, len(k.chunks))
	}
	return err
}

// writeSummaries upserts every attempt, job and agent whose summary changed
// since it was last written (store.FoldTx's dirty states), and takes the
// agents' logged sequences in.
func (t *tx) writeSummaries(conn driver.Conn, exec func(string) error) error {
	atts, jobs, agents := t.f.DirtyAttempts(), t.f.DirtyJobs(), t.f.DirtyAgents()
	jobIDs, agentIDs := slices.Collect(maps.Keys(jobs)), slices.Collect(maps.Keys(agents))
	for _, tb := range []struct {
		name string
		n    int
	}{{"stage_attempts", len(atts)}, {"stage_jobs", len(jobIDs)}, {"stage_agents", len(agentIDs)}} {
		if tb.n > 0 {
			if err := exec("DELETE FROM " + tb.name); err != nil {
				return err
			}
		}
	}
	err := t.appendRows(conn, "stage_attempts", len(atts), func(i int, a *duck.Appender) error {
		return a.AppendRow(t.s.attemptValues(atts[i])...)
	})
	if err != nil {
		return err
	}
	stored := t.s.opt.Clock.Now().UnixMilli()
	err = t.appendRows(conn, "stage_jobs", len(jobIDs), func(i int, a *duck.Appender) error {
		id := jobIDs[i]
		j := jobs[id]
		v := j.Job(id, 0)
		return a.AppendRow(id, nullStr(v.AppID), v.Framework, nullStr(v.Name), nullStr(v.User), nullStr(v.Queue), nullMs(j.First),
			nullMs(j.Last), int32(v.Attempts), int32(v.Running), v.CPUMs, v.PeakRSS, v.MemGBHours, v.UsedGBHours, int32(v.Hosts),
			nullStr(store.FormatByType(v.ByType)), j.GenLo, j.GenHi, stored)
	})
	if err != nil {
		return err
	}
	err = t.appendRows(conn, "stage_agents", len(agentIDs), func(i int, a *duck.Appender) error {
		id := agentIDs[i]
		g := agents[id]
		return a.AppendRow(id, g.Host, g.Seq, nullMs(g.FirstMs), nullMs(g.LastMs), g.Batches, g.Samples,
			g.Stats.DroppedSamples, g.Stats.DroppedBatches, g.Stats.ReadErrors, g.Stats.Overruns)
	})
	if err != nil {
		return err
	}
	for _, q := range []struct {
		n int
		q string
	}{{len(atts), t.s.layout.upsert}, {len(jobIDs), upsertJobs}, {len(agentIDs), upsertAgents}} {
		if q.n > 0 {
			if err := exec(q.q); err != nil {
				return err
			}
		}
	}
	if len(agentIDs) > 0 {
		if err := exec("DELETE FROM agent_seqs"); err != nil {
			return err
		}
	}
	// The attempts' descriptions are in their rows now: recovery reads only
	// those logged after this write.
	if t.s.logged {
		if err := exec("DELETE FROM attempt_log"); err != nil {
			return err
		}
		t.s.logged = false
	}
	if err := exec("UPDATE meta SET value = '" + strconv.FormatUint(t.gen, 10) + "' WHERE key = 'flushed_gen'"); err != nil {
		return err
	}
	t.flushed = true
	return nil
}

// apply makes the committed transaction's states the fold's.
func (t *tx) apply() {
	s := t.s
	s.gen = t.gen
	for _, sh := range t.newTmpls {
		s.tmpls.put(sh)
	}
	s.fold.Commit(t.f, t.flushed, &s.ext)
	if t.flushed {
		s.lastFlush = time.Now()
		s.flushedGen = t.gen
	}
}

// Flush writes the summaries that changed since they were last written.
func (s *Store) Flush(ctx context.Context) error {
	app, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	return app.(*tx).commit(true)
}

func nullStr(s string) driver.Value {
	if s == "" {
		return nil
	}
	return s
}

func nullMs(v int64) driver.Value {
	if v == 0 {
		return nil
	}
	return v
}

func nullPos(v int64) driver.Value {
	if v <= 0 {
		return nil
	}
	return v
}

func nullKey(k uint64) driver.Value {
	if k == 0 {
		return nil
	}
	return keyValue(k)
}

func nullPID(p int32) driver.Value {
	if p == 0 {
		return nil
	}
	return p
}
