package store

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestJobAccumulatorAsEachAlone: a job's sums made by one accumulator,
// which keeps one attempt's buckets and empties them after each Add, are
// those of each attempt's buckets made afresh and added, bucket for
// bucket (the same floats, added in the same order), with attempts of
// every length (some outside the window, some over its edges, some
// reset), missing values, and a column absent from some attempts.
func TestJobAccumulatorAsEachAlone(t *testing.T) {
	metrics, err := LookupMetrics(ScopeJob, []string{"cpu_percent", "rss_bytes", "heap_used_bytes", JobAttemptsMetric,
		"read_bytes_per_s"})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 50; round++ {
		q := &SeriesQuery{Scope: ScopeJob, JobID: "j", From: 100_000, To: 100_000 + int64(10+r.IntN(200))*1000,
			Step: int64(1+r.IntN(5)) * 1000}
		acc := NewJobAccumulator(q, metrics)
		want := newJobAccumulator(q, metrics, AttemptColumns) // (each attempt added as Add did before)
		for a := 0; a < 40; a++ {
			p, start := randomAttemptPoints(r, q)
			acc.Add(p, start)
			addAlone(want, p, start)
		}
		got, exp := NewSeriesResult(q, metrics), NewSeriesResult(q, metrics)
		acc.Fill(got)
		want.Fill(exp)
		filled := 0
		for mi := range metrics {
			for b := range got.Times {
				g, e := got.Series[mi].Values[b], exp.Series[mi].Values[b]
				if math.Float64bits(float64(g)) != math.Float64bits(float64(e)) {
					t.Fatalf("round %d: %s bucket %d: %v, alone %v", round, metrics[mi].Name, b, g, e)
				}
				if !math.IsNaN(float64(e)) {
					filled++
				}
			}
		}
		if filled == 0 {
			t.Fatalf("round %d: no bucket has a value", round)
		}
	}
}

// addAlone is what JobAccumulator.Add did before it kept its buckets:
// each metric's buckets made afresh, every bucket looked at.
func addAlone(j *JobAccumulator, p *Points, start int64) {
	n := len(j.count)
	seen := make([]bool, n) // the buckets the attempt has a sample in
	for _, t := range p.Times {
		if b := int((t - j.q.From) / j.q.Step); t >= j.q.From && t < j.q.To && b < n {
			seen[b] = true
		}
	}
	for mi, r := range j.metrics {
		if r.m.Name == JobAttemptsMetric {
			continue
		}
		a := newAccum(n)
		bucketize(j.q, p, r, start, a)
		v := a.gauge
		if r.m.Rate {
			v = a.inc
		}
		for b := range n {
			seen[b] = seen[b] || a.has[b]
			j.has[mi][b] = j.has[mi][b] || a.has[b]
			if a.has[b] {
				j.sums[mi][b] += v[b]
			}
		}
	}
	for b := range n {
		if seen[b] {
			j.count[b]++
		}
	}
}

// randomAttemptPoints is an attempt's samples, about a second apart,
// somewhere around q's window, and its start.
func randomAttemptPoints(r *rand.Rand, q *SeriesQuery) (*Points, int64) {
	cols := AttemptColumns
	p := &Points{Cols: make([][]int64, len(cols)), Absent: make([][]bool, len(cols)), Has: make([]bool, len(cols))}
	span := q.To - q.From
	start := q.From - span/4 + r.Int64N(span*3/2)
	n := r.IntN(40)
	for j := range cols {
		p.Has[j] = r.IntN(5) > 0
		p.Cols[j] = make([]int64, n)
		p.Absent[j] = make([]bool, n)
	}
	t := start
	v := make([]int64, len(cols))
	for i := 0; i < n; i++ {
		t += 500 + r.Int64N(1000)
		p.Times = append(p.Times, t)
		for j := range cols {
			if r.IntN(20) == 0 {
				v[j] = 0 // a reset
			}
			v[j] += r.Int64N(5000)
			p.Cols[j][i] = v[j]
			p.Absent[j][i] = r.IntN(10) == 0
		}
	}
	if r.IntN(3) == 0 {
		start = 0 // not known
	}
	return p, start
}
