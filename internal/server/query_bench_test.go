package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

func benchServer(tb testing.TB, st *duckdb.Store) *Server {
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	return srv
}

func benchGet(b *testing.B, url string) {
	c := &http.Client{Timeout: time.Minute}
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %v %s", url, err, resp.Status)
		}
		size = len(body)
	}
	b.StopTimer()
	b.ReportMetric(float64(size), "bytes/answer")
}

// BenchmarkQueryJob times GET /api/v1/jobs/{id} over HTTP (store, API,
// JSON, loopback) of a job of 10,000 attempts (1 minute each, a wrapper and
// a JVM sampled every second, on 100 nodes). Target: 100 ms.
//
//	go test -run '^$' -bench QueryJob -benchtime 20x ./internal/server/
func BenchmarkQueryJob(b *testing.B) {
	st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	start := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 100, Slots: 8, BatchTicks: 5, Seed: 5, Start: start})
	job, end := g.AddJob(10000, 60)
	storetest.Fill(b, st, g, start, end+5)
	srv := benchServer(b, st)
	defer srv.Shutdown(context.Background())
	benchGet(b, srv.URL()+"/api/v1/jobs/"+url.PathEscape(job))
}

// BenchmarkQueryAttemptSeries times GET .../attempts/{id}/series over HTTP
// of an attempt (a reduce: wrapper and JVM sampled every second) over the
// hour it ran, on a cluster of 50 nodes running jobs beside it:
// points-300 as the UI asks (15 s buckets), points-3600 every second.
// Target: 20 ms.
//
//	go test -run '^$' -bench QueryAttemptSeries -benchtime 50x ./internal/server/
func BenchmarkQueryAttemptSeries(b *testing.B) {
	st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 50, Slots: 8, BatchTicks: 5, Seed: 6, Start: start})
	storetest.Fill(b, st, g, start, 600)
	job, att := g.AddAttempt(3600)
	storetest.Fill(b, st, g, start, g.Tick()+3600+5)
	srv := benchServer(b, st)
	defer srv.Shutdown(context.Background())
	base := srv.URL() + "/api/v1/jobs/" + url.PathEscape(job) + "/attempts/" + url.PathEscape(att) +
		"/series?metrics=cpu_percent,rss_bytes,read_bytes_per_s"
	for _, pts := range []string{"300", "3600"} {
		b.Run("points-"+pts, func(b *testing.B) { benchGet(b, base+"&points="+pts) })
	}
}
