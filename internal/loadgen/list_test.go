package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/ingest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestSendLists: a sender that finds bodies waiting sends them as lists
// (at most MaxList), and the server stores every batch once, each
// agent's in order.
func TestSendLists(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := ingest.NewPipeline(st, ingest.PipelineOptions{})
	defer p.Close()
	h := ingest.NewHandler(p, ingest.HandlerOptions{})
	var lists, singles atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == wire.ListContentType {
			lists.Add(1)
		} else {
			singles.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cfg := Config{Nodes: 6, Slots: 2, Duration: 6 * time.Minute, Seed: 5, Start: time.Unix(1_700_000_000, 0), Concurrency: 2,
		MaxList: 64, URL: srv.URL}
	bodies := Prepare(cfg)
	res, err := SendAll(context.Background(), cfg, bodies)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for _, b := range bodies {
		samples += int64(b.Samples)
	}
	if res.Batches != int64(len(bodies)) || res.Samples != samples || res.Duplicates != 0 || res.Rejected != 0 {
		t.Errorf("result %+v, want %d batches of %d samples", res, len(bodies), samples)
	}
	if u, err := st.Usage(context.Background()); err != nil || u.Samples != samples {
		t.Errorf("store holds %d samples (%v), want %d", u.Samples, err, samples)
	}
	if n := lists.Load() + singles.Load(); lists.Load() == 0 || n > int64(len(bodies))/2 {
		t.Errorf("%d lists and %d batches alone for %d batches", lists.Load(), singles.Load(), len(bodies))
	}
	t.Logf("%d batches in %d lists and %d requests of one", len(bodies), lists.Load(), singles.Load())
}
