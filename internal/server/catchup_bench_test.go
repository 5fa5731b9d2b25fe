package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/ship"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
)

// BenchmarkClickHouseCatchUp is issue 25's latency on ClickHouse (one
// server, a commit at most every second, InsertEvery): how fast batches
// that waited are stored.
//
//   - spool: one agent's shipper (package ship) with 300 batches in its
//     spool (25 minutes of a loadgen node's, made while no server
//     answered) replays them to a server: batches/s (target: 20).
//   - loadgen-6x6m: a loadgen run of 6 nodes, 6 simulated minutes (432
//     batches), 2 requests in flight, as `taskscope loadgen --nodes 6
//     --duration 6m --concurrency 2` sends it: its time (target: 30 s).
//
// Before lists, each batch waited for a paced commit: one agent replaying
// stored about one batch a second, the loadgen run took more than 400 s.
//
//	go test -run '^$' -bench ClickHouseCatchUp -benchtime 1x ./internal/server/
func BenchmarkClickHouseCatchUp(b *testing.B) {
	b.Run("spool", func(b *testing.B) {
		for range b.N {
			srv := chServer(b)
			cfg := loadgen.Config{Nodes: 1, Slots: 8, BatchTicks: 5, Seed: 3, Start: time.Now().Add(-2 * time.Hour)}
			g := loadgen.NewGenerator(cfg)
			sh, err := ship.New(ship.Config{URLs: []string{srv.URL()}, SpoolDir: b.TempDir(), Host: "node-0"})
			if err != nil {
				b.Fatal(err)
			}
			const n = 300
			for range n {
				if err := sh.Enqueue(g.Next()[0]); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			b.ResetTimer()
			t0 := time.Now()
			go sh.Run(ctx)
			err = sh.Flush(context.Background())
			elapsed := time.Since(t0)
			b.StopTimer()
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			if st := sh.Stats(); st.Sent != n || st.Duplicates != 0 || st.Rejected != 0 {
				b.Fatalf("shipper stats %+v", st)
			}
			b.ReportMetric(n/elapsed.Seconds(), "batches/s")
			b.Logf("%d spooled batches replayed in %s: %.1f batches/s; commits: %s", n, elapsed.Round(time.Millisecond),
				n/elapsed.Seconds(), commitStats(srv.URL()))
		}
	})
	b.Run("loadgen-6x6m", func(b *testing.B) {
		for range b.N {
			srv := chServer(b)
			cfg := loadgen.Config{URL: srv.URL(), Nodes: 6, Slots: 8, BatchTicks: 5, Seed: 3, Duration: 6 * time.Minute,
				Start: time.Now().Add(-2 * time.Hour), Concurrency: 2, MaxList: 64}
			bodies := loadgen.Prepare(cfg)
			b.ResetTimer()
			res, err := loadgen.SendAll(context.Background(), cfg, bodies)
			b.StopTimer()
			if err != nil || res.Rejected > 0 || res.Batches != int64(len(bodies)) {
				b.Fatalf("%+v, %v", res, err)
			}
			b.ReportMetric(res.Elapsed.Seconds(), "s")
			b.ReportMetric(float64(res.Acks.P99.Microseconds())/1000, "ack-p99-ms")
			b.Logf("%d batches in %s; acknowledgements %s; commits: %s", res.Batches, res.Elapsed.Round(time.Millisecond), res.Acks,
				commitStats(srv.URL()))
		}
	})
}

// chServer is a server on a ClickHouse store of its own (one server, the
// default InsertEvery), both stopped at the end.
func chServer(b *testing.B) *Server {
	ch := chtest.Start(b)
	st, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: ch.URL() + "?database=catchup"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Shutdown(context.Background()) })
	return srv
}
