package duckdb

import (
	"context"
	"fmt"

	"github.com/taskscope/taskscope/internal/store"
)

// Metrics with no column of their own (ext_metrics): each is a series of
// its own per process or attempt (store.KindProcessExt, store.KindAttemptExt), asked
// for by name (store.SeriesMetric.Ext).

type extName struct {
	kind   int8
	metric string
}

// loadExt reads the names of ext_metrics.
func (s *Store) loadExt(ctx context.Context) error {
	rows, err := s.handle().QueryContext(ctx, `SELECT kind, metric FROM ext_metrics`)
	if err != nil {
		return fmt.Errorf("cannot read ext_metrics: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n extName
		if err := rows.Scan(&n.kind, &n.metric); err != nil {
			return fmt.Errorf("cannot read ext_metrics: %w", err)
		}
		s.ext.Add(int(n.kind), n.metric)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read ext_metrics: %w", err)
	}
	return nil
}

// extSeries fills the metrics of metrics that are ext metrics of the series
// of key (kind store.KindProcessExt or store.KindAttemptExt) into res.
func (s *Store) extSeries(ctx context.Context, q *store.SeriesQuery, res *store.SeriesResult, metrics []store.SeriesMetric,
	kind int, key uint64, start int64) error {
	for i, m := range metrics {
		if m.Ext == "" {
			continue
		}
		p, _, err := s.windowPoints(ctx, kind, store.ExtKey(key, m.Ext), q.From, q.To, start, metrics[i:i+1])
		if err != nil {
			return err
		}
		one := *res
		one.Series = res.Series[i : i+1]
		store.ComputeOne(q, &one, metrics[i:i+1], store.ExtColumns, p, start)
	}
	return nil
}
