package store

import (
	"github.com/taskscope/taskscope/internal/store/chunk"
	"github.com/taskscope/taskscope/internal/wire"
)

// StoredColumn is how one well-known metric is stored: memory in KiB
// (lossless: pages are 4 KiB), time in the coarsest unit that loses nothing
// worth having (schedstat's nanoseconds in milliseconds, like utime and
// stime, which the kernel counts in 10 ms ticks). Counter tells the
// summaries and rollups that the metric only grows.
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
	{"sched_run_ms", wire.SchedRunNs, true, 1_000_000},
	{"sched_wait_ms", wire.SchedWaitNs, true, 1_000_000},
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
	{"sched_wait_ms", wire.AttemptSchedWaitNs, true, 1_000_000},
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
	aWait  = ColumnIndex(AttemptColumns, "sched_wait_ms")
	aProcs = ColumnIndex(AttemptColumns, "processes")
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
	Key       uint64 // process key, or AttemptKey of the attempt (ExtKey of them for ExtChunks)
	AttemptID string // attempt chunks
	Metric    string // ExtChunks: the metric
	TMin      int64
	TMax      int64
	N         int
	Data      []byte
}

// ExtColumns is the stored column of the series of a metric with no column
// of its own (a metric of another agent, say): its values as sent, each
// metric of each process or attempt a series of its own (ExtKey).
var ExtColumns = []StoredColumn{{"value", "", false, 1}}

// ExtKey is the key of the series of metric of the process or attempt of
// key.
func ExtKey(key uint64, metric string) uint64 { return wire.ProcessKey(metric, 0, int64(key)) }

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
	SchedWaitMs int64
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
	// ExtChunks are the series of metrics with no column of their own
	// (ExtColumns), of processes (AttemptID empty) and attempts.
	ExtChunks []SeriesChunk
	Samples   int
	Atts      map[string]*AttemptSummary
}

// Batch is the wire batch (an alias, so that backends need not import wire
// for the type).
type Batch = wire.Batch

// AttemptKey is the 64-bit key of an attempt's series.
func AttemptKey(id string) uint64 { return wire.ProcessKey(id, 0, 0) }

// Preparer turns batches into chunks, reusing its buffers between batches.
// Not safe for concurrent use.
type Preparer struct {
	w    chunk.Writer
	buf  []byte
	byID []*wire.Column
	ext  []*wire.Column
}

// Prepare encodes every series of a validated batch as a chunk (values in
// the stored units of SampleColumns / AttemptColumns) and sums up what the
// batch says of each attempt.
func Prepare(b *wire.Batch) *Prepared {
	var pr Preparer
	return pr.Prepare(b)
}

// Prepare is the package function with this Preparer's buffers.
func (pr *Preparer) Prepare(b *wire.Batch) *Prepared {
	p := &Prepared{Batch: b, Atts: map[string]*AttemptSummary{}}
	procMap := mapColumns(b.Metrics, SampleColumns)
	attMap := mapColumns(b.Metrics, AttemptColumns)
	// All chunks of the batch share one allocation.
	pr.buf = pr.buf[:0]
	type span struct{ lo, hi int }
	var procSpans, attSpans []span
	var ext []byte
	for si := range b.ProcSeries {
		s := &b.ProcSeries[si]
		lo := len(pr.buf)
		pr.buf = pr.encode(pr.buf, b, s, procMap, SampleColumns)
		procSpans = append(procSpans, span{lo, len(pr.buf)})
		p.Samples += len(s.Times)
		ext = pr.encodeExt(ext, b, s, &p.ExtChunks)
	}
	for si := range b.AttemptSeries {
		s := &b.AttemptSeries[si]
		lo := len(pr.buf)
		pr.buf = pr.encode(pr.buf, b, s, attMap, AttemptColumns)
		attSpans = append(attSpans, span{lo, len(pr.buf)})
		ext = pr.encodeExt(ext, b, s, &p.ExtChunks)
		summarizeInto(p.Atts, s, attMap)
	}
	data := append([]byte(nil), pr.buf...)
	p.ProcChunks = make([]SeriesChunk, len(procSpans))
	for i, sp := range procSpans {
		s := &b.ProcSeries[i]
		p.ProcChunks[i] = SeriesChunk{Key: s.Key, TMin: s.Times[0], TMax: s.Times[len(s.Times)-1], N: len(s.Times),
			Data: data[sp.lo:sp.hi:sp.hi]}
	}
	p.AttChunks = make([]SeriesChunk, len(attSpans))
	for i, sp := range attSpans {
		s := &b.AttemptSeries[i]
		p.AttChunks[i] = SeriesChunk{Key: AttemptKey(s.AttemptID), AttemptID: s.AttemptID, TMin: s.Times[0],
			TMax: s.Times[len(s.Times)-1], N: len(s.Times), Data: data[sp.lo:sp.hi:sp.hi]}
	}
	return p
}

// encode appends the chunk of a wire series, in stored columns and units,
// in schema order; metrics without a column of their own are kept in pr.ext
// for encodeExt.
func (pr *Preparer) encode(dst []byte, b *wire.Batch, s *wire.Series, m []int, cols []StoredColumn) []byte {
	if cap(pr.byID) < len(cols) {
		pr.byID = make([]*wire.Column, len(cols))
	}
	byID := pr.byID[:len(cols)]
	clear(byID)
	pr.ext = pr.ext[:0]
	for ci := range s.Columns {
		wc := &s.Columns[ci]
		j := m[wc.Metric]
		if j >= 0 {
			byID[j] = wc
			continue
		}
		pr.ext = append(pr.ext, wc)
	}
	pr.w.Begin(s.Times)
	for j, wc := range byID {
		if wc != nil {
			pr.w.Column(uint8(j), wc.Values, wc.Absent, cols[j].Div)
		}
	}
	return pr.w.Finish(dst, chunk.None)
}

// encodeExt appends to dst a chunk (ExtColumns) of each column of s that
// encode left in pr.ext, and adds them to out (their data in dst, which
// they keep: dst is not reused).
func (pr *Preparer) encodeExt(dst []byte, b *wire.Batch, s *wire.Series, out *[]SeriesChunk) []byte {
	for _, wc := range pr.ext {
		metric := b.Metrics[wc.Metric]
		lo := len(dst)
		pr.w.Begin(s.Times)
		pr.w.Column(0, wc.Values, wc.Absent, 1)
		dst = pr.w.Finish(dst, chunk.None)
		c := SeriesChunk{Key: ExtKey(s.Key, metric), Metric: metric, TMin: s.Times[0], TMax: s.Times[len(s.Times)-1],
			N: len(s.Times), Data: dst[lo:len(dst):len(dst)]}
		if s.AttemptID != "" {
			c.Key, c.AttemptID = ExtKey(AttemptKey(s.AttemptID), metric), s.AttemptID
		}
		*out = append(*out, c)
	}
	return dst
}

// SummarizeBatch is what a validated batch says of the summary of each
// attempt it has samples of (what Prepare puts in Prepared.Atts), for
// MergeSummary; by attempt id.
func SummarizeBatch(b *wire.Batch) map[string]*AttemptSummary {
	out := make(map[string]*AttemptSummary, len(b.AttemptSeries))
	m := mapColumns(b.Metrics, AttemptColumns)
	for si := range b.AttemptSeries {
		summarizeInto(out, &b.AttemptSeries[si], m)
	}
	return out
}

// summarizeInto adds attempt series s (of a batch whose metrics map to
// AttemptColumns by m) to its attempt's summary in atts.
func summarizeInto(atts map[string]*AttemptSummary, s *wire.Series, m []int) {
	sum := atts[s.AttemptID]
	if sum == nil {
		sum = &AttemptSummary{}
		atts[s.AttemptID] = sum
	}
	summarize(sum, s, m)
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
		sum.SchedWaitMs = v / 1_000_000
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

// SummarizePoints is what the points of an attempt series after a time
// (stored units) say of its summary, in the units of AttemptSummary; nil if
// there are none.
func SummarizePoints(p *Points, after int64) *AttemptSummary {
	first := 0
	for first < len(p.Times) && p.Times[first] <= after {
		first++
	}
	if first == len(p.Times) {
		return nil
	}
	sum := &AttemptSummary{}
	last := func(j int) (int64, bool) {
		for i := len(p.Times) - 1; i >= first; i-- {
			if p.present(j, i) {
				return p.Cols[j][i] * AttemptColumns[j].Div, true
			}
		}
		return 0, false
	}
	peak := func(j int) int64 {
		var m int64
		for i := first; i < len(p.Times); i++ {
			if p.present(j, i) {
				m = max(m, p.Cols[j][i]*AttemptColumns[j].Div)
			}
		}
		return m
	}
	if v, ok := last(aCPU); ok {
		sum.CPUMs = v
	}
	if v, ok := last(aRead); ok {
		sum.ReadBytes = v
	}
	if v, ok := last(aWrite); ok {
		sum.WriteBytes = v
	}
	if v, ok := last(aGC); ok {
		sum.GCTimeMs = v
	}
	if v, ok := last(aWait); ok {
		sum.SchedWaitMs = v / 1_000_000
	}
	sum.PeakRSS, sum.PeakPSS, sum.PeakVMS, sum.PeakHeap = peak(aRSS), peak(aPSS), peak(aVMS), peak(aHeap)
	var pt, pv int64
	for i := first; i < len(p.Times); i++ {
		if !p.present(aRSS, i) {
			continue
		}
		t, v := p.Times[i], p.Cols[aRSS][i]*1024
		if pt == 0 {
			sum.FirstMs, sum.FirstRSS = t, v
		} else {
			sum.RSSByteMs += float64(v+pv) / 2 * float64(t-pt)
		}
		pt, pv = t, v
	}
	if pt > 0 {
		sum.LastRSS = pv
	}
	sum.LastMs = p.Times[len(p.Times)-1]
	return sum
}
