package duckdb

import (
	"context"

	"github.com/taskscope/taskscope/internal/store"
)

// Metrics with no column of their own (ext_metrics): each is a series of
// its own per process or attempt (kindProcessExt, kindAttemptExt), asked
// for by name (store.SeriesMetric.Ext).

type extName struct {
	kind   int8
	metric string
}

// loadExt reads the names of ext_metrics.
func (s *Store) loadExt(ctx context.Context) error {
	rows, err := s.handle().QueryContext(ctx, `SELECT kind, metric FROM ext_metrics`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var names []extName
	for rows.Next() {
		var n extName
		if err := rows.Scan(&n.kind, &n.metric); err != nil {
			return err
		}
		names = append(names, n)
	}
	s.addExt(names)
	return rows.Err()
}

func (s *Store) addExt(names []extName) {
	if len(names) == 0 {
		return
	}
	s.emu.Lock()
	defer s.emu.Unlock()
	if s.ext == nil {
		s.ext = map[extName]bool{}
	}
	for _, n := range names {
		s.ext[n] = true
	}
}

func (s *Store) knownExt(n extName) bool {
	s.emu.Lock()
	defer s.emu.Unlock()
	return s.ext[n]
}

// checkExt returns ErrUnknownMetric for a metric of metrics that no agent
// sent for series of this kind.
func (s *Store) checkExt(scope store.Scope, kind int8, metrics []store.SeriesMetric) error {
	for _, m := range metrics {
		if m.Ext != "" && !s.knownExt(extName{kind, m.Ext}) {
			return store.UnknownMetric(scope, m.Name)
		}
	}
	return nil
}

// extSeries fills the metrics of metrics that are ext metrics of the series
// of key (kind kindProcessExt or kindAttemptExt) into res.
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
