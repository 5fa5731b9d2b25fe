package store

import (
	"math"
	"testing"
)

// TestPointsKeptAsWhole: samples read in windows one after another
// (Narrow, Keep; Condense for one bucket) compute what the samples read
// at once compute, bucket for bucket, with columns absent in some windows
// and values missing in others; and the counts tell a sample stored late
// (Complete) and one stored twice (Start).
func TestPointsKeptAsWhole(t *testing.T) {
	schema := AttemptColumns
	q := SeriesQuery{Scope: ScopeAttempt, AttemptID: "a", Metrics: []string{"rss_bytes", "heap_used_bytes"}, From: 1000}
	_, cols, err := PointsMetrics(&q)
	if err != nil {
		t.Fatal(err)
	}
	rss, heap := ColumnIndex(schema, "rss_kb"), ColumnIndex(schema, "heap_used_kb")
	// 60 samples a second apart; heap absent before 20 s and missing at
	// each seventh sample; rss missing at 33 s.
	all := &Points{Cols: make([][]int64, len(schema)), Absent: make([][]bool, len(schema)), Has: make([]bool, len(schema))}
	all.Has[rss], all.Has[heap] = true, true
	all.Absent[rss], all.Absent[heap] = make([]bool, 60), make([]bool, 60)
	for j := range schema {
		all.Cols[j] = make([]int64, 60)
	}
	for i := range 60 {
		all.Times = append(all.Times, 1000+int64(i)*1000)
		all.Cols[rss][i] = int64(100 + (i*37)%50)
		all.Cols[heap][i] = int64(10 + (i*13)%20)
		all.Absent[heap][i] = i < 20 || i%7 == 0
		all.Absent[rss][i] = i == 33
	}
	window := func(from, to int64) *SeriesPoints {
		sp := &SeriesPoints{Cols: cols}
		var before, after int
		// (Chunks before 20 s have no heap column at all.)
		all.Has[heap] = to > 20_000
		sp.Points, before, after = Narrow(all, schema, cols, from, to)
		all.Has[heap] = true
		sp.Before, sp.After = int64(before), int64(after)
		sp.Stored = int64(len(all.Times))
		return sp
	}
	// (The first window has no heap at all.)
	kept := window(1000, 15_000)
	if !kept.Start() || kept.Points.Has[1] {
		t.Fatalf("first window: start %+v", kept)
	}
	for _, to := range []int64{15_000, 15_500, 31_000, 44_000, 61_000} {
		if to > 15_000 {
			later := window(q.To, to)
			if !kept.Complete(later) {
				t.Fatalf("window to %d: not complete", to)
			}
			kept.Keep(later)
		}
		q.To = to
		for _, step := range []int64{250, 1000, 3333, to - 1000} {
			q.Step = step
			whole := window(1000, to)
			want, err := whole.Compute(&q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kept.Compute(&q)
			if err != nil {
				t.Fatal(err)
			}
			for m := range want.Series {
				for b, w := range want.Series[m].Values {
					g := got.Series[m].Values[b]
					if g != w && !(math.IsNaN(float64(g)) && math.IsNaN(float64(w))) {
						t.Fatalf("to %d, step %d, %s bucket %d: kept %v, whole %v", to, step, want.Series[m].Metric, b, g, w)
					}
				}
			}
		}
	}
	// One bucket: condensed to one sample, and kept on.
	one := window(1000, 30_000)
	one.Start()
	one.Condense(nil)
	if one.Len() != 1 {
		t.Fatalf("condensed to %d samples", one.Len())
	}
	later := window(30_000, 61_000)
	if !one.Complete(later) {
		t.Fatal("condensed: not complete")
	}
	one.Keep(later)
	q.To, q.Step = 61_000, 60_000
	want, _ := window(1000, 61_000).Compute(&q)
	got, _ := one.Compute(&q)
	for m := range want.Series {
		if g, w := got.Series[m].Values[0], want.Series[m].Values[0]; g != w {
			t.Errorf("condensed, %s: %v, whole %v", want.Series[m].Metric, g, w)
		}
	}
	// A sample stored late, before the window; one stored twice.
	late := window(61_000, 61_000)
	late.Stored++
	if kept.Complete(late) {
		t.Error("a sample stored late: complete")
	}
	twice := window(1000, 20_000)
	twice.Stored++
	rest := window(20_000, 61_000)
	rest.Stored++
	if !twice.Start() || !twice.Complete(rest) {
		t.Error("a sample stored twice from the start: its later reads not complete")
	}
	short := window(1000, 20_000)
	short.Stored--
	if short.Start() {
		t.Error("fewer samples counted than read: kept")
	}
}
