package duckdb

import (
	"context"
	"fmt"
	"slices"

	"github.com/taskscope/taskscope/internal/store"
)

// lookback is how far before a window the chunks are read, so that the
// window's first sample has the one before it to make a rate from: agents
// sample every few seconds, rollups keep a point a minute. (A series with a
// longer gap just before the window has no rate in its first bucket.) It
// was 10 minutes; every read of a live chart's new buckets read as much
// again before them.
const lookback = 2 * 60 * 1000

// Series returns bucketed series, computed from the chunks of the series
// (package store does the arithmetic, the same for every backend).
func (s *Store) Series(ctx context.Context, q store.SeriesQuery) (*store.SeriesResult, error) {
	metrics, err := checkSeries(&q)
	if err != nil {
		return nil, err
	}
	res := store.NewSeriesResult(&q, metrics)
	switch q.Scope {
	case store.ScopeProcess:
		if err := s.checkExt(q.Scope, kindProcessExt, metrics); err != nil {
			return nil, err
		}
		start, err := s.processStart(ctx, &q)
		if err != nil {
			return nil, err
		}
		p, chunkStart, err := s.processPoints(ctx, uint64(q.Process), q.From-lookback, q.To)
		if err != nil {
			return nil, err
		}
		if start < 0 {
			// Without an attempt: the process is known by its samples, or
			// else by its records.
			start = chunkStart
			if len(p.Times) == 0 {
				var n int64
				err := s.handle().QueryRowContext(ctx, `SELECT coalesce(min(start_ms), 0), count(*) FROM proc_log WHERE proc_key = ?`,
					keyValue(uint64(q.Process))).Scan(&start, &n)
				if err != nil {
					return nil, err
				}
				if n == 0 {
					return nil, store.ErrNotFound
				}
			}
		}
		store.ComputeOne(&q, res, metrics, store.SampleColumns, p, start)
		if err := s.extSeries(ctx, &q, res, metrics, kindProcessExt, uint64(q.Process), start); err != nil {
			return nil, err
		}
	case store.ScopeAttempt:
		if err := s.checkExt(q.Scope, kindAttemptExt, metrics); err != nil {
			return nil, err
		}
		var start int64
		err := s.handle().QueryRowContext(ctx, `SELECT coalesce(first_ms, 0) FROM attempts WHERE attempt_id = ?`, q.AttemptID).Scan(&start)
		if isNoRows(err) {
			return nil, store.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		p, err := s.points(ctx, kindAttempt, store.AttemptKey(q.AttemptID), q.From-lookback, q.To)
		if err != nil {
			return nil, err
		}
		store.ComputeOne(&q, res, metrics, store.AttemptColumns, p, start)
		if err := s.extSeries(ctx, &q, res, metrics, kindAttemptExt, store.AttemptKey(q.AttemptID), start); err != nil {
			return nil, err
		}
	case store.ScopeJob:
		if err := s.checkExt(q.Scope, kindAttemptExt, metrics); err != nil {
			return nil, err
		}
		if err := s.jobSeries(ctx, &q, metrics, res); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown scope %q", q.Scope)
	}
	return res, nil
}

// checkSeries checks a query and returns its metrics.
func checkSeries(q *store.SeriesQuery) ([]store.SeriesMetric, error) {
	if q.Step <= 0 || q.To <= q.From {
		return nil, fmt.Errorf("series needs from < to and a step > 0")
	}
	if q.Buckets() > 100000 {
		return nil, fmt.Errorf("series of %d buckets: at most 100000", q.Buckets())
	}
	return store.LookupMetrics(q.Scope, q.Metrics)
}

// processStart is the start of the process of q when q names an attempt it
// is a member of (ErrNotFound if it is not); -1 without an attempt.
func (s *Store) processStart(ctx context.Context, q *store.SeriesQuery) (int64, error) {
	if q.AttemptID == "" {
		return -1, nil
	}
	r, err := s.attemptRange(ctx, q.AttemptID)
	if err != nil {
		return 0, err
	}
	var start, members int64
	err = s.handle().QueryRowContext(ctx, `SELECT coalesce(min(start_ms), 0), count(*) FILTER (WHERE member) FROM (`+
		r.where(" AND proc_key = ?")+`)`, r.args(keyValue(uint64(q.Process)))...).Scan(&start, &members)
	if err != nil {
		return 0, err
	}
	if members == 0 {
		return 0, fmt.Errorf("process %s is not in attempt %s: %w", q.Process, q.AttemptID, store.ErrNotFound)
	}
	return start, nil
}

// processPoints is points of a process, with the process's start that its
// chunks keep (0: not known).
func (s *Store) processPoints(ctx context.Context, key uint64, from, to int64) (*store.Points, int64, error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT level, data, job_key FROM series_all WHERE key = ? AND kind = ?
		AND t_max >= ? AND t_min < ? ORDER BY t_min`, keyValue(key), kindProcess, from, to)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot read series: %w", err)
	}
	defer rows.Close()
	var raw, rollup [][]byte
	var start int64
	for rows.Next() {
		var level int
		var data []byte
		var st int64
		if err := rows.Scan(&level, &data, &st); err != nil {
			return nil, 0, err
		}
		start = max(start, st)
		if level == levelRollup {
			rollup = append(rollup, data)
		} else {
			raw = append(raw, data)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	p, err := mergeLevels(raw, rollup, store.SampleColumns)
	return p, start, err
}

func schemaOf(kind int) []store.StoredColumn {
	switch kind {
	case kindProcess:
		return store.SampleColumns
	case kindAttempt:
		return store.AttemptColumns
	}
	return store.ExtColumns
}

// points reads and merges the chunks of one series overlapping [from, to):
// raw chunks, and per-minute rollups for the time before the oldest raw one
// (raw samples past their retention).
func (s *Store) points(ctx context.Context, kind int, key uint64, from, to int64) (*store.Points, error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT level, data FROM series_all WHERE key = ? AND kind = ?
		AND t_max >= ? AND t_min < ? ORDER BY t_min`, keyValue(key), kind, from, to)
	if err != nil {
		return nil, fmt.Errorf("cannot read series: %w", err)
	}
	defer rows.Close()
	var raw, rollup [][]byte
	for rows.Next() {
		var level int
		var data []byte
		if err := rows.Scan(&level, &data); err != nil {
			return nil, err
		}
		if level == levelRollup {
			rollup = append(rollup, data)
		} else {
			raw = append(raw, data)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return mergeLevels(raw, rollup, schemaOf(kind))
}

func mergeLevels(raw, rollup [][]byte, cols []store.StoredColumn) (*store.Points, error) {
	p, err := store.Decode(raw, cols)
	if err != nil {
		return nil, err
	}
	if len(rollup) == 0 {
		return p, nil
	}
	r, err := store.Decode(rollup, cols)
	if err != nil {
		return nil, err
	}
	if len(p.Times) == 0 {
		return r, nil
	}
	// Rollup points only before the oldest raw one.
	return store.Prepend(r, p), nil
}

// jobSeries sums the job's attempts.
func (s *Store) jobSeries(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric, res *store.SeriesResult) error {
	var lo, hi uint64
	err := s.handle().QueryRowContext(ctx, `SELECT coalesce(gen_lo, 0), coalesce(gen_hi, 0) FROM jobs WHERE job_id = ?`, q.JobID).
		Scan(&lo, &hi)
	if isNoRows(err) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	starts := map[int64]int64{}
	rows, err := s.handle().QueryContext(ctx, `SELECT attempt_key, coalesce(first_ms, 0) FROM attempts WHERE `+jobAttempts,
		q.JobID, lo, hi)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k, st int64
		if err := rows.Scan(&k, &st); err != nil {
			rows.Close()
			return err
		}
		starts[k] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	acc := store.NewJobAccumulator(q, metrics)
	if err := s.jobChunks(ctx, q, kindAttempt, store.AttemptKey(q.JobID), starts, acc); err != nil {
		return err
	}
	acc.Fill(res)
	// Ext metrics: the sums of the attempts' series of each.
	for i, m := range metrics {
		if m.Ext == "" {
			continue
		}
		ext := make(map[int64]int64, len(starts))
		for k, st := range starts {
			ext[keyValue(store.ExtKey(uint64(k), m.Ext))] = st
		}
		acc := store.NewExtAccumulator(q, m)
		if err := s.jobChunks(ctx, q, kindAttemptExt, store.ExtKey(store.AttemptKey(q.JobID), m.Ext), ext, acc); err != nil {
			return err
		}
		one := *res
		one.Series = res.Series[i : i+1]
		acc.Fill(&one)
	}
	return nil
}

// jobChunks adds to acc every series of this kind and job key in q's
// window, each with its start from starts.
func (s *Store) jobChunks(ctx context.Context, q *store.SeriesQuery, kind int, jobKey uint64, starts map[int64]int64,
	acc *store.JobAccumulator) error {
	// Not ORDER BY key, t_min: DuckDB's sort would carry every chunk's
	// bytes along; the rows are grouped by series here, and pointsIn puts
	// each series' few chunks in time order.
	from := q.From - lookback
	rows, err := s.handle().QueryContext(ctx, `SELECT key, t_min, t_max, level, data FROM series_all
		WHERE kind = ? AND job_key = ? AND t_max >= ? AND t_min < ?`, kind, keyValue(jobKey), from, q.To)
	if err != nil {
		return fmt.Errorf("cannot read job series: %w", err)
	}
	defer rows.Close()
	byKey := map[int64][]chunkRow{}
	for rows.Next() {
		var k int64
		var c chunkRow
		if err := rows.Scan(&k, &c.tMin, &c.tMax, &c.level, &c.data); err != nil {
			return err
		}
		byKey[k] = append(byKey[k], c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	keys := make([]int64, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the order the sums are taken in, as before
	for _, k := range keys {
		p, _, _, err := pointsIn(byKey[k], kind, from, q.To)
		if err != nil {
			return err
		}
		acc.Add(p, starts[k])
	}
	return nil
}
