package wire

import (
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The batches of the benchmarks: what one agent sends about 50 task
// processes, 10 samples each, 25 metrics per sample.
func BenchmarkMarshal(b *testing.B) {
	batch := realisticBatch(50, 10)
	buf := Marshal(nil, batch)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = Marshal(buf[:0], batch)
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	data := Marshal(nil, realisticBatch(50, 10))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unmarshal(data, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	batch := realisticBatch(50, 10)
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(batch); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSanitizeText(b *testing.B) {
	clean := []byte("/usr/lib/jvm/java-8-openjdk-amd64/bin/java -Xmx820m org.apache.hadoop.mapred.YarnChild 10.1.2.3 39417 attempt_1700000000000_0042_m_000003_0 5")
	b.ReportAllocs()
	for b.Loop() {
		_ = SanitizeText(clean)
	}
}

// BenchmarkZstdLevels compresses a batch as the agent does (package ship:
// one encoder, concurrency 1, a 1 MiB window, lower memory) at two levels:
// "first" makes the encoder and compresses once (an agent's start), "steady"
// compresses again with the same encoder. Fastest is what the agent uses:
// the same size within 1%, a third less CPU, a fifth of the start.
//
//	go test -run '^$' -bench ZstdLevels -benchmem -count 6 ./internal/wire/
func BenchmarkZstdLevels(b *testing.B) {
	raw := Marshal(nil, realisticBatch(50, 5))
	enc := func(lvl zstd.EncoderLevel) *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	for _, lvl := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault} {
		b.Run("level="+lvl.String()+"/first", func(b *testing.B) {
			b.ReportAllocs()
			var out []byte
			for b.Loop() {
				out = enc(lvl).EncodeAll(raw, nil)
			}
			b.ReportMetric(float64(len(out))/float64(len(raw)), "ratio")
		})
		b.Run("level="+lvl.String()+"/steady", func(b *testing.B) {
			e := enc(lvl)
			b.ReportAllocs()
			var out []byte
			for b.Loop() {
				out = e.EncodeAll(raw, out[:0])
			}
			b.ReportMetric(float64(len(out))/float64(len(raw)), "ratio")
		})
	}
}
