package duckdb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"os"
	"strings"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Series kinds in series_fresh and series_chunks.
const (
	kindProcess = 0
	kindAttempt = 1
)

// Chunk levels.
const (
	levelFresh  = 0 // one batch's samples of a series
	levelMerged = 1 // merged by Maintain, zstd-compressed
	levelRollup = 2 // one point per minute, kept longer
)

// tx is one ingest transaction. Append checks sequences; Commit prepares
// every batch and writes it in one DuckDB transaction: chunks, process and
// membership records and events by appender, the agents' sequences by
// upsert, and (at most every SummaryEvery) the attempts' and jobs' summaries.
type tx struct {
	s   *Store
	ctx context.Context

	pending  []*wire.Batch
	prepared []*store.Prepared
	procs    []procRow
	members  []wire.Membership
	agents   map[string]*agentRow
	events   []eventRow
	atts     map[string]*attState // copies of the cache's entries, changed by this transaction
	flushed  bool
	done     bool
}

type procRow struct {
	p    wire.Process
	host string
	seen int64
}

// attState is an attempt as the store knows it: its description and its
// summary, in absolute values.
type attState struct {
	meta  wire.Attempt
	host  string
	sum   store.AttemptSummary
	rss   rssPoint // last RSS point, to integrate across batches
	dirty bool     // changed since it was last written
}

type agentRow struct {
	host    string
	seq     uint64
	firstMs int64
	lastMs  int64
	batches uint64
	samples uint64
	stats   wire.AgentStats
}

type eventRow struct {
	host string
	e    wire.Event
}

// Begin starts an ingest transaction. It holds the store's writer lock
// until Commit or Rollback.
func (s *Store) Begin(ctx context.Context) (store.Appender, error) {
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return nil, errClosed
	}
	return &tx{s: s, ctx: ctx, agents: map[string]*agentRow{}, atts: map[string]*attState{}}, nil
}

func (t *tx) Rollback() error {
	if !t.done {
		t.done = true
		t.s.wmu.Unlock()
	}
	return nil
}

// Append checks the batch's sequence; the batch is prepared at Commit.
func (t *tx) Append(b *wire.Batch) (bool, error) {
	if t.done {
		return false, fmt.Errorf("append after commit or rollback")
	}
	seq, err := t.agentSeq(b.AgentID)
	if err != nil {
		return false, err
	}
	if b.Seq <= seq {
		return true, nil
	}
	ag := t.agents[b.AgentID]
	if ag == nil {
		ag = &agentRow{host: b.Host, firstMs: b.SentMs}
		t.agents[b.AgentID] = ag
	}
	ag.seq, ag.lastMs, ag.stats = b.Seq, b.SentMs, b.Stats
	t.pending = append(t.pending, b)
	return false, nil
}

func (t *tx) agentSeq(agent string) (uint64, error) {
	if a := t.agents[agent]; a != nil {
		return a.seq, nil
	}
	c := t.s.cache
	c.mu.Lock()
	seq, ok := c.agentSeq[agent]
	c.mu.Unlock()
	if ok {
		return seq, nil
	}
	err := t.s.db.QueryRowContext(t.ctx, `SELECT seq FROM agents WHERE agent_id = ?`, agent).Scan(&seq)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("cannot read agent sequence: %w", err)
	}
	return seq, nil
}

// absorb prepares a batch and merges it into the transaction.
func (t *tx) absorb(b *wire.Batch) {
	p := store.Prepare(b)
	t.prepared = append(t.prepared, p)
	ag := t.agents[b.AgentID]
	ag.batches++
	ag.samples += uint64(p.Samples)
	for i := range b.Processes {
		t.procs = append(t.procs, procRow{p: b.Processes[i], host: b.Host, seen: b.SentMs})
	}
	t.members = append(t.members, b.Members...)
	for i := range b.Attempts {
		a := &b.Attempts[i]
		st := t.att(a.AttemptID)
		mergeMeta(&st.meta, a)
		st.host = b.Host
		st.dirty = true
	}
	for id, sum := range p.Atts {
		st := t.att(id)
		if st.host == "" {
			st.host = b.Host
		}
		// Join this batch's RSS integral to the previous batch's last point.
		if st.rss.ms > 0 && sum.FirstMs > st.rss.ms {
			sum.RSSByteMs += float64(sum.FirstRSS+st.rss.rss) / 2 * float64(sum.FirstMs-st.rss.ms)
		}
		if sum.LastMs > 0 {
			st.rss = rssPoint{sum.LastMs, sum.LastRSS}
		}
		mergeSummary(&st.sum, sum)
		st.dirty = true
	}
	for _, e := range b.Events {
		t.events = append(t.events, eventRow{host: b.Host, e: e})
	}
}

// mergeMeta takes what a new description of an attempt says.
func mergeMeta(dst, src *wire.Attempt) {
	first, last, ended := dst.FirstMs, dst.LastMs, dst.Ended
	keep := *dst
	*dst = *src
	if first > 0 && (dst.FirstMs == 0 || first < dst.FirstMs) {
		dst.FirstMs = first
	}
	dst.LastMs = max(last, dst.LastMs)
	dst.Ended = ended || dst.Ended
	// A description that leaves a field empty does not erase it.
	for _, f := range []struct{ d, k *string }{{&dst.JobID, &keep.JobID}, {&dst.AppID, &keep.AppID},
		{&dst.ContainerID, &keep.ContainerID}, {&dst.Type, &keep.Type}, {&dst.JobName, &keep.JobName},
		{&dst.User, &keep.User}, {&dst.Queue, &keep.Queue}, {&dst.JavaOpts, &keep.JavaOpts}} {
		if *f.d == "" {
			*f.d = *f.k
		}
	}
	if dst.Framework == "" || dst.Framework == "unknown" {
		if keep.Framework != "" {
			dst.Framework = keep.Framework
		}
	}
	if dst.MemoryMB == 0 {
		dst.MemoryMB = keep.MemoryMB
	}
	if dst.XmxBytes == 0 {
		dst.XmxBytes = keep.XmxBytes
	}
	dst.Streaming = dst.Streaming || keep.Streaming
}

func mergeSummary(dst, src *store.AttemptSummary) {
	dst.LastMs = max(dst.LastMs, src.LastMs)
	dst.PeakRSS, dst.PeakPSS = max(dst.PeakRSS, src.PeakRSS), max(dst.PeakPSS, src.PeakPSS)
	dst.PeakVMS, dst.PeakHeap = max(dst.PeakVMS, src.PeakVMS), max(dst.PeakHeap, src.PeakHeap)
	// Counters are cumulative: the latest values (they only grow).
	dst.CPUMs, dst.ReadBytes = max(dst.CPUMs, src.CPUMs), max(dst.ReadBytes, src.ReadBytes)
	dst.WriteBytes, dst.GCTimeMs = max(dst.WriteBytes, src.WriteBytes), max(dst.GCTimeMs, src.GCTimeMs)
	dst.SchedWaitUs = max(dst.SchedWaitUs, src.SchedWaitUs)
	dst.RSSByteMs += src.RSSByteMs
}

// att returns the transaction's copy of an attempt's state.
func (t *tx) att(id string) *attState {
	if st := t.atts[id]; st != nil {
		return st
	}
	c := t.s.cache
	c.mu.Lock()
	cur := c.atts[id]
	c.mu.Unlock()
	st := &attState{meta: wire.Attempt{AttemptID: id}}
	if cur != nil {
		*st = *cur
	}
	t.atts[id] = st
	return st
}

// loadAttempts brings into the cache the attempts of the pending batches
// that it does not hold (after a restart), in one query.
func (t *tx) loadAttempts() error {
	c := t.s.cache
	want := map[string]bool{}
	c.mu.Lock()
	for _, b := range t.pending {
		for i := range b.Attempts {
			if c.atts[b.Attempts[i].AttemptID] == nil {
				want[b.Attempts[i].AttemptID] = true
			}
		}
		for i := range b.AttemptSeries {
			if c.atts[b.AttemptSeries[i].AttemptID] == nil {
				want[b.AttemptSeries[i].AttemptID] = true
			}
		}
	}
	c.mu.Unlock()
	if len(want) == 0 {
		return nil
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	rows, err := t.s.db.QueryContext(t.ctx, `SELECT `+attemptCols+`, coalesce(sample_ms, 0) FROM attempts
		WHERE attempt_id IN (SELECT unnest(?::VARCHAR[]))`, ids)
	if err != nil {
		return fmt.Errorf("cannot load attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		st, err := scanState(rows)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.atts[st.meta.AttemptID] == nil {
			c.atts[st.meta.AttemptID] = st
		}
		c.mu.Unlock()
	}
	return rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// Commit writes the transaction.
func (t *tx) Commit() error {
	if t.done {
		return fmt.Errorf("commit after commit or rollback")
	}
	defer t.Rollback()
	if len(t.pending) == 0 && !t.flushed {
		return nil
	}
	if err := t.loadAttempts(); err != nil {
		return err
	}
	for _, b := range t.pending {
		t.absorb(b)
	}
	err := t.s.wconn.Raw(func(dc any) error {
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
		if err := exec("BEGIN TRANSACTION"); err != nil {
			return err
		}
		if err := t.write(conn, exec); err != nil {
			exec("ROLLBACK")
			return err
		}
		return exec("COMMIT")
	})
	if err != nil {
		return fmt.Errorf("cannot store batches: %w", err)
	}
	t.apply()
	return nil
}

var debugTiming = os.Getenv("TASKSCOPE_DEBUG_TIMING") != ""

func (t *tx) write(conn driver.Conn, exec func(string) error) error {
	t0 := time.Now()
	if err := t.appendLogs(conn); err != nil {
		return err
	}
	if debugTiming {
		fmt.Fprintf(os.Stderr, "%8.2fms appenders\n", float64(time.Since(t0).Microseconds())/1000)
	}
	if len(t.agents) > 0 {
		if err := exec("DELETE FROM stage_agents"); err != nil {
			return err
		}
		if err := t.stageAgents(conn); err != nil {
			return err
		}
		if err := exec(upsertAgents); err != nil {
			return err
		}
	}
	// Summaries: at most every SummaryEvery (and when flushing).
	c := t.s.cache
	c.mu.Lock()
	due := t.flushed || time.Since(c.lastFlush) >= t.s.opt.SummaryEvery
	c.mu.Unlock()
	if !due {
		return nil
	}
	if err := exec("DELETE FROM stage_attempts"); err != nil {
		return err
	}
	n, err := t.stageAttempts(conn)
	if err != nil {
		return err
	}
	t.flushed = true
	if n == 0 {
		return nil
	}
	for _, q := range []string{upsertAttempts, upsertJobs, updateJobs} {
		if err := exec(q); err != nil {
			return err
		}
	}
	return nil
}

func newAppender(conn driver.Conn, table string) (*duck.Appender, error) {
	a, err := duck.NewAppenderFromConn(conn, "", table)
	if err != nil {
		return nil, fmt.Errorf("cannot append to %s: %w", table, err)
	}
	return a, nil
}

// keyValue stores a 64-bit key in a BIGINT column.
func keyValue(k uint64) int64 { return int64(k) }

// appendLogs appends the series chunks, process and membership records,
// extra metrics and events.
func (t *tx) appendLogs(conn driver.Conn) error {
	pa, err := newAppender(conn, "processes")
	if err != nil {
		return err
	}
	for _, r := range t.procs {
		m := &r.p
		if err := pa.AppendRow(keyValue(m.Key), r.host, m.PID, m.PPID, m.SID, nullMs(m.StartMs), nullMs(m.EndMs), m.Cmdline,
			m.Comm, nullStr(m.Role), m.UID, nullStr(m.User), r.seen); err != nil {
			pa.Close()
			return fmt.Errorf("cannot append process: %w", err)
		}
	}
	if err := pa.Close(); err != nil {
		return err
	}
	ma, err := newAppender(conn, "memberships")
	if err != nil {
		return err
	}
	for _, m := range t.members {
		if err := ma.AppendRow(keyValue(m.Process), m.AttemptID, nullMs(m.FromMs), nullMs(m.ToMs), m.CPUBaseMs, nullStr(m.Role)); err != nil {
			ma.Close()
			return err
		}
	}
	if err := ma.Close(); err != nil {
		return err
	}
	ca, err := newAppender(conn, freshName(t.s.fresh))
	if err != nil {
		return err
	}
	for _, p := range t.prepared {
		for _, c := range p.ProcChunks {
			if err := ca.AppendRow(int8(kindProcess), keyValue(c.Key), int64(0), c.TMin, c.TMax, int32(c.N), int8(levelFresh), c.Data); err != nil {
				ca.Close()
				return fmt.Errorf("cannot append chunk: %w", err)
			}
		}
		for _, c := range p.AttChunks {
			job := keyValue(store.AttemptKey(t.att(c.AttemptID).meta.JobID))
			if err := ca.AppendRow(int8(kindAttempt), keyValue(c.Key), job, c.TMin, c.TMax, int32(c.N), int8(levelFresh), c.Data); err != nil {
				ca.Close()
				return fmt.Errorf("cannot append chunk: %w", err)
			}
		}
	}
	if err := ca.Close(); err != nil {
		return fmt.Errorf("cannot append chunks: %w", err)
	}
	ea, err := newAppender(conn, "samples_ext")
	if err != nil {
		return err
	}
	for _, p := range t.prepared {
		for _, x := range p.Ext {
			if err := ea.AppendRow(keyValue(x.Key), x.Ms, x.Metric, x.Value); err != nil {
				ea.Close()
				return err
			}
		}
	}
	if err := ea.Close(); err != nil {
		return err
	}
	ev, err := newAppender(conn, "events")
	if err != nil {
		return err
	}
	for _, r := range t.events {
		e := &r.e
		if err := ev.AppendRow(e.Ms, r.host, e.Kind, nullStr(e.JobID), nullStr(e.AttemptID), nullKey(e.Process),
			nullPID(e.PID), nullStr(e.Message), e.Value); err != nil {
			ev.Close()
			return err
		}
	}
	return ev.Close()
}

// stageAttempts appends every attempt whose summary changed since it was
// last written: those of this transaction and the dirty ones in the cache.
func (t *tx) stageAttempts(conn driver.Conn) (int, error) {
	c := t.s.cache
	c.mu.Lock()
	for id, st := range c.atts {
		if st.dirty && t.atts[id] == nil {
			cp := *st
			t.atts[id] = &cp
		}
	}
	c.mu.Unlock()
	aa, err := newAppender(conn, "stage_attempts")
	if err != nil {
		return 0, err
	}
	n := 0
	for id, st := range t.atts {
		if !st.dirty {
			continue
		}
		m, s := &st.meta, &st.sum
		if m.JobID == "" {
			continue // samples of an attempt no batch described yet: its summary waits
		}
		first := m.FirstMs
		if first == 0 {
			first = s.FirstMs
		}
		last := max(m.LastMs, s.LastMs)
		if err := aa.AppendRow(id, m.JobID, st.host, nullStr(m.ContainerID), nullStr(m.AppID), nullStr(m.Type),
			nullStr(m.Framework), nullMs(first), nullMs(last), m.Ended, nullStr(m.JobName), nullStr(m.User), nullStr(m.Queue),
			nullPos(m.MemoryMB), nullStr(m.JavaOpts), nullPos(m.XmxBytes), m.Streaming, s.CPUMs, s.PeakRSS, s.PeakPSS,
			s.PeakVMS, s.PeakHeap, s.ReadBytes, s.WriteBytes, s.GCTimeMs, s.SchedWaitUs, s.RSSByteMs, nullMs(s.LastMs),
			keyValue(store.AttemptKey(id))); err != nil {
			aa.Close()
			return 0, fmt.Errorf("cannot stage attempt: %w", err)
		}
		n++
	}
	return n, aa.Close()
}

func (t *tx) stageAgents(conn driver.Conn) error {
	ga, err := newAppender(conn, "stage_agents")
	if err != nil {
		return err
	}
	for id, a := range t.agents {
		if err := ga.AppendRow(id, a.host, a.seq, a.firstMs, a.lastMs, a.batches, a.samples, a.stats.DroppedSamples,
			a.stats.DroppedBatches, a.stats.ReadErrors, a.stats.Overruns); err != nil {
			ga.Close()
			return err
		}
	}
	return ga.Close()
}

// apply makes the committed transaction's states the cache's.
func (t *tx) apply() {
	c := t.s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, a := range t.agents {
		c.agentSeq[id] = a.seq
	}
	if t.flushed {
		c.lastFlush = time.Now()
		for id, st := range t.atts {
			if st.meta.JobID != "" {
				st.dirty = false
			}
			// An ended attempt that is written will not change: forget it.
			if st.meta.Ended && !st.dirty {
				delete(c.atts, id)
				continue
			}
			c.atts[id] = st
		}
		return
	}
	for id, st := range t.atts {
		c.atts[id] = st
	}
}

// Flush writes the summaries that changed since they were last written.
func (s *Store) Flush(ctx context.Context) error {
	app, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	t := app.(*tx)
	t.flushed = true
	return t.Commit()
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
