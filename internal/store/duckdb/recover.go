package duckdb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// recover brings the summaries up to date after a crash. Everything a
// commit stores is durable with it (chunks, logs, sequences); only the
// summaries, written at most every SummaryEvery, can be behind. So: the
// attempts' descriptions logged since the last summary write are read
// again, every attempt whose series goes past what its summary took in is
// summed up again from there, and the jobs of those attempts are counted
// again from their attempts.
func (s *Store) recover(ctx context.Context) error {
	type logged struct {
		gen  uint64
		host string
		a    wire.Attempt
	}
	rows, err := s.handle().QueryContext(ctx, `SELECT gen, coalesce(host, ''), `+logCols+`
		FROM attempt_log WHERE gen > ?::UBIGINT ORDER BY gen`, s.flushedGen)
	if err != nil {
		return fmt.Errorf("cannot read attempt_log: %w", err)
	}
	var logs []logged
	for rows.Next() {
		var l logged
		var r store.AttemptRow
		if err := rows.Scan(append([]any{&l.gen, &l.host}, fieldDests(&r, isLogged)...)...); err != nil {
			rows.Close()
			return fmt.Errorf("cannot read attempt_log: %w", err)
		}
		l.a = r.Meta
		logs = append(logs, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read attempt_log: %w", err)
	}
	want := map[string]bool{}
	for _, l := range logs {
		want[l.a.AttemptID] = true
	}
	// Attempts whose series go past their summary.
	rows, err = s.handle().QueryContext(ctx, `SELECT a.attempt_id FROM attempts a JOIN
		(SELECT key, max(t_max) AS t FROM series_all WHERE kind = 1 AND level < 2 GROUP BY key) c ON c.key = a.attempt_key
		WHERE c.t > coalesce(a.sum_last_ms, 0)`)
	if err != nil {
		return fmt.Errorf("cannot find the attempts whose samples go past their summaries: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("cannot find the attempts whose samples go past their summaries: %w", err)
		}
		want[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot find the attempts whose samples go past their summaries: %w", err)
	}
	// Attempts with process rows since: the commits they span, and their
	// memberships.
	since, err := s.procRowsSince(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the process rows since the last summary write: %w", err)
	}
	for _, l := range logs {
		if pr := since[keyValue(store.AttemptKey(l.a.AttemptID))]; pr != nil {
			pr.id = l.a.AttemptID
		}
	}
	if err := s.attemptIDs(ctx, since); err != nil {
		return fmt.Errorf("cannot name the attempts of those rows: %w", err)
	}
	for k, pr := range since {
		if pr.id == "" {
			// Nothing else is stored of it yet: its first commit, for when
			// it is.
			s.pendingFirst[uint64(k)] = pr.lo
			continue
		}
		want[pr.id] = true
	}
	if len(want) == 0 && len(logs) == 0 {
		return s.Flush(ctx) // the agents' logged sequences
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if err := s.fold.Load(ctx, ids); err != nil {
		return fmt.Errorf("cannot read the attempts to recover: %w", err)
	}
	for _, l := range logs {
		st := s.fold.Attempt(l.a.AttemptID)
		store.MergeAttempt(&st.Meta, &l.a)
		st.Host = l.host
		if st.GenFirst == 0 || l.gen < st.GenFirst {
			st.GenFirst = l.gen
		}
		st.GenLast = max(st.GenLast, l.gen)
	}
	for _, pr := range since {
		st := s.fold.Attempt(pr.id)
		if st == nil {
			continue
		}
		if st.GenFirst == 0 || pr.lo < st.GenFirst {
			st.GenFirst = pr.lo
		}
		st.GenLast = max(st.GenLast, pr.hi)
		for _, k := range pr.procs {
			st.AddMember(k)
			s.fold.AddLive(k, pr.id)
		}
	}
	jobs := map[string]bool{}
	lo := uint64(1<<63 - 1) // the first commit of the attempts recovered
	for _, id := range ids {
		st := s.fold.Attempt(id)
		after := st.Sum.LastMs
		p, _, err := s.points(ctx, store.KindAttempt, store.AttemptKey(id), after+1, 1<<62, allAttemptColumns)
		if err != nil {
			return fmt.Errorf("cannot read the samples of attempt %s: %w", id, err)
		}
		if inc := store.SummarizePoints(p, after); inc != nil {
			if st.Host == "" {
				st.Host = "unknown"
			}
			store.MergeSummary(&st.Sum, inc)
		}
		s.fold.Changed(st)
		if st.Meta.JobID != "" {
			jobs[st.Meta.JobID] = true
		}
		if st.GenFirst > 0 {
			lo = min(lo, st.GenFirst)
		}
	}
	s.opt.Log.Warn("the store was not closed: summaries recovered", "attempts", len(ids), "descriptions", len(logs),
		"jobs", len(jobs))
	if err := s.Flush(ctx); err != nil {
		return fmt.Errorf("cannot write the attempts recovered: %w", err)
	}
	// The jobs, counted again from their attempts (store.Fold, as ingest
	// counts them): those the job's row counted (gen_first from its
	// gen_lo) and those stored since.
	s.fold.ForgetJobs()
	s.recountFrom = lo
	err = s.fold.RecountJobs(ctx, slices.Sorted(maps.Keys(jobs)))
	s.recountFrom = 0
	if err != nil {
		return fmt.Errorf("cannot count jobs again: %w", err)
	}
	// Written as ingest writes them; those that run stay in the fold.
	if err := s.Flush(ctx); err != nil {
		return fmt.Errorf("cannot write the jobs counted again: %w", err)
	}
	return nil
}

// loggedAttempt is what proc_log holds of an attempt since the last
// summary write.
type loggedAttempt struct {
	id     string
	lo, hi uint64
	procs  []uint64 // members
}

// procRowsSince reads the attempts of the process rows committed after the
// last summary write, by attempt key.
func (s *Store) procRowsSince(ctx context.Context) (map[int64]*loggedAttempt, error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT attempt_key, min(gen), max(gen), list(DISTINCT proc_key) FILTER (WHERE member)
		FROM proc_log WHERE gen > ?::UBIGINT AND attempt_key <> 0 GROUP BY attempt_key`, s.flushedGen)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]*loggedAttempt{}
	for rows.Next() {
		var k int64
		var procs duck.Composite[[]int64]
		l := &loggedAttempt{}
		if err := rows.Scan(&k, &l.lo, &l.hi, &procs); err != nil {
			return nil, err
		}
		for _, p := range procs.Get() {
			l.procs = append(l.procs, uint64(p))
		}
		out[k] = l
	}
	return out, rows.Err()
}

// attemptIDs names the attempts of logged that have a row in attempts.
func (s *Store) attemptIDs(ctx context.Context, logged map[int64]*loggedAttempt) error {
	var keys []any
	for k, l := range logged {
		if l.id == "" {
			keys = append(keys, k)
		}
	}
	for len(keys) > 0 {
		part := keys[:min(256, len(keys))]
		keys = keys[len(part):]
		rows, err := s.handle().QueryContext(ctx, `SELECT attempt_key, attempt_id FROM attempts WHERE attempt_key IN (`+
			placeholders(len(part))+`)`, part...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k int64
			var id string
			if err := rows.Scan(&k, &id); err != nil {
				rows.Close()
				return err
			}
			logged[k].id = id
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}
