package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/taskscope/taskscope/internal/store"
)

// lookback is how far before a window the chunks are read, so that the
// window's first sample has the one before it to make a rate from: agents
// sample every few seconds, rollups keep a point a minute. (A series with a
// longer gap just before the window has, in its first bucket, the average
// since its start, as package store computes a first sample's.) It
// was 10 minutes; every read of a live chart's new buckets read as much
// again before them.
//
// A read first goes back shortLookback only: the fresh chunks have no
// index but their time, so each read scans every series' chunks of the
// time it covers, and a live chart's new buckets are a few seconds. A
// series found with no value before the window of a rate asked for (a
// gap, a longer sampling interval, a metric sampled every few samples,
// rollups' minute), though it began before shortLookback did, is read
// again from lookback (needsLookback).
const (
	lookback      = 2 * 60 * 1000
	shortLookback = 15 * 1000
)

// needsLookback reports whether a series read from shortLookback before
// from needs reading from lookback: it began before the short read did
// (began: 0 if not known), and a rate asked for has no value before from
// to start its first increment from (earlier: store.NeedsEarlier's answer).
func needsLookback(from, began int64, earlier bool) bool {
	return (began <= 0 || began < from-shortLookback) && earlier
}

// Series returns bucketed series, computed from the chunks of the series
// (package store does the arithmetic, the same for every backend).
func (s *Store) Series(ctx context.Context, q store.SeriesQuery) (_ *store.SeriesResult, err error) {
	defer store.WrapErr(&err, "cannot read the series of %s", q.Scope)
	metrics, err := checkSeries(&q)
	if err != nil {
		return nil, err
	}
	res := store.NewSeriesResult(&q, metrics)
	switch q.Scope {
	case store.ScopeProcess:
		start, err := s.processStart(ctx, &q)
		if err != nil {
			return nil, err
		}
		p, chunkStart, err := s.windowPoints(ctx, store.KindProcess, uint64(q.Process), q.From, q.To, max(start, 0), metrics)
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
		if err := s.extSeries(ctx, &q, res, metrics, store.KindProcessExt, uint64(q.Process), start); err != nil {
			return nil, err
		}
	case store.ScopeAttempt:
		var start int64
		err := s.queryRow(ctx, `SELECT coalesce(first_ms, 0) FROM attempts WHERE attempt_id = ?`, q.AttemptID).Scan(&start)
		if isNoRows(err) {
			return nil, store.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		p, _, err := s.windowPoints(ctx, store.KindAttempt, store.AttemptKey(q.AttemptID), q.From, q.To, start, metrics)
		if err != nil {
			return nil, err
		}
		store.ComputeOne(&q, res, metrics, store.AttemptColumns, p, start)
		if err := s.extSeries(ctx, &q, res, metrics, store.KindAttemptExt, store.AttemptKey(q.AttemptID), start); err != nil {
			return nil, err
		}
	case store.ScopeJob:
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

func schemaOf(kind int) []store.StoredColumn { return store.ColumnsOf(kind) }

// windowPoints is points of a window [from, to) with its lookback, for
// metrics, and the start its chunks keep (a process's: 0 if not known).
// began is the series' start (0: not known; a process's is then that of its
// chunks).
func (s *Store) windowPoints(ctx context.Context, kind int, key uint64, from, to, began int64,
	metrics []store.SeriesMetric) (*store.Points, int64, error) {
	want := attemptWant(metrics)
	p, start, err := s.points(ctx, kind, key, from-shortLookback, to, want)
	if began <= 0 && kind == store.KindProcess {
		began = start
	}
	if err != nil || !needsLookback(from, began, store.NeedsEarlier(p, from, metrics, schemaOf(kind))) {
		return p, start, err
	}
	return s.points(ctx, kind, key, from-lookback, to, want)
}

// points reads and merges the chunks of one series overlapping [from, to):
// raw chunks, and per-minute rollups for the time before the oldest raw one
// (raw samples past their retention). It returns too the start the chunks
// keep in their job_key: a process's (0: not known). An attempt's
// residuals are made whole in the columns want only (resolve).
func (s *Store) points(ctx context.Context, kind int, key uint64, from, to int64, want uint64) (*store.Points, int64, error) {
	q := `SELECT kind, key, t_min, t_max, level, data, coalesce(job_key, 0) FROM series_all WHERE key = ? AND kind = ?
		AND t_max >= ? AND t_min < ? ORDER BY t_min`
	args := []any{keyValue(key), kind, from, to}
	// An attempt's merged chunks are read by res_att. A read of an attempt
	// whose residuals were kept (wholes.marked: compaction kept their own
	// samples, or an earlier read made them whole) takes those only, and
	// its processes' merged chunks by key for residuals not kept
	// (resolve): a page's later reads do not carry the processes' bytes.
	// Another takes, in the same scan, those of its processes that its
	// residuals need (those that name it too): one scan, not two. (A
	// UNION, not an OR: DuckDB pushes each side's filter into its scan.
	// Not ORDER BY: the sort would carry every chunk's bytes along;
	// pointsIn puts them in time order.)
	kept := false
	if kind == store.KindAttempt {
		kept = s.wholes.marked(key)
		q = `SELECT kind, key, t_min, t_max, level, data, coalesce(job_key, 0) FROM series_fresh
			WHERE key = ? AND kind = ? AND t_max >= ? AND t_min < ?
			UNION ALL SELECT kind, key, t_min, t_max, level, data, coalesce(job_key, 0) FROM series_chunks
			WHERE res_att = ? AND t_max >= ? AND t_min < ?`
		args = []any{keyValue(key), kind, from, to, keyValue(key), from, to}
		if kept {
			q += ` AND kind = ?`
			args = append(args, kind)
		}
	}
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot read series: %w", err)
	}
	defer rows.Close()
	var chunks []chunkRow
	var procs map[uint64][]chunkRow
	for rows.Next() {
		var c chunkRow
		var k int
		var ck int64
		if err := rows.Scan(&k, &ck, &c.tMin, &c.tMax, &c.level, &c.data, &c.job); err != nil {
			return nil, 0, err
		}
		if k != kind {
			if procs == nil {
				procs = map[uint64][]chunkRow{}
			}
			procs[uint64(ck)] = append(procs[uint64(ck)], c)
			continue
		}
		if kind != store.KindProcess {
			c.job = 0
		}
		chunks = append(chunks, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if kind == store.KindAttempt {
		if len(procs) > 0 {
			s.wholes.took(len(procs))
		}
		if err := s.resolve(ctx, procs, from, to, want, chunks); err != nil {
			return nil, 0, err
		}
		s.wholes.mark(key)
	}
	p, _, start, err := pointsIn(chunks, kind, from, to)
	return p, start, err
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
	if err := s.jobChunks(ctx, q, store.KindAttempt, store.AttemptKey(q.JobID), starts, acc, attemptWant(metrics)); err != nil {
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
		if err := s.jobChunks(ctx, q, store.KindAttemptExt, store.ExtKey(store.AttemptKey(q.JobID), m.Ext), ext, acc, allAttemptColumns); err != nil {
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
// shortLookback before the window, and those of the series that need more
// (needsLookback) again from lookback. Attempts' residuals are made whole
// in the columns want only (resolve).
func (s *Store) jobChunks(ctx context.Context, q *store.SeriesQuery, kind int, jobKey uint64, starts map[int64]int64,
	acc *store.JobAccumulator, want uint64) error {
	short := q.From - shortLookback
	byKey, procs, err := s.jobChunksIn(ctx, kind, jobKey, short, q.To, nil)
	if err != nil {
		return err
	}
	if err := s.resolveByKey(ctx, kind, byKey, procs, short, q.To, want); err != nil {
		return err
	}
	keys := make([]int64, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the order the sums are taken in
	var more []int64
	for _, k := range keys {
		p, _, _, err := pointsIn(byKey[k], kind, short, q.To)
		if err != nil {
			return err
		}
		if needsLookback(q.From, starts[k], acc.NeedsEarlier(p, q.From)) {
			more = append(more, k)
			continue
		}
		acc.Add(p, starts[k])
	}
	if len(more) == 0 {
		return nil
	}
	// Their chunks again, all of them from lookback: a read of its own,
	// whatever a compaction did between the two.
	for len(more) > 0 {
		part := more[:min(len(more), maxInKeys)]
		more = more[len(part):]
		byKey, _, err := s.jobChunksIn(ctx, kind, jobKey, q.From-lookback, q.To, part)
		if err != nil {
			return err
		}
		if err := s.resolveByKey(ctx, kind, byKey, nil, 0, 0, want); err != nil {
			return err
		}
		for _, k := range part {
			p, _, _, err := pointsIn(byKey[k], kind, q.From-lookback, q.To)
			if err != nil {
				return err
			}
			acc.Add(p, starts[k])
		}
	}
	return nil
}

// jobChunksIn reads the chunks of this kind and job key overlapping
// [from, to), by series; only those of the series keys, if any. Attempts'
// chunks come with the merged chunks of their processes that their
// residuals need (res_job), in the same scan: procs, by process.
func (s *Store) jobChunksIn(ctx context.Context, kind int, jobKey uint64, from, to int64, keys []int64) (
	byKey map[int64][]chunkRow, procs map[uint64][]chunkRow, err error) {
	// Not ORDER BY key, t_min: DuckDB's sort would carry every chunk's
	// bytes along; the rows are grouped by series here, and pointsIn puts
	// each series' few chunks in time order.
	q := `SELECT kind, key, t_min, t_max, level, data FROM series_all WHERE kind = ? AND job_key = ? AND t_max >= ? AND t_min < ?`
	args := []any{kind, keyValue(jobKey), from, to}
	var rows *sql.Rows
	switch {
	case keys != nil:
		// Those series only (their processes' chunks are read as they
		// are needed: resolve).
		for _, k := range keys {
			args = append(args, k)
		}
		rows, err = s.handle().QueryContext(ctx, q+` AND key IN (`+placeholders(len(keys))+`)`, args...)
	case kind == store.KindAttempt:
		// The merged chunks of the job's attempts and of their
		// processes: those that name the job (res_job; a UNION: points).
		rows, err = s.query(ctx, `SELECT kind, key, t_min, t_max, level, data FROM series_fresh
			WHERE kind = ? AND job_key = ? AND t_max >= ? AND t_min < ?
			UNION ALL SELECT kind, key, t_min, t_max, level, data FROM series_chunks
			WHERE res_job = ? AND t_max >= ? AND t_min < ?`, append(args, keyValue(jobKey), from, to)...)
	default:
		rows, err = s.query(ctx, q, args...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read job series: %w", err)
	}
	defer rows.Close()
	byKey, procs = map[int64][]chunkRow{}, map[uint64][]chunkRow{}
	for rows.Next() {
		var k int64
		var ck int
		var c chunkRow
		if err := rows.Scan(&ck, &k, &c.tMin, &c.tMax, &c.level, &c.data); err != nil {
			return nil, nil, err
		}
		if ck != kind {
			procs[uint64(k)] = append(procs[uint64(k)], c)
			continue
		}
		byKey[k] = append(byKey[k], c)
	}
	return byKey, procs, rows.Err()
}

// resolveByKey makes whole the residual chunks of attempts' series read
// by key (resolve, all together; procs read with them over [from, to);
// the columns want).
func (s *Store) resolveByKey(ctx context.Context, kind int, byKey map[int64][]chunkRow, procs map[uint64][]chunkRow, from, to int64, want uint64) error {
	if kind != store.KindAttempt {
		return nil
	}
	all := make([][]chunkRow, 0, len(byKey))
	for _, rows := range byKey {
		all = append(all, rows)
	}
	return s.resolve(ctx, procs, from, to, want, all...)
}
