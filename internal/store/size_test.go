package store

import (
	"encoding/binary"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/chunk"
	"github.com/taskscope/taskscope/internal/wire"
)

// BenchmarkChunkSize measures the bytes per process sample of merged chunks
// (what compaction writes: every series' samples of a window in one chunk)
// on loadgen's data and on the replayed recording of a real agent, for the
// encodings compared in docs/storage.md; the first (v1) is the format this
// package wrote before, the baseline. Process chunks are divided by process
// samples; attempt chunks are reported per process sample too, as they are
// stored on top.
//
//	go test -run '^$' -bench ChunkSize -benchtime 1x ./internal/store/
func BenchmarkChunkSize(b *testing.B) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sources := []struct {
		name    string
		batches func() [][]*wire.Batch
	}{
		{"loadgen", func() [][]*wire.Batch {
			g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 5, Seed: 1, Start: start})
			var out [][]*wire.Batch
			for i := 0; i < 360; i++ { // half an hour
				out = append(out, g.Next())
			}
			return out
		}},
		{"agent-recording", func() [][]*wire.Batch {
			rec, err := loadgen.ReadRecordingFile("../loadgen/testdata/agent-sim.rec.zst")
			if err != nil {
				b.Skip(err)
			}
			return [][]*wire.Batch{rec}
		}},
	}
	for _, src := range sources {
		b.Run(src.name, func(b *testing.B) {
			rounds := src.batches()
			for i := 0; i < b.N; i++ {
				res := measureSizes(rounds)
				for _, r := range res {
					b.ReportMetric(r.perSample, r.name+"_B/sample")
				}
				if i == 0 {
					for _, r := range res {
						b.Logf("%-28s %7.2f B/sample (process chunks %.2f, attempt chunks %.2f)", r.name, r.perSample, r.proc, r.att)
					}
				}
			}
		})
	}
}

type sizeResult struct {
	name            string
	perSample       float64
	proc, att       float64
	procSamples     int
	procB, attBytes int
}

// measureSizes cuts every series into windows of 5 minutes (and 1 hour)
// and encodes each window's samples as one chunk, each way.
func measureSizes(rounds [][]*wire.Batch) []sizeResult {
	type variant struct {
		name   string
		window int64
		enc    func(c *chunk.Chunk, kind int) []byte
	}
	v2 := func(l chunk.Level) func(*chunk.Chunk, int) []byte {
		return func(c *chunk.Chunk, _ int) []byte { return chunk.EncodeLevel(nil, c, l) }
	}
	variants := []variant{
		{"v1_5min_zstd_better", 300_000, func(c *chunk.Chunk, kind int) []byte { return encodeV1(c, kind, zstd.SpeedBetterCompression) }},
		{"v2_5min_none", 300_000, v2(chunk.None)},
		{"v2_5min_zstd_fast", 300_000, v2(chunk.Fast)},
		{"v2_5min_zstd_better", 300_000, v2(chunk.Better)},
		{"v2_5min_zstd_best", 300_000, v2(chunk.Best)},
		{"v2_10min_zstd_fast", 600_000, v2(chunk.Fast)}, // compaction's until 2026-12-07
		{"v2_10min_zstd_better", 600_000, v2(chunk.Better)},
		{"v2_1h_zstd_fast", 3600_000, v2(chunk.Fast)},
		{"v2_1h_zstd_better", 3600_000, v2(chunk.Better)},
		{"v2_1h_zstd_best", 3600_000, v2(chunk.Best)},
		{"v3_10min_packed", 600_000, v2(chunk.Packed)}, // compaction's since
		{"v3_1h_packed", 3600_000, v2(chunk.Packed)},
	}
	var out []sizeResult
	var samples int
	// Blocks: every series' chunk of a window, uncompressed, packed in key
	// order into blocks of at least blockSize bytes, each compressed whole.
	for _, bs := range []int{16 << 10, 64 << 10, 256 << 10} {
		for _, lvl := range []chunk.Level{chunk.Fast, chunk.Better, chunk.Best} {
			pts, smp := collectWindows(rounds, 600_000)
			samples = smp
			var keys []seriesWindow
			for k := range pts {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool {
				a, b := keys[i], keys[j]
				if a.win != b.win {
					return a.win < b.win
				}
				if a.kind != b.kind {
					return a.kind < b.kind
				}
				return a.k < b.k
			})
			r := sizeResult{name: fmt.Sprintf("v2_10min_block%dk_%d", bs>>10, lvl), procSamples: samples}
			var block []byte
			var kinds [2]int
			flush := func() {
				if len(block) == 0 {
					return
				}
				z := chunk.CompressBlock(nil, block, lvl)
				// Attribute by the share of each kind's raw bytes.
				tot := kinds[0] + kinds[1]
				r.procB += len(z) * kinds[0] / tot
				r.attBytes += len(z) * kinds[1] / tot
				block, kinds = block[:0], [2]int{}
			}
			lastWin := int64(-1)
			for _, k := range keys {
				if k.win != lastWin {
					flush()
					lastWin = k.win
				}
				cols := SampleColumns
				if k.kind == 1 {
					cols = AttemptColumns
				}
				c := chunk.EncodeLevel(nil, ToChunk(finish(pts[k]), cols), chunk.None)
				block = append(block, c...)
				block = append(block, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // key, length: about what a directory entry takes
				kinds[k.kind] += len(c) + 12
				if len(block) >= bs {
					flush()
				}
			}
			flush()
			r.proc = float64(r.procB) / float64(samples)
			r.att = float64(r.attBytes) / float64(samples)
			r.perSample = r.proc + r.att
			out = append(out, r)
		}
	}
	cache := map[int64]map[seriesWindow]*Points{}
	for _, v := range variants {
		pts := cache[v.window]
		if pts == nil {
			pts, samples = collectWindows(rounds, v.window)
			cache[v.window] = pts
		}
		var keys []seriesWindow
		for k := range pts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].k < keys[j].k })
		r := sizeResult{name: v.name, procSamples: samples}
		for _, k := range keys {
			p := pts[k]
			cols := SampleColumns
			if k.kind == 1 {
				cols = AttemptColumns
			}
			n := len(v.enc(ToChunk(finish(p), cols), k.kind))
			if k.kind == 0 {
				r.procB += n
			} else {
				r.attBytes += n
			}
		}
		r.proc = float64(r.procB) / float64(samples)
		r.att = float64(r.attBytes) / float64(samples)
		r.perSample = r.proc + r.att
		out = append(out, r)
	}
	return out
}

// seriesWindow is a series (kind 0: a process, 1: an attempt) in a window
// of time.
type seriesWindow struct {
	kind int
	k    uint64
	win  int64
}

// collectWindows is the points of every series in every window of this
// length (ms) of rounds, and the process samples.
func collectWindows(rounds [][]*wire.Batch, window int64) (map[seriesWindow]*Points, int) {
	pts := map[seriesWindow]*Points{}
	samples := 0
	for _, r := range rounds {
		for _, b := range r {
			p := Prepare(b)
			add := func(kind int, c SeriesChunk, cols []StoredColumn) {
				ch, err := chunk.Decode(c.Data)
				if err != nil {
					panic(err)
				}
				k := seriesWindow{kind, c.Key, c.TMin / window}
				cur := pts[k]
				if cur == nil {
					cur = &Points{Cols: make([][]int64, len(cols)), Absent: make([][]bool, len(cols)), Has: make([]bool, len(cols))}
					pts[k] = cur
				}
				appendChunk(cur, ch, len(cols))
			}
			for _, c := range p.ProcChunks {
				add(0, c, SampleColumns)
			}
			for _, c := range p.AttChunks {
				add(1, c, AttemptColumns)
			}
			samples += p.Samples
		}
	}
	return pts, samples
}

// BenchmarkAttemptResidual measures the lever of docs/storage.md's design
// note (not built): an attempt's series stored as its difference from the
// sums of its processes' series in the same window (format 3), against
// its own chunk (format 3), on an hour of loadgen's data (20 nodes), per
// process sample; and how many of the attempts' columns are then all
// zero (the agent adds up the same samples).
//
//	go test -run '^$' -bench AttemptResidual -benchtime 1x ./internal/store/
func BenchmarkAttemptResidual(b *testing.B) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 20, Slots: 8, BatchTicks: 5, Seed: 1, Start: start})
	var rounds [][]*wire.Batch
	attemptOf := map[uint64]uint64{} // process key -> attempt key
	for i := 0; i < 720; i++ {
		r := g.Next()
		for _, bt := range r {
			for _, m := range bt.Members {
				attemptOf[m.Process] = AttemptKey(m.AttemptID)
			}
		}
		rounds = append(rounds, r)
	}
	pc := func(n string) int { return ColumnIndex(SampleColumns, n) }
	sources := map[string][]int{"cpu_ms": {pc("cpu_user_ms"), pc("cpu_sys_ms"), pc("cpu_children_user_ms"), pc("cpu_children_sys_ms")},
		"rss_kb": {pc("rss_kb")}, "pss_kb": {pc("pss_kb")}, "vms_kb": {pc("vms_kb")}, "read_bytes": {pc("read_bytes")},
		"write_bytes": {pc("write_bytes")}, "heap_used_kb": {pc("heap_used_kb")}, "gc_time_ms": {pc("gc_time_ms")},
		"sched_wait_ms": {pc("sched_wait_ms")}}
	for i := 0; i < b.N; i++ {
		pts, samples := collectWindows(rounds, 600_000)
		procsOf := map[seriesWindow][]*Points{}
		var procBytes int
		for k, p := range pts {
			if k.kind == 0 {
				ak := seriesWindow{1, attemptOf[k.k], k.win}
				procsOf[ak] = append(procsOf[ak], p)
				procBytes += len(chunk.EncodeLevel(nil, ToChunk(finish(p), SampleColumns), chunk.Packed))
			}
		}
		var plain, resid, zeroCols, cols int
		for k, p := range pts {
			if k.kind != 1 {
				continue
			}
			finish(p)
			plain += len(chunk.EncodeLevel(nil, ToChunk(p, AttemptColumns), chunk.Packed))
			at := map[int64]int{}
			for i, t := range p.Times {
				at[t] = i
			}
			r := &Points{Times: p.Times, Has: p.Has, Absent: p.Absent, Cols: make([][]int64, len(p.Cols))}
			for j, c := range AttemptColumns {
				if !p.Has[j] {
					continue
				}
				r.Cols[j] = append([]int64(nil), p.Cols[j]...)
				for _, pp := range procsOf[k] {
					for i, t := range pp.Times {
						ai, ok := at[t]
						if !ok {
							continue
						}
						if c.Name == "processes" {
							r.Cols[j][ai]--
						}
						for _, src := range sources[c.Name] {
							if pp.Has[src] && (pp.Absent[src] == nil || !pp.Absent[src][i]) {
								r.Cols[j][ai] -= pp.Cols[src][i]
							}
						}
					}
				}
				cols++
				zero := true
				for i, v := range r.Cols[j] {
					zero = zero && (v == 0 || r.Absent[j] != nil && r.Absent[j][i])
				}
				if zero {
					zeroCols++
				}
			}
			resid += len(chunk.EncodeLevel(nil, ToChunk(r, AttemptColumns), chunk.Packed))
		}
		s := float64(samples)
		b.ReportMetric(float64(procBytes)/s, "process_B/sample")
		b.ReportMetric(float64(plain)/s, "attempt_B/sample")
		b.ReportMetric(float64(resid)/s, "attempt_diff_B/sample")
		b.Logf("process chunks %.2f B a process sample; attempt chunks %.2f, as differences %.2f (%d of %d columns all zero)",
			float64(procBytes)/s, float64(plain)/s, float64(resid)/s, zeroCols, cols)
	}
}

func appendChunk(p *Points, c *chunk.Chunk, ncols int) {
	base := len(p.Times)
	p.Times = append(p.Times, c.Times...)
	for _, col := range c.Columns {
		j := col.ID
		if !p.Has[j] {
			p.Has[j] = true
			p.Cols[j] = make([]int64, base)
			p.Absent[j] = make([]bool, base)
			for i := range p.Absent[j] {
				p.Absent[j][i] = true
			}
		}
	}
	for j := 0; j < ncols; j++ {
		if !p.Has[j] {
			continue
		}
		var col *chunk.Column
		for i := range c.Columns {
			if int(c.Columns[i].ID) == j {
				col = &c.Columns[i]
			}
		}
		for i := range c.Times {
			if col == nil {
				p.Cols[j] = append(p.Cols[j], 0)
				p.Absent[j] = append(p.Absent[j], true)
				continue
			}
			p.Cols[j] = append(p.Cols[j], col.Values[i])
			p.Absent[j] = append(p.Absent[j], col.Absent != nil && col.Absent[i])
		}
	}
}

// finish drops absent lists without a mark.
func finish(p *Points) *Points {
	for j := range p.Absent {
		any := false
		for _, a := range p.Absent[j] {
			any = any || a
		}
		if !any {
			p.Absent[j] = nil
		}
	}
	return p
}

// encodeV1 is the chunk format before version 2, kept here as the
// baseline: times and counters delta of delta, gauges delta, a divisor of
// the values, zstd over it all.
func encodeV1(c *chunk.Chunk, kind int, lvl zstd.EncoderLevel) []byte {
	cols := SampleColumns
	if kind == 1 {
		cols = AttemptColumns
	}
	n := len(c.Times)
	b := binary.AppendUvarint(nil, uint64(n))
	b = binary.AppendUvarint(b, uint64(len(c.Columns)))
	dod := func(b []byte, v []int64, absent []bool) []byte {
		var prev, prevD int64
		k := 0
		for i, x := range v {
			if absent != nil && absent[i] {
				continue
			}
			switch k {
			case 0:
				b = binary.AppendVarint(b, x)
			case 1:
				prevD = x - prev
				b = binary.AppendVarint(b, prevD)
			default:
				d := x - prev
				b = binary.AppendVarint(b, d-prevD)
				prevD = d
			}
			prev = x
			k++
		}
		return b
	}
	delta := func(b []byte, v []int64, absent []bool) []byte {
		var prev int64
		first := true
		for i, x := range v {
			if absent != nil && absent[i] {
				continue
			}
			if first {
				b = binary.AppendVarint(b, x)
				first = false
			} else {
				b = binary.AppendVarint(b, x-prev)
			}
			prev = x
		}
		return b
	}
	b = dod(b, c.Times, nil)
	for _, col := range c.Columns {
		b = append(b, col.ID)
		var g int64
		for i, x := range col.Values {
			if col.Absent != nil && col.Absent[i] {
				continue
			}
			if x < 0 {
				x = -x
			}
			for x != 0 {
				g, x = x, g%x
			}
		}
		flags := byte(0)
		if col.Absent != nil {
			flags |= 1
		}
		if g > 1 {
			flags |= 2
		}
		b = append(b, flags)
		if col.Absent != nil {
			bm := make([]byte, (n+7)/8)
			for j, a := range col.Absent {
				if a {
					bm[j/8] |= 1 << (j % 8)
				}
			}
			b = append(b, bm...)
		}
		vals := col.Values
		if g > 1 {
			b = binary.AppendUvarint(b, uint64(g))
			vals = make([]int64, len(col.Values))
			for j, v := range col.Values {
				vals[j] = v / g
			}
		}
		if cols[col.ID].Counter {
			b = dod(b, vals, col.Absent)
		} else {
			b = delta(b, vals, col.Absent)
		}
	}
	e := v1enc[lvl]
	if e == nil {
		e, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
		v1enc[lvl] = e
	}
	return e.EncodeAll(b, []byte{0x11})
}

var v1enc = map[zstd.EncoderLevel]*zstd.Encoder{}
