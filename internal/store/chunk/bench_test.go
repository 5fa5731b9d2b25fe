package chunk

import (
	"math/rand/v2"
	"testing"
)

// processLike is a series shaped like a task JVM's: counters that grow by
// clock ticks (multiples of 10 ms), memory in KiB that moves by pages,
// gauges that hardly move, and columns that are often absent (PSS, read
// every few samples).
func processLike(n int, r *rand.Rand) (times []int64, cols [][]int64, absent [][]byte) {
	t := int64(1_700_000_000_000)
	for i := 0; i < n; i++ {
		t += 1000 + r.Int64N(3)
		times = append(times, t)
	}
	for c := 0; c < 25; c++ {
		v := r.Int64N(1 << 20)
		col := make([]int64, n)
		var bm []byte
		for i := range col {
			switch c % 5 {
			case 0: // CPU ms
				v += 10 * r.Int64N(100)
			case 1: // RSS KiB
				v += 4 * (r.Int64N(64) - 16)
			case 2: // threads
				if r.IntN(50) == 0 {
					v++
				}
			case 3: // bytes read
				v += 4096 * r.Int64N(300)
			case 4: // PSS, every 10th sample
				v = 4 * (1000 + r.Int64N(100))
			}
			col[i] = v
		}
		if c%5 == 4 {
			bm = make([]byte, (n+7)/8)
			for i := range col {
				if i%10 != 0 {
					bm[i/8] |= 1 << (i % 8)
				}
			}
		}
		cols = append(cols, col)
		absent = append(absent, bm)
	}
	return
}

// processChunk is processLike's series of n samples as a Chunk: format 3
// is made by Encode only, from a Chunk, as compaction does.
func processChunk(tb testing.TB, n int) *Chunk {
	tb.Helper()
	times, cols, absent := processLike(n, rand.New(rand.NewPCG(1, 2)))
	var w Writer
	w.Begin(times)
	for j := range cols {
		w.Column(uint8(j), cols[j], absent[j], 1)
	}
	c, err := Decode(w.Finish(nil, None))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func benchWriter(b *testing.B, n int, lvl Level) {
	var w Writer
	var buf []byte
	if lvl == Packed {
		c := processChunk(b, n)
		b.ReportAllocs()
		for b.Loop() {
			buf = w.Encode(buf[:0], c, Packed)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
		return
	}
	times, cols, absent := processLike(n, rand.New(rand.NewPCG(1, 2)))
	b.ReportAllocs()
	for b.Loop() {
		w.Begin(times)
		for j := range cols {
			w.Column(uint8(j), cols[j], absent[j], 1)
		}
		buf = w.Finish(buf[:0], lvl)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
}

// BenchmarkWriterFresh is what ingest does to every series of a batch (5
// samples, no zstd); BenchmarkWriterMerged what compaction does to a
// series' 10 minutes, at each zstd level and in format 3 (packed:
// compaction's since 2026-12-07; Fast before).
//
//	go test -run '^$' -bench Writer ./internal/store/chunk/
func BenchmarkWriterFresh(b *testing.B) { benchWriter(b, 5, None) }
func BenchmarkWriterMerged(b *testing.B) {
	for _, l := range []struct {
		name string
		lvl  Level
	}{{"none", None}, {"fast", Fast}, {"default", Default}, {"better", Better}, {"packed", Packed}} {
		b.Run(l.name, func(b *testing.B) { benchWriter(b, 600, l.lvl) })
	}
}

func benchDecode(b *testing.B, n int, lvl Level) {
	var data []byte
	if lvl == Packed {
		data = EncodeLevel(nil, processChunk(b, n), Packed)
	} else {
		times, cols, absent := processLike(n, rand.New(rand.NewPCG(1, 2)))
		var w Writer
		w.Begin(times)
		for j := range cols {
			w.Column(uint8(j), cols[j], absent[j], 1)
		}
		data = w.Finish(nil, lvl)
	}
	var d Decoder
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
}

// BenchmarkDecodeFresh and BenchmarkDecodeMerged decode those chunks
// (compaction decodes fresh ones; queries merged ones).
func BenchmarkDecodeFresh(b *testing.B)  { benchDecode(b, 5, None) }
func BenchmarkDecodeMerged(b *testing.B) { benchDecode(b, 600, Default) }

// BenchmarkDecodePacked decodes format 3's chunk of the same series
// (compaction's since 2026-12-07).
func BenchmarkDecodePacked(b *testing.B) { benchDecode(b, 600, Packed) }
