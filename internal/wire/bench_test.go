package wire

import "testing"

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
