package chunk

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func sample(n int, r *rand.Rand) *Chunk {
	c := &Chunk{Times: make([]int64, n)}
	t := int64(1_700_000_000_000)
	for i := range c.Times {
		t += 1000 + r.Int64N(7)
		c.Times[i] = t
	}
	for id := uint8(0); id < 6; id++ {
		col := Column{ID: id, Values: make([]int64, n)}
		var v int64
		for i := range col.Values {
			if id%2 == 0 {
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
			got, err := Decode(Encode(nil, c, z))
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
		Columns: []Column{{ID: 0, Values: []int64{math.MinInt64, math.MaxInt64, 0}},
			{ID: 1, Values: []int64{math.MaxInt64, math.MinInt64, -1}}}}
	got, err := Decode(Encode(nil, c, false))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("extremes: %v %+v", err, got)
	}
}

// A counter at a steady rate costs about one byte per value, a page-aligned
// gauge that barely moves less.
func TestCompact(t *testing.T) {
	n := 600
	c := &Chunk{Times: make([]int64, n)}
	cnt := Column{ID: 0, Values: make([]int64, n)}
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

// Each column gets the cheaper of delta and delta of delta; a constant one
// costs its first value only; differences share a divisor.
func TestEncodingChoice(t *testing.T) {
	n := 300
	r := rand.New(rand.NewPCG(7, 8))
	times := make([]int64, n)
	steady, noisy, walk, flat, pages := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	var s, no, w, p int64 = 0, 0, 1 << 30, 4096 * 1000
	for i := 0; i < n; i++ {
		times[i] = int64(1_700_000_000_000 + i*1000)
		s += 600
		no += r.Int64N(100000)
		w += r.Int64N(2001) - 1000
		p += 4096 * (r.Int64N(9) - 4)
		steady[i], noisy[i], walk[i], flat[i], pages[i] = s, no, w, 77, p
	}
	size := func(v []int64) int {
		c := &Chunk{Times: times, Columns: []Column{{ID: 0, Values: v}}}
		base := len(Encode(nil, &Chunk{Times: times}, false))
		return len(Encode(nil, c, false)) - base
	}
	if got := size(steady); got > 8 {
		t.Errorf("steady counter: %d bytes for %d values", got, n)
	}
	if got := size(flat); got > 5 {
		t.Errorf("constant column: %d bytes", got)
	}
	// Noisy increments of up to 1e5: 3 bytes each as deltas (dod would need more).
	if got := size(noisy); got > 3*n+8 {
		t.Errorf("noisy counter: %d bytes for %d values", got, n)
	}
	if got := size(walk); got > 2*n+8 {
		t.Errorf("random walk: %d bytes for %d values", got, n)
	}
	// Page-sized steps: the divisor leaves one byte per value.
	if got := size(pages); got > n+8 {
		t.Errorf("page-aligned gauge: %d bytes for %d values", got, n)
	}
	for _, v := range [][]int64{steady, noisy, walk, flat, pages} {
		c := &Chunk{Times: times, Columns: []Column{{ID: 3, Values: v}}}
		got, err := Decode(Encode(nil, c, true))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: %v", err)
		}
	}
}

// Writer takes wire-style bitmaps and divisors directly.
func TestWriter(t *testing.T) {
	var w Writer
	times := []int64{1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000}
	w.Begin(times)
	w.Column(4, []int64{4096, 0, 8192, 8192, 0, 0, 0, 0, 12288}, []byte{0xf2, 0x00}, 1024)
	w.Column(7, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}, nil, 1)
	w.Column(9, []int64{5, 5, 5, 5, 5, 5, 5, 5, 5}, []byte{0, 0}, 1)
	c, err := Decode(w.Finish(nil, Best))
	if err != nil {
		t.Fatal(err)
	}
	want := &Chunk{Times: times, Columns: []Column{
		{ID: 4, Values: []int64{4, 0, 8, 8, 0, 0, 0, 0, 12}, Absent: []bool{false, true, false, false, true, true, true, true, false}},
		{ID: 7, Values: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{ID: 9, Values: []int64{5, 5, 5, 5, 5, 5, 5, 5, 5}},
	}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v", c)
	}
	// Used again, it allocates nothing.
	buf := make([]byte, 0, 1024)
	vals := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if a := testing.AllocsPerRun(100, func() {
		w.Begin(times)
		w.Column(1, vals, nil, 1)
		buf = w.Finish(buf[:0], None)
	}); a != 0 {
		t.Errorf("%v allocations per chunk", a)
	}
}

func TestCorrupt(t *testing.T) {
	for _, lvl := range []Level{None, Packed} {
		good := EncodeLevel(nil, sample(50, rand.New(rand.NewPCG(3, 4))), lvl)
		for i := 0; i < len(good); i++ {
			if _, err := Decode(good[:i]); err == nil {
				t.Fatalf("level %d: truncated at %d decoded", lvl, i)
			}
		}
		bad := append([]byte{}, good...)
		bad[0] = 9
		if _, err := Decode(bad); err == nil {
			t.Fatalf("level %d: bad version decoded", lvl)
		}
		if _, err := Decode(append(append([]byte{}, good...), 0)); err == nil {
			t.Fatalf("level %d: trailing byte accepted", lvl)
		}
	}
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	f.Add(Encode(nil, sample(20, r), false))
	f.Add(Encode(nil, sample(5, r), true))
	f.Add([]byte{2, 0, 0})
	f.Add([]byte{2, 3, 1, 4, 2, 8, 8, 0, 4, 6})
	f.Add(EncodeLevel(nil, sample(20, r), Packed))
	f.Add(EncodeLevel(nil, sample(70, r), Packed))
	f.Add([]byte{3, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		n, known := Samples(data)
		c, err := Decode(data)
		if err != nil {
			return
		}
		// A header read alone says what the chunk holds.
		if known && n != len(c.Times) || !known && data[0]&flagZstd == 0 {
			t.Fatalf("Samples = %d, %v; the chunk holds %d", n, known, len(c.Times))
		}
		// What decodes re-encodes, in either format, to something that
		// decodes the same.
		for _, lvl := range []Level{None, Packed} {
			again, err := Decode(EncodeLevel(nil, c, lvl))
			if err != nil {
				t.Fatalf("re-encoded chunk (level %d) does not decode: %v", lvl, err)
			}
			if !reflect.DeepEqual(normal(again), normal(c)) {
				t.Fatalf("re-encoded chunk (level %d) differs", lvl)
			}
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

// DecodeTo gives what Decode gives whatever the chunk held before (more
// or fewer samples and columns, absent values where there were none), and
// allocates nothing once its slices are large enough.
func TestDecodeToReuses(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var dc Decoder
	var c Chunk
	for trial := 0; trial < 300; trial++ {
		n := 1 + r.IntN(700)
		src := sample(n, r)
		src.Columns = src.Columns[:r.IntN(len(src.Columns)+1)]
		for k := range src.Columns {
			if r.IntN(3) == 0 {
				col := &src.Columns[k]
				col.Absent = make([]bool, n)
				for i := range col.Absent {
					col.Absent[i] = r.IntN(3) == 0
				}
			}
		}
		data := Encode(nil, src, r.IntN(2) == 0)
		want, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := dc.DecodeTo(data, &c); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&c, want) {
			t.Fatalf("trial %d (n %d, %d columns): DecodeTo differs from Decode", trial, n, len(src.Columns))
		}
	}
	data := Encode(nil, sample(600, r), false) // (zstd's decoder has buffers of its own, in a sync.Pool)
	if err := dc.DecodeTo(data, &c); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(20, func() { dc.DecodeTo(data, &c) }); a != 0 {
		t.Errorf("DecodeTo again: %.0f allocations", a)
	}
}

// Samples reads the count from an uncompressed chunk's header, and does
// not guess for a compressed or damaged one.
func TestSamples(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 5, 600} {
		if got, ok := Samples(Encode(nil, sample(n, r), false)); !ok || got != n {
			t.Errorf("%d samples, uncompressed: Samples = %d, %v", n, got, ok)
		}
	}
	z := Encode(nil, sample(600, r), true)
	if z[0]&flagZstd == 0 {
		t.Fatal("600 samples did not compress")
	}
	if _, ok := Samples(z); ok {
		t.Error("Samples read a compressed header")
	}
	for _, bad := range [][]byte{nil, {version}, {version, 0xff}, {7, 5}, {version, 0xff, 0xff, 0x7f}} {
		if n, ok := Samples(bad); ok {
			t.Errorf("Samples(%v) = %d", bad, n)
		}
	}
}
