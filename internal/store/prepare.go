package store

import (
	"github.com/taskscope/taskscope/internal/store/chunk"
	"github.com/taskscope/taskscope/internal/wire"
)

// StoredColumn is how one well-known metric is stored: counters as the
// increment since the previous sample of the same series (small numbers that
// compress to a few bits), memory in KiB (lossless: pages are 4 KiB), time
// in the coarsest unit that loses nothing worth having.
type StoredColumn struct {
	Name    string // column name
	Metric  string // wire metric
	Counter bool   // stored as increments
	Div     int64  // wire value / Div = stored value
}

// SampleColumns are the stored columns of process samples, in order.
var SampleColumns = []StoredColumn{
	{"cpu_user_ms", wire.CPUUserMs, true, 1},
	{"cpu_sys_ms", wire.CPUSysMs, true, 1},
	{"cpu_children_user_ms", wire.CPUChildUserMs, true, 1},
	{"cpu_children_sys_ms", wire.CPUChildSysMs, true, 1},
	{"rss_kb", wire.RSSBytes, false, 1024},
	{"vms_kb", wire.VMSBytes, false, 1024},
	{"pss_kb", wire.PSSBytes, false, 1024},
	{"threads", wire.Threads, false, 1},
	{"minflt", wire.MinorFaults, true, 1},
	{"majflt", wire.MajorFaults, true, 1},
	{"read_bytes", wire.ReadBytes, true, 1},
	{"write_bytes", wire.WriteBytes, true, 1},
	{"rchar", wire.ReadChars, true, 1},
	{"wchar", wire.WriteChars, true, 1},
	{"ctx_voluntary", wire.CtxVoluntary, true, 1},
	{"ctx_involuntary", wire.CtxInvoluntary, true, 1},
	{"sched_run_us", wire.SchedRunNs, true, 1000},
	{"sched_wait_us", wire.SchedWaitNs, true, 1000},
	{"fds", wire.FDs, false, 1},
	{"heap_used_kb", wire.HeapUsedBytes, false, 1024},
	{"heap_committed_kb", wire.HeapCommitBytes, false, 1024},
	{"heap_max_kb", wire.HeapMaxBytes, false, 1024},
	{"gc_count", wire.GCCount, true, 1},
	{"gc_time_ms", wire.GCTimeMs, true, 1},
	{"jvm_threads", wire.JVMThreads, false, 1},
}

// AttemptColumns are the stored columns of attempt samples, in order.
var AttemptColumns = []StoredColumn{
	{"cpu_ms", wire.AttemptCPUMs, true, 1},
	{"rss_kb", wire.AttemptRSSBytes, false, 1024},
	{"pss_kb", wire.AttemptPSSBytes, false, 1024},
	{"vms_kb", wire.AttemptVMSBytes, false, 1024},
	{"processes", wire.AttemptProcesses, false, 1},
	{"read_bytes", wire.AttemptReadBytes, true, 1},
	{"write_bytes", wire.AttemptWriteBytes, true, 1},
	{"heap_used_kb", wire.AttemptHeapUsed, false, 1024},
	{"gc_time_ms", wire.AttemptGCTimeMs, true, 1},
	{"sched_wait_us", wire.AttemptSchedWaitNs, true, 1000},
	{"short_lived", wire.AttemptShortLived, true, 1},
}

// Positions of the columns that summaries read.
var (
	aCPU   = ColumnIndex(AttemptColumns, "cpu_ms")
	aRSS   = ColumnIndex(AttemptColumns, "rss_kb")
	aPSS   = ColumnIndex(AttemptColumns, "pss_kb")
	aVMS   = ColumnIndex(AttemptColumns, "vms_kb")
	aRead  = ColumnIndex(AttemptColumns, "read_bytes")
	aWrite = ColumnIndex(AttemptColumns, "write_bytes")
	aHeap  = ColumnIndex(AttemptColumns, "heap_used_kb")
	aGC    = ColumnIndex(AttemptColumns, "gc_time_ms")
	aWait  = ColumnIndex(AttemptColumns, "sched_wait_us")
)

// ColumnIndex returns the position of a stored column, or -1.
func ColumnIndex(cols []StoredColumn, name string) int {
	for i, c := range cols {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// SeriesChunk is one series' samples of one batch, encoded (package chunk).
type SeriesChunk struct {
	Key       uint64 // process key, or AttemptKey of the attempt
	AttemptID string // attempt chunks
	TMin      int64
	TMax      int64
	N         int
	Data      []byte
}

// ExtRow is a sample of a metric that has no column of its own.
type ExtRow struct {
	Key    uint64
	Ms     int64
	Metric string
	Value  int64
}

// AttemptSummary is what one batch says of an attempt's summary (values in
// wire units; counters are cumulative).
type AttemptSummary struct {
	LastMs      int64
	CPUMs       int64
	PeakRSS     int64
	PeakPSS     int64
	PeakVMS     int64
	PeakHeap    int64
	ReadBytes   int64
	WriteBytes  int64
	GCTimeMs    int64
	SchedWaitUs int64
	RSSByteMs   float64 // increment of the RSS time integral
	FirstMs     int64   // time of the batch's first sample
	FirstRSS    int64
	LastRSS     int64
}

// Prepared is a batch turned into chunks and summary updates.
type Prepared struct {
	Batch      *Batch
	ProcChunks []SeriesChunk
	AttChunks  []SeriesChunk
	Ext        []ExtRow
	Samples    int
	Atts       map[string]*AttemptSummary
}

// Batch is the wire batch (an alias, so that backends need not import wire
// for the type).
type Batch = wire.Batch

// AttemptKey is the 64-bit key of an attempt's series.
func AttemptKey(id string) uint64 { return wire.ProcessKey(id, 0, 0) }

// Prepare encodes every series of a validated batch as a chunk (values in
// the stored units of SampleColumns / AttemptColumns) and sums up what the
// batch says of each attempt.
func Prepare(b *wire.Batch) *Prepared {
	p := &Prepared{Batch: b, Atts: map[string]*AttemptSummary{}}
	procMap := mapColumns(b.Metrics, SampleColumns)
	attMap := mapColumns(b.Metrics, AttemptColumns)
	var buf []byte
	for si := range b.ProcSeries {
		s := &b.ProcSeries[si]
		c, ext := toChunk(b, s, procMap, SampleColumns)
		p.Ext = append(p.Ext, ext...)
		buf = chunk.Encode(buf[:0], c, false)
		p.ProcChunks = append(p.ProcChunks, SeriesChunk{Key: s.Key, TMin: s.Times[0], TMax: s.Times[len(s.Times)-1],
			N: len(s.Times), Data: append([]byte(nil), buf...)})
		p.Samples += len(s.Times)
	}
	for si := range b.AttemptSeries {
		s := &b.AttemptSeries[si]
		c, _ := toChunk(b, s, attMap, AttemptColumns)
		buf = chunk.Encode(buf[:0], c, false)
		p.AttChunks = append(p.AttChunks, SeriesChunk{Key: AttemptKey(s.AttemptID), AttemptID: s.AttemptID,
			TMin: s.Times[0], TMax: s.Times[len(s.Times)-1], N: len(s.Times), Data: append([]byte(nil), buf...)})
		sum := p.Atts[s.AttemptID]
		if sum == nil {
			sum = &AttemptSummary{}
			p.Atts[s.AttemptID] = sum
		}
		summarize(sum, s, attMap)
	}
	return p
}

// toChunk converts a wire series into a chunk of stored columns; metrics
// without a column of their own come back as rows.
func toChunk(b *wire.Batch, s *wire.Series, m []int, cols []StoredColumn) (*chunk.Chunk, []ExtRow) {
	c := &chunk.Chunk{Times: s.Times}
	var ext []ExtRow
	for ci := range s.Columns {
		wc := &s.Columns[ci]
		j := m[wc.Metric]
		if j < 0 {
			for r, t := range s.Times {
				if !wc.IsAbsent(r) {
					ext = append(ext, ExtRow{Key: s.Key, Ms: t, Metric: b.Metrics[wc.Metric], Value: wc.Values[r]})
				}
			}
			continue
		}
		col := chunk.Column{ID: uint8(j), Counter: cols[j].Counter, Values: make([]int64, len(s.Times))}
		div := cols[j].Div
		for r, v := range wc.Values {
			col.Values[r] = v / div
		}
		if wc.Absent != nil {
			col.Absent = make([]bool, len(s.Times))
			for r := range col.Absent {
				col.Absent[r] = wc.IsAbsent(r)
			}
		}
		c.Columns = append(c.Columns, col)
	}
	return c, ext
}

func summarize(sum *AttemptSummary, s *wire.Series, m []int) {
	byCol := make([]*wire.Column, len(AttemptColumns))
	for ci := range s.Columns {
		if j := m[s.Columns[ci].Metric]; j >= 0 {
			byCol[j] = &s.Columns[ci]
		}
	}
	n := len(s.Times)
	last := func(j int) int64 {
		c := byCol[j]
		if c == nil {
			return -1
		}
		for r := n - 1; r >= 0; r-- {
			if !c.IsAbsent(r) {
				return c.Values[r]
			}
		}
		return -1
	}
	if v := last(aCPU); v >= 0 {
		sum.CPUMs = v
	}
	if v := last(aRead); v >= 0 {
		sum.ReadBytes = v
	}
	if v := last(aWrite); v >= 0 {
		sum.WriteBytes = v
	}
	if v := last(aGC); v >= 0 {
		sum.GCTimeMs = v
	}
	if v := last(aWait); v >= 0 {
		sum.SchedWaitUs = v / 1000
	}
	sum.PeakRSS = max(sum.PeakRSS, colMax(byCol[aRSS], n))
	sum.PeakPSS = max(sum.PeakPSS, colMax(byCol[aPSS], n))
	sum.PeakVMS = max(sum.PeakVMS, colMax(byCol[aVMS], n))
	sum.PeakHeap = max(sum.PeakHeap, colMax(byCol[aHeap], n))
	if c := byCol[aRSS]; c != nil {
		var pt, pv int64
		for r, t := range s.Times {
			if c.IsAbsent(r) {
				continue
			}
			if pt == 0 {
				if sum.FirstMs == 0 {
					sum.FirstMs, sum.FirstRSS = t, c.Values[r]
				}
			} else {
				// Trapezoids of RSS over time, in byte-milliseconds.
				sum.RSSByteMs += float64(c.Values[r]+pv) / 2 * float64(t-pt)
			}
			pt, pv = t, c.Values[r]
		}
		if pt > 0 {
			sum.LastRSS = pv
		}
	}
	sum.LastMs = max(sum.LastMs, s.Times[n-1])
}

func mapColumns(metrics []string, cols []StoredColumn) []int {
	out := make([]int, len(metrics))
	for i, m := range metrics {
		out[i] = -1
		for j, c := range cols {
			if c.Metric == m {
				out[i] = j
				break
			}
		}
	}
	return out
}

func colMax(c *wire.Column, n int) int64 {
	if c == nil {
		return 0
	}
	var m int64
	for r := 0; r < n; r++ {
		if !c.IsAbsent(r) && c.Values[r] > m {
			m = c.Values[r]
		}
	}
	return m
}
