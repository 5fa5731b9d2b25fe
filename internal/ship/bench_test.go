package ship

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkEnqueueSend: a batch queued with a spool and delivered to a
// server that answers at once, one after another (the agent's way: a batch
// every 5 ticks, the sender idle in between). It reports the CPU of this
// process per batch (getrusage: the shipper's and the server's, which does
// not change) beside the wall time (the fsyncs).
//
//	go test -run '^$' -bench EnqueueSend -count 8 ./internal/ship/
func BenchmarkEnqueueSend(b *testing.B) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hs.Close()
	s, err := New(Config{URLs: []string{hs.URL}, SpoolDir: b.TempDir(), Host: "node1"})
	if err != nil {
		b.Fatal(err)
	}
	go s.Run(b.Context())
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Enqueue(batch(250)); err != nil {
			b.Fatal(err)
		}
		if err := s.Flush(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
