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
