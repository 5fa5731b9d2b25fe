package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/taskscope/taskscope/internal/store"
)

var _ store.SeriesBatcher = (*Store)(nil)

// SeriesMany returns what Series returns for each query
// (store.SeriesBatcher; nil for one not found): the series of attempts
// (without ext metrics) read together, their lives in two queries and
// their chunks in two, each computed from the chunks its own read would
// have selected; the others one by one. A job's analysis reads its
// attempts' series so: one by one, each took four queries (its index,
// its row, its chunks, its rollups), and they were most of ClickHouse's
// CPU a job analysed (BenchmarkKeepUp).
func (s *Store) SeriesMany(ctx context.Context, qs []store.SeriesQuery) (_ []*store.SeriesResult, err error) {
	defer store.WrapErr(&err, "cannot read %d series", len(qs))
	out := make([]*store.SeriesResult, len(qs))
	metrics := make([][]store.SeriesMetric, len(qs))
	together := make([]bool, len(qs))
	var ids []string
	seen := map[string]bool{}
	for i := range qs {
		q := &qs[i]
		if q.Scope != store.ScopeAttempt || q.Step <= 0 || q.To <= q.From || q.Buckets() > 100000 {
			continue // (alone: Series says what is wrong)
		}
		m, err := store.LookupMetrics(q.Scope, q.Metrics)
		if err != nil || slices.ContainsFunc(m, func(m store.SeriesMetric) bool { return m.Ext != "" }) {
			continue
		}
		metrics[i], together[i] = m, true
		if !seen[q.AttemptID] {
			seen[q.AttemptID] = true
			ids = append(ids, q.AttemptID)
		}
	}
	lives, err := s.lives(ctx, ids)
	if err != nil {
		return nil, err
	}
	jobs := []uint64{jobKey("")}
	var keys []uint64
	from, to := int64(math.MaxInt64), int64(math.MinInt64)
	for i := range qs {
		q := &qs[i]
		life := lives[q.AttemptID]
		if !together[i] || life == nil {
			continue
		}
		if k := jobKey(life.JobID); !slices.Contains(jobs, k) {
			jobs = append(jobs, k)
		}
		if k := store.AttemptKey(q.AttemptID); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		from, to = min(from, q.From-lookback), max(to, q.To)
	}
	var byKey map[uint64][]chunkRec
	if len(keys) > 0 {
		if byKey, err = s.chunksOf(ctx, store.KindAttempt, jobs, keys, from, to); err != nil {
			return nil, err
		}
	}
	cols := schemaOf(store.KindAttempt)
	for i := range qs {
		q := &qs[i]
		if !together[i] {
			r, err := s.Series(ctx, *q)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			out[i] = r
			continue
		}
		life := lives[q.AttemptID]
		if life == nil {
			continue // not found
		}
		// The chunks Series' own read selects (chunksOf's condition).
		var cs []chunkRec
		for _, c := range byKey[store.AttemptKey(q.AttemptID)] {
			if c.tMax >= q.From-lookback && c.tMin < q.To {
				cs = append(cs, c)
			}
		}
		p, err := pointsOf(cs, cols)
		if err != nil {
			return nil, err
		}
		res := store.NewSeriesResult(q, metrics[i])
		store.ComputeOne(q, res, metrics[i], cols, p, int64(life.Start))
		out[i] = res
	}
	return out, nil
}

// lives are the lives of attempts (as AttemptLife reads each), by id; an
// unknown attempt has none. Those the index places are read together, a
// thousand at a time; one not where its index says is read alone.
func (s *Store) lives(ctx context.Context, ids []string) (map[string]*store.AttemptLife, error) {
	out := map[string]*store.AttemptLife{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), 1000)]
		ids = ids[len(part):]
		jobs, days, err := s.indexed(ctx, part)
		if err != nil {
			return nil, err
		}
		if len(days) == 0 {
			continue // none known
		}
		rows, err := s.query(ctx, fmt.Sprintf("SELECT attempt_id, %s FROM %s FINAL WHERE job_key IN (%s) AND attempt_id IN (%s) AND day IN (%s) "+
			"ORDER BY version", lifeColumns, s.read("attempts"), numList(jobs), QuoteList(part), numList(days)))
		if err != nil {
			return nil, fmt.Errorf("cannot read attempts: %w", err)
		}
		stale := s.staleBefore()
		for rows.Next() { // (the latest version of each last, as AttemptLife)
			id := rows.String()
			out[id] = readLife(rows, id, stale)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, id := range part {
			if out[id] != nil {
				continue
			}
			life, err := s.AttemptLife(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[id] = life
		}
	}
	return out, nil
}
