package duckdb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"hash/maphash"
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

// Series kinds in series_fresh and series_chunks.
const (
	kindProcess    = 0
	kindAttempt    = 1
	kindProcessExt = 2 // a process's metric with no column of its own (store.ExtColumns)
	kindAttemptExt = 3 // an attempt's
)

// Chunk levels.
const (
	levelFresh  = 0 // one batch's samples of a series
	levelMerged = 1 // merged by Maintain, zstd-compressed
	levelRollup = 2 // one point per minute, kept longer
)

// tx is one ingest transaction. Append checks sequences against the
// agents' high-water marks in memory; Commit writes everything in one DuckDB
// transaction by appenders: chunks, process and membership records, attempt
// descriptions, events, and each agent's new sequence; and (at most every
// SummaryEvery) the attempts', jobs' and agents' summaries by upsert.
type tx struct {
	s   *Store
	ctx context.Context

	prepared []*store.Prepared
	agents   map[string]*agentState // copies, changed by this transaction
	atts     map[string]*attState
	jobs     map[string]*jobState
	flush    bool // write the summaries whatever the time
	flushed  bool // they were written
	done     bool
	gen      uint64
	// The rows of proc_log, one per attempt and process (records of the
	// same attempt and process in this commit are merged into one).
	procRows []*procRow
	rowIdx   map[rowKey]*procRow
	live     map[uint64]*liveProc // changes to the cache's live (nil: forget)
	newTmpls []*cmdShape          // command line templates this commit stores
	newExt   []extName            // metrics of ext_metrics this commit stores
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
	return &tx{s: s, ctx: ctx, agents: map[string]*agentState{}}, nil
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
	b := p.Batch
	ag := t.agents[b.AgentID]
	if ag == nil {
		if cur := t.s.cache.agents[b.AgentID]; cur != nil {
			cp := *cur
			ag = &cp
		} else {
			ag = &agentState{host: b.Host, firstMs: b.SentMs}
		}
		t.agents[b.AgentID] = ag
	}
	if b.Seq <= ag.seq {
		return true, nil
	}
	ag.seq, ag.host, ag.lastMs, ag.stats, ag.dirty = b.Seq, b.Host, b.SentMs, b.Stats, true
	ag.batches++
	ag.samples += uint64(p.Samples)
	if ag.firstMs == 0 {
		ag.firstMs = b.SentMs
	}
	t.prepared = append(t.prepared, p)
	return false, nil
}

// att returns the transaction's copy of an attempt's state (loaded before).
func (t *tx) att(id string) *attState {
	if st := t.atts[id]; st != nil {
		return st
	}
	st := &attState{meta: wire.Attempt{AttemptID: id}}
	if cur := t.s.cache.atts[id]; cur != nil {
		*st = *cur
		st.shared = true
	}
	t.atts[id] = st
	return st
}

func (t *tx) job(id string) *jobState {
	if j := t.jobs[id]; j != nil {
		return j
	}
	j := newJobState()
	if cur := t.s.cache.jobs[id]; cur != nil {
		j = cur.clone()
	}
	t.jobs[id] = j
	return j
}

// load brings into the cache the attempts and jobs the pending batches
// name that it does not hold (new ones, or all of them after a restart).
func (t *tx) load() error {
	c := t.s.cache
	var ids []string
	seen := map[string]bool{}
	want := func(id string) {
		if id != "" && c.atts[id] == nil && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	var touched []string
	for _, p := range t.prepared {
		b := p.Batch
		for i := range b.Attempts {
			touched = append(touched, b.Attempts[i].AttemptID)
		}
		for i := range b.AttemptSeries {
			touched = append(touched, b.AttemptSeries[i].AttemptID)
		}
		for i := range b.Members {
			touched = append(touched, b.Members[i].AttemptID)
		}
		// The attempts a process record goes to.
		for i := range b.Processes {
			if lp := c.live[b.Processes[i].Key]; lp != nil {
				touched = append(touched, lp.atts...)
			}
		}
	}
	for _, id := range touched {
		want(id)
	}
	if len(ids) > 0 {
		if err := t.s.loadAttempts(t.ctx, t.s.handle(), ids); err != nil {
			return err
		}
	}
	var jobs []string
	jseen := map[string]bool{}
	wantJob := func(id string) {
		if id != "" && c.jobs[id] == nil && !jseen[id] {
			jseen[id] = true
			jobs = append(jobs, id)
		}
	}
	for _, p := range t.prepared {
		b := p.Batch
		for i := range b.Attempts {
			wantJob(b.Attempts[i].JobID)
		}
	}
	for _, id := range touched {
		if st := c.atts[id]; st != nil {
			wantJob(st.meta.JobID)
		}
	}
	return t.s.loadJobs(t.ctx, t.s.handle(), jobs)
}

// absorb merges a prepared batch into the transaction's states.
func (t *tx) absorb(p *store.Prepared) {
	b := p.Batch
	touched := map[string]contrib{}
	touch := func(id string) *attState {
		st := t.att(id)
		if _, ok := touched[id]; !ok {
			touched[id] = st.counted
		}
		if st.genFirst == 0 {
			st.genFirst = t.gen
		}
		st.genLast = t.gen
		return st
	}
	for i := range b.Attempts {
		a := &b.Attempts[i]
		st := touch(a.AttemptID)
		store.MergeAttempt(&st.meta, a)
		st.host = b.Host
		st.dirty = true
		if a.JobID != "" {
			t.job(a.JobID).Describe(&st.meta)
		}
	}
	for i := range b.Members {
		m := &b.Members[i]
		st := touch(m.AttemptID)
		st.addProc(m.Process)
		st.dirty = true
		t.row(m.AttemptID, m.Process).addMember(m)
		t.addLive(m.Process, m.AttemptID)
	}
	for i := range b.Processes {
		pr := &b.Processes[i]
		lp := t.liveProc(pr.Key)
		if lp == nil || len(lp.atts) == 0 {
			t.row("", pr.Key).process(pr, b.Host, true)
		} else {
			for _, id := range lp.atts {
				st := touch(id)
				st.dirty = true
				h := maphash.String(cmdSeed, pr.Cmdline) | 1
				logCmd := st.procs[pr.Key] != h
				if logCmd {
					st.setCmd(pr.Key, h)
				}
				t.row(id, pr.Key).process(pr, b.Host, logCmd)
			}
		}
		if pr.EndMs != 0 {
			t.setLive(pr.Key, nil)
		} else if lp != nil && lp.start != pr.StartMs {
			cp := *lp
			cp.start = pr.StartMs
			t.setLive(pr.Key, &cp)
		}
	}
	for id, sum := range p.Atts {
		st := touch(id)
		if st.host == "" {
			st.host = b.Host
		}
		store.MergeSummary(&st.sum, sum)
		st.dirty = true
	}
	for id, old := range touched {
		st := t.atts[id]
		now := st.contribution()
		if now != old {
			job := st.meta.JobID
			if job != "" {
				t.job(job).apply(old, now)
			}
			st.counted = now
		}
	}
}

// Commit writes the transaction. A full disk is store.ErrDiskFull.
func (t *tx) Commit() (err error) {
	defer func() { err = mapErr(err) }()
	if t.done {
		return fmt.Errorf("commit after commit or rollback")
	}
	defer t.Rollback()
	s := t.s
	due := t.flush || s.opt.SummaryEvery < 0 || time.Since(s.lastFlush) >= s.opt.SummaryEvery
	if len(t.prepared) == 0 && (!due || !s.anyDirty()) {
		return nil
	}
	if err := s.failure(); err != nil {
		return err
	}
	t.atts, t.jobs = map[string]*attState{}, map[string]*jobState{}
	if err := t.load(); err != nil {
		s.failedLocked(err)
		return err
	}
	t.gen = s.gen + 1
	for _, p := range t.prepared {
		t.absorb(p)
	}
	if err := t.describeMembers(); err != nil {
		return err
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
		if err := exec("BEGIN TRANSACTION"); err != nil {
			return err
		}
		if err := t.write(conn, exec); err != nil {
			exec("ROLLBACK")
			return err
		}
		if due {
			if err := t.writeSummaries(conn, exec); err != nil {
				exec("ROLLBACK")
				return err
			}
		}
		return exec("COMMIT")
	})
	if err != nil {
		s.failedLocked(err)
		return fmt.Errorf("cannot store batches: %w", err)
	}
	t.apply()
	return nil
}

var debugTiming = os.Getenv("TASKSCOPE_DEBUG_TIMING") != ""

func newAppender(conn driver.Conn, table string) (*duck.Appender, error) {
	a, err := duck.NewAppenderFromConn(conn, "", table)
	if err != nil {
		return nil, fmt.Errorf("cannot append to %s: %w", table, err)
	}
	return a, nil
}

// appendRows appends rows to table with one appender; none: no appender.
func appendRows(conn driver.Conn, table string, n int, row func(i int, a *duck.Appender) error) error {
	if n == 0 {
		return nil
	}
	a, err := newAppender(conn, table)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := row(i, a); err != nil {
			a.Close()
			return fmt.Errorf("cannot append to %s: %w", table, err)
		}
	}
	if err := a.Close(); err != nil {
		return fmt.Errorf("cannot append to %s: %w", table, err)
	}
	return nil
}

// cmdSeed hashes command lines (in memory only).
var cmdSeed = maphash.MakeSeed()

// keyValue stores a 64-bit key in a BIGINT column.
func keyValue(k uint64) int64 { return int64(k) }

// write appends the transaction's records: chunks, processes, memberships,
// attempt descriptions, extra metrics, events, and the agents' sequences.
func (t *tx) write(conn driver.Conn, exec func(string) error) error {
	t0 := time.Now()
	type chunkRow struct {
		kind int8
		c    *store.SeriesChunk
		job  int64
	}
	var chunks []chunkRow
	var atts, events int
	for _, p := range t.prepared {
		b := p.Batch
		// A process chunk's job_key is the process's start, when known: from
		// a record in its batch, or from what is known of live processes.
		starts := map[uint64]int64{}
		for i := range b.Processes {
			starts[b.Processes[i].Key] = b.Processes[i].StartMs
		}
		for i := range p.ProcChunks {
			c := &p.ProcChunks[i]
			start, ok := starts[c.Key]
			if lp := t.liveProc(c.Key); !ok && lp != nil {
				start = lp.start
			}
			chunks = append(chunks, chunkRow{kindProcess, c, start})
		}
		for i := range p.AttChunks {
			c := &p.AttChunks[i]
			chunks = append(chunks, chunkRow{kindAttempt, c, keyValue(store.AttemptKey(t.att(c.AttemptID).meta.JobID))})
		}
		for i := range p.ExtChunks {
			c := &p.ExtChunks[i]
			r := chunkRow{kindProcessExt, c, 0}
			if c.AttemptID != "" {
				r.kind = kindAttemptExt
				r.job = keyValue(store.ExtKey(store.AttemptKey(t.att(c.AttemptID).meta.JobID), c.Metric))
			}
			chunks = append(chunks, r)
			if n := (extName{r.kind, c.Metric}); !t.s.knownExt(n) && !slices.Contains(t.newExt, n) {
				t.newExt = append(t.newExt, n)
			}
		}
		atts += len(b.Attempts)
		events += len(b.Events)
	}
	err := appendRows(conn, freshName(t.s.fresh), len(chunks), func(i int, a *duck.Appender) error {
		r := chunks[i]
		return a.AppendRow(r.kind, keyValue(r.c.Key), r.job, r.c.TMin, r.c.TMax, int32(r.c.N), int8(levelFresh), r.c.Data)
	})
	if err != nil {
		return err
	}
	// The other logs, batch by batch.
	type rec struct {
		b *wire.Batch
		p *store.Prepared
		i int
	}
	each := func(count func(*store.Prepared) int) []rec {
		var out []rec
		for _, p := range t.prepared {
			for i := 0; i < count(p); i++ {
				out = append(out, rec{p.Batch, p, i})
			}
		}
		return out
	}
	if err := t.writeProcRows(conn); err != nil {
		return err
	}
	if err := t.writeProfiles(conn); err != nil {
		return err
	}
	if atts > 0 {
		t.s.logged = true
		rs := each(func(p *store.Prepared) int { return len(p.Batch.Attempts) })
		err := appendRows(conn, "attempt_log", len(rs), func(i int, a *duck.Appender) error {
			r := rs[i]
			m := &r.b.Attempts[r.i]
			return a.AppendRow(append([]driver.Value{t.gen, r.b.Host, m.AttemptID, m.JobID, nullStr(m.AppID), nullStr(m.ContainerID),
				nullStr(m.Type), nullStr(m.Framework), nullMs(m.FirstMs), nullMs(m.LastMs), m.Ended, nullStr(m.JobName),
				nullStr(m.User), nullStr(m.Queue), nullPos(m.MemoryMB), nullStr(m.JavaOpts), nullPos(m.XmxBytes), m.Streaming},
				exitValues(m)...)...)
		})
		if err != nil {
			return err
		}
	}
	err = appendRows(conn, "ext_metrics", len(t.newExt), func(i int, a *duck.Appender) error {
		return a.AppendRow(t.newExt[i].kind, t.newExt[i].metric)
	})
	if err != nil {
		return err
	}
	if events > 0 {
		rs := each(func(p *store.Prepared) int { return len(p.Batch.Events) })
		err := appendRows(conn, "events", len(rs), func(i int, a *duck.Appender) error {
			r := rs[i]
			e := &r.b.Events[r.i]
			return a.AppendRow(e.Ms, r.b.Host, e.Kind, nullStr(e.JobID), nullStr(e.AttemptID), nullKey(e.Process),
				nullPID(e.PID), nullStr(e.Message), e.Value)
		})
		if err != nil {
			return err
		}
	}
	// The exactly-once high-water marks, in the same transaction as the data.
	var ids []string
	for id, a := range t.agents {
		if a.dirty {
			ids = append(ids, id)
		}
	}
	err = appendRows(conn, "agent_seqs", len(ids), func(i int, a *duck.Appender) error {
		return a.AppendRow(ids[i], t.agents[ids[i]].seq)
	})
	if debugTiming {
		fmt.Fprintf(os.Stderr, "%8.2fms appenders (%d chunks)\n", float64(time.Since(t0).Microseconds())/1000, len(chunks))
	}
	return err
}

// writeSummaries upserts every attempt, job and agent whose summary changed
// since it was last written: those of this transaction and the dirty ones
// in the cache; and takes the agents' logged sequences in.
func (t *tx) writeSummaries(conn driver.Conn, exec func(string) error) error {
	c := t.s.cache
	for id, st := range c.atts {
		if st.dirty && t.atts[id] == nil {
			t.att(id)
		}
	}
	for id, j := range c.jobs {
		if j.dirty && t.jobs[id] == nil {
			t.job(id)
		}
	}
	for id, a := range c.agents {
		if a.dirty && t.agents[id] == nil {
			cp := *a
			t.agents[id] = &cp
		}
	}
	var attIDs, jobIDs, agentIDs []string
	for id, st := range t.atts {
		if st.dirty && st.meta.JobID != "" {
			attIDs = append(attIDs, id) // (samples of an attempt no batch described yet wait for its description)
		}
	}
	for id, j := range t.jobs {
		if j.dirty && j.Attempts > 0 {
			jobIDs = append(jobIDs, id)
		}
	}
	for id, a := range t.agents {
		if a.dirty {
			agentIDs = append(agentIDs, id)
		}
	}
	for _, tb := range []struct {
		name string
		n    int
	}{{"stage_attempts", len(attIDs)}, {"stage_jobs", len(jobIDs)}, {"stage_agents", len(agentIDs)}} {
		if tb.n > 0 {
			if err := exec("DELETE FROM " + tb.name); err != nil {
				return err
			}
		}
	}
	err := appendRows(conn, "stage_attempts", len(attIDs), func(i int, a *duck.Appender) error {
		id := attIDs[i]
		st := t.atts[id]
		m, s := &st.meta, &st.sum
		first, last := store.AttemptSpan(m, s)
		return a.AppendRow(append([]driver.Value{id, m.JobID, nullStr(st.host), nullStr(m.ContainerID), nullStr(m.AppID), nullStr(m.Type),
			nullStr(m.Framework), nullMs(first), nullMs(last), m.Ended, nullStr(m.JobName), nullStr(m.User), nullStr(m.Queue),
			nullPos(m.MemoryMB), nullStr(m.JavaOpts), nullPos(m.XmxBytes), m.Streaming, s.CPUMs, s.PeakRSS, s.PeakPSS,
			s.PeakVMS, s.PeakHeap, s.ReadBytes, s.WriteBytes, s.GCTimeMs, s.SchedWaitMs, s.RSSByteMs, int32(len(st.procs)),
			nullMs(s.LastMs), s.LastRSS, keyValue(store.AttemptKey(id)), st.genFirst, st.genLast}, exitValues(m)...)...)
	})
	if err != nil {
		return err
	}
	err = appendRows(conn, "stage_jobs", len(jobIDs), func(i int, a *duck.Appender) error {
		id := jobIDs[i]
		j := t.jobs[id]
		v := j.Job(id, 0)
		return a.AppendRow(id, nullStr(v.AppID), v.Framework, nullStr(v.Name), nullStr(v.User), nullStr(v.Queue), nullMs(j.First),
			nullMs(j.Last), int32(v.Attempts), int32(v.Running), v.CPUMs, v.PeakRSS, v.MemGBHours, v.UsedGBHours, int32(v.Hosts),
			formatByType(v.ByType), j.genLo, j.genHi)
	})
	if err != nil {
		return err
	}
	err = appendRows(conn, "stage_agents", len(agentIDs), func(i int, a *duck.Appender) error {
		id := agentIDs[i]
		g := t.agents[id]
		return a.AppendRow(id, g.host, g.seq, nullMs(g.firstMs), nullMs(g.lastMs), g.batches, g.samples,
			g.stats.DroppedSamples, g.stats.DroppedBatches, g.stats.ReadErrors, g.stats.Overruns)
	})
	if err != nil {
		return err
	}
	for _, q := range []struct {
		n int
		q string
	}{{len(attIDs), upsertAttempts}, {len(jobIDs), upsertJobs}, {len(agentIDs), upsertAgents}} {
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

// apply makes the committed transaction's states the cache's.
func (t *tx) apply() {
	s := t.s
	c := s.cache
	s.gen = t.gen
	for _, sh := range t.newTmpls {
		s.tmpls.put(sh)
	}
	s.addExt(t.newExt)
	for k, lp := range t.live {
		if lp == nil {
			delete(c.live, k)
		} else {
			c.live[k] = lp
		}
	}
	if len(c.live) > maxLive {
		// Processes whose exit was never told: keep those of the attempts
		// in memory (those that run).
		clear(c.live)
		for id, st := range c.atts {
			for k := range st.procs {
				c.addLive(k, id)
			}
		}
	}
	for id, a := range t.agents {
		if t.flushed {
			a.dirty = false
		}
		c.agents[id] = a
	}
	for id, st := range t.atts {
		st.shared = false
		if t.flushed && st.meta.JobID != "" {
			st.dirty = false
		}
		// An ended attempt that is written will not change: forget it.
		if st.meta.Ended && !st.dirty {
			delete(c.atts, id)
			continue
		}
		c.atts[id] = st
	}
	for id, j := range t.jobs {
		if t.flushed {
			j.dirty = false
		}
		if j.Running <= 0 && !j.dirty {
			delete(c.jobs, id)
			continue
		}
		c.jobs[id] = j
	}
	if t.flushed {
		s.lastFlush = time.Now()
		s.flushedGen = t.gen
	}
}

// anyDirty reports whether a summary waits to be written.
func (s *Store) anyDirty() bool {
	c := s.cache
	for _, a := range c.agents {
		if a.dirty {
			return true
		}
	}
	for _, st := range c.atts {
		if st.dirty && st.meta.JobID != "" {
			return true
		}
	}
	for _, j := range c.jobs {
		if j.dirty {
			return true
		}
	}
	return false
}

// Flush writes the summaries that changed since they were last written.
func (s *Store) Flush(ctx context.Context) error {
	app, err := s.Begin(ctx)
	if err != nil {
		return err
	}
	t := app.(*tx)
	t.flush = true
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
