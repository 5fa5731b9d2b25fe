package chunk

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func counters(id uint8) bool { return id%2 == 0 }

func sample(n int, r *rand.Rand) *Chunk {
	c := &Chunk{Times: make([]int64, n)}
	t := int64(1_700_000_000_000)
	for i := range c.Times {
		t += 1000 + r.Int64N(7)
		c.Times[i] = t
	}
	for id := uint8(0); id < 6; id++ {
		col := Column{ID: id, Counter: counters(id), Values: make([]int64, n)}
		var v int64
		for i := range col.Values {
			if col.Counter {
				v += r.Int64N(1000)
			} else {
				v = 4096 * (1000 + r.Int64N(50))
			}
			col.Values[i] = v
		}
		if id == 3 {
			col.Absent = make([]bool, n)
			for i := range col.Absent {
				col.Absent[i] = i%10 != 0
				if col.Absent[i] {
					col.Values[i] = 0
				}
			}
		}
		c.Columns = append(c.Columns, col)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 10, 100, 3600} {
		for _, z := range []bool{false, true} {
			c := sample(n, r)
			got, err := Decode(Encode(nil, c, z), counters)
			if err != nil {
				t.Fatalf("n=%d zstd=%v: %v", n, z, err)
			}
			if !reflect.DeepEqual(normal(got), normal(c)) {
				t.Fatalf("n=%d zstd=%v: round trip differs", n, z)
			}
		}
	}
}

func TestExtremes(t *testing.T) {
	c := &Chunk{Times: []int64{math.MinInt64 / 4, 0, math.MaxInt64 / 4},
		Columns: []Column{{ID: 0, Counter: true, Values: []int64{math.MinInt64, math.MaxInt64, 0}},
			{ID: 1, Values: []int64{math.MaxInt64, math.MinInt64, -1}}}}
	got, err := Decode(Encode(nil, c, false), counters)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("extremes: %v %+v", err, got)
	}
}

// A counter at a steady rate costs about one byte per value, a page-aligned
// gauge that barely moves less.
func TestCompact(t *testing.T) {
	n := 600
	c := &Chunk{Times: make([]int64, n)}
	cnt := Column{ID: 0, Counter: true, Values: make([]int64, n)}
	g := Column{ID: 1, Values: make([]int64, n)}
	for i := 0; i < n; i++ {
		c.Times[i] = int64(1_700_000_000_000 + i*1000)
		cnt.Values[i] = int64(i*850 + i%3)
		g.Values[i] = int64(4096 * (20000 + i%5))
	}
	c.Columns = []Column{cnt, g}
	b := Encode(nil, c, false)
	if per := float64(len(b)) / float64(n); per > 3.5 {
		t.Errorf("%.2f bytes per sample for 3 near-constant columns", per)
	}
}

func TestCorrupt(t *testing.T) {
	good := Encode(nil, sample(50, rand.New(rand.NewPCG(3, 4))), false)
	for i := 0; i < len(good); i++ {
		if _, err := Decode(good[:i], counters); err == nil {
			t.Fatalf("truncated at %d decoded", i)
		}
	}
	bad := append([]byte{}, good...)
	bad[0] = 9
	if _, err := Decode(bad, counters); err == nil {
		t.Fatal("bad version decoded")
	}
	if _, err := Decode(append(append([]byte{}, good...), 0), counters); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	f.Add(Encode(nil, sample(20, r), false))
	f.Add(Encode(nil, sample(5, r), true))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data, counters)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again, err := Decode(Encode(nil, c, false), counters)
		if err != nil {
			t.Fatalf("re-encoded chunk does not decode: %v", err)
		}
		if !reflect.DeepEqual(normal(again), normal(c)) {
			t.Fatal("re-encoded chunk differs")
		}
	})
}

// normal clears values under absent marks and drops all-false absent lists,
// which an encoding does not keep.
func normal(c *Chunk) *Chunk {
	for i := range c.Columns {
		col := &c.Columns[i]
		any := false
		for j, a := range col.Absent {
			if a {
				col.Values[j] = 0
				any = true
			}
		}
		if !any {
			col.Absent = nil
		}
	}
	return c
}
