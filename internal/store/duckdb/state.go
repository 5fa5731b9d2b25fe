package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// What ingest keeps in memory between commits is package store's Fold
// (store.Fold): every agent's sequence (the exactly-once check needs no
// query), and the running attempts and jobs with their summaries, written
// to their tables at most every SummaryEvery. The store reads into it
// what it does not hold (loadAttempts, loadJobAttempts); a transaction
// works on copies of the states it touches and hands them back to the
// fold when it commits.

// noRow is what the store keeps beside an attempt's state: nothing (its
// rows are found by the commits of the state, GenFirst and GenLast).
type noRow struct{}

// attState is an attempt's state as the fold keeps it.
type attState = store.AttemptRecord[noRow]

func (s *Store) newFold() *store.Fold[noRow] {
	return store.NewFold(store.FoldOptions[noRow]{
		LoadAttempts: func(ctx context.Context, ids []string, _ map[string]string) (map[string]*attState, error) {
			return s.loadAttempts(ctx, ids)
		},
		LoadJobAttempts: s.loadJobAttempts,
	})
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
		a := &store.AgentState{}
		if err := rows.Scan(&id, &a.Host, &a.Seq, &a.FirstMs, &a.LastMs, &a.Batches, &a.Samples, &a.Stats.DroppedSamples,
			&a.Stats.DroppedBatches, &a.Stats.ReadErrors, &a.Stats.Overruns); err != nil {
			return fmt.Errorf("cannot read agents: %w", err)
		}
		s.fold.PutAgent(id, a)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read agents: %w", err)
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
			return fmt.Errorf("cannot read agent sequences: %w", err)
		}
		s.fold.LoggedSeq(id, seq)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read agent sequences: %w", err)
	}
	return nil
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

// loadAttempts reads attempts' states from their table, with the
// processes of their memberships (store.FoldOptions.LoadAttempts). One
// that is not there yet but whose process rows a crash left (recover:
// pendingFirst) is new with its first commit.
func (s *Store) loadAttempts(ctx context.Context, ids []string) (map[string]*attState, error) {
	db := s.handle()
	found := map[string]*attState{}
	var stored []*attState // those of the table
	for len(ids) > 0 {
		part := ids[:min(len(ids), 256)]
		ids = ids[len(part):]
		// Most are new (first seen in this commit): a narrow query finds
		// those that exist (2.8 ms for 100 new ids among 8,000 attempts,
		// against 6.7 for the whole rows), and only those are read whole.
		exist, err := existing(ctx, db, part)
		if err != nil {
			return nil, err
		}
		if len(exist) > 0 {
			if err := s.readStates(ctx, db, `attempt_id IN (`+placeholders(len(exist))+`)`, exist, func(st *attState) {
				found[st.Meta.AttemptID] = st
				stored = append(stored, st)
			}); err != nil {
				return nil, fmt.Errorf("cannot load attempts: %w", err)
			}
		}
		for _, id := range part {
			if g := s.pendingFirst[store.AttemptKey(id)]; g > 0 && found[id] == nil {
				st := store.NewAttemptRecord[noRow](id)
				st.GenFirst = g
				found[id] = st
			}
		}
	}
	if len(stored) == 0 {
		return found, nil
	}
	// Their processes: the membership rows of their commits.
	byKey := map[int64]*attState{}
	var keys []any
	lo, hi := uint64(1<<63), uint64(0)
	for _, st := range stored {
		st.ReadMembers()
		k := keyValue(store.AttemptKey(st.Meta.AttemptID))
		byKey[k] = st
		keys = append(keys, k)
		lo, hi = min(lo, st.GenFirst), max(hi, st.GenLast)
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT attempt_key, proc_key FROM proc_log WHERE gen BETWEEN ?::UBIGINT AND ?::UBIGINT
		AND member AND attempt_key IN (`+placeholders(len(keys))+`)`, append([]any{lo, hi}, keys...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot load memberships: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a, k int64
		if err := rows.Scan(&a, &k); err != nil {
			return nil, fmt.Errorf("cannot load memberships: %w", err)
		}
		if st := byKey[a]; st != nil {
			st.AddMember(uint64(k))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot load memberships: %w", err)
	}
	return found, nil
}

// readStates reads the states of the attempts rows a condition selects,
// in the order of their first commits, for each.
func (s *Store) readStates(ctx context.Context, db querier, where string, args []any, each func(*attState)) error {
	rows, err := db.QueryContext(ctx, `SELECT `+attemptCols+`, coalesce(gen_first, 0), coalesce(gen_last, 0)
		FROM attempts WHERE `+where+` ORDER BY gen_first, attempt_id`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		st, err := scanState(rows)
		if err != nil {
			return err
		}
		each(st)
	}
	return rows.Err()
}

// loadJobAttempts reads the states of the attempts of jobs ids
// (store.FoldOptions.LoadJobAttempts), which the fold adds up into the
// jobs: those whose first commit is in the range their job's row keeps
// (gen_lo, gen_hi: the zone maps of gen_first leave out the row groups of
// other times). While recover counts jobs again (recountFrom), those from
// the first of their rows' gen_lo and of the commits recovered: attempts
// written since a job's row was.
func (s *Store) loadJobAttempts(ctx context.Context, ids []string) ([]*attState, error) {
	db := s.handle()
	var out []*attState
	each := func(st *attState) { out = append(out, st) }
	if s.recountFrom > 0 {
		for len(ids) > 0 {
			part := idArgs(ids[:min(len(ids), 256)])
			ids = ids[len(part):]
			lo := s.recountFrom
			var rowLo uint64
			err := db.QueryRowContext(ctx, `SELECT coalesce(min(gen_lo), 9223372036854775807) FROM jobs WHERE job_id IN (`+
				placeholders(len(part))+`)`, part...).Scan(&rowLo)
			if err != nil {
				return nil, fmt.Errorf("cannot read the jobs' first commits: %w", err)
			}
			if err := s.readStates(ctx, db, `gen_first >= ?::UBIGINT AND job_id IN (`+placeholders(len(part))+`)`,
				append([]any{min(lo, rowLo)}, part...), each); err != nil {
				return nil, fmt.Errorf("cannot read the jobs' attempts: %w", err)
			}
		}
		return out, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT job_id, coalesce(gen_lo, 0), coalesce(gen_hi, 0) FROM jobs
		WHERE job_id IN (`+placeholders(len(ids))+`) AND attempts > 0`, idArgs(ids)...)
	if err != nil {
		return nil, fmt.Errorf("cannot load jobs: %w", err)
	}
	type span struct {
		id     string
		lo, hi uint64
	}
	var spans []span
	for rows.Next() {
		var sp span
		if err := rows.Scan(&sp.id, &sp.lo, &sp.hi); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cannot load jobs: %w", err)
		}
		spans = append(spans, sp)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot load jobs: %w", err)
	}
	for _, sp := range spans {
		if err := s.readStates(ctx, db, `job_id = ? AND gen_first BETWEEN ?::UBIGINT AND ?::UBIGINT`, []any{sp.id, sp.lo, sp.hi}, each); err != nil {
			return nil, fmt.Errorf("cannot load job %s's attempts: %w", sp.id, err)
		}
	}
	return out, nil
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
