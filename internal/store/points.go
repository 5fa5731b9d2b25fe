package store

import (
	"context"
	"fmt"
)

// What a reader that comes back to a growing series keeps of it: its
// samples, not its buckets. The background analysis reads the gauges of
// each running attempt again every minute over the attempt's whole life,
// in buckets that widen as the attempt runs (a 120th of its duration), so
// that no bucket of one read is a bucket of the next; kept as samples,
// each read adds only the samples that came since, and the buckets are
// made from them by ComputeOne, as Series makes them (SeriesPoints.Compute).

// PointsQuery asks for the samples of one series of gauges: Series' Scope
// (ScopeAttempt with AttemptID, or ScopeProcess with Process and no
// AttemptID) and Metrics (gauges, no agent's metric), its samples at times
// in [From, To) (Step is not looked at; To may be From: none). Since is the series' first time
// that a reader keeps (the From of its first read): Stored counts the
// samples of the series' chunks that end at or after it.
type PointsQuery struct {
	SeriesQuery
	Since int64
}

// SeriesPoints is what a PointsReader read of one series: Points, its
// samples at times in [From, To) of the stored columns Cols (those the
// query's metrics are made of, in the order of Points.Cols); Stored, the
// samples the store holds of the series in chunks that end at or after
// Since, counted as the chunks were written (a sample stored twice counts
// twice); and Before and After, the samples it read besides, before From
// and at or after To: it reads every chunk that ends at or after From, in
// one snapshot of the store with Stored.
//
// A reader that keeps the samples of a first read (Since its From; Start)
// and then reads from where its last window ended (Keep) holds every
// sample of the series when the counts add up (Complete): else some came
// late, at times before the window, since it read them (or a time came
// twice), and the series is to be read from Since again.
type SeriesPoints struct {
	Cols          []StoredColumn
	Points        Points
	Stored        int64
	Before, After int64
}

// PointsReader is a store that reads series as their samples
// (PointsQuery): SeriesPoints returns, for each query, the series'
// samples (nil for a series it has no sample of in the window, or does not
// know). Without it, a series is read again whole (Series).
type PointsReader interface {
	SeriesPoints(ctx context.Context, qs []PointsQuery) ([]*SeriesPoints, error)
}

// ReadSeriesPoints is what st's SeriesPoints returns for qs (PointsReader);
// can is false when st cannot read samples.
func ReadSeriesPoints(ctx context.Context, st Store, qs []PointsQuery) (_ []*SeriesPoints, can bool, err error) {
	pr, ok := st.(PointsReader)
	if !ok {
		return nil, false, nil
	}
	ps, err := pr.SeriesPoints(ctx, qs)
	return ps, true, err
}

// PointsMetrics are the metrics of a PointsQuery, and the stored
// columns of its series that they are made of: an error for a scope or
// metric that is not a gauge of an attempt or a process.
func PointsMetrics(q *SeriesQuery) ([]SeriesMetric, []StoredColumn, error) {
	var kind int
	switch {
	case q.Scope == ScopeAttempt && q.AttemptID != "":
		kind = KindAttempt
	case q.Scope == ScopeProcess && q.AttemptID == "":
		kind = KindProcess
	default:
		return nil, nil, fmt.Errorf("samples of %s series (attempt %q): only an attempt's, or a process's without its attempt", q.Scope, q.AttemptID)
	}
	metrics, err := LookupMetrics(q.Scope, q.Metrics)
	if err != nil {
		return nil, nil, err
	}
	schema := ColumnsOf(kind)
	var cols []StoredColumn
	for _, m := range metrics {
		if m.Rate || m.Ext != "" {
			return nil, nil, fmt.Errorf("samples of %s: not a gauge the store holds a column of", m.Name)
		}
		for _, name := range m.Columns {
			j := ColumnIndex(schema, name)
			if j < 0 {
				return nil, nil, fmt.Errorf("samples of %s: no column %s", m.Name, name)
			}
			if ColumnIndex(cols, name) < 0 {
				cols = append(cols, schema[j])
			}
		}
	}
	return metrics, cols, nil
}

// Narrow is the samples of p (a series of schema, in time order) at
// times in [from, to), of columns cols only; before and after are how
// many of p's samples are before from, and at or after to.
func Narrow(p *Points, schema, cols []StoredColumn, from, to int64) (out Points, before, after int) {
	lo, hi := 0, len(p.Times)
	for lo < hi && p.Times[lo] < from {
		lo++
	}
	for hi > lo && p.Times[hi-1] >= to {
		hi--
	}
	out.Times = append([]int64(nil), p.Times[lo:hi]...)
	out.Cols = make([][]int64, len(cols))
	out.Absent = make([][]bool, len(cols))
	out.Has = make([]bool, len(cols))
	for i, c := range cols {
		j := ColumnIndex(schema, c.Name)
		if j < 0 || j >= len(p.Cols) || !p.Has[j] {
			out.Cols[i] = make([]int64, hi-lo)
			continue
		}
		out.Has[i] = true
		out.Cols[i] = append([]int64(nil), p.Cols[j][lo:hi]...)
		if p.Absent[j] != nil {
			out.Absent[i] = append([]bool(nil), p.Absent[j][lo:hi]...)
		}
	}
	return out, lo, len(p.Times) - hi
}

// Start makes sp, a first read (From its Since), the base that later
// reads add to (Complete): its Before counts too the samples the store
// counts twice (a time held in two chunks is read once). It is false when
// the store counts fewer samples than were read: the counts cannot tell
// what came late.
func (sp *SeriesPoints) Start() bool {
	extra := sp.Stored - (sp.Before + int64(sp.Len()) + sp.After)
	if extra < 0 {
		return false
	}
	sp.Before += extra
	return true
}

// Complete reports whether later, read after sp from where sp's window
// ended, holds with sp every sample the store holds of the series since
// sp's first read's Since: none came late, before later's window, since
// sp's samples were read.
func (sp *SeriesPoints) Complete(later *SeriesPoints) bool {
	return sp.Before+int64(sp.Len()+later.Len())+later.After == later.Stored
}

// Keep appends the samples of later (read from where sp's window ended:
// times after all of sp's) to sp. sp's Before stays its first read's.
func (sp *SeriesPoints) Keep(later *SeriesPoints) {
	n := len(sp.Points.Times)
	lp := &later.Points
	sp.Points.Times = append(sp.Points.Times, lp.Times...)
	for i := range sp.Cols {
		if lp.Has[i] {
			sp.Points.Cols[i] = append(sp.Points.Cols[i], lp.Cols[i]...)
		} else {
			sp.Points.Cols[i] = append(sp.Points.Cols[i], make([]int64, len(lp.Times))...)
		}
		if sp.Points.Absent[i] != nil || lp.Absent[i] != nil || sp.Points.Has[i] != lp.Has[i] {
			a := sp.Points.Absent[i]
			if a == nil {
				a = make([]bool, n, n+len(lp.Times))
				for k := range a {
					a[k] = !sp.Points.Has[i]
				}
			}
			switch {
			case !lp.Has[i]:
				for range lp.Times {
					a = append(a, true)
				}
			case lp.Absent[i] != nil:
				a = append(a, lp.Absent[i]...)
			default:
				a = append(a, make([]bool, len(lp.Times))...)
			}
			sp.Points.Absent[i] = a
		}
		sp.Points.Has[i] = sp.Points.Has[i] || lp.Has[i]
	}
	sp.Stored, sp.After = later.Stored, later.After
}

// Compute is the result of q (what Series returns for it) made of sp's
// samples, which must be all those of the series in [q.From, q.To).
func (sp *SeriesPoints) Compute(q *SeriesQuery) (*SeriesResult, error) {
	metrics, _, err := PointsMetrics(q)
	if err != nil {
		return nil, err
	}
	res := NewSeriesResult(q, metrics)
	ComputeOne(q, res, metrics, sp.Cols, &sp.Points, 0)
	return res, nil
}

// Condense keeps of sp, whose samples are all in one bucket of the
// queries to come (from the first on: their Step spans From to To), one
// sample at the first one's time with each column's largest value, which
// is what their gauges are made of: the others count in Before. False
// (nothing done) when a metric sums columns.
func (sp *SeriesPoints) Condense(metrics []SeriesMetric) bool {
	for _, m := range metrics {
		if len(m.Columns) != 1 {
			return false
		}
	}
	n := sp.Len()
	if n <= 1 {
		return true
	}
	p := &sp.Points
	for j := range sp.Cols {
		if !p.Has[j] {
			p.Cols[j] = p.Cols[j][:1]
			continue
		}
		var v int64
		some := false
		for i := range p.Times {
			if p.present(j, i) && (!some || p.Cols[j][i] > v) {
				v, some = p.Cols[j][i], true
			}
		}
		p.Cols[j] = append(p.Cols[j][:0], v)
		if p.Absent[j] != nil {
			p.Absent[j] = append(p.Absent[j][:0], !some)
		}
	}
	p.Times = p.Times[:1]
	sp.Before += int64(n - 1)
	return true
}

// Len is how many samples sp holds.
func (sp *SeriesPoints) Len() int { return len(sp.Points.Times) }
