package agent

import (
	"github.com/taskscope/taskscope/internal/wire"
)

// builder is the tracker's Sink: it accumulates one batch, keeping each
// process's and attempt's samples as columns. Its buffers serve batch after
// batch (a node's processes mostly live through many): the columns of a
// series that had samples in a batch are kept for the next, those of one
// that had none are dropped.
type builder struct {
	procMetrics []string // tracker order
	attMetrics  []string
	procIdx     []uint32 // tracker metric i -> index in names
	attIdx      []uint32
	names       []string

	processes    map[uint64]wire.Process // latest record per process
	procOrder    []uint64
	attempts     map[string]wire.Attempt
	attOrder     []string
	members      []wire.Membership
	events       []wire.Event
	procSer      map[uint64]*seriesBuf
	procSerOrder []uint64
	attSer       map[string]*seriesBuf
	attSerOrder  []string
	samples      int
	firstMs      int64
	// spare are emptied buffers of short series (under churn, processes
	// seen at a tick or two), for new series to take.
	spare []*seriesBuf
	// out is the batch take returns, its slices and its series' columns
	// (cols) kept for the next: a batch is encoded before the next sample.
	out  wire.Batch
	cols []wire.Column
}

// maxSpare bounds the spare buffers (each of at most spareCap samples).
const (
	maxSpare = 256
	spareCap = 8
)

// seriesFirst is how many samples a new series's columns hold before each
// grows on its own: they start as parts of one array.
const seriesFirst = 4

// newSeries is a buffer for a series of n metrics: a spare one, or a new
// one whose columns share one array (two allocations for all, not one per
// column).
func (b *builder) newSeries(n int) *seriesBuf {
	if k := len(b.spare); k > 0 && len(b.spare[k-1].cols) == n {
		s := b.spare[k-1]
		b.spare[k-1] = nil
		b.spare = b.spare[:k-1]
		return s
	}
	vals := make([]int64, n*seriesFirst)
	bits := make([]byte, n)
	s := &seriesBuf{times: make([]int64, 0, seriesFirst), cols: make([][]int64, n), absent: make([][]byte, n)}
	for i := range s.cols {
		s.cols[i] = vals[i*seriesFirst : i*seriesFirst : (i+1)*seriesFirst]
		s.absent[i] = bits[i : i : i+1]
	}
	return s
}

// drop lets a series's buffer go, to the spares if it is a short one's.
func (b *builder) drop(s *seriesBuf) {
	if len(b.spare) < maxSpare && cap(s.times) <= spareCap {
		b.spare = append(b.spare, s)
	}
}

type seriesBuf struct {
	times  []int64
	cols   [][]int64
	absent [][]byte // empty until a value is missing
}

// recycle empties the buffer for the next batch, keeping its memory; it
// reports whether the buffer had samples (else it is to be dropped).
func (s *seriesBuf) recycle() bool {
	if len(s.times) == 0 {
		return false
	}
	s.times = s.times[:0]
	for i := range s.cols {
		s.cols[i] = s.cols[i][:0]
		s.absent[i] = s.absent[i][:0]
	}
	return true
}

func newBuilder(procMetrics, attMetrics []string) *builder {
	b := &builder{procMetrics: procMetrics, attMetrics: attMetrics}
	pos := map[string]uint32{}
	add := func(m string) uint32 {
		if i, ok := pos[m]; ok {
			return i
		}
		i := uint32(len(b.names))
		pos[m] = i
		b.names = append(b.names, m)
		return i
	}
	for _, m := range procMetrics {
		b.procIdx = append(b.procIdx, add(m))
	}
	for _, m := range attMetrics {
		b.attIdx = append(b.attIdx, add(m))
	}
	b.reset()
	return b
}

func (b *builder) reset() {
	if b.processes == nil {
		b.processes, b.attempts = map[uint64]wire.Process{}, map[string]wire.Attempt{}
		b.procSer, b.attSer = map[uint64]*seriesBuf{}, map[string]*seriesBuf{}
	}
	clear(b.processes)
	b.procOrder = b.procOrder[:0]
	clear(b.attempts)
	b.attOrder = b.attOrder[:0]
	b.members = b.members[:0]
	b.events = b.events[:0]
	for k, s := range b.procSer {
		if !s.recycle() {
			delete(b.procSer, k)
			b.drop(s)
		}
	}
	b.procSerOrder = b.procSerOrder[:0]
	for k, s := range b.attSer {
		if !s.recycle() {
			delete(b.attSer, k)
		}
	}
	b.attSerOrder = b.attSerOrder[:0]
	b.samples = 0
	b.firstMs = 0
}

func (b *builder) empty() bool {
	return b.samples == 0 && len(b.processes) == 0 && len(b.attempts) == 0 && len(b.events) == 0 && len(b.members) == 0
}

func (b *builder) Process(p *wire.Process) {
	if _, ok := b.processes[p.Key]; !ok {
		b.procOrder = append(b.procOrder, p.Key)
	}
	b.processes[p.Key] = *p
}

func (b *builder) Attempt(a *wire.Attempt) {
	if _, ok := b.attempts[a.AttemptID]; !ok {
		b.attOrder = append(b.attOrder, a.AttemptID)
	}
	b.attempts[a.AttemptID] = *a
}

func (b *builder) Membership(m *wire.Membership) { b.members = append(b.members, *m) }

func (b *builder) Event(e *wire.Event) { b.events = append(b.events, *e) }

func (b *builder) ProcessSample(key uint64, ms int64, vals []int64, present uint64) {
	s := b.procSer[key]
	if s == nil {
		s = b.newSeries(len(vals))
		b.procSer[key] = s
	}
	if len(s.times) == 0 {
		b.procSerOrder = append(b.procSerOrder, key)
	}
	s.add(ms, vals, present)
	b.samples++
	if b.firstMs == 0 {
		b.firstMs = ms
	}
}

func (b *builder) AttemptSample(id string, ms int64, vals []int64, present uint64) {
	s := b.attSer[id]
	if s == nil {
		s = b.newSeries(len(vals))
		b.attSer[id] = s
	}
	if len(s.times) == 0 {
		b.attSerOrder = append(b.attSerOrder, id)
	}
	if n := len(s.times); n > 0 && s.times[n-1] >= ms {
		// An attempt that switched and ended in one tick reports twice: keep the last.
		s.times = s.times[:n-1]
		for i := range s.cols {
			s.cols[i] = s.cols[i][:n-1]
		}
	}
	s.add(ms, vals, present)
	if b.firstMs == 0 {
		b.firstMs = ms
	}
}

func (s *seriesBuf) add(ms int64, vals []int64, present uint64) {
	n := len(s.times)
	s.times = append(s.times, ms)
	for i, v := range vals {
		if present&(1<<uint(i)) == 0 {
			v = 0
			for len(s.absent[i]) <= n/8 {
				s.absent[i] = append(s.absent[i], 0)
			}
			s.absent[i][n/8] |= 1 << (n % 8)
		}
		s.cols[i] = append(s.cols[i], v)
	}
}

// take returns the batch built so far (without agent id and seq) and starts
// a new one. The batch is the builder's, and shares its buffers: it is
// valid until the next sample (the agent encodes it at once).
func (b *builder) take(host string, stats wire.AgentStats) *wire.Batch {
	out := &b.out
	*out = wire.Batch{Version: wire.Version, Host: host, Metrics: b.names, Stats: stats,
		Processes: out.Processes[:0], Attempts: out.Attempts[:0], ProcSeries: out.ProcSeries[:0], AttemptSeries: out.AttemptSeries[:0]}
	for _, k := range b.procOrder {
		out.Processes = append(out.Processes, b.processes[k])
	}
	for _, k := range b.attOrder {
		out.Attempts = append(out.Attempts, b.attempts[k])
	}
	out.Members = b.members
	out.Events = b.events
	// The columns of every series, in one array.
	n := 0
	for _, k := range b.procSerOrder {
		n += len(b.procSer[k].cols)
	}
	for _, k := range b.attSerOrder {
		n += len(b.attSer[k].cols)
	}
	if cap(b.cols) < n {
		b.cols = make([]wire.Column, 0, n)
	}
	cols := b.cols[:0]
	for _, k := range b.procSerOrder {
		var s wire.Series
		s, cols = b.procSer[k].series(b.procIdx, wire.Series{Key: k}, cols)
		out.ProcSeries = append(out.ProcSeries, s)
	}
	for _, k := range b.attSerOrder {
		var s wire.Series
		s, cols = b.attSer[k].series(b.attIdx, wire.Series{AttemptID: k}, cols)
		out.AttemptSeries = append(out.AttemptSeries, s)
	}
	b.reset()
	return out
}

// series is the buffer as a wire series, its columns appended to cols
// (returned, with them).
func (s *seriesBuf) series(idx []uint32, out wire.Series, cols []wire.Column) (wire.Series, []wire.Column) {
	out.Times = s.times
	n := len(s.times)
	start := len(cols)
	for i, col := range s.cols {
		c := wire.Column{Metric: idx[i], Values: col}
		if a := s.absent[i]; len(a) > 0 {
			for len(a) < (n+7)/8 {
				a = append(a, 0)
			}
			allAbsent := true
			for j := 0; j < n; j++ {
				if a[j/8]&(1<<(j%8)) == 0 {
					allAbsent = false
					break
				}
			}
			if allAbsent {
				continue // the metric was never read for this series
			}
			c.Absent = a
		}
		cols = append(cols, c)
	}
	out.Columns = cols[start:len(cols):len(cols)]
	return out, cols
}
