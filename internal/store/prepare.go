package store

import (
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
	{"d_cpu_user_ms", wire.CPUUserMs, true, 1},
	{"d_cpu_sys_ms", wire.CPUSysMs, true, 1},
	{"d_cpu_children_user_ms", wire.CPUChildUserMs, true, 1},
	{"d_cpu_children_sys_ms", wire.CPUChildSysMs, true, 1},
	{"rss_kb", wire.RSSBytes, false, 1024},
	{"vms_kb", wire.VMSBytes, false, 1024},
	{"pss_kb", wire.PSSBytes, false, 1024},
	{"threads", wire.Threads, false, 1},
	{"d_minflt", wire.MinorFaults, true, 1},
	{"d_majflt", wire.MajorFaults, true, 1},
	{"d_read_bytes", wire.ReadBytes, true, 1},
	{"d_write_bytes", wire.WriteBytes, true, 1},
	{"d_rchar", wire.ReadChars, true, 1},
	{"d_wchar", wire.WriteChars, true, 1},
	{"d_ctx_voluntary", wire.CtxVoluntary, true, 1},
	{"d_ctx_involuntary", wire.CtxInvoluntary, true, 1},
	{"d_sched_run_us", wire.SchedRunNs, true, 1000},
	{"d_sched_wait_us", wire.SchedWaitNs, true, 1000},
	{"fds", wire.FDs, false, 1},
	{"heap_used_kb", wire.HeapUsedBytes, false, 1024},
	{"heap_committed_kb", wire.HeapCommitBytes, false, 1024},
	{"heap_max_kb", wire.HeapMaxBytes, false, 1024},
	{"d_gc_count", wire.GCCount, true, 1},
	{"d_gc_time_ms", wire.GCTimeMs, true, 1},
	{"jvm_threads", wire.JVMThreads, false, 1},
}

// AttemptColumns are the stored columns of attempt samples, in order.
var AttemptColumns = []StoredColumn{
	{"d_cpu_ms", wire.AttemptCPUMs, true, 1},
	{"rss_kb", wire.AttemptRSSBytes, false, 1024},
	{"pss_kb", wire.AttemptPSSBytes, false, 1024},
	{"vms_kb", wire.AttemptVMSBytes, false, 1024},
	{"processes", wire.AttemptProcesses, false, 1},
	{"d_read_bytes", wire.AttemptReadBytes, true, 1},
	{"d_write_bytes", wire.AttemptWriteBytes, true, 1},
	{"heap_used_kb", wire.AttemptHeapUsed, false, 1024},
	{"d_gc_time_ms", wire.AttemptGCTimeMs, true, 1},
	{"d_sched_wait_us", wire.AttemptSchedWaitNs, true, 1000},
}

// Positions of the columns that summaries read.
var (
	sCPUUser  = ColumnIndex(SampleColumns, "d_cpu_user_ms")
	sCPUSys   = ColumnIndex(SampleColumns, "d_cpu_sys_ms")
	sCPUCUser = ColumnIndex(SampleColumns, "d_cpu_children_user_ms")
	sCPUCSys  = ColumnIndex(SampleColumns, "d_cpu_children_sys_ms")
	sRSS      = ColumnIndex(SampleColumns, "rss_kb")
	sVMS      = ColumnIndex(SampleColumns, "vms_kb")
	sPSS      = ColumnIndex(SampleColumns, "pss_kb")
	sThreads  = ColumnIndex(SampleColumns, "threads")
	sRead     = ColumnIndex(SampleColumns, "d_read_bytes")
	sWrite    = ColumnIndex(SampleColumns, "d_write_bytes")
	aCPU      = ColumnIndex(AttemptColumns, "d_cpu_ms")
	aRSS      = ColumnIndex(AttemptColumns, "rss_kb")
	aPSS      = ColumnIndex(AttemptColumns, "pss_kb")
	aVMS      = ColumnIndex(AttemptColumns, "vms_kb")
	aRead     = ColumnIndex(AttemptColumns, "d_read_bytes")
	aWrite    = ColumnIndex(AttemptColumns, "d_write_bytes")
	aHeap     = ColumnIndex(AttemptColumns, "heap_used_kb")
	aGC       = ColumnIndex(AttemptColumns, "d_gc_time_ms")
	aWait     = ColumnIndex(AttemptColumns, "d_sched_wait_us")
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

// SeriesState is what ingest must remember of a series between batches: the
// last cumulative value of each counter (in stored units), to turn the next
// batch's values into increments.
type SeriesState struct {
	Last      []int64 // one per stored column; meaningful for counters
	Have      []bool
	LastMs    int64
	LastRSSKB int64 // attempts: for the RSS time integral
}

// NewSeriesState makes an empty state for cols.
func NewSeriesState(cols []StoredColumn) *SeriesState {
	return &SeriesState{Last: make([]int64, len(cols)), Have: make([]bool, len(cols))}
}

func (s *SeriesState) clone() *SeriesState {
	c := &SeriesState{Last: append([]int64(nil), s.Last...), Have: append([]bool(nil), s.Have...), LastMs: s.LastMs, LastRSSKB: s.LastRSSKB}
	return c
}

// Rows is a columnar block of samples ready to append. Null[i][r] marks a
// missing value of column i at row r.
type Rows struct {
	Keys       []uint64 // process samples
	AttemptIDs []string // attempt samples
	JobIDs     []string // attempt samples
	Times      []int64
	Cols       [][]int64
	Null       [][]bool
}

// Len is the number of rows.
func (r *Rows) Len() int { return len(r.Times) }

// ExtRow is a sample of a metric that has no column of its own.
type ExtRow struct {
	Key    uint64
	Ms     int64
	Metric string
	Value  int64
}

// ProcSummary is what one batch says of a process's summary.
type ProcSummary struct {
	LastMs     int64
	Samples    int64
	PeakRSS    int64 // bytes
	PeakPSS    int64
	PeakVMS    int64
	MaxThreads int64
	CPUMs      int64 // cumulative, own
	ChildCPUMs int64
	ReadBytes  int64
	WriteBytes int64
	State      *SeriesState
}

// AttemptSummary is what one batch says of an attempt's summary.
type AttemptSummary struct {
	JobID       string
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
	State       *SeriesState
}

// Prepared is a batch turned into rows and summary updates.
type Prepared struct {
	Batch      *wire.Batch
	Samples    Rows
	Ext        []ExtRow
	AttSamples Rows
	Procs      map[uint64]*ProcSummary
	Atts       map[string]*AttemptSummary
}

// Prepare turns a validated batch into rows. procState and attState return
// the remembered state of a series (nil when there is none: the series is
// new). Prepare does not modify the states it is given; the new ones are in
// the summaries, for the store to keep once the transaction commits.
func Prepare(b *wire.Batch, procState func(uint64) *SeriesState, attState func(string) *SeriesState, attJob func(string) string) *Prepared {
	p := &Prepared{Batch: b, Procs: map[uint64]*ProcSummary{}, Atts: map[string]*AttemptSummary{}}
	procMap := mapColumns(b.Metrics, SampleColumns)
	attMap := mapColumns(b.Metrics, AttemptColumns)
	p.Samples.Cols, p.Samples.Null = makeCols(len(SampleColumns), b.SampleCount())
	for si := range b.ProcSeries {
		s := &b.ProcSeries[si]
		st := procState(s.Key)
		if st == nil {
			st = NewSeriesState(SampleColumns)
		} else {
			st = st.clone()
		}
		sum := p.Procs[s.Key]
		if sum == nil {
			sum = &ProcSummary{}
			p.Procs[s.Key] = sum
		}
		byCol := make([]*wire.Column, len(SampleColumns))
		for ci := range s.Columns {
			c := &s.Columns[ci]
			if j := procMap[c.Metric]; j >= 0 {
				byCol[j] = c
			} else {
				for r, t := range s.Times {
					if !c.IsAbsent(r) {
						p.Ext = append(p.Ext, ExtRow{Key: s.Key, Ms: t, Metric: b.Metrics[c.Metric], Value: c.Values[r]})
					}
				}
			}
		}
		for r, t := range s.Times {
			p.Samples.Keys = append(p.Samples.Keys, s.Key)
			p.Samples.Times = append(p.Samples.Times, t)
			for j, col := range SampleColumns {
				c := byCol[j]
				if c == nil || c.IsAbsent(r) {
					p.Samples.Cols[j] = append(p.Samples.Cols[j], 0)
					p.Samples.Null[j] = append(p.Samples.Null[j], true)
					continue
				}
				v := c.Values[r] / col.Div
				if col.Counter {
					v = st.increment(j, v)
				}
				p.Samples.Cols[j] = append(p.Samples.Cols[j], v)
				p.Samples.Null[j] = append(p.Samples.Null[j], false)
			}
			st.LastMs = t
		}
		sum.LastMs = max(sum.LastMs, st.LastMs)
		sum.Samples += int64(len(s.Times))
		sum.PeakRSS = max(sum.PeakRSS, colMax(byCol[sRSS], len(s.Times)))
		sum.PeakVMS = max(sum.PeakVMS, colMax(byCol[sVMS], len(s.Times)))
		sum.PeakPSS = max(sum.PeakPSS, colMax(byCol[sPSS], len(s.Times)))
		sum.MaxThreads = max(sum.MaxThreads, colMax(byCol[sThreads], len(s.Times)))
		sum.CPUMs = st.Last[sCPUUser] + st.Last[sCPUSys]
		sum.ChildCPUMs = st.Last[sCPUCUser] + st.Last[sCPUCSys]
		sum.ReadBytes, sum.WriteBytes = st.Last[sRead], st.Last[sWrite]
		sum.State = st
	}
	n := 0
	for i := range b.AttemptSeries {
		n += len(b.AttemptSeries[i].Times)
	}
	p.AttSamples.Cols, p.AttSamples.Null = makeCols(len(AttemptColumns), n)
	for si := range b.AttemptSeries {
		s := &b.AttemptSeries[si]
		st := attState(s.AttemptID)
		if st == nil {
			st = NewSeriesState(AttemptColumns)
		} else {
			st = st.clone()
		}
		job := attJob(s.AttemptID)
		sum := p.Atts[s.AttemptID]
		if sum == nil {
			sum = &AttemptSummary{JobID: job}
			p.Atts[s.AttemptID] = sum
		}
		byCol := make([]*wire.Column, len(AttemptColumns))
		for ci := range s.Columns {
			c := &s.Columns[ci]
			if j := attMap[c.Metric]; j >= 0 {
				byCol[j] = c
			}
		}
		for r, t := range s.Times {
			p.AttSamples.AttemptIDs = append(p.AttSamples.AttemptIDs, s.AttemptID)
			p.AttSamples.JobIDs = append(p.AttSamples.JobIDs, job)
			p.AttSamples.Times = append(p.AttSamples.Times, t)
			for j, col := range AttemptColumns {
				c := byCol[j]
				if c == nil || c.IsAbsent(r) {
					p.AttSamples.Cols[j] = append(p.AttSamples.Cols[j], 0)
					p.AttSamples.Null[j] = append(p.AttSamples.Null[j], true)
					continue
				}
				v := c.Values[r] / col.Div
				if col.Counter {
					v = st.increment(j, v)
				}
				p.AttSamples.Cols[j] = append(p.AttSamples.Cols[j], v)
				p.AttSamples.Null[j] = append(p.AttSamples.Null[j], false)
			}
			if c := byCol[aRSS]; c != nil && !c.IsAbsent(r) {
				rss := c.Values[r] / 1024
				if st.LastMs > 0 && t > st.LastMs {
					// Trapezoids of RSS over time, in byte-milliseconds.
					sum.RSSByteMs += float64(rss+st.LastRSSKB) / 2 * 1024 * float64(t-st.LastMs)
				}
				st.LastRSSKB = rss
			}
			st.LastMs = t
		}
		sum.LastMs = max(sum.LastMs, st.LastMs)
		sum.PeakRSS = max(sum.PeakRSS, colMax(byCol[aRSS], len(s.Times)))
		sum.PeakPSS = max(sum.PeakPSS, colMax(byCol[aPSS], len(s.Times)))
		sum.PeakVMS = max(sum.PeakVMS, colMax(byCol[aVMS], len(s.Times)))
		sum.PeakHeap = max(sum.PeakHeap, colMax(byCol[aHeap], len(s.Times)))
		sum.CPUMs = st.Last[aCPU]
		sum.ReadBytes, sum.WriteBytes = st.Last[aRead], st.Last[aWrite]
		sum.GCTimeMs, sum.SchedWaitUs = st.Last[aGC], st.Last[aWait]
		sum.State = st
	}
	return p
}

// increment turns a cumulative value into the increment since the last
// one. A value lower than the last is a reset (a new process under a reused
// series key cannot happen, but a JVM's perf counters can restart): the
// increment is then the value itself, as Prometheus does.
func (s *SeriesState) increment(j int, v int64) int64 {
	d := v
	if s.Have[j] {
		d = v - s.Last[j]
		if d < 0 {
			d = v
		}
	}
	s.Last[j], s.Have[j] = v, true
	return d
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

func makeCols(n, capacity int) ([][]int64, [][]bool) {
	cols := make([][]int64, n)
	null := make([][]bool, n)
	for i := range cols {
		cols[i] = make([]int64, 0, capacity)
		null[i] = make([]bool, 0, capacity)
	}
	return cols, null
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
