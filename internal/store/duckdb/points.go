package duckdb

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// SeriesPoints implements store.PointsReader: the samples of attempts'
// and processes' gauges (store.PointsQuery), each series' chunks that end
// at or after its From read with the count of its samples since its Since
// in one statement (one snapshot: a chunk committed meanwhile is in both
// or in neither), the series of a kind together. A series with neither
// samples nor chunks since Since is nil. An invalid query fails the whole
// call.
func (s *Store) SeriesPoints(ctx context.Context, qs []store.PointsQuery) (_ []*store.SeriesPoints, err error) {
	defer store.WrapErr(&err, "cannot read the samples of %d series", len(qs))
	out := make([]*store.SeriesPoints, len(qs))
	cols := make([][]store.StoredColumn, len(qs))
	byKind := map[int][]int{}
	for i := range qs {
		q := &qs[i].SeriesQuery
		if q.To < q.From || qs[i].Since > q.From {
			return nil, fmt.Errorf("samples of [%d, %d) since %d: want since <= from <= to", q.From, q.To, qs[i].Since)
		}
		_, c, err := store.PointsMetrics(q)
		if err != nil {
			return nil, err
		}
		cols[i] = c
		kind := store.KindProcess
		if q.Scope == store.ScopeAttempt {
			kind = store.KindAttempt
		}
		// (Those read from their since apart from those read from later:
		// the scan starts at the earliest window of its statement.)
		if qs[i].From > qs[i].Since {
			kind += 100
		}
		byKind[kind] = append(byKind[kind], i)
	}
	for kind, is := range byKind {
		kind %= 100
		for len(is) > 0 {
			part := is[:min(len(is), maxInKeys)]
			is = is[len(part):]
			if err := s.seriesPoints(ctx, kind, qs, part, cols, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// seriesPoints reads the series qs[is] (of kind) into out.
func (s *Store) seriesPoints(ctx context.Context, kind int, qs []store.PointsQuery, is []int,
	cols [][]store.StoredColumn, out []*store.SeriesPoints) error {
	key := func(i int) uint64 {
		if kind == store.KindAttempt {
			return store.AttemptKey(qs[i].AttemptID)
		}
		return uint64(qs[i].Process)
	}
	// Each series' window and since, by key (a key asked twice: the
	// earliest of each, the samples of each query cut from them).
	type bounds struct{ from, since int64 }
	at := map[uint64]bounds{}
	lo, since := int64(math.MaxInt64), int64(math.MaxInt64)
	for _, i := range is {
		k, q := key(i), &qs[i]
		b, ok := at[k]
		if !ok {
			b = bounds{q.From, q.Since}
		}
		b.from, b.since = min(b.from, q.From), min(b.since, q.Since)
		at[k] = b
		lo, since = min(lo, b.from), min(since, b.since)
	}
	var values strings.Builder
	var args, keys []any
	for k, b := range at {
		if values.Len() > 0 {
			values.WriteByte(',')
		}
		values.WriteString("(?::BIGINT, ?::BIGINT, ?::BIGINT)")
		args = append(args, keyValue(k), b.from, b.since)
		keys = append(keys, keyValue(k))
	}
	// The chunks of each series that end at or after its window's start,
	// and the samples of those that end at or after its since (the keys
	// filter each scan; the join, each series' times).
	in := placeholders(len(keys))
	q := `WITH v(key, lo, since) AS (VALUES ` + values.String() + `)
		SELECT 0, s.key, s.t_min, s.t_max, s.level, coalesce(s.job_key, 0), s.data, 0::BIGINT FROM series_all s JOIN v USING (key)
			WHERE s.kind = ? AND s.t_max >= ? AND s.key IN (` + in + `) AND s.t_max >= v.lo
		UNION ALL
		SELECT 1, s.key, 0, 0, 0, 0, NULL, sum(s.n)::BIGINT FROM series_all s JOIN v USING (key)
			WHERE s.kind = ? AND s.t_max >= ? AND s.key IN (` + in + `) AND s.t_max >= v.since GROUP BY s.key`
	args = append(append(append(args, kind, lo), keys...), kind, since)
	args = append(args, keys...)
	rows, err := s.handle().QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("cannot read series: %w", err)
	}
	defer rows.Close()
	chunks := map[uint64][]chunkRow{}
	stored := map[uint64]int64{}
	for rows.Next() {
		var part int
		var k, n int64
		var c chunkRow
		if err := rows.Scan(&part, &k, &c.tMin, &c.tMax, &c.level, &c.job, &c.data, &n); err != nil {
			return err
		}
		if part == 1 {
			stored[uint64(k)] = n
			continue
		}
		if kind != store.KindProcess {
			c.job = 0
		}
		chunks[uint64(k)] = append(chunks[uint64(k)], c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if kind == store.KindAttempt {
		all := make([][]chunkRow, 0, len(chunks))
		for _, rs := range chunks {
			all = append(all, rs)
		}
		// (An attempt's residual chunks: their processes read here.)
		if err := s.resolve(ctx, nil, lo, math.MaxInt64, allAttemptColumns, all...); err != nil {
			return err
		}
	}
	schema := schemaOf(kind)
	for _, i := range is {
		k, pq := key(i), &qs[i]
		n, ok := stored[k]
		cs := chunks[k]
		if !ok && len(cs) == 0 {
			continue // not known, or no sample since
		}
		var mine []chunkRow
		for _, c := range cs {
			if c.tMax >= pq.From {
				mine = append(mine, c)
			}
		}
		p, _, _, err := pointsIn(mine, kind, pq.From, math.MaxInt64)
		if err != nil {
			return err
		}
		sp := &store.SeriesPoints{Cols: cols[i], Stored: n}
		var before, after int
		sp.Points, before, after = store.Narrow(p, schema, cols[i], pq.From, pq.To)
		sp.Before, sp.After = int64(before), int64(after)
		out[i] = sp
	}
	return nil
}
