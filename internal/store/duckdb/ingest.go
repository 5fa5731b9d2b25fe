package duckdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"strings"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// tx is one ingest transaction. Append only prepares and merges in memory;
// Commit writes everything in one DuckDB transaction: appenders for the
// samples and events, one upsert per summary table.
type tx struct {
	s   *Store
	ctx context.Context

	pending  []*wire.Batch
	prepared []*store.Prepared
	procs    map[uint64]*procRow
	atts     map[string]*attRow
	members  map[memberKey]wire.Membership
	agents   map[string]*agentRow
	events   []eventRow
	procSt   map[uint64]*store.SeriesState
	attSt    map[string]*store.SeriesState
	attJob   map[string]string
	ended    []uint64
	endedAtt []string
	done     bool
}

type memberKey struct {
	key     uint64
	attempt string
}

type procRow struct {
	meta *wire.Process
	host string
	sum  store.ProcSummary
	has  bool
}

type attRow struct {
	meta *wire.Attempt
	host string
	sum  store.AttemptSummary
	has  bool
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
	return &tx{s: s, ctx: ctx, procs: map[uint64]*procRow{}, atts: map[string]*attRow{},
		members: map[memberKey]wire.Membership{}, agents: map[string]*agentRow{},
		procSt: map[uint64]*store.SeriesState{}, attSt: map[string]*store.SeriesState{}, attJob: map[string]string{}}, nil
}

func (t *tx) Rollback() error {
	if !t.done {
		t.done = true
		t.s.wmu.Unlock()
	}
	return nil
}

// Append checks the batch's sequence; the batch is prepared at Commit, with
// the states of all the transaction's series looked up at once.
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

// absorb prepares a batch's rows and merges its summaries into the transaction's.
func (t *tx) absorb(b *wire.Batch) {
	for i := range b.Attempts {
		a := &b.Attempts[i]
		t.attJob[a.AttemptID] = a.JobID
	}
	p := store.Prepare(b, t.procState, t.attState, t.jobOf)
	t.prepared = append(t.prepared, p)
	ag := t.agents[b.AgentID]
	ag.batches++
	ag.samples += uint64(p.Samples.Len())
	for i := range b.Processes {
		pr := &b.Processes[i]
		r := t.proc(pr.Key, b.Host)
		m := *pr
		if r.meta != nil && r.meta.EndMs != 0 && m.EndMs == 0 {
			m.EndMs = r.meta.EndMs
		}
		r.meta = &m
		if pr.EndMs != 0 {
			t.ended = append(t.ended, pr.Key)
		}
	}
	for k, sum := range p.Procs {
		r := t.proc(k, b.Host)
		mergeProc(&r.sum, sum, r.has)
		r.has = true
		t.procSt[k] = sum.State
	}
	for i := range b.Attempts {
		a := b.Attempts[i]
		r := t.att(a.AttemptID, b.Host)
		if r.meta != nil && r.meta.FirstMs > 0 && (a.FirstMs == 0 || r.meta.FirstMs < a.FirstMs) {
			a.FirstMs = r.meta.FirstMs
		}
		r.meta = &a
		if a.Ended {
			t.endedAtt = append(t.endedAtt, a.AttemptID)
		}
	}
	for id, sum := range p.Atts {
		r := t.att(id, b.Host)
		mergeAtt(&r.sum, sum, r.has)
		r.has = true
		t.attSt[id] = sum.State
	}
	for _, m := range b.Members {
		k := memberKey{m.Process, m.AttemptID}
		if old, ok := t.members[k]; ok {
			if old.FromMs < m.FromMs {
				m.FromMs = old.FromMs
			}
			if m.ToMs == 0 {
				m.ToMs = old.ToMs
			}
		}
		t.members[k] = m
	}
	for _, e := range b.Events {
		t.events = append(t.events, eventRow{host: b.Host, e: e})
	}
}

func (t *tx) proc(k uint64, host string) *procRow {
	r := t.procs[k]
	if r == nil {
		r = &procRow{host: host}
		t.procs[k] = r
	}
	return r
}

func (t *tx) att(id, host string) *attRow {
	r := t.atts[id]
	if r == nil {
		r = &attRow{host: host}
		t.atts[id] = r
	}
	return r
}

func mergeProc(dst, src *store.ProcSummary, has bool) {
	if !has {
		*dst = *src
		return
	}
	dst.LastMs = max(dst.LastMs, src.LastMs)
	dst.Samples += src.Samples
	dst.PeakRSS, dst.PeakPSS, dst.PeakVMS = max(dst.PeakRSS, src.PeakRSS), max(dst.PeakPSS, src.PeakPSS), max(dst.PeakVMS, src.PeakVMS)
	dst.MaxThreads = max(dst.MaxThreads, src.MaxThreads)
	dst.CPUMs, dst.ChildCPUMs, dst.ReadBytes, dst.WriteBytes, dst.State = src.CPUMs, src.ChildCPUMs, src.ReadBytes, src.WriteBytes, src.State
}

func mergeAtt(dst, src *store.AttemptSummary, has bool) {
	if !has {
		*dst = *src
		return
	}
	dst.LastMs = max(dst.LastMs, src.LastMs)
	dst.PeakRSS, dst.PeakPSS, dst.PeakVMS, dst.PeakHeap = max(dst.PeakRSS, src.PeakRSS), max(dst.PeakPSS, src.PeakPSS), max(dst.PeakVMS, src.PeakVMS), max(dst.PeakHeap, src.PeakHeap)
	dst.CPUMs, dst.ReadBytes, dst.WriteBytes, dst.GCTimeMs, dst.SchedWaitUs = src.CPUMs, src.ReadBytes, src.WriteBytes, src.GCTimeMs, src.SchedWaitUs
	dst.RSSByteMs += src.RSSByteMs
	dst.State = src.State
	if src.JobID != "" {
		dst.JobID = src.JobID
	}
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

func (t *tx) procState(k uint64) *store.SeriesState {
	if st, ok := t.procSt[k]; ok {
		return st
	}
	c := t.s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[k]
}

func (t *tx) attState(id string) *store.SeriesState {
	if st, ok := t.attSt[id]; ok {
		return st
	}
	c := t.s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atts[id]
}

func (t *tx) jobOf(id string) string {
	if j, ok := t.attJob[id]; ok {
		return j
	}
	c := t.s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attJob[id]
}

// loadStates fetches, for the series of b that neither the transaction nor
// the cache knows, their state from the database (after a restart).
func (t *tx) loadStates(batches []*wire.Batch) error {
	c := t.s.cache
	var keys, ids []any
	seenK := map[uint64]bool{}
	seenA := map[string]bool{}
	c.mu.Lock()
	for _, b := range batches {
		for i := range b.ProcSeries {
			k := b.ProcSeries[i].Key
			if _, ok := c.procs[k]; !ok && !seenK[k] {
				seenK[k] = true
				keys = append(keys, int64(k))
			}
		}
		for i := range b.AttemptSeries {
			id := b.AttemptSeries[i].AttemptID
			if _, ok := c.atts[id]; !ok && !seenA[id] {
				seenA[id] = true
				ids = append(ids, id)
			}
		}
	}
	c.mu.Unlock()
	if len(keys) > 0 {
		if err := t.loadProcStates(keys); err != nil {
			return err
		}
	}
	if len(ids) > 0 {
		rows, err := t.s.db.QueryContext(t.ctx, `SELECT attempt_id, job_id, state FROM attempts WHERE attempt_id IN (`+placeholders(len(ids))+`)`, ids...)
		if err != nil {
			return fmt.Errorf("cannot load attempt states: %w", err)
		}
		for rows.Next() {
			var id, job string
			var blob []byte
			if err := rows.Scan(&id, &job, &blob); err != nil {
				rows.Close()
				return err
			}
			if _, ok := t.attJob[id]; !ok {
				t.attJob[id] = job
			}
			if blob != nil {
				if st, err := store.DecodeState(blob, len(store.AttemptColumns)); err == nil {
					t.attSt[id] = st
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if _, ok := t.attSt[id.(string)]; !ok {
				t.attSt[id.(string)] = nil
			}
		}
	}
	return nil
}

// loadProcStates rebuilds the increment state of processes from their
// samples: counters are stored as increments from the process's start, so
// their sums are the last cumulative values.
func (t *tx) loadProcStates(keys []any) error {
	// Most unknown keys are new processes: only those the database has
	// described before (a restart of the server or of the agent) have
	// samples to sum.
	known, err := t.s.db.QueryContext(t.ctx, `SELECT proc_key FROM processes WHERE proc_key IN (`+placeholders(len(keys))+`)`, keys...)
	if err != nil {
		return fmt.Errorf("cannot look up processes: %w", err)
	}
	var old []any
	for known.Next() {
		var k int64
		if err := known.Scan(&k); err != nil {
			known.Close()
			return err
		}
		old = append(old, k)
	}
	known.Close()
	for _, k := range keys {
		t.procSt[uint64(k.(int64))] = nil // new: no state
	}
	if len(old) == 0 {
		return nil
	}
	keys = old
	var sums []string
	var cols []int
	for j, c := range store.SampleColumns {
		if c.Counter {
			sums = append(sums, "sum("+c.Name+")")
			cols = append(cols, j)
		}
	}
	rows, err := t.s.db.QueryContext(t.ctx, `SELECT proc_key, max(ts), `+strings.Join(sums, ", ")+
		` FROM samples_all WHERE proc_key IN (`+placeholders(len(keys))+`) GROUP BY proc_key`, keys...)
	if err != nil {
		return fmt.Errorf("cannot load process states: %w", err)
	}
	defer rows.Close()
	vals := make([]sql.NullInt64, len(cols))
	dst := make([]any, 2+len(cols))
	var k, last int64
	dst[0], dst[1] = &k, &last
	for i := range vals {
		dst[2+i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		st := store.NewSeriesState(store.SampleColumns)
		st.LastMs = last
		for i, j := range cols {
			st.Last[j], st.Have[j] = vals[i].Int64, vals[i].Valid
		}
		t.procSt[uint64(k)] = st
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
	if len(t.pending) == 0 {
		return nil
	}
	if err := t.loadStates(t.pending); err != nil {
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
			defer func() {
				if debugTiming {
					fmt.Fprintf(os.Stderr, "%8.2fms %.70s\n", float64(time.Since(t0).Microseconds())/1000, strings.Join(strings.Fields(q), " "))
				}
			}()
			_, err := ex.ExecContext(t.ctx, q, nil)
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

func (t *tx) write(conn driver.Conn, exec func(string) error) error {
	for _, q := range []string{"DELETE FROM stage_procs", "DELETE FROM stage_attempts", "DELETE FROM stage_members", "DELETE FROM stage_agents"} {
		if err := exec(q); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := t.appendSamples(conn); err != nil {
		return err
	}
	if debugTiming {
		fmt.Fprintf(os.Stderr, "%8.2fms appendSamples\n", float64(time.Since(t0).Microseconds())/1000)
	}
	t0 = time.Now()
	if err := t.appendStage(conn); err != nil {
		return err
	}
	if err := t.appendAgents(conn); err != nil {
		return err
	}
	if debugTiming {
		fmt.Fprintf(os.Stderr, "%8.2fms appendStage\n", float64(time.Since(t0).Microseconds())/1000)
	}
	for _, q := range []string{upsertAgents, upsertProcs, upsertAttempts, upsertMembers,
		`UPDATE attempts SET processes = m.n FROM (SELECT attempt_id, count(*) AS n FROM memberships
			WHERE attempt_id IN (SELECT DISTINCT attempt_id FROM stage_members) GROUP BY attempt_id) m
			WHERE attempts.attempt_id = m.attempt_id`,
		`INSERT INTO jobs (job_id, app_id, framework, name, user_name, queue)
			SELECT job_id, max(app_id), max(framework), max(job_name), max(user_name), max(queue)
			FROM stage_attempts WHERE job_id IS NOT NULL GROUP BY job_id
			ON CONFLICT (job_id) DO UPDATE SET app_id = coalesce(excluded.app_id, jobs.app_id),
			framework = CASE WHEN excluded.framework IS NULL OR excluded.framework = 'unknown' THEN coalesce(jobs.framework, excluded.framework) ELSE excluded.framework END,
			name = coalesce(excluded.name, jobs.name), user_name = coalesce(excluded.user_name, jobs.user_name),
			queue = coalesce(excluded.queue, jobs.queue)`,
		`UPDATE jobs SET attempts = a.n, running = a.running, cpu_ms = a.cpu, peak_rss = a.peak, first_ms = a.first,
			last_ms = a.last, mem_gb_hours = a.mem, used_gb_hours = a.used, hosts = a.hosts
			FROM (SELECT job_id, count(*) AS n, count(*) FILTER (WHERE NOT coalesce(ended, false)) AS running,
				sum(coalesce(cpu_ms, 0)) AS cpu, max(coalesce(peak_rss, 0)) AS peak, min(first_ms) AS first,
				max(last_ms) AS last,
				sum(coalesce(memory_mb, 0) * (last_ms - first_ms)) / 1024.0 / 3600000.0 AS mem,
				sum(coalesce(rss_byte_ms, 0)) / 1073741824.0 / 3600000.0 AS used,
				count(DISTINCT host) AS hosts
				FROM attempts WHERE job_id IN (SELECT DISTINCT job_id FROM stage_attempts) GROUP BY job_id) a
			WHERE jobs.job_id = a.job_id`,
	} {
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

// appendSamples appends process and attempt samples, extra metrics and events.
func (t *tx) appendSamples(conn driver.Conn) error {
	sa, err := newAppender(conn, "samples_hot")
	if err != nil {
		return err
	}
	row := make([]driver.Value, 2+len(store.SampleColumns))
	for _, p := range t.prepared {
		r := &p.Samples
		for i := 0; i < r.Len(); i++ {
			row[0], row[1] = int64(r.Keys[i]), r.Times[i]
			for j := range store.SampleColumns {
				if r.Null[j][i] {
					row[2+j] = nil
				} else {
					row[2+j] = r.Cols[j][i]
				}
			}
			if err := sa.AppendRow(row...); err != nil {
				sa.Close()
				return fmt.Errorf("cannot append sample: %w", err)
			}
		}
	}
	if err := sa.Close(); err != nil {
		return fmt.Errorf("cannot append samples: %w", err)
	}
	aa, err := newAppender(conn, "attempt_samples_hot")
	if err != nil {
		return err
	}
	arow := make([]driver.Value, 3+len(store.AttemptColumns))
	for _, p := range t.prepared {
		r := &p.AttSamples
		for i := 0; i < r.Len(); i++ {
			arow[0], arow[1], arow[2] = r.AttemptIDs[i], nullStr(r.JobIDs[i]), r.Times[i]
			for j := range store.AttemptColumns {
				if r.Null[j][i] {
					arow[3+j] = nil
				} else {
					arow[3+j] = r.Cols[j][i]
				}
			}
			if err := aa.AppendRow(arow...); err != nil {
				aa.Close()
				return fmt.Errorf("cannot append attempt sample: %w", err)
			}
		}
	}
	if err := aa.Close(); err != nil {
		return fmt.Errorf("cannot append attempt samples: %w", err)
	}
	ea, err := newAppender(conn, "samples_ext")
	if err != nil {
		return err
	}
	for _, p := range t.prepared {
		for _, x := range p.Ext {
			if err := ea.AppendRow(int64(x.Key), x.Ms, x.Metric, x.Value); err != nil {
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

// appendStage fills the staging tables with the transaction's merged rows.
func (t *tx) appendStage(conn driver.Conn) error {
	pa, err := newAppender(conn, "stage_procs")
	if err != nil {
		return err
	}
	for k, r := range t.procs {
		m := r.meta
		if m == nil {
			continue // only samples: nothing to describe
		}
		if err := pa.AppendRow(int64(k), r.host, m.PID, m.PPID, m.SID, nullMs(m.StartMs), nullMs(m.EndMs), m.Cmdline,
			m.Comm, nullStr(m.Role), m.UID, nullStr(m.User)); err != nil {
			pa.Close()
			return fmt.Errorf("cannot stage process: %w", err)
		}
	}
	if err := pa.Close(); err != nil {
		return err
	}
	aa, err := newAppender(conn, "stage_attempts")
	if err != nil {
		return err
	}
	for id, r := range t.atts {
		v := make([]driver.Value, 29)
		v[0], v[2] = id, r.host
		if m := r.meta; m != nil {
			v[1], v[3], v[4], v[5], v[6] = m.JobID, nullStr(m.ContainerID), nullStr(m.AppID), nullStr(m.Type), nullStr(m.Framework)
			v[7], v[8], v[9] = nullMs(m.FirstMs), nullMs(m.LastMs), m.Ended
			v[10], v[11], v[12] = nullStr(m.JobName), nullStr(m.User), nullStr(m.Queue)
			v[13], v[14], v[15], v[16] = nullPos(m.MemoryMB), nullStr(m.JavaOpts), nullPos(m.XmxBytes), m.Streaming
		}
		if v[1] == nil {
			v[1] = nullStr(r.sum.JobID)
		}
		if v[1] == nil {
			continue // samples of an attempt no batch described yet: its summary waits
		}
		if r.has {
			s := &r.sum
			v[17], v[18], v[19], v[20], v[21] = s.CPUMs, s.PeakRSS, s.PeakPSS, s.PeakVMS, s.PeakHeap
			v[22], v[23], v[24], v[25] = s.ReadBytes, s.WriteBytes, s.GCTimeMs, s.SchedWaitUs
			v[26], v[27], v[28] = s.RSSByteMs, s.LastMs, store.EncodeState(s.State)
			if v[8] == nil {
				v[8] = s.LastMs
			}
		}
		if err := aa.AppendRow(v...); err != nil {
			aa.Close()
			return fmt.Errorf("cannot stage attempt: %w", err)
		}
	}
	if err := aa.Close(); err != nil {
		return err
	}
	ma, err := newAppender(conn, "stage_members")
	if err != nil {
		return err
	}
	for k, m := range t.members {
		if err := ma.AppendRow(int64(k.key), k.attempt, nullMs(m.FromMs), nullMs(m.ToMs), m.CPUBaseMs, nullStr(m.Role)); err != nil {
			ma.Close()
			return err
		}
	}
	return ma.Close()
}

func (t *tx) appendAgents(conn driver.Conn) error {
	aa, err := newAppender(conn, "stage_agents")
	if err != nil {
		return err
	}
	for id, a := range t.agents {
		if err := aa.AppendRow(id, a.host, a.seq, a.firstMs, a.lastMs, a.batches, a.samples, a.stats.DroppedSamples,
			a.stats.DroppedBatches, a.stats.ReadErrors, a.stats.Overruns); err != nil {
			aa.Close()
			return err
		}
	}
	return aa.Close()
}

// apply makes the committed transaction's states the cache's.
func (t *tx) apply() {
	c := t.s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, a := range t.agents {
		c.agentSeq[id] = a.seq
	}
	for k, st := range t.procSt {
		if st != nil {
			c.procs[k] = st
		}
	}
	for id, st := range t.attSt {
		if st != nil {
			c.atts[id] = st
		}
	}
	for id, j := range t.attJob {
		c.attJob[id] = j
	}
	// Series that ended will not continue: forget their state.
	for _, k := range t.ended {
		delete(c.procs, k)
	}
	for _, id := range t.endedAtt {
		delete(c.atts, id)
		delete(c.attJob, id)
	}
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
	return int64(k)
}

func nullPID(p int32) driver.Value {
	if p == 0 {
		return nil
	}
	return p
}

var debugTiming = os.Getenv("TASKSCOPE_DEBUG_TIMING") != ""
