package analysis

import (
	"cmp"
	"math"
	"slices"
	"sort"

	"github.com/taskscope/taskscope/internal/store"
)

// maxSeriesAttempts bounds the attempts whose time series one heuristic
// reads (the largest ones by the heuristic's own measure), so that a
// report on a job of thousands of tasks stays quick.
const maxSeriesAttempts = 40

// span is the attempt's time range [from, to) in ms (to now for running ones).
func span(a store.Attempt) (int64, int64) {
	from := int64(a.Start)
	to := max(int64(a.End), int64(a.LastSeen), from+int64(a.DurationMs)) + 1
	return from, to
}

// attemptQuery asks for metrics of one attempt in buckets of step ms (0:
// one bucket for the whole attempt).
func attemptQuery(a store.Attempt, metrics []string, step int64) store.SeriesQuery {
	from, to := span(a)
	if step <= 0 {
		step = to - from
	}
	return store.SeriesQuery{Scope: store.ScopeAttempt, JobID: a.JobID, AttemptID: a.AttemptID,
		Metrics: metrics, From: from, To: to, Step: step}
}

// values returns the non-null values of a metric with their times.
func values(r *store.SeriesResult, metric string) (ts, vs []float64) {
	for _, s := range r.Series {
		if s.Metric != metric {
			continue
		}
		for i, v := range s.Values {
			if f := float64(v); !math.IsNaN(f) {
				ts = append(ts, float64(r.Times[i]))
				vs = append(vs, f)
			}
		}
	}
	return ts, vs
}

// top returns up to n attempts, largest by key first.
func top(atts []store.Attempt, n int, key func(store.Attempt) float64) []store.Attempt {
	if len(atts) == 0 {
		return nil
	}
	// (Their indexes sorted, not the attempts: sorting 9,000 copies of
	// them moved megabytes, twice a report.)
	keys, idx := make([]float64, len(atts)), make([]int, len(atts))
	for i, a := range atts {
		keys[i], idx[i] = key(a), i
	}
	slices.SortStableFunc(idx, func(x, y int) int { return cmp.Compare(keys[y], keys[x]) })
	out := make([]store.Attempt, 0, min(n, len(atts)))
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, atts[i])
	}
	return out
}

// sortedTypes lists the task types of the job in a stable order.
func sortedTypes(m map[string][]store.Attempt) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// linearFit is the least-squares line through (x, y): slope, intercept and
// the coefficient of determination.
func linearFit(x, y []float64) (slope, icept, r2 float64) {
	n := float64(len(x))
	if len(x) < 2 {
		return 0, 0, 0
	}
	// Centred, so that unix times keep their precision.
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/n, my/n
	var sx, sy, sxx, sxy, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sx += dx
		sy += dy
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, my, 0
	}
	slope = (n*sxy - sx*sy) / d
	icept = my + (sy-slope*sx)/n - slope*mx
	vy := n*syy - sy*sy
	if vy <= 0 {
		return slope, icept, 0
	}
	r := (n*sxy - sx*sy) / math.Sqrt(d*vy)
	return slope, icept, r * r
}
