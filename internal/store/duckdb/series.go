package duckdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// metricExpr is the per-row value a metric aggregates: the sum of its
// columns (NULL when all are NULL).
func metricExpr(m store.SeriesMetric) string {
	if len(m.Columns) == 1 {
		return m.Columns[0]
	}
	var nulls, sum []string
	for _, c := range m.Columns {
		nulls = append(nulls, c+" IS NULL")
		sum = append(sum, "coalesce("+c+", 0)")
	}
	return "CASE WHEN " + strings.Join(nulls, " AND ") + " THEN NULL ELSE " + strings.Join(sum, " + ") + " END"
}

// Series returns bucketed series. For a process or an attempt, a rate is the
// increments in the bucket over the time they cover; for a job, the
// increments of all its attempts over the bucket's width, and gauges are the
// sum over attempts of each one's peak in the bucket.
func (s *Store) Series(ctx context.Context, q store.SeriesQuery) (*store.SeriesResult, error) {
	if q.Step <= 0 || q.To <= q.From {
		return nil, fmt.Errorf("series needs from < to and a step > 0")
	}
	if q.Buckets() > 100000 {
		return nil, fmt.Errorf("series of %d buckets: at most 100000", q.Buckets())
	}
	metrics, err := store.LookupMetrics(q.Scope, q.Metrics)
	if err != nil {
		return nil, err
	}
	res := store.NewSeriesResult(&q, metrics)
	var rows *sql.Rows
	switch q.Scope {
	case store.ScopeProcess, store.ScopeAttempt:
		rows, err = s.seriesOne(ctx, &q, metrics)
	case store.ScopeJob:
		rows, err = s.seriesJob(ctx, &q, metrics)
	default:
		return nil, fmt.Errorf("unknown scope %q", q.Scope)
	}
	if err != nil {
		return nil, err
	}
	if rows == nil {
		return res, nil
	}
	defer rows.Close()
	vals := make([]sql.NullFloat64, len(metrics))
	dst := make([]any, 1+len(metrics))
	var b int64
	dst[0] = &b
	for i := range vals {
		dst[1+i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, err
		}
		if b < 0 || int(b) >= len(res.Times) {
			continue
		}
		for i, v := range vals {
			if v.Valid {
				res.Series[i].Values[b] = store.Float(v.Float64)
			}
		}
	}
	return res, rows.Err()
}

func (s *Store) seriesOne(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric) (*sql.Rows, error) {
	var table, where string
	var key any
	var start int64
	if q.Scope == store.ScopeProcess {
		table, where, key = "samples_all", "proc_key = ?", int64(q.Process)
		err := s.db.QueryRowContext(ctx, `SELECT coalesce(start_ms, 0) FROM processes WHERE proc_key = ?`, int64(q.Process)).Scan(&start)
		if isNoRows(err) {
			return nil, store.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
	} else {
		table, where, key = "attempt_samples_all", "attempt_id = ?", q.AttemptID
		err := s.db.QueryRowContext(ctx, `SELECT coalesce(first_ms, 0) FROM attempts WHERE attempt_id = ?`, q.AttemptID).Scan(&start)
		if isNoRows(err) {
			return nil, store.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	var inner, outer []string
	for i, m := range metrics {
		inner = append(inner, fmt.Sprintf("%s AS m%d", metricExpr(m), i))
		if m.Rate {
			outer = append(outer, fmt.Sprintf("sum(m%d) / nullif(sum(CASE WHEN m%d IS NOT NULL THEN dt END), 0) * %g", i, i, m.Scale))
		} else {
			outer = append(outer, fmt.Sprintf("max(m%d) * %g", i, m.Scale))
		}
	}
	// The first sample's increment covers the time since the series began.
	sqlText := fmt.Sprintf(`WITH w AS (
			SELECT ts, ts - coalesce(lag(ts) OVER (ORDER BY ts), ?) AS dt, %s
			FROM %s WHERE %s AND ts < ?)
		SELECT (ts - ?) // ? AS b, %s FROM w WHERE ts >= ? GROUP BY b ORDER BY b`,
		strings.Join(inner, ", "), table, where, strings.Join(outer, ", "))
	return s.db.QueryContext(ctx, sqlText, start, key, q.To, q.From, q.Step, q.From)
}

func (s *Store) seriesJob(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric) (*sql.Rows, error) {
	var inner, per, outer []string
	for i, m := range metrics {
		if m.Name == store.JobAttemptsMetric {
			per = append(per, fmt.Sprintf("1 AS p%d", i))
			outer = append(outer, fmt.Sprintf("sum(p%d)", i))
			inner = append(inner, fmt.Sprintf("1 AS m%d", i))
			continue
		}
		inner = append(inner, fmt.Sprintf("%s AS m%d", metricExpr(m), i))
		if m.Rate {
			per = append(per, fmt.Sprintf("sum(m%d) AS p%d", i, i))
			outer = append(outer, fmt.Sprintf("sum(p%d) / %d * %g", i, q.Step, m.Scale))
		} else {
			per = append(per, fmt.Sprintf("max(m%d) AS p%d", i, i))
			outer = append(outer, fmt.Sprintf("sum(p%d) * %g", i, m.Scale))
		}
	}
	sqlText := fmt.Sprintf(`WITH w AS (SELECT attempt_id, (ts - ?) // ? AS b, %s FROM attempt_samples_all
			WHERE job_id = ? AND ts >= ? AND ts < ?),
		per AS (SELECT attempt_id, b, %s FROM w GROUP BY attempt_id, b)
		SELECT b, %s FROM per GROUP BY b ORDER BY b`,
		strings.Join(inner, ", "), strings.Join(per, ", "), strings.Join(outer, ", "))
	return s.db.QueryContext(ctx, sqlText, q.From, q.Step, q.JobID, q.From, q.To)
}
