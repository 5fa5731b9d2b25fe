package duckdb

import (
	"context"
	"fmt"
	"math"

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
		if err := s.seriesPoints(ctx, kind%100, qs, is, cols, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pointsQuery reads series (seriesPoints): the chunks of each that end
// at or after its window's start (lo), and the count of the samples of
// those that end at or after its since. The series' keys, windows and
// sinces are LIST arguments, so that its text is one and DuckDB plans it
// once (prepared): with a VALUES row and an IN list of placeholders for
// each series, planning a statement of some 500 series cost about a third
// of what running it did. Each scan keeps the chunks of the kind that end
// at or after the earliest window (or since), by the zone maps of t_max;
// the join, each series' own.
const pointsQuery = `WITH v AS (SELECT unnest(?::BIGINT[]) AS key, unnest(?::BIGINT[]) AS lo, unnest(?::BIGINT[]) AS since)
	SELECT 0, s.key, s.t_min, s.t_max, s.level, coalesce(s.job_key, 0), s.data, 0::BIGINT FROM series_all s JOIN v USING (key)
		WHERE s.kind = ? AND s.t_max >= ? AND s.t_max >= v.lo
	UNION ALL
	SELECT 1, s.key, 0, 0, 0, 0, NULL, sum(s.n)::BIGINT FROM series_all s JOIN v USING (key)
		WHERE s.kind = ? AND s.t_max >= ? AND s.t_max >= v.since GROUP BY s.key`

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
	keys, los, sinces := make([]int64, 0, len(at)), make([]int64, 0, len(at)), make([]int64, 0, len(at))
	for k, b := range at {
		keys, los, sinces = append(keys, keyValue(k)), append(los, b.from), append(sinces, b.since)
	}
	st, err := s.prepared(ctx, pointsQuery)
	if err != nil {
		return fmt.Errorf("cannot prepare the read of series: %w", err)
	}
	rows, err := st.QueryContext(ctx, keys, los, sinces, kind, lo, kind, since)
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
