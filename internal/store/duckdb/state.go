package duckdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// What ingest keeps in memory between commits: every agent's sequence (the
// exactly-once check needs no query), and the running attempts and jobs
// with their summaries, written to their tables at most every SummaryEvery.
// A transaction works on copies of the states it touches and hands them
// back to the cache when it commits.

// agentState is an agent as the agents table has it.
type agentState struct {
	host    string
	seq     uint64
	firstMs int64
	lastMs  int64
	batches uint64
	samples uint64
	stats   wire.AgentStats
	dirty   bool
}

// attState is an attempt as the store knows it: its description, its
// summary in absolute values (whose LastMs and LastRSS are the last RSS
// point, to integrate across batches: store.MergeSummary), the processes
// of its memberships, and what it last added to its job.
type attState struct {
	meta wire.Attempt
	host string
	sum  store.AttemptSummary
	// procs are the processes of its memberships, each with a hash of the
	// command line last logged for it in this attempt's rows (0: none yet).
	procs   map[uint64]uint64
	shared  bool // procs is shared with the cache's copy: copy before changing
	counted contrib
	dirty   bool // changed since it was last written
	// The first and the last commit that stored anything of the attempt.
	genFirst, genLast uint64
}

// contrib is what one attempt adds to its job's figures, with the first
// commit of the attempt (the job keeps the range of its attempts').
type contrib struct {
	store.Contribution
	gen uint64 // the attempt's genFirst
}

func (a *attState) contribution() contrib {
	c := contrib{Contribution: store.AttemptContribution(&a.meta, a.host, &a.sum)}
	if c.In {
		c.gen = a.genFirst
	}
	return c
}

func (a *attState) addProc(k uint64) {
	if _, ok := a.procs[k]; ok {
		return
	}
	a.setCmd(k, 0)
}

// setCmd records the hash of the command line logged for process k.
func (a *attState) setCmd(k, h uint64) {
	if a.shared || a.procs == nil {
		a.procs = maps.Clone(a.procs)
		if a.procs == nil {
			a.procs = map[uint64]uint64{}
		}
		a.shared = false
	}
	a.procs[k] = h
}

// jobState is a job's figures, kept as sums over its attempts
// (store.JobTotals), with the range of its attempts' first commits.
type jobState struct {
	store.JobTotals
	genLo, genHi uint64 // the range of its attempts' genFirst
	dirty        bool
}

func newJobState() *jobState {
	return &jobState{JobTotals: store.JobTotals{Hosts: map[string]int{}, ByType: map[string]int{}}}
}

func (j *jobState) clone() *jobState {
	return &jobState{JobTotals: j.JobTotals.Clone(), genLo: j.genLo, genHi: j.genHi, dirty: j.dirty}
}

// apply replaces old's share of the job by now's.
func (j *jobState) apply(old, now contrib) {
	j.Apply(old.Contribution, now.Contribution)
	if now.In && now.gen > 0 {
		if j.genLo == 0 || now.gen < j.genLo {
			j.genLo = now.gen
		}
		j.genHi = max(j.genHi, now.gen)
	}
	j.dirty = true
}

// caches hold the states; guarded by the writer's lock.
type caches struct {
	agents map[string]*agentState
	atts   map[string]*attState
	jobs   map[string]*jobState
	// live: the processes not seen to exit, with the attempts they are
	// members of (as far as the attempts loaded say) and their start, so
	// that a process record without a membership beside it goes to the
	// rows of its attempts. Lost (restart, overflow), it is made again as
	// attempts are loaded; a record of a process it does not know is
	// logged with attempt_key 0.
	live map[uint64]*liveProc
	// pendingFirst: after a crash, the first commit that logged rows of
	// an attempt the store has no row of yet (by attempt key).
	pendingFirst map[uint64]uint64
}

type liveProc struct {
	atts  []string
	start int64
}

// maxLive bounds live (processes that never report their exit).
const maxLive = 1 << 20

func newCaches() *caches {
	return &caches{agents: map[string]*agentState{}, atts: map[string]*attState{}, jobs: map[string]*jobState{},
		live: map[uint64]*liveProc{}, pendingFirst: map[uint64]uint64{}}
}

// loadAgents reads every agent's sequence: the table's, or the log's where
// it is ahead (a commit after the last summary write).
func (s *Store) loadAgents(ctx context.Context) error {
	rows, err := s.handle().QueryContext(ctx, `SELECT agent_id, host, seq, coalesce(first_ms, 0), coalesce(last_ms, 0),
		coalesce(batches, 0), coalesce(samples, 0), coalesce(dropped_samples, 0), coalesce(dropped_batches, 0),
		coalesce(read_errors, 0), coalesce(overruns, 0) FROM agents`)
	if err != nil {
		return fmt.Errorf("cannot read agents: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		a := &agentState{}
		if err := rows.Scan(&id, &a.host, &a.seq, &a.firstMs, &a.lastMs, &a.batches, &a.samples, &a.stats.DroppedSamples,
			&a.stats.DroppedBatches, &a.stats.ReadErrors, &a.stats.Overruns); err != nil {
			return err
		}
		s.cache.agents[id] = a
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = s.handle().QueryContext(ctx, `SELECT agent_id, max(seq) FROM agent_seqs GROUP BY agent_id`)
	if err != nil {
		return fmt.Errorf("cannot read agent sequences: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var seq uint64
		if err := rows.Scan(&id, &seq); err != nil {
			return err
		}
		a := s.cache.agents[id]
		if a == nil {
			a = &agentState{}
			s.cache.agents[id] = a
		}
		if seq > a.seq {
			a.seq, a.dirty = seq, true
		}
	}
	return rows.Err()
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// existing returns those of ids that the attempts table holds.
func existing(ctx context.Context, db querier, ids []string) ([]any, error) {
	out, err := column[string](ctx, db, `SELECT attempt_id FROM attempts WHERE attempt_id IN (`+placeholders(len(ids))+`)`,
		idArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("cannot load attempts: %w", err)
	}
	return out, nil
}

// newAttempts puts in the cache a new state for each of ids not found.
func (s *Store) newAttempts(ids []string, found map[string]*attState) {
	for _, id := range ids {
		if found[id] == nil {
			st := &attState{meta: wire.Attempt{AttemptID: id}}
			k := store.AttemptKey(id)
			if g := s.cache.pendingFirst[k]; g > 0 {
				st.genFirst = g
				delete(s.cache.pendingFirst, k)
			}
			s.cache.atts[id] = st
		}
	}
}

// loadAttempts reads attempts into the cache from their table (those not
// there are new), with the processes of their memberships.
func (s *Store) loadAttempts(ctx context.Context, db querier, ids []string) error {
	found := map[string]*attState{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), 256)]
		ids = ids[len(part):]
		// Most are new (first seen in this commit): a narrow query finds
		// those that exist (2.8 ms for 100 new ids among 8,000 attempts,
		// against 6.7 for the whole rows), and only those are read whole.
		exist, err := existing(ctx, db, part)
		if err != nil {
			return err
		}
		if len(exist) == 0 {
			s.newAttempts(part, found)
			continue
		}
		rows, err := db.QueryContext(ctx, `SELECT `+attemptCols+`, coalesce(sample_ms, 0), coalesce(last_rss, 0),
			coalesce(gen_first, 0), coalesce(gen_last, 0) FROM attempts WHERE attempt_id IN (`+placeholders(len(exist))+`)`, exist...)
		if err != nil {
			return fmt.Errorf("cannot load attempts: %w", err)
		}
		for rows.Next() {
			st, err := scanState(rows)
			if err != nil {
				rows.Close()
				return err
			}
			st.counted = st.contribution()
			found[st.meta.AttemptID] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		s.newAttempts(part, found)
	}
	if len(found) == 0 {
		return nil
	}
	// Their processes: the membership rows of their commits.
	byKey := map[int64]*attState{}
	var keys []any
	lo, hi := uint64(1<<63), uint64(0)
	for _, st := range found {
		k := keyValue(store.AttemptKey(st.meta.AttemptID))
		byKey[k] = st
		keys = append(keys, k)
		lo, hi = min(lo, st.genFirst), max(hi, st.genLast)
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT attempt_key, proc_key FROM proc_log WHERE gen BETWEEN ? AND ?
		AND member AND attempt_key IN (`+placeholders(len(keys))+`)`, append([]any{lo, hi}, keys...)...)
	if err != nil {
		return fmt.Errorf("cannot load memberships: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a, k int64
		if err := rows.Scan(&a, &k); err != nil {
			return err
		}
		if st := byKey[a]; st != nil {
			st.addProc(uint64(k))
		}
	}
	for id, st := range found {
		s.cache.atts[id] = st
		for k := range st.procs {
			s.cache.addLive(k, id)
		}
	}
	return rows.Err()
}

// addLive makes process k known as a member of attempt id.
func (c *caches) addLive(k uint64, id string) {
	lp := c.live[k]
	if lp == nil {
		if len(c.live) >= maxLive {
			clear(c.live)
		}
		lp = &liveProc{}
		c.live[k] = lp
	}
	if !slices.Contains(lp.atts, id) {
		lp.atts = append(lp.atts, id)
	}
}

// loadJobs reads jobs into the cache (those not in the table are new), with
// their hosts and who described them.
func (s *Store) loadJobs(ctx context.Context, db querier, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := db.QueryContext(ctx, `SELECT job_id, coalesce(app_id, ''), coalesce(framework, ''), coalesce(name, ''),
		coalesce(user_name, ''), coalesce(queue, ''), coalesce(first_ms, 0), coalesce(last_ms, 0), coalesce(attempts, 0),
		coalesce(running, 0), coalesce(cpu_ms, 0), coalesce(peak_rss, 0), coalesce(mem_gb_hours, 0),
		coalesce(used_gb_hours, 0), coalesce(by_type, ''), coalesce(gen_lo, 0), coalesce(gen_hi, 0)
		FROM jobs WHERE job_id IN (`+placeholders(len(ids))+`)`, idArgs(ids)...)
	if err != nil {
		return fmt.Errorf("cannot load jobs: %w", err)
	}
	found := map[string]*jobState{}
	for rows.Next() {
		var id, byType string
		var memGBh, usedGBh float64
		j := newJobState()
		if err := rows.Scan(&id, &j.AppID, &j.Framework, &j.Name, &j.User, &j.Queue, &j.First, &j.Last, &j.Attempts,
			&j.Running, &j.CPUMs, &j.PeakRSS, &memGBh, &usedGBh, &byType, &j.genLo, &j.genHi); err != nil {
			rows.Close()
			return err
		}
		j.SetGBHours(memGBh, usedGBh)
		j.ByType = parseByType(byType)
		found[id] = j
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for id, j := range found {
		if err := s.loadJobAttempts(ctx, db, id, j); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if j := found[id]; j != nil {
			s.cache.jobs[id] = j
		} else {
			s.cache.jobs[id] = newJobState()
		}
	}
	return nil
}

// loadJobAttempts counts the job's attempts by host, and describes the
// job again from its attempts' descriptions: the jobs table keeps what
// they said of the job, not which said it, and a job's name, user and
// queue are the latest description's that says each (JobTotals.Describe),
// whatever order the rest come in.
func (s *Store) loadJobAttempts(ctx context.Context, db querier, id string, j *jobState) error {
	if j.Attempts == 0 {
		return nil
	}
	rows, err := db.QueryContext(ctx, `SELECT host, attempt_id, coalesce(last_ms, 0), coalesce(app_id, ''),
		coalesce(framework, ''), coalesce(job_name, ''), coalesce(user_name, ''), coalesce(queue, '') FROM attempts
		WHERE job_id = ? AND gen_first BETWEEN ? AND ?`, id, j.genLo, j.genHi)
	if err != nil {
		return fmt.Errorf("cannot load job %s's attempts: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var host sql.NullString
		var m wire.Attempt
		if err := rows.Scan(&host, &m.AttemptID, &m.LastMs, &m.AppID, &m.Framework, &m.JobName, &m.User, &m.Queue); err != nil {
			return err
		}
		if host.Valid {
			j.Hosts[host.String]++
		}
		j.Describe(&m)
	}
	return rows.Err()
}

// formatByType and parseByType keep a job's attempts by type as JSON.
func formatByType(m map[string]int) driver.Value {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func parseByType(s string) map[string]int {
	m := map[string]int{}
	if s != "" {
		json.Unmarshal([]byte(s), &m)
	}
	return m
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// idArgs is ids as query arguments (for placeholders(len(ids))).
func idArgs(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

// column runs a query of one column and returns its values, of type T, as
// query arguments.
func column[T any](ctx context.Context, db querier, q string, args ...any) ([]any, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []any
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
