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
//
// A read first goes back shortLookback only: the fresh chunks have no
// index but their time, so each read scans every series' chunks of the
// time it covers, and a live chart's new buckets are a few seconds. A
// series found with no sample before the window, though it began before
// shortLookback did, is read again from lookback (needsLookback).
const (
	lookback      = 2 * 60 * 1000
	shortLookback = 15 * 1000
)

// needsLookback reports whether a series read from shortLookback before
// from needs reading from lookback: it has samples, none before from, and
// began before the short read did (began: 0 if not known).
func needsLookback(p *store.Points, from, began int64) bool {
	return len(p.Times) > 0 && p.Times[0] >= from && (began <= 0 || began < from-shortLookback)
}

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
		p, chunkStart, err := s.processPoints(ctx, uint64(q.Process), q.From, q.To)
		if err != nil {
			return nil, err
		}
		if start < 0 {
			// Without an attempt: the process is known by its samples, or
			// else by its records.
			start = chunkStart
			if len(p.Times) == 0 {
				var n int64
				err := s.queryRow(ctx, `SELECT coalesce(min(start_ms), 0), count(*) FROM proc_log WHERE proc_key = ?`,
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
		err := s.queryRow(ctx, `SELECT coalesce(first_ms, 0) FROM attempts WHERE attempt_id = ?`, q.AttemptID).Scan(&start)
		if isNoRows(err) {
			return nil, store.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		p, err := s.windowPoints(ctx, kindAttempt, store.AttemptKey(q.AttemptID), q.From, q.To, start)
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
	err = s.queryRow(ctx, `SELECT coalesce(min(start_ms), 0), count(*) FILTER (WHERE member) FROM (`+
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
	p, start, err := s.processPointsSince(ctx, key, from-shortLookback, to)
	if err != nil || !needsLookback(p, from, start) {
		return p, start, err
	}
	return s.processPointsSince(ctx, key, from-lookback, to)
}

// processPointsSince is processPoints from since, without lookback.
func (s *Store) processPointsSince(ctx context.Context, key uint64, from, to int64) (*store.Points, int64, error) {
	rows, err := s.query(ctx, `SELECT level, data, job_key FROM series_all WHERE key = ? AND kind = ?
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

// windowPoints is points of a window [from, to) with its lookback (began:
// the series' start, 0 if not known).
func (s *Store) windowPoints(ctx context.Context, kind int, key uint64, from, to, began int64) (*store.Points, error) {
	p, err := s.points(ctx, kind, key, from-shortLookback, to)
	if err != nil || !needsLookback(p, from, began) {
		return p, err
	}
	return s.points(ctx, kind, key, from-lookback, to)
}

// points reads and merges the chunks of one series overlapping [from, to):
// raw chunks, and per-minute rollups for the time before the oldest raw one
// (raw samples past their retention).
func (s *Store) points(ctx context.Context, kind int, key uint64, from, to int64) (*store.Points, error) {
	rows, err := s.query(ctx, `SELECT level, data FROM series_all WHERE key = ? AND kind = ?
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
	err := s.queryRow(ctx, `SELECT coalesce(gen_lo, 0), coalesce(gen_hi, 0) FROM jobs WHERE job_id = ?`, q.JobID).
		Scan(&lo, &hi)
	if isNoRows(err) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	starts := map[int64]int64{}
	rows, err := s.query(ctx, `SELECT attempt_key, coalesce(first_ms, 0) FROM attempts WHERE `+jobAttempts,
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
// window, each with its start from starts. The chunks are read from
// shortLookback before the window, and from lookback for the series that
// need it (needsLookback).
func (s *Store) jobChunks(ctx context.Context, q *store.SeriesQuery, kind int, jobKey uint64, starts map[int64]int64,
	acc *store.JobAccumulator) error {
	byKey := map[int64][]chunkRow{}
	short := q.From - shortLookback
	if err := s.readJobChunks(ctx, kind, jobKey, short, q.To, byKey, nil); err != nil {
		return err
	}
	// A series needs more when none of its chunks began before the window
	// and it began before short.
	more := map[int64]bool{}
	for k, cs := range byKey {
		before := false
		for _, c := range cs {
			before = before || c.tMin < q.From
		}
		if !before && starts[k] < short {
			more[k] = true
		}
	}
	if len(more) > 0 {
		// The chunks that ended before short: those not read yet.
		if err := s.readJobChunks(ctx, kind, jobKey, q.From-lookback, short, byKey, more); err != nil {
			return err
		}
	}
	keys := make([]int64, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the order the sums are taken in, as before
	for _, k := range keys {
		p, _, _, err := pointsIn(byKey[k], kind, q.From-lookback, q.To)
		if err != nil {
			return err
		}
		acc.Add(p, starts[k])
	}
	return nil
}

// readJobChunks adds to byKey the chunks of this kind and job key: with
// only nil, those overlapping [from, to); else those of the series in only
// that end in [from, to).
func (s *Store) readJobChunks(ctx context.Context, kind int, jobKey uint64, from, to int64, byKey map[int64][]chunkRow,
	only map[int64]bool) error {
	// Not ORDER BY key, t_min: DuckDB's sort would carry every chunk's
	// bytes along; the rows are grouped by series here, and pointsIn puts
	// each series' few chunks in time order.
	cond := `t_min < ?`
	if only != nil {
		cond = `t_max < ?`
	}
	rows, err := s.query(ctx, `SELECT key, t_min, t_max, level, data FROM series_all
		WHERE kind = ? AND job_key = ? AND t_max >= ? AND `+cond, kind, keyValue(jobKey), from, to)
	if err != nil {
		return fmt.Errorf("cannot read job series: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k int64
		var c chunkRow
		if err := rows.Scan(&k, &c.tMin, &c.tMax, &c.level, &c.data); err != nil {
			return err
		}
		if only == nil || only[k] {
			byKey[k] = append(byKey[k], c)
		}
	}
	return rows.Err()
}
