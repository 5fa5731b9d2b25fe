package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// benchStores opens the embedded store and ClickHouse (one server the
// benchmark starts), fills each with fill (the same data: fill makes its
// own generator of the same seed), and starts a server on each. The
// ClickHouse store inserts every millisecond at most, so that a fill of
// hundreds of rounds does not wait a second a commit.
func benchStores(b *testing.B, fill func(st store.Store)) []benchTarget {
	dst, err := duckdb.Open(duckdb.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dst.Close() })
	ch := chtest.Start(b)
	cst, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: ch.URL() + "?database=bench&log_queries=1",
		InsertEvery: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cst.Close() })
	// What the ClickHouse server spent on each kind of read, from its
	// query log, once the benchmark is over.
	b.Cleanup(func() { logQueries(b, ch) })
	var out []benchTarget
	for _, t := range []struct {
		name string
		st   store.Store
	}{{"duckdb", dst}, {"clickhouse", cst}} {
		t0 := time.Now()
		fill(t.st)
		b.Logf("%s filled in %s", t.name, time.Since(t0).Round(time.Millisecond))
		srv, err := Start(Config{Listen: "127.0.0.1:0", Store: t.st, Analyzer: analysis.New(t.st), MaintainEvery: time.Hour,
			Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Shutdown(context.Background()) })
		out = append(out, benchTarget{t.name, srv.URL()})
	}
	return out
}

// benchTarget is a server of benchStores.
type benchTarget struct{ store, url string }

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
// a JVM sampled every second, on 100 nodes), on the embedded store and on
// ClickHouse (one server), with the same data (the answers compared).
// Target: 100 ms.
//
// Alternate the stores by running the benchmark several times (-count 1).
//
//	go test -run '^$' -bench QueryJob -benchtime 20x -benchmem ./internal/server/
func BenchmarkQueryJob(b *testing.B) {
	start := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	cfg := loadgen.Config{Nodes: 100, Slots: 8, BatchTicks: 5, Seed: 5, Start: start}
	var job string
	targets := benchStores(b, func(st store.Store) {
		g := loadgen.NewGenerator(cfg)
		var end int
		job, end = g.AddJob(10000, 60)
		storetest.Fill(b, st, g, start, end+5)
	})
	path := "/api/v1/jobs/" + url.PathEscape(job)
	sameAnswers(b, targets, path)
	for _, t := range targets {
		b.Run("store="+t.store, func(b *testing.B) { benchGet(b, t.url+path) })
	}
}

// BenchmarkQueryAttemptSeries times GET .../attempts/{id}/series over HTTP
// of an attempt (a reduce: wrapper and JVM sampled every second) over the
// hour it ran, on a cluster of 50 nodes running jobs beside it:
// points-300 as the UI asks (15 s buckets), points-3600 every second; on
// the embedded store and on ClickHouse (one server), with the same data.
// Target: 20 ms.
//
//	go test -run '^$' -bench QueryAttemptSeries -benchtime 50x -benchmem ./internal/server/
func BenchmarkQueryAttemptSeries(b *testing.B) {
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	cfg := loadgen.Config{Nodes: 50, Slots: 8, BatchTicks: 5, Seed: 6, Start: start}
	var job, att string
	targets := benchStores(b, func(st store.Store) {
		g := loadgen.NewGenerator(cfg)
		storetest.Fill(b, st, g, start, 600)
		job, att = g.AddAttempt(3600)
		storetest.Fill(b, st, g, start, g.Tick()+3600+5)
	})
	base := "/api/v1/jobs/" + url.PathEscape(job) + "/attempts/" + url.PathEscape(att) +
		"/series?metrics=cpu_percent,rss_bytes,read_bytes_per_s"
	for _, pts := range []string{"300", "3600"} {
		sameAnswers(b, targets, base+"&points="+pts)
		for _, t := range targets {
			b.Run("points="+pts+"/store="+t.store, func(b *testing.B) { benchGet(b, t.url+base+"&points="+pts) })
		}
	}
}

// sameAnswers fails the benchmark unless every target answers path alike
// (as TestAPISameOnClickHouse compares them).
func sameAnswers(b *testing.B, targets []benchTarget, path string) {
	var first any
	for i, t := range targets {
		var v any
		if err := get(t.url+path, &v); err != nil {
			b.Fatalf("%s: %s: %v", t.store, path, err)
		}
		if i == 0 {
			first = v
		} else if d := diff("", first, v); d != "" {
			b.Fatalf("%s: %s answers otherwise than %s: %s", path, t.store, targets[0].store, d)
		}
	}
}

// logQueries logs the reads a ClickHouse server answered with log_queries
// on, grouped by their first 70 characters: count, mean duration, rows and
// bytes read.
func logQueries(b *testing.B, ch *chtest.Server) {
	c, err := clickhouse.NewClient(ch.URL()+"?database=system", clickhouse.ClientOptions{})
	if err != nil {
		b.Error(err)
		return
	}
	ctx := context.Background()
	if err := c.Exec(ctx, "SYSTEM FLUSH LOGS", nil); err != nil {
		b.Errorf("query log: %v", err)
		return
	}
	rows, err := c.Query(ctx, `SELECT substring(replaceRegexpAll(query, '\\s+', ' '), 1, 70) AS q, count(), avg(query_duration_ms),
		avg(read_rows), avg(read_bytes) FROM system.query_log WHERE type = 2 AND query LIKE 'SELECT%' AND query NOT LIKE '%query_log%'
		GROUP BY q ORDER BY count() * avg(query_duration_ms) DESC LIMIT 12`, nil)
	if err != nil {
		b.Errorf("query log: %v", err)
		return
	}
	var out strings.Builder
	for rows.Next() {
		fmt.Fprintf(&out, "%-70s %6d × %6.1f ms, %9.0f rows, %11.0f B\n", rows.String(), rows.UInt64(), rows.Float64(), rows.Float64(), rows.Float64())
	}
	if err := rows.Err(); err != nil {
		b.Errorf("query log: %v", err)
	}
	b.Logf("ClickHouse's reads (count × mean time, rows and bytes read):\n%s", out.String())
}
