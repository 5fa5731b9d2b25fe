package clickhouse

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/wire"
)

var (
	benchMinutes = flag.Int("bench.minutes", 60, "BenchmarkSeriesLayout: simulated minutes")
	benchNodes   = flag.Int("bench.nodes", 100, "BenchmarkSeriesLayout: simulated nodes")
)

// BenchmarkSeriesLayout measures how series are best kept in ClickHouse
// 18.16 (no column codecs), on loadgen's cluster (nodes × 8 attempts, a
// batch per node every 5 s) and one reduce attempt of the whole run beside
// it, in three layouts:
//
//   - chunks: a row per series per batch, its samples a chunk (package
//     chunk, as the embedded store's fresh chunks);
//   - merged: the same chunks merged per series and 10 minutes, zstd
//     (the embedded store's compaction);
//   - columns: a row per sample, a column per stored metric (Int64) and a
//     bitmap of the absent ones.
//
// Tables are partitioned by day and ordered by (job, series, time), with
// the server's zstd (the chunk tables with 1024 rows a mark, as the
// store's); after the inserts each is merged (OPTIMIZE FINAL).
// It reports each layout's bytes on disk per process sample (attempt
// series included, as the embedded store's figures count them), and the
// time to read the long attempt's whole life and compute its CPU and RSS
// at 1 s (the results of the layouts are compared).
//
//	go test -run '^$' -bench SeriesLayout -benchtime 1x -timeout 60m ./internal/store/clickhouse/ -bench.minutes=60
func BenchmarkSeriesLayout(b *testing.B) {
	srv := chtest.Start(b)
	ctx := context.Background()
	c, err := NewClient(srv.URL()+"?database=layout", ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	must(c.WithDatabase("default").Exec(ctx, "CREATE DATABASE layout", nil))
	chunkTable := `(day Date, kind UInt8, job_key UInt64, key UInt64, t_min Int64, t_max Int64, n UInt32, data String)
		ENGINE = MergeTree PARTITION BY day ORDER BY (kind, job_key, key, t_min) SETTINGS index_granularity = 1024`
	must(c.Exec(ctx, "CREATE TABLE chunks "+chunkTable, nil))
	must(c.Exec(ctx, "CREATE TABLE merged "+chunkTable, nil))
	colsOf := func(n int) string {
		var s []string
		for i := 0; i < n; i++ {
			s = append(s, fmt.Sprintf("c%d Int64", i))
		}
		return strings.Join(s, ", ")
	}
	for _, t := range []struct {
		name string
		n    int
	}{{"proc_samples", len(store.SampleColumns)}, {"att_samples", len(store.AttemptColumns)}} {
		must(c.Exec(ctx, "CREATE TABLE "+t.name+" (day Date, job_key UInt64, key UInt64, t Int64, absent UInt32, "+colsOf(t.n)+
			") ENGINE = MergeTree PARTITION BY day ORDER BY (job_key, key, t)", nil))
	}
	chunkCols := []string{"day", "kind", "job_key", "key", "t_min", "t_max", "n", "data"}
	sampleCols := func(n int) []string {
		out := []string{"day", "job_key", "key", "t", "absent"}
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf("c%d", i))
		}
		return out
	}

	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: *benchNodes, Slots: 8, BatchTicks: 5, Seed: 1, Start: start})
	longJob, longAtt := g.AddAttempt(*benchMinutes * 60)
	jobOf := map[string]uint64{}   // attempt -> job key
	procJob := map[uint64]uint64{} // process -> job key
	var chunks, procRows, attRows Block
	var samples, attSamples int64
	flush := func(force bool) {
		for _, t := range []struct {
			name string
			blk  *Block
			cols []string
		}{{"chunks", &chunks, chunkCols}, {"proc_samples", &procRows, sampleCols(len(store.SampleColumns))},
			{"att_samples", &attRows, sampleCols(len(store.AttemptColumns))}} {
			if t.blk.Rows() >= 10_000 || force && t.blk.Rows() > 0 {
				must(c.Insert(ctx, t.name, t.cols, t.blk.Bytes(), nil))
				t.blk.Reset()
			}
		}
	}
	addChunk := func(kind uint8, job uint64, sc *store.SeriesChunk) {
		chunks.Row()
		chunks.Date(sc.TMin)
		chunks.UInt8(kind)
		chunks.UInt64(job)
		chunks.UInt64(sc.Key)
		chunks.Int64(sc.TMin)
		chunks.Int64(sc.TMax)
		chunks.UInt32(uint32(sc.N))
		chunks.Blob(sc.Data)
	}
	addSamples := func(blk *Block, bt *wire.Batch, s *wire.Series, key, job uint64, cols []store.StoredColumn) {
		byCol := make([]*wire.Column, len(cols))
		for i := range s.Columns {
			for j, sc := range cols {
				if sc.Metric == bt.Metrics[s.Columns[i].Metric] {
					byCol[j] = &s.Columns[i]
				}
			}
		}
		for r, t := range s.Times {
			blk.Row()
			blk.Date(t)
			blk.UInt64(job)
			blk.UInt64(key)
			blk.Int64(t)
			var absent uint32
			for j, wc := range byCol {
				if wc == nil || wc.IsAbsent(r) {
					absent |= 1 << j
				}
			}
			blk.UInt32(absent)
			for j, wc := range byCol {
				var v int64
				if wc != nil && !wc.IsAbsent(r) {
					v = wc.Values[r] / cols[j].Div
				}
				blk.Int64(v)
			}
		}
	}
	t0 := time.Now()
	for g.Tick() < *benchMinutes*60 {
		for _, bt := range g.Next() {
			for i := range bt.Attempts {
				jobOf[bt.Attempts[i].AttemptID] = store.AttemptKey(bt.Attempts[i].JobID)
			}
			for i := range bt.Members {
				procJob[bt.Members[i].Process] = jobOf[bt.Members[i].AttemptID]
			}
			p := store.Prepare(bt)
			for i := range p.ProcChunks {
				addChunk(0, procJob[p.ProcChunks[i].Key], &p.ProcChunks[i])
			}
			for i := range p.AttChunks {
				addChunk(1, jobOf[p.AttChunks[i].AttemptID], &p.AttChunks[i])
			}
			for i := range bt.ProcSeries {
				s := &bt.ProcSeries[i]
				addSamples(&procRows, bt, s, s.Key, procJob[s.Key], store.SampleColumns)
				samples += int64(len(s.Times))
			}
			for i := range bt.AttemptSeries {
				s := &bt.AttemptSeries[i]
				addSamples(&attRows, bt, s, store.AttemptKey(s.AttemptID), jobOf[s.AttemptID], store.AttemptColumns)
				attSamples += int64(len(s.Times))
			}
		}
		flush(false)
	}
	flush(true)
	b.Logf("%d process samples, %d attempt samples, %d simulated minutes of %d nodes, generated and inserted in %s",
		samples, attSamples, *benchMinutes, *benchNodes, time.Since(t0).Round(time.Second))

	// Compaction: each series' chunks merged by 10 minutes, zstd.
	rows, err := c.Query(ctx, "SELECT day, kind, job_key, key, t_min, data FROM chunks ORDER BY kind, key, t_min", nil)
	must(err)
	var merged Block
	var group [][]byte
	var gDay uint16
	var gKind uint8
	var gJob, gKey uint64
	var gWin int64 = -1
	emit := func() {
		if len(group) == 0 {
			return
		}
		cols := store.SampleColumns
		if gKind == 1 {
			cols = store.AttemptColumns
		}
		pts, err := store.Decode(group, cols)
		must(err)
		data := chunk.EncodeLevel(nil, store.ToChunk(pts, cols), chunk.Fast)
		merged.Row()
		merged.UInt16(gDay)
		merged.UInt8(gKind)
		merged.UInt64(gJob)
		merged.UInt64(gKey)
		merged.Int64(pts.Times[0])
		merged.Int64(pts.Times[len(pts.Times)-1])
		merged.UInt32(uint32(len(pts.Times)))
		merged.Blob(data)
		group = nil
		if merged.Rows() >= 10_000 {
			must(c.Insert(ctx, "merged", chunkCols, merged.Bytes(), nil))
			merged.Reset()
		}
	}
	for rows.Next() {
		day, kind, job, key, tmin, data := rows.UInt16(), rows.UInt8(), rows.UInt64(), rows.UInt64(), rows.Int64(), rows.Bytes()
		if kind != gKind || key != gKey || tmin/600_000 != gWin {
			emit()
			gDay, gKind, gJob, gKey, gWin = day, kind, job, key, tmin/600_000
		}
		group = append(group, data)
	}
	must(rows.Err())
	emit()
	if merged.Rows() > 0 {
		must(c.Insert(ctx, "merged", chunkCols, merged.Bytes(), nil))
	}

	bytesOf := func(tables ...string) int64 {
		var n int64
		for _, t := range tables {
			must(c.Exec(ctx, "OPTIMIZE TABLE "+t+" FINAL", nil))
			rows, err := c.Query(ctx, "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'layout' AND table = "+
				Quote(t)+" AND active", nil)
			must(err)
			n += int64(rows.UInt64())
		}
		return n
	}
	per := func(n int64) float64 { return float64(n) / float64(samples) }
	chunkBytes, mergedBytes := bytesOf("chunks"), bytesOf("merged")
	procBytes, attBytes := bytesOf("proc_samples"), bytesOf("att_samples")
	b.ReportMetric(per(chunkBytes), "B/sample-chunks")
	b.ReportMetric(per(mergedBytes), "B/sample-merged")
	b.ReportMetric(per(procBytes+attBytes), "B/sample-columns")
	b.Logf("bytes per process sample: chunks %.2f, merged chunks %.2f, columns %.2f (process samples %.2f, attempt samples %.2f)",
		per(chunkBytes), per(mergedBytes), per(procBytes+attBytes), per(procBytes), per(attBytes))

	// The long attempt's life at 1 s, each layout.
	jobKey, attKey := store.AttemptKey(longJob), store.AttemptKey(longAtt)
	metrics, err := store.LookupMetrics(store.ScopeAttempt, []string{"cpu_percent", "rss_bytes"})
	must(err)
	q := store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: longAtt, From: start.UnixMilli(),
		To: start.Add(time.Duration(*benchMinutes) * time.Minute).UnixMilli(), Step: 1000}
	fromChunks := func(table string) *store.SeriesResult {
		rows, err := c.Query(ctx, fmt.Sprintf("SELECT data FROM %s WHERE kind = 1 AND job_key = %d AND key = %d AND t_max >= %d AND t_min < %d ORDER BY t_min",
			table, jobKey, attKey, q.From, q.To), nil)
		must(err)
		var data [][]byte
		for rows.Next() {
			data = append(data, rows.Bytes())
		}
		must(rows.Err())
		pts, err := store.Decode(data, store.AttemptColumns)
		must(err)
		res := store.NewSeriesResult(&q, metrics)
		store.ComputeOne(&q, res, metrics, store.AttemptColumns, pts, q.From)
		return res
	}
	fromColumns := func() *store.SeriesResult {
		n := len(store.AttemptColumns)
		rows, err := c.Query(ctx, fmt.Sprintf("SELECT t, absent, %s FROM att_samples WHERE job_key = %d AND key = %d AND t >= %d AND t < %d ORDER BY t",
			strings.Join(sampleCols(n)[5:], ", "), jobKey, attKey, q.From, q.To), nil)
		must(err)
		pts := &store.Points{Cols: make([][]int64, n), Absent: make([][]bool, n), Has: make([]bool, n)}
		for j := range pts.Has {
			pts.Has[j] = true
			pts.Absent[j] = []bool{}
		}
		for rows.Next() {
			pts.Times = append(pts.Times, rows.Int64())
			absent := rows.UInt32()
			for j := 0; j < n; j++ {
				pts.Cols[j] = append(pts.Cols[j], rows.Int64())
				pts.Absent[j] = append(pts.Absent[j], absent&(1<<j) != 0)
			}
		}
		must(rows.Err())
		res := store.NewSeriesResult(&q, metrics)
		store.ComputeOne(&q, res, metrics, store.AttemptColumns, pts, q.From)
		return res
	}
	want := fromChunks("chunks")
	for name, read := range map[string]func() *store.SeriesResult{
		"chunks":  func() *store.SeriesResult { return fromChunks("chunks") },
		"merged":  func() *store.SeriesResult { return fromChunks("merged") },
		"columns": fromColumns,
	} {
		got := read()
		for m := range want.Series {
			for i, v := range want.Series[m].Values {
				if w, g := float64(v), float64(got.Series[m].Values[i]); w != g && !(math.IsNaN(w) && math.IsNaN(g)) {
					b.Fatalf("%s: %s[%d] = %g, chunks give %g", name, want.Series[m].Metric, i, g, w)
				}
			}
		}
		const reads = 20
		t0 := time.Now()
		for i := 0; i < reads; i++ {
			read()
		}
		d := time.Since(t0) / reads
		b.ReportMetric(float64(d.Microseconds())/1000, "ms/attempt-hour-"+name)
		b.Logf("%s: the attempt's %d minutes at 1 s in %s", name, *benchMinutes, d.Round(10*time.Microsecond))
	}
}
