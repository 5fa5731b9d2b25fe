package duckdb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// rollupCols aggregates stored columns per minute: increments are summed,
// gauges keep their peak.
func rollupCols(cols []store.StoredColumn) string {
	var out []string
	for _, c := range cols {
		if c.Counter {
			out = append(out, fmt.Sprintf("sum(%s) AS %s", c.Name, c.Name))
		} else {
			out = append(out, fmt.Sprintf("max(%s) AS %s", c.Name, c.Name))
		}
	}
	return strings.Join(out, ", ")
}

func rollupSchema() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS samples_1m (proc_key BIGINT, ts BIGINT, n INTEGER, cover_ms BIGINT` + colDefs(store.SampleColumns) + `)`,
		`CREATE TABLE IF NOT EXISTS attempt_samples_1m (attempt_id VARCHAR, job_id VARCHAR, ts BIGINT, n INTEGER, cover_ms BIGINT` + colDefs(store.AttemptColumns) + `)`,
	}
}

// Maintain moves hot samples into the sorted main tables (and their
// per-minute rollups) when there are many or they are old, then drops raw
// samples and rollups past their retention.
func (s *Store) Maintain(ctx context.Context, now time.Time) error {
	var hot int64
	var oldest *int64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*), min(ts) FROM samples_hot`).Scan(&hot, &oldest); err != nil {
		return err
	}
	if hot > 0 && (hot >= s.opt.CompactRows || (oldest != nil && now.UnixMilli()-*oldest >= s.opt.CompactAge.Milliseconds())) {
		if err := s.Compact(ctx); err != nil {
			return err
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.opt.Retention > 0 {
		cut := now.Add(-s.opt.Retention).UnixMilli()
		for _, q := range []string{`DELETE FROM samples WHERE ts < ?`, `DELETE FROM attempt_samples WHERE ts < ?`,
			`DELETE FROM samples_ext WHERE ts < ?`} {
			if _, err := s.wconn.ExecContext(ctx, q, cut); err != nil {
				return fmt.Errorf("retention: %w", err)
			}
		}
	}
	if s.opt.RollupRetention > 0 {
		cut := now.Add(-s.opt.RollupRetention).UnixMilli()
		for _, q := range []string{`DELETE FROM samples_1m WHERE ts < ?`, `DELETE FROM attempt_samples_1m WHERE ts < ?`,
			`DELETE FROM events WHERE ts < ?`} {
			if _, err := s.wconn.ExecContext(ctx, q, cut); err != nil {
				return fmt.Errorf("retention: %w", err)
			}
		}
	}
	return nil
}

// Compact moves every hot sample, sorted by series then time, into the main
// tables, and adds them to the minute rollups, in one transaction.
func (s *Store) Compact(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	cover := `CASE WHEN count(*) > 1 THEN (max(ts) - min(ts)) * count(*) // (count(*) - 1) ELSE 1000 END`
	stmts := []string{
		"BEGIN TRANSACTION",
		`INSERT INTO samples_1m SELECT proc_key, ts // 60000 * 60000 AS m, count(*), ` + cover + `, ` +
			rollupCols(store.SampleColumns) + ` FROM samples_hot GROUP BY proc_key, m`,
		`INSERT INTO attempt_samples_1m SELECT attempt_id, any_value(job_id), ts // 60000 * 60000 AS m, count(*), ` + cover + `, ` +
			rollupCols(store.AttemptColumns) + ` FROM attempt_samples_hot GROUP BY attempt_id, m`,
		`INSERT INTO samples SELECT * FROM samples_hot ORDER BY proc_key, ts`,
		`INSERT INTO attempt_samples SELECT * FROM attempt_samples_hot ORDER BY job_id, attempt_id, ts`,
		`DELETE FROM samples_hot`,
		`DELETE FROM attempt_samples_hot`,
		"COMMIT",
	}
	for _, q := range stmts {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			s.wconn.ExecContext(ctx, "ROLLBACK")
			return fmt.Errorf("compaction: %w", err)
		}
	}
	_, err := s.wconn.ExecContext(ctx, "CHECKPOINT")
	return err
}
