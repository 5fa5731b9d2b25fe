package store

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// randomPoints are n samples a second of every sample column, each value
// absent one time in four, peaks and counters in any order.
func randomPoints(r *rand.Rand, n int) *Points {
	p := &Points{}
	for i := 0; i < n; i++ {
		p.Times = append(p.Times, int64(1000*(i+1)))
	}
	for range SampleColumns {
		col, absent := make([]int64, n), make([]bool, n)
		for i := range col {
			col[i], absent[i] = r.Int64N(1<<20)-100, r.IntN(4) == 0
		}
		p.Cols, p.Absent, p.Has = append(p.Cols, col), append(p.Absent, absent), append(p.Has, r.IntN(8) != 0)
	}
	return p
}

// upTo is p's samples up to time t.
func upTo(p *Points, t int64) *Points {
	n := 0
	for n < len(p.Times) && p.Times[n] <= t {
		n++
	}
	q := &Points{Times: p.Times[:n], Has: p.Has}
	for j := range p.Cols {
		q.Cols, q.Absent = append(q.Cols, p.Cols[j][:n]), append(q.Absent, p.Absent[j][:n])
	}
	return q
}

// A summary kept and added to with what came after is the summary of the
// whole: the points after the split are those of a read that overlaps it
// (chunks that began before), and Add leaves out those it has.
func TestProcessAggAddsUp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 200; k++ {
		p := randomPoints(r, r.IntN(50))
		var whole Process
		ProcessSummary(p, &whole)
		split := int64(r.IntN(52)) * 1000
		var a ProcessAgg
		a.Add(upTo(p, split), math.MinInt64)
		kept := a.Clone()
		a.Add(p, split)
		var got Process
		a.Fill(&got)
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("%d samples split at %d: added up %+v, whole %+v", len(p.Times), split, got, whole)
		}
		// The clone is the first part's still.
		var first ProcessAgg
		first.Add(upTo(p, split), math.MinInt64)
		if first.Last != nil && !reflect.DeepEqual(kept, &first) {
			t.Fatalf("a clone changed with the aggregate it was made of")
		}
	}
}
