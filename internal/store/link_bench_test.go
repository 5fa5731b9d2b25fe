package store

import (
	"fmt"
	"testing"
)

// BenchmarkLinkAttempts10k links a job of 10,000 attempts (5,000 tasks,
// each with a retry), as Job does at every read of it.
func BenchmarkLinkAttempts10k(b *testing.B) {
	atts := make([]Attempt, 10000)
	for i := range atts {
		atts[i] = Attempt{AttemptID: fmt.Sprintf("attempt_1700000000000_0042_m_%06d_%d", i/2, i%2), Start: Time(1000 + i), End: Time(5000 + i)}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		LinkAttempts(atts)
	}
}
