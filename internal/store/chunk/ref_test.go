package chunk

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// Writer.values writes what refValues writes, for columns of every shape:
// constant, steady steps, multiples of powers of two and of odd numbers,
// large and negative values and differences (math.MinInt64 among them),
// absent values, divided by 1, 1024 and 10^6.
func TestValuesMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	gens := []func(i int, v int64) int64{
		func(i int, v int64) int64 { return 7 },
		func(i int, v int64) int64 { return v + 1000 },
		func(i int, v int64) int64 { return v + 10*r.Int64N(100) },
		func(i int, v int64) int64 { return v + 4096*(r.Int64N(64)-16) },
		func(i int, v int64) int64 { return v + 12*r.Int64N(5) },
		func(i int, v int64) int64 { return v + 3*r.Int64N(1000)*r.Int64N(1000) },
		func(i int, v int64) int64 { return r.Int64() },
		func(i int, v int64) int64 { return -r.Int64N(1 << 40) },
		func(i int, v int64) int64 { return []int64{math.MinInt64, 0, math.MaxInt64, -1, 1}[r.IntN(5)] },
		func(i int, v int64) int64 { return v + 6*int64(i%3) },
		func(i int, v int64) int64 { return int64(1) << (r.IntN(62)) },
		func(i int, v int64) int64 { return 1_000_000 * (v/1_000_000 + r.Int64N(7)) },
	}
	var w Writer
	for trial := 0; trial < 20000; trial++ {
		n := 1 + r.IntN(40)
		if trial%100 == 0 {
			n = 1 + r.IntN(3000)
		}
		gen := gens[r.IntN(len(gens))]
		v := make([]int64, n)
		x := r.Int64N(1 << 30)
		for i := range v {
			x = gen(i, x)
			v[i] = x
		}
		var absent []byte
		if r.IntN(3) == 0 {
			absent = make([]byte, (n+7)/8)
			for i := 0; i < n; i++ {
				if r.IntN(4) == 0 {
					absent[i/8] |= 1 << (i % 8)
				}
			}
		}
		div := []int64{1, 1, 1024, 1_000_000}[r.IntN(4)]
		w.n = n
		got := w.values(nil, v, absent, div)
		want := refValues(nil, n, v, absent, div)
		if !bytes.Equal(got, want) {
			t.Fatalf("trial %d: n %d div %d values %v absent %v:\n got %x\nwant %x", trial, n, div, v, absent, got, want)
		}
	}
}

// refValues is Writer.values as it was first written, simply: the
// reference the faster one must match byte for byte.
func refValues(b []byte, n int, v []int64, absent []byte, div int64) []byte {
	var w struct{ diffs []int64 }
	gone := func(i int) bool { return absent != nil && absent[i/8]&(1<<(i%8)) != 0 }
	d := w.diffs[:0]
	first, prev, seen := int64(0), int64(0), false
	for i, x := range v {
		if gone(i) {
			continue
		}
		if div > 1 {
			x /= div
		}
		if !seen {
			first, seen = x, true
		} else {
			d = append(d, x-prev)
		}
		prev = x
	}
	w.diffs = d
	var g int64
	for _, x := range d {
		if x < 0 {
			x = -x
		}
		if x < 0 { // math.MinInt64
			g = 1
			break
		}
		for x != 0 {
			g, x = x, g%x
		}
		if g == 1 {
			break
		}
	}
	enc := encConst
	for _, x := range d {
		if x != d[0] {
			enc = encDelta
			break
		}
	}
	if enc == encConst {
		g = 0
	} else {
		var cd, cdd int
		var pd int64
		for _, x := range d {
			q := x / g
			cd += uvarintLen(zz(q))
			cdd += uvarintLen(zz(q - pd)) // the first difference is written as it is (pd = 0)
			pd = q
		}
		enc = encDelta
		if cdd < cd {
			enc = encDoD
		}
	}
	flags := byte(enc << encShift)
	if absent != nil {
		flags |= colAbsent
	}
	if g > 1 {
		flags |= colGCD
	}
	b = append(b, flags)
	if absent != nil {
		b = append(b, absent[:(n+7)/8]...)
	}
	if g > 1 {
		b = binary.AppendUvarint(b, uint64(g))
	}
	if !seen {
		return b
	}
	b = binary.AppendVarint(b, first)
	if enc == encConst {
		if len(d) > 0 {
			b = binary.AppendUvarint(b, zz(d[0]))
		}
		return b
	}
	var pd int64
	for i, x := range d {
		q := x
		if g > 1 {
			q = x / g
		}
		if enc == encDoD && i > 0 {
			b = binary.AppendUvarint(b, zz(q-pd))
		} else {
			b = binary.AppendUvarint(b, zz(q))
		}
		pd = q
	}
	return b
}

// BenchmarkValues compares Writer.values with refValues on a 600-sample
// process-like series (25 columns), in one binary so that runs alternate:
//
//	go test -run '^$' -bench Values -count 10 ./internal/store/chunk/ | benchstat -col /impl -
func BenchmarkValues(b *testing.B) {
	const n = 600
	_, cols, absent := processLike(n, rand.New(rand.NewPCG(1, 2)))
	var buf []byte
	b.Run("impl=ref", func(b *testing.B) {
		for b.Loop() {
			buf = buf[:0]
			for j := range cols {
				buf = refValues(buf, n, cols[j], absent[j], 1)
			}
		}
	})
	b.Run("impl=writer", func(b *testing.B) {
		w := Writer{n: n}
		for b.Loop() {
			buf = buf[:0]
			for j := range cols {
				buf = w.values(buf, cols[j], absent[j], 1)
			}
		}
	})
}
