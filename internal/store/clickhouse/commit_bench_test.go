package clickhouse

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

var benchQueryLog = flag.Bool("bench.querylog", false, "BenchmarkCommitNewAttempts: log the server's queries and print where its CPU went")

// BenchmarkCommitNewAttempts times a commit whose batch starts attempts the
// store has not met (with short tasks, most commits), beside `stored`
// attempts of earlier days already in the attempts table (and its index):
// what such a commit costs as retention fills the table. ns/op is a
// commit of one batch of 4 new attempts, 5 s of their samples.
//
// With -bench.querylog, the server logs its queries and each run prints
// where its CPU and time went (chtest.Server.QueryCPU).
func BenchmarkCommitNewAttempts(b *testing.B) {
	srv := chtest.StartWith(b, chtest.Options{QueryLog: *benchQueryLog})
	for _, stored := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("stored=%d", stored), func(b *testing.B) {
			s, batch := besideStored(b, srv, stored, "node1-commit")
			defer s.Close()
			if *benchQueryLog {
				srv.TruncateLogs(b)
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				bt := batch(i)
				b.StartTimer()
				storetest.Ingest(b, s, bt)
			}
			b.StopTimer()
			if *benchQueryLog {
				lines, err := srv.QueryCPU()
				if err != nil {
					b.Fatal(err)
				}
				b.Logf("b.N=%d:\n%s", b.N, strings.Join(lines, "\n"))
			}
		})
	}
}

// BenchmarkCommitBesideStored is BenchmarkCommitNewAttempts with its two
// cases alternated commit by commit (beside none, beside 1,000,000, in
// turns, the first of each round alternating too), on one server: the
// host's speed moves by up to 2× within a run, and the two cases timed
// one after the other read 0.48 to 1.35 of each other. It reports the
// median commit (and flush) of each and their ratio (issue 25's target:
// within 1.2×).
func BenchmarkCommitBesideStored(b *testing.B) {
	srv := chtest.StartWith(b, chtest.Options{})
	agent := fmt.Sprintf("node1-alternated-%d", b.N) // (b.N = 1 runs first, on the same databases)
	none, batchNone := besideStored(b, srv, 0, agent)
	defer none.Close()
	full, batchFull := besideStored(b, srv, 1_000_000, agent)
	defer full.Close()
	var dNone, dFull []time.Duration
	timed := func(s *Store, bt *wire.Batch) time.Duration {
		start := time.Now()
		storetest.Ingest(b, s, bt)
		return time.Since(start)
	}
	b.ResetTimer()
	for i := range b.N {
		bn, bf := batchNone(i), batchFull(i)
		if i%2 == 0 {
			dNone = append(dNone, timed(none, bn))
			dFull = append(dFull, timed(full, bf))
		} else {
			dFull = append(dFull, timed(full, bf))
			dNone = append(dNone, timed(none, bn))
		}
	}
	b.StopTimer()
	mNone, mFull := median(dNone), median(dFull)
	b.ReportMetric(float64(mNone.Microseconds())/1000, "ms-beside-none")
	b.ReportMetric(float64(mFull.Microseconds())/1000, "ms-beside-1M")
	b.ReportMetric(float64(mFull)/float64(mNone), "ratio")
}

// median is the median of ds (sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// besideStored opens a store (a database of its own on srv) beside
// `stored` attempts of 10 earlier days in the attempts table and its
// index (inserted once, merged), and says the batches to commit into it:
// batch i starts 4 attempts the store has not met, 5 s of their samples,
// of agent.
func besideStored(b *testing.B, srv *chtest.Server, stored int, agent string) (*Store, func(i int) *wire.Batch) {
	ctx := context.Background()
	db := fmt.Sprintf("commit%d", stored)
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=" + db, Clock: storetest.Clock, InsertEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	have, err := s.uint64s(ctx, "SELECT count() FROM "+s.read("attempt_index"))
	if err != nil {
		b.Fatal(err)
	}
	// (Once: the benchmark's function runs for b.N = 1 first, on the
	// same database.)
	if stored > 0 && have[0] == 0 {
		// Attempts of 10 earlier days, 20 to a job, as the store
		// writes them (the columns left out take their defaults).
		for _, q := range [...]struct{ table, sql string }{
			{"attempts", `INSERT INTO %s (day, job_key, attempt_id, attempt_key, version, job_id, type, ended)
			 SELECT toDate('2026-11-20') + intDiv(number, %d), cityHash64(intDiv(number, 20)),
			        concat('attempt_1700000000000_', toString(intDiv(number, 20)), '_m_', toString(modulo(number, 20)), '_0'),
			        cityHash64(number), 1, concat('job_1700000000000_', toString(intDiv(number, 20))), 'map', 1
			 FROM system.numbers LIMIT %d`},
			{"attempt_index", `INSERT INTO %s (day, attempt_key, attempt_id, job_key)
			 SELECT toDate('2026-11-20') + intDiv(number, %d), cityHash64(number),
			        concat('attempt_1700000000000_', toString(intDiv(number, 20)), '_m_', toString(modulo(number, 20)), '_0'),
			        cityHash64(intDiv(number, 20))
			 FROM system.numbers LIMIT %d`},
		} {
			if err := s.c.Exec(ctx, fmt.Sprintf(q.sql, s.schema.Write(q.table), stored/10, stored), nil); err != nil {
				b.Fatal(err)
			}
		}
		// Both merged, as rows of earlier days are (the index's
		// merges ran beside the timed commits before).
		for _, t := range []string{"attempts", "attempt_index"} {
			if err := s.c.Exec(ctx, "OPTIMIZE TABLE "+s.schema.Write(t)+" FINAL", nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	g := &storetest.Gen{Agent: agent, Host: "node1"}
	return s, func(i int) *wire.Batch {
		var atts []*storetest.AttemptSpec
		for k := range 4 {
			n := i*4 + k
			atts = append(atts, &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1800000000000_%04d_m_%06d_0", n/20, n%20),
				JobID: fmt.Sprintf("job_1800000000000_%04d", n/20), Type: "map", Start: storetest.T0.Add(time.Duration(i) * 5 * time.Second),
				MemoryMB: 1024, JobName: "short", User: "u", Queue: "q",
				Procs: []storetest.ProcSpec{{PID: int32(1000 + n), Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28}}})
		}
		return g.Batch(atts, 0, 5, false)
	}
}
