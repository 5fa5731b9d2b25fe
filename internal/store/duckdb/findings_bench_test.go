package duckdb

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// BenchmarkPutAnalyses stores a pass's analyses of 64 running jobs
// analysed before (store.AnalysesPutter, as the analyser's passes store
// them): together (one upsert) and, for comparison, one statement each
// in one transaction (PutAnalysis' statements, as PutAnalyses was); the
// time and the process' CPU an analysis.
//
//	go test -run '^$' -bench 'PutAnalyses' ./internal/store/duckdb/
func BenchmarkPutAnalyses(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"together", "each"} {
		b.Run(mode, func(b *testing.B) {
			// 2,000 jobs' rows stored, and a pass's 64 of them stored again.
			const jobs, pass = 2000, 64
			s := analysesStored(b, jobs)
			measurePuts(b, pass, func(n int) error {
				batch := make([]*store.Analysis, pass)
				for i := range batch {
					batch[i] = benchAnalysis((n*pass+i*31)%jobs, int64(n+2))
				}
				if mode == "together" {
					return s.PutAnalyses(ctx, batch)
				}
				return s.putEach(ctx, batch)
			})
		})
	}
}

// BenchmarkPutAnalysis stores one analysis alone (PutAnalysis, as a
// job's page, or an ended job taken alone, stores it), of a job analysed
// before (its row replaced: again) or not (a row added: new), beside
// 2,000 jobs' rows: by PutAnalysis, and by PutAnalyses' one-row upsert in
// its transaction (upsert); the time and the process' CPU an analysis.
//
//	go test -run '^$' -bench 'PutAnalysis$' ./internal/store/duckdb/
func BenchmarkPutAnalysis(b *testing.B) {
	ctx := context.Background()
	for _, rows := range []string{"again", "new"} {
		for _, mode := range []string{"put", "upsert"} {
			b.Run(rows+"/"+mode, func(b *testing.B) {
				const jobs = 2000
				s := analysesStored(b, jobs)
				measurePuts(b, 1, func(n int) error {
					a := benchAnalysis((n*31)%jobs, int64(n+2))
					if rows == "new" {
						a = benchAnalysis(jobs+n, 2)
					}
					if mode == "put" {
						return s.PutAnalysis(ctx, a)
					}
					return s.putAnalyses(ctx, []*store.Analysis{a})
				})
			})
		}
	}
}

// measurePuts runs put b.N times, each storing per analyses, and reports
// the time and the process' CPU (DuckDB's threads too: what load moves
// less) an analysis.
func measurePuts(b *testing.B, per int, put func(n int) error) {
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if err := put(n); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per)/1e6, "ms/analysis")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*per)/1e6, "cpu-ms/analysis")
}

// analysesStored is a store with the analyses of jobs jobs (benchAnalysis),
// closed at the benchmark's end.
func analysesStored(b *testing.B, jobs int) *Store {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	as := make([]*store.Analysis, jobs)
	for i := range as {
		as[i] = benchAnalysis(i, 1)
	}
	if err := s.PutAnalyses(context.Background(), as); err != nil {
		b.Fatal(err)
	}
	return s
}

// putEach is PutAnalyses as it was: PutAnalysis' statements for each
// analysis, in one transaction.
func (s *Store) putEach(ctx context.Context, as []*store.Analysis) error {
	upd, ups, err := s.analysisStmts(ctx)
	if err != nil {
		return err
	}
	tx, err := s.handle().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	upd, ups = tx.StmtContext(ctx, upd), tx.StmtContext(ctx, ups)
	for _, a := range as {
		if err := putAnalysis(ctx, upd, ups, a); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// benchAnalysis is a running job's analysis as the analyser stores one:
// a few findings and a report of a few kilobytes.
func benchAnalysis(job int, evaluated int64) *store.Analysis {
	a := &store.Analysis{JobID: fmt.Sprintf("job_1700000000000_%04d", job), Name: "wordcount", User: "alice", Queue: "etl",
		Start: 1, Worst: store.SeverityModerate, AnalysisStamp: store.AnalysisStamp{LastSeen: store.Time(evaluated),
			Evaluated: store.Time(evaluated), Version: "2", Settings: "default", Mark: uint64(evaluated)}}
	for i, h := range []string{"skew", "waste", "straggler"} {
		body, _ := json.Marshal(map[string]any{"heuristic": h, "attempts": []string{"attempt_1", "attempt_2"}, "detail": strings.Repeat("x", 200+i)})
		a.Findings = append(a.Findings, store.StoredFinding{Heuristic: h, Severity: store.Severity(i + 1), Body: body, Restricted: i == 2})
	}
	a.Report = json.RawMessage(`{"summary":"` + strings.Repeat("y", 3000) + `"}`)
	return a
}
