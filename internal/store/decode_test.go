package store

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/store/chunk"
)

// Chunks in time order are decoded by appending each to the points (the
// fast path); the points are those the general merge makes of them, with
// columns that only some chunks have, absent values, empty chunks; and
// chunks out of order or overlapping still merge. A Decoder that decodes
// one series after another (in the arrays of the one before) gives the
// same points, the schema changing between series too.
func TestDecodeInOrderSameAsMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var shared Decoder
	for trial := 0; trial < 500; trial++ {
		cols := SampleColumns
		if trial%3 == 1 {
			cols = AttemptColumns
		}
		var chunks [][]byte
		tm := int64(1_700_000_000_000)
		for k := 0; k < 1+r.IntN(12); k++ {
			n := r.IntN(8)
			if r.IntN(10) == 0 {
				n = r.IntN(600)
			}
			c := &chunk.Chunk{}
			for i := 0; i < n; i++ {
				tm += 1 + r.Int64N(2000)
				c.Times = append(c.Times, tm)
			}
			for j := range cols {
				if r.IntN(4) == 0 {
					continue
				}
				col := chunk.Column{ID: uint8(j), Values: make([]int64, n)}
				v := r.Int64N(1 << 30)
				for i := range col.Values {
					v += r.Int64N(100)
					col.Values[i] = v
				}
				if r.IntN(3) == 0 {
					col.Absent = make([]bool, n)
					for i := range col.Absent {
						if col.Absent[i] = r.IntN(3) == 0; col.Absent[i] {
							col.Values[i] = 0
						}
					}
				}
				c.Columns = append(c.Columns, col)
			}
			chunks = append(chunks, chunk.Encode(nil, c, r.IntN(2) == 0))
		}
		if trial%5 == 4 {
			// Out of order, or overlapping: the fast path must step aside.
			r.Shuffle(len(chunks), func(i, j int) { chunks[i], chunks[j] = chunks[j], chunks[i] })
			chunks = append(chunks, chunks[r.IntN(len(chunks))])
		}
		got, err := Decode(chunks, cols)
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeMerge(chunks, cols)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: %d chunks: the points differ", trial, len(chunks))
		}
		again, err := shared.Decode(chunks, cols)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, want) {
			t.Fatalf("trial %d: %d chunks: the points a reused Decoder made differ", trial, len(chunks))
		}
	}
}

// BenchmarkDecode decodes what compaction merges for one process: 120
// fresh chunks of 5 samples (10 minutes), by the general merge and by
// Decode (the in-order path), in one binary so that runs alternate:
//
//	go test -run '^$' -bench 'Decode$' -count 10 ./internal/store/ | benchstat -col /impl -
func BenchmarkDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	var chunks [][]byte
	tm := int64(1_700_000_000_000)
	vals := make([]int64, len(SampleColumns))
	for k := 0; k < 120; k++ {
		c := &chunk.Chunk{}
		for i := 0; i < 5; i++ {
			tm += 1000
			c.Times = append(c.Times, tm)
		}
		for j := range SampleColumns {
			col := chunk.Column{ID: uint8(j), Values: make([]int64, 5)}
			for i := range col.Values {
				vals[j] += 10 * r.Int64N(50)
				col.Values[i] = vals[j]
			}
			c.Columns = append(c.Columns, col)
		}
		chunks = append(chunks, chunk.Encode(nil, c, false))
	}
	for _, impl := range []struct {
		name string
		fn   func([][]byte, []StoredColumn) (*Points, error)
	}{{"merge", decodeMerge}, {"inorder", Decode}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := impl.fn(chunks, SampleColumns); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A chunk whose times fall within an earlier chunk's span (a sample that
// came late) is merged into it by time, not read as duplicates of it;
// a time two chunks hold is read once, with the value of the chunk that
// starts first.
func TestDecodeChunkWithinAnother(t *testing.T) {
	cols := []StoredColumn{{Name: "v"}}
	enc := func(times, values []int64) []byte {
		return chunk.Encode(nil, &chunk.Chunk{Times: times, Columns: []chunk.Column{{ID: 0, Values: values}}}, false)
	}
	p, err := Decode([][]byte{enc([]int64{10, 30, 50}, []int64{1, 3, 5}), enc([]int64{20, 30, 60}, []int64{2, 9, 6})}, cols)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{10, 20, 30, 50, 60}; !reflect.DeepEqual(p.Times, want) {
		t.Errorf("times %v, want %v", p.Times, want)
	}
	if want := []int64{1, 2, 3, 5, 6}; !reflect.DeepEqual(p.Cols[0], want) {
		t.Errorf("values %v, want %v", p.Cols[0], want)
	}
}
