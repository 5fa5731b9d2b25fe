package chunk

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// Format 3 gives back what it was given: every length, absent values
// (none, a few, most, all), extremes, constant and noisy columns.
func TestPackedRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var w Writer
	var dc Decoder
	var got Chunk
	for trial := 0; trial < 400; trial++ {
		n := []int{0, 1, 2, 3, 31, 32, 33, 65, 100, 600, 3600}[trial%11]
		c := sample(n, r)
		for k := range c.Columns {
			col := &c.Columns[k]
			switch r.IntN(5) {
			case 0:
				col.Absent = make([]bool, n)
				for i := range col.Absent {
					col.Absent[i] = r.IntN(3) == 0
				}
			case 1:
				col.Absent = make([]bool, n)
				for i := range col.Absent {
					col.Absent[i] = r.IntN(9) != 0
				}
			case 2:
				col.Absent = make([]bool, n)
				for i := range col.Absent {
					col.Absent[i] = true
				}
			}
			if r.IntN(7) == 0 && n > 0 { // an outlier: a quotient past the escape
				col.Values[r.IntN(n)] = r.Int64() - math.MaxInt64/2
			}
		}
		normal(c)
		data := w.Encode(nil, c, Packed)
		if data[0] != versionPacked {
			t.Fatalf("version %d", data[0])
		}
		if m, ok := Samples(data); !ok || m != n {
			t.Fatalf("Samples = %d, %v; want %d", m, ok, n)
		}
		want, _ := Decode(Encode(nil, c, false))
		one, err := Decode(data)
		if err != nil {
			t.Fatalf("trial %d (n %d): %v", trial, n, err)
		}
		if !reflect.DeepEqual(normal(one), normal(want)) {
			t.Fatalf("trial %d (n %d): round trip differs", trial, n)
		}
		// Decoded into what the last trial left: the same (but for empty
		// slices that are not nil).
		if err := dc.DecodeTo(data, &got); err != nil {
			t.Fatalf("trial %d (n %d): %v", trial, n, err)
		}
		if n > 0 && !reflect.DeepEqual(normal(&got), one) {
			t.Fatalf("trial %d (n %d): DecodeTo differs from Decode", trial, n)
		}
	}
	c := &Chunk{Times: []int64{math.MinInt64 / 4, 0, math.MaxInt64 / 4},
		Columns: []Column{{ID: 0, Values: []int64{math.MinInt64, math.MaxInt64, 0}},
			{ID: 63, Values: []int64{math.MaxInt64, math.MinInt64, -1}}}}
	if got, err := Decode(EncodeLevel(nil, c, Packed)); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("extremes: %v %+v", err, got)
	}
}

// A process's 10 minutes take fewer bytes packed than zstd makes of
// format 2, and a metric read every tenth sample costs a few bytes.
func TestPackedSmaller(t *testing.T) {
	c := processChunk(t, 600)
	times := c.Times
	packed, fast := len(EncodeLevel(nil, c, Packed)), len(EncodeLevel(nil, c, Fast))
	if packed >= fast {
		t.Errorf("packed %d bytes, format 2 with zstd %d", packed, fast)
	}
	one := func(col Column) int {
		return len(EncodeLevel(nil, &Chunk{Times: times, Columns: []Column{col}}, Packed)) -
			len(EncodeLevel(nil, &Chunk{Times: times}, Packed))
	}
	pss := c.Columns[4]
	if pss.Absent == nil {
		t.Fatal("column 4 has no absent values")
	}
	flat := Column{ID: 4, Values: make([]int64, 600), Absent: pss.Absent}
	if got := one(flat); got > 8 {
		t.Errorf("a constant read every tenth sample: %d bytes", got)
	}
}

// A decoder that wants some columns decodes a format 3 chunk up to the
// last of them and no further, in whatever order the writer put them
// (their values as a whole decode gives them); Want 0 decodes all, and a
// format 2 chunk is decoded whole whatever Want says.
func TestPackedWant(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	c := sample(300, r)
	// Written in the order 4, 1, 5, 0, 2, 3.
	cols := c.Columns
	c.Columns = []Column{cols[4], cols[1], cols[5], cols[0], cols[2], cols[3]}
	normal(c)
	var w Writer
	data := w.Encode(nil, c, Packed)
	whole, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		want uint64
		ids  []uint8
	}{
		{1 << 4, []uint8{4}},
		{1<<1 | 1<<4, []uint8{4, 1}},
		{1 << 0, []uint8{4, 1, 5, 0}},
		{1<<5 | 1<<4, []uint8{4, 1, 5}},
		{1 << 3, []uint8{4, 1, 5, 0, 2, 3}},
		{1 << 40, []uint8{4, 1, 5, 0, 2, 3}}, // (a column it does not have)
		{0, []uint8{4, 1, 5, 0, 2, 3}},
	} {
		dc := Decoder{Want: tc.want}
		var got Chunk
		if err := dc.DecodeTo(data, &got); err != nil {
			t.Fatalf("want %b: %v", tc.want, err)
		}
		var ids []uint8
		for _, col := range got.Columns {
			ids = append(ids, col.ID)
		}
		if !reflect.DeepEqual(ids, tc.ids) {
			t.Fatalf("want %b: columns %v, want %v", tc.want, ids, tc.ids)
		}
		part := *whole
		part.Columns = whole.Columns[:len(ids)]
		if !reflect.DeepEqual(normal(&got), normal(&part)) || !reflect.DeepEqual(got.Times, whole.Times) {
			t.Fatalf("want %b: the columns decoded differ from a whole decode's", tc.want)
		}
	}
	dc := Decoder{Want: 1 << 4}
	got, err := dc.Decode(Encode(nil, c, false))
	if err != nil || len(got.Columns) != 6 {
		t.Fatalf("format 2 with Want: %v, %d columns; want all 6", err, len(got.Columns))
	}
}
