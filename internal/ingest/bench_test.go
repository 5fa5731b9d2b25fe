package ingest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/wire"
)

// BenchmarkServeHTTP posts loadgen's batches (a node's 5 seconds: 8
// attempts, zstd as the agent sends them) to the handler, which decodes,
// validates and prepares each and waits for its commit into a real DuckDB
// store: the allocations of a request.
//
//	go test -run '^$' -bench ServeHTTP -benchmem ./internal/ingest/
func BenchmarkServeHTTP(b *testing.B) {
	r := newRig(b, rigOptions{})
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 4, Slots: 8, BatchTicks: 5, Seed: 2, Start: time.Now().Add(-time.Hour)})
	enc := loadgen.NewEncoder()
	var bodies []loadgen.Body
	for len(bodies) < 2000 {
		for _, bt := range g.Next() {
			bodies = append(bodies, enc.Encode(bt))
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body := bodies[i%len(bodies)]
		i++
		req := httptest.NewRequest(http.MethodPost, "/api/v1/ingest", bytes.NewReader(body.Data))
		req.Header.Set("Content-Type", wire.ContentType)
		req.Header.Set("Content-Encoding", "zstd")
		req.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		r.h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkBombs posts the hostile bodies of issue 16 to the handler, one
// at a time (each refused with 413), and a real batch written as a zstd
// stream (no content size) and as the agent writes it: what one request
// allocates (B/op) is the garbage that the collector's heap goal and the
// server's RSS follow under a burst of them.
//
//	go test -run '^$' -bench Bombs -benchmem -count 6 ./internal/ingest/
func BenchmarkBombs(b *testing.B) {
	r := newRig(b, rigOptions{})
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 2, Slots: 8, BatchTicks: 60, Seed: 2, Start: time.Now().Add(-time.Hour)})
	var raw []byte // the largest of a few batches (a node's minute)
	for range 20 {
		for _, bt := range g.Next() {
			bt.AgentID = "bench-bombs"
			if m := wire.Marshal(nil, bt); len(m) > len(raw) {
				raw = m
			}
		}
	}
	b.Logf("a batch of %d bytes", len(raw))
	for _, c := range []struct {
		name, enc string
		body      []byte
		code      int
	}{
		{"zstd-stream-bomb", "zstd", zstdStream(make([]byte, 1<<20), 1024), http.StatusRequestEntityTooLarge},
		{"zstd-frames-bomb", "zstd", zstdBomb(b), http.StatusRequestEntityTooLarge},
		{"gzip-bomb", "gzip", gzipBomb(b), http.StatusRequestEntityTooLarge},
		{"zstd-stream-batch", "zstd", zstdStream(raw, 1), http.StatusOK},
		{"zstd-batch", "zstd", zstdBytes(b, raw), http.StatusOK},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/api/v1/ingest", bytes.NewReader(c.body))
				req.Header.Set("Content-Type", wire.ContentType)
				req.Header.Set("Content-Encoding", c.enc)
				req.Header.Set("Authorization", "Bearer "+token)
				w := httptest.NewRecorder()
				r.h.ServeHTTP(w, req)
				// A batch stored before is a duplicate: 200 all the same.
				if w.Code != c.code {
					b.Fatalf("%d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
