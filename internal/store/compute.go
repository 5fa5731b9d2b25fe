package store

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/taskscope/taskscope/internal/store/chunk"
)

// Points is one series decoded: times and, per stored column (schema
// order), its values (stored units, counters cumulative). Absent[j] is nil
// when column j has every value.
type Points struct {
	Times  []int64
	Cols   [][]int64
	Absent [][]bool
	Has    []bool // the column appears at all
}

// Decode merges the chunks of one series (any order, possibly overlapping)
// into time order; a time seen twice keeps its first occurrence in chunk
// order. cols is the series' schema.
func Decode(chunks [][]byte, cols []StoredColumn) (*Points, error) {
	if p, ok, err := decodeInOrder(chunks, cols, nil); ok || err != nil {
		return p, err
	}
	return decodeMerge(chunks, cols)
}

// decodeMerge is Decode of chunks in any order: all are decoded, then
// merged.
func decodeMerge(chunks [][]byte, cols []StoredColumn) (*Points, error) {
	cs := make([]*chunk.Chunk, 0, len(chunks))
	var dec chunk.Decoder
	for _, data := range chunks {
		c, err := dec.Decode(data)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return mergeChunks(cs, cols)
}

// mergeChunks is decodeMerge of chunks decoded (cs is reordered).
func mergeChunks(all []*chunk.Chunk, cols []StoredColumn) (*Points, error) {
	cs := all[:0]
	for _, c := range all {
		for _, col := range c.Columns {
			if int(col.ID) >= len(cols) {
				return nil, fmt.Errorf("%w: column %d of %d", chunk.ErrCorrupt, col.ID, len(cols))
			}
		}
		if len(c.Times) > 0 {
			cs = append(cs, c)
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Times[0] < cs[j].Times[0] })
	runs, total := mergeRuns(cs)
	p := &Points{Times: make([]int64, 0, total), Cols: make([][]int64, len(cols)), Absent: make([][]bool, len(cols)),
		Has: make([]bool, len(cols))}
	absent := make([][]bool, len(cols))
	for _, r := range runs {
		c := cs[r.k]
		base := len(p.Times)
		p.Times = append(p.Times, c.Times[r.from:r.to]...)
		for _, col := range c.Columns {
			j := col.ID
			if !p.Has[j] {
				p.Has[j] = true
				p.Cols[j] = make([]int64, total)
				absent[j] = make([]bool, total)
				for i := range absent[j] {
					absent[j][i] = true
				}
			}
			for i := r.from; i < r.to; i++ {
				p.Cols[j][base+i-r.from] = col.Values[i]
				absent[j][base+i-r.from] = col.Absent != nil && col.Absent[i]
			}
		}
	}
	for j := range cols {
		if !p.Has[j] {
			continue
		}
		for _, a := range absent[j] {
			if a {
				p.Absent[j] = absent[j]
				break
			}
		}
	}
	return p, nil
}

// mergeRun is samples [from, to) of chunk k, read in this order.
type mergeRun struct{ k, from, to int }

// mergeRuns is the order mergeChunks reads cs' samples in (cs sorted by
// their first time), and how many: every time once, that of the chunk
// that starts first where two chunks hold it. Chunks that do not overlap
// are read whole, one after the other; where they do (a chunk that came
// late, with times within another's, or written twice), sample by sample
// in time order: a chunk's times within another's are not all its
// duplicates (TestLateSampleBeforeCompaction).
func mergeRuns(cs []*chunk.Chunk) ([]mergeRun, int) {
	runs := make([]mergeRun, 0, len(cs))
	last, total := int64(math.MinInt64), 0
	for k, c := range cs {
		if c.Times[0] <= last {
			return mergeSamples(cs)
		}
		runs = append(runs, mergeRun{k, 0, len(c.Times)})
		last, total = c.Times[len(c.Times)-1], total+len(c.Times)
	}
	return runs, total
}

// mergeSamples is mergeRuns of chunks that overlap.
func mergeSamples(cs []*chunk.Chunk) ([]mergeRun, int) {
	type at struct {
		t    int64
		k, i int
	}
	var all []at
	for k, c := range cs {
		for i, t := range c.Times {
			all = append(all, at{t, k, i})
		}
	}
	slices.SortStableFunc(all, func(a, b at) int { return cmp.Compare(a.t, b.t) })
	var runs []mergeRun
	total := 0
	for x, a := range all {
		if x > 0 && a.t == all[x-1].t {
			continue
		}
		total++
		if n := len(runs); n > 0 && runs[n-1].k == a.k && runs[n-1].to == a.i {
			runs[n-1].to++
			continue
		}
		runs = append(runs, mergeRun{a.k, a.i, a.i + 1})
	}
	return runs, total
}

// Decoder decodes series one after another into the same arrays, for a
// caller that is done with each series' points before it decodes the next
// (compaction): a compaction of some 100,000 series otherwise allocates
// their every column anew. The zero value is ready.
type Decoder struct {
	dec    chunk.Decoder
	c      chunk.Chunk
	p      Points
	cols   [][]int64
	absent [][]bool
	in     []bool
}

// Decode is Decode (the package function), into d's arrays: the points are
// valid until the next call.
func (d *Decoder) Decode(chunks [][]byte, cols []StoredColumn) (*Points, error) {
	if p, ok, err := decodeInOrder(chunks, cols, d); ok || err != nil {
		return p, err
	}
	return decodeMerge(chunks, cols)
}

// DecodeColumns is Decode of the columns want at least (bit j: cols[j];
// 0: all): a chunk that lets a reader stop once it has them (format 3,
// chunk.Decoder.Want) is decoded no further. The points may hold some
// other columns too; those after the last one wanted are left out.
func (d *Decoder) DecodeColumns(chunks [][]byte, cols []StoredColumn, want uint64) (*Points, error) {
	d.dec.Want = want
	defer func() { d.dec.Want = 0 }()
	return d.Decode(chunks, cols)
}

// decodeInOrder is Decode of chunks that come in time order without
// overlapping (as queries and compaction read them): each is decoded into
// one reused chunk and appended, rather than all decoded first. ok is
// false, with nothing decoded, for chunks out of order (or a column twice
// in a chunk): Decode then merges them. With d, the points are made in d's
// arrays; without, in new ones.
func decodeInOrder(chunks [][]byte, cols []StoredColumn, d *Decoder) (p *Points, ok bool, err error) {
	if d == nil {
		d = &Decoder{}
	}
	// Earlier series' points are dropped: their arrays are reused.
	nc := len(cols)
	d.p = Points{Times: d.p.Times[:0], Cols: slices.Grow(d.p.Cols[:0], nc)[:nc], Absent: slices.Grow(d.p.Absent[:0], nc)[:nc],
		Has: slices.Grow(d.p.Has[:0], nc)[:nc]}
	p = &d.p
	clear(p.Cols)
	clear(p.Absent)
	clear(p.Has)
	dec, c := &d.dec, &d.c
	if len(d.cols) < len(cols) {
		d.cols = append(d.cols, make([][]int64, len(cols)-len(d.cols))...)
		d.absent = append(d.absent, make([][]bool, len(cols)-len(d.absent))...)
	}
	absent := d.absent[:len(cols)]
	d.in = slices.Grow(d.in[:0], nc)[:nc]
	in := d.in
	last := int64(math.MinInt64)
	known := 0
	started := false
	for _, data := range chunks {
		n, ok := chunk.Samples(data)
		if !ok {
			known = 0
			break
		}
		known += n
	}
	for _, data := range chunks {
		if err := dec.DecodeTo(data, c); err != nil {
			return nil, false, err
		}
		for _, col := range c.Columns {
			if int(col.ID) >= len(cols) {
				return nil, false, fmt.Errorf("%w: column %d of %d", chunk.ErrCorrupt, col.ID, len(cols))
			}
		}
		n := len(c.Times)
		if n == 0 {
			continue
		}
		if c.Times[0] <= last {
			return nil, false, nil
		}
		last = c.Times[n-1]
		base := len(p.Times)
		if !started {
			// Room for all the samples at once where the chunks' headers
			// say how many (compaction's fresh chunks, uncompressed): not
			// doubling from five samples (the columns take this capacity).
			p.Times = slices.Grow(p.Times, max(n, known))
			started = true
		}
		p.Times = append(p.Times, c.Times...)
		clear(in)
		for _, col := range c.Columns {
			j := col.ID
			if in[j] {
				return nil, false, nil
			}
			in[j] = true
			if !p.Has[j] {
				p.Has[j] = true
				p.Cols[j] = slices.Grow(d.cols[j][:0], max(base+n, cap(p.Times)))[:base]
				clear(p.Cols[j])
				absent[j] = slices.Grow(d.absent[j][:0], cap(p.Cols[j]))[:base]
				for i := range absent[j] {
					absent[j][i] = true
				}
			}
			p.Cols[j] = append(p.Cols[j], col.Values...)
			if col.Absent != nil {
				absent[j] = append(absent[j], col.Absent...)
			} else {
				absent[j] = append(absent[j], make([]bool, n)...)
			}
		}
		for j := range cols {
			if p.Has[j] && !in[j] {
				p.Cols[j] = append(p.Cols[j], make([]int64, n)...)
				for i := 0; i < n; i++ {
					absent[j] = append(absent[j], true)
				}
			}
		}
	}
	if p.Times == nil {
		p.Times = []int64{}
	}
	for j := range cols {
		if !p.Has[j] {
			continue // (absent[j] is another series')
		}
		d.cols[j], d.absent[j] = p.Cols[j], absent[j] // (grown: kept for the next series)
		if slices.Contains(absent[j], true) {
			p.Absent[j] = absent[j]
		}
	}
	return p, true, nil
}

// present reports whether column j has a value at i.
func (p *Points) present(j, i int) bool {
	return p.Has[j] && (p.Absent[j] == nil || !p.Absent[j][i])
}

// Last is the last present value of column j, and whether there is one.
func (p *Points) Last(j int) (int64, bool) {
	for i := len(p.Times) - 1; i >= 0; i-- {
		if p.present(j, i) {
			return p.Cols[j][i], true
		}
	}
	return 0, false
}

// Max is the largest present value of column j (0 if none).
func (p *Points) Max(j int) int64 {
	var m int64
	for i := range p.Times {
		if p.present(j, i) && p.Cols[j][i] > m {
			m = p.Cols[j][i]
		}
	}
	return m
}

// sum is the sum of columns idx at i, and whether any was present.
func (p *Points) sum(idx []int, i int) (int64, bool) {
	var v int64
	ok := false
	for _, j := range idx {
		if p.present(j, i) {
			v += p.Cols[j][i]
			ok = true
		}
	}
	return v, ok
}

type resolved struct {
	m    SeriesMetric
	cols []int
}

func resolve(metrics []SeriesMetric, cols []StoredColumn) []resolved {
	out := make([]resolved, len(metrics))
	for i, m := range metrics {
		out[i].m = m
		for _, name := range m.Columns {
			if j := ColumnIndex(cols, name); j >= 0 {
				out[i].cols = append(out[i].cols, j)
			}
		}
	}
	return out
}

// NeedsEarlier reports whether points read from some time before from lack,
// for a rate of metrics (a series of cols), the value before from that the
// rate's first increment in the window is taken from: its first value is at
// or after from. (A gauge needs none.) A store that reads a window with a
// short lookback reads further back when it does.
func NeedsEarlier(p *Points, from int64, metrics []SeriesMetric, cols []StoredColumn) bool {
	return needsEarlier(p, from, resolve(metrics, cols))
}

func needsEarlier(p *Points, from int64, rs []resolved) bool {
	for _, r := range rs {
		if !r.m.Rate {
			continue
		}
		for i, t := range p.Times {
			if _, ok := p.sum(r.cols, i); ok {
				if t >= from {
					return true
				}
				break
			}
		}
	}
	return false
}

// accum collects one series' bucket sums.
type accum struct {
	inc, dt, gauge []float64
	has            []bool
}

func newAccum(n int) *accum {
	a := &accum{inc: make([]float64, n), dt: make([]float64, n), gauge: make([]float64, n), has: make([]bool, n)}
	for i := range a.gauge {
		a.gauge[i] = math.Inf(-1)
	}
	return a
}

// bucketize computes, for metric r over points p, each bucket's increments
// and covered time (rates) or peak (gauges). start is the series' own start
// (the base of its first sample's increment), 0 if unknown. It returns the
// first and last buckets it wrote (lo > hi: none).
func bucketize(q *SeriesQuery, p *Points, r resolved, start int64, a *accum) (lo, hi int) {
	n := len(a.has)
	lo, hi = n, -1
	var prevV, prevT int64
	havePrev := false
	first := true
	for i, t := range p.Times {
		v, ok := p.sum(r.cols, i)
		if !ok {
			continue
		}
		if r.m.Rate {
			var inc, dt int64
			switch {
			case havePrev:
				inc, dt = v-prevV, t-prevT
				if inc < 0 {
					inc = v // a reset
				}
			case first && start > 0 && t > start:
				inc, dt = v, t-start
			default:
				inc, dt = -1, 0 // no base: the first sample of a window counts from the next
			}
			prevV, prevT, havePrev = v, t, true
			first = false
			if t < q.From || t >= q.To || dt <= 0 || inc < 0 {
				continue
			}
			b := int((t - q.From) / q.Step)
			if b < n {
				a.inc[b] += float64(inc)
				a.dt[b] += float64(dt)
				a.has[b] = true
				lo, hi = min(lo, b), max(hi, b)
			}
			continue
		}
		first = false
		if t < q.From || t >= q.To {
			continue
		}
		b := int((t - q.From) / q.Step)
		if b < n {
			a.gauge[b] = math.Max(a.gauge[b], float64(v))
			a.has[b] = true
			lo, hi = min(lo, b), max(hi, b)
		}
	}
	return lo, hi
}

// reset empties buckets lo to hi of a, as newAccum makes them.
func (a *accum) reset(lo, hi int) {
	for b := lo; b <= hi; b++ {
		a.inc[b], a.dt[b], a.gauge[b], a.has[b] = 0, 0, math.Inf(-1), false
	}
}

// ComputeOne fills res (from NewSeriesResult) with the metrics of one
// process or attempt series: rates as increments over the time they cover,
// gauges as peaks.
func ComputeOne(q *SeriesQuery, res *SeriesResult, metrics []SeriesMetric, cols []StoredColumn, p *Points, start int64) {
	n := len(res.Times)
	for mi, r := range resolve(metrics, cols) {
		a := newAccum(n)
		bucketize(q, p, r, start, a)
		for b := 0; b < n; b++ {
			if !a.has[b] {
				continue
			}
			if r.m.Rate {
				if a.dt[b] > 0 {
					res.Series[mi].Values[b] = Float(a.inc[b] / a.dt[b] * r.m.Scale)
				}
			} else {
				res.Series[mi].Values[b] = Float(a.gauge[b] * r.m.Scale)
			}
		}
	}
}

// JobAccumulator sums attempts into a job's series: a rate is all the
// attempts' increments in the bucket over the bucket's width, a gauge the sum
// of each attempt's peak in it, and JobAttemptsMetric counts the attempts
// with data.
type JobAccumulator struct {
	q       *SeriesQuery
	metrics []resolved
	sums    [][]float64
	has     [][]bool
	count   []float64
	// An attempt's buckets while Add adds it, emptied again after (Add
	// looks at the buckets its points are in, not at all of them: a job
	// of 10,000 attempts of a few seconds each, over 600 buckets, made
	// and walked 10,000 × 6 × 600 of them, 1 GB a read).
	one  *accum
	seen []bool
}

// NewJobAccumulator starts a job's sums.
func NewJobAccumulator(q *SeriesQuery, metrics []SeriesMetric) *JobAccumulator {
	return newJobAccumulator(q, metrics, AttemptColumns)
}

// NewExtAccumulator starts a job's sums of the series (ExtColumns) of an
// ext metric of its attempts; Fill fills the metric alone.
func NewExtAccumulator(q *SeriesQuery, m SeriesMetric) *JobAccumulator {
	return newJobAccumulator(q, []SeriesMetric{m}, ExtColumns)
}

func newJobAccumulator(q *SeriesQuery, metrics []SeriesMetric, cols []StoredColumn) *JobAccumulator {
	n := q.Buckets()
	j := &JobAccumulator{q: q, metrics: resolve(metrics, cols), count: make([]float64, n), one: newAccum(n), seen: make([]bool, n)}
	for range metrics {
		j.sums = append(j.sums, make([]float64, n))
		j.has = append(j.has, make([]bool, n))
	}
	return j
}

// NeedsEarlier is NeedsEarlier for the accumulator's metrics.
func (j *JobAccumulator) NeedsEarlier(p *Points, from int64) bool {
	return needsEarlier(p, from, j.metrics)
}

// Add adds one attempt's points (start: the attempt's start).
func (j *JobAccumulator) Add(p *Points, start int64) {
	n := len(j.count)
	seen, a := j.seen, j.one
	seenLo, seenHi := n, -1
	for mi, r := range j.metrics {
		if r.m.Name == JobAttemptsMetric {
			continue
		}
		lo, hi := bucketize(j.q, p, r, start, a)
		for b := lo; b <= hi; b++ {
			if !a.has[b] {
				continue
			}
			seen[b] = true
			j.has[mi][b] = true
			if r.m.Rate {
				j.sums[mi][b] += a.inc[b]
			} else {
				j.sums[mi][b] += a.gauge[b]
			}
		}
		a.reset(lo, hi)
		seenLo, seenHi = min(seenLo, lo), max(seenHi, hi)
	}
	for _, t := range p.Times {
		if t >= j.q.From && t < j.q.To {
			if b := int((t - j.q.From) / j.q.Step); b < n {
				seen[b] = true
				seenLo, seenHi = min(seenLo, b), max(seenHi, b)
			}
		}
	}
	for b := seenLo; b <= seenHi; b++ {
		if seen[b] {
			j.count[b]++
			seen[b] = false
		}
	}
}

// Fill writes the sums into res.
func (j *JobAccumulator) Fill(res *SeriesResult) {
	for mi, r := range j.metrics {
		for b := range j.count {
			if r.m.Name == JobAttemptsMetric {
				if j.count[b] > 0 {
					res.Series[mi].Values[b] = Float(j.count[b])
				}
				continue
			}
			if !j.has[mi][b] {
				continue
			}
			v := j.sums[mi][b]
			if r.m.Rate {
				v /= float64(j.q.Step)
			}
			res.Series[mi].Values[b] = Float(v * r.m.Scale)
		}
	}
}

// ProcessSummary computes a process's summary from its points.
func ProcessSummary(p *Points, proc *Process) {
	var a ProcessAgg
	a.Add(p, math.MinInt64)
	a.Fill(proc)
}

// ProcessAgg is what a process's summary is made of: each column's last
// present value and peak, the count of samples and the last one's time.
// Aggregates of consecutive spans of time add up (Add the later span's
// points to the earlier's aggregate), so that a store can keep one and add
// only the samples that came since.
type ProcessAgg struct {
	Last    []int64
	HasLast []bool
	Max     []int64 // 0 if no present value is above 0 (as Points.Max)
	Samples int64
	LastMs  int64 // the last sample's time (Samples > 0)
}

// Add adds the samples of p (a process's points, in time order) after time
// after.
func (a *ProcessAgg) Add(p *Points, after int64) {
	if a.Last == nil {
		n := len(SampleColumns)
		a.Last, a.HasLast, a.Max = make([]int64, n), make([]bool, n), make([]int64, n)
	}
	i0, _ := slices.BinarySearch(p.Times, after+1)
	for j := range p.Cols {
		if j >= len(a.Last) || !p.Has[j] {
			continue
		}
		for i := i0; i < len(p.Times); i++ {
			if !p.present(j, i) {
				continue
			}
			v := p.Cols[j][i]
			a.Max[j] = max(a.Max[j], v)
			a.Last[j], a.HasLast[j] = v, true
		}
	}
	if n := len(p.Times); n > i0 {
		a.Samples += int64(n - i0)
		a.LastMs = p.Times[n-1]
	}
}

// Clone is a copy of a that Add to it leaves a as it is.
func (a *ProcessAgg) Clone() *ProcessAgg {
	c := *a
	c.Last, c.HasLast, c.Max = slices.Clone(a.Last), slices.Clone(a.HasLast), slices.Clone(a.Max)
	return &c
}

// Fill sets proc's summary from a.
func (a *ProcessAgg) Fill(proc *Process) {
	last := func(names ...string) int64 {
		var s int64
		for _, n := range names {
			if j := ColumnIndex(SampleColumns, n); j >= 0 && j < len(a.Last) && a.HasLast[j] {
				s += a.Last[j]
			}
		}
		return s
	}
	peak := func(name string) int64 {
		if j := ColumnIndex(SampleColumns, name); j >= 0 && j < len(a.Max) {
			return a.Max[j]
		}
		return 0
	}
	proc.CPUMs = last("cpu_user_ms", "cpu_sys_ms")
	proc.ChildCPUMs = last("cpu_children_user_ms", "cpu_children_sys_ms")
	proc.PeakRSS = peak("rss_kb") * 1024
	proc.PeakPSS = peak("pss_kb") * 1024
	proc.PeakVMS = peak("vms_kb") * 1024
	proc.MaxThreads = peak("threads")
	proc.ReadBytes = last("read_bytes")
	proc.WriteBytes = last("write_bytes")
	proc.SchedWaitMs = last("sched_wait_ms")
	proc.Samples = a.Samples
	if a.Samples > 0 {
		proc.LastSeen = Time(a.LastMs)
	}
}

// Downsample keeps one point per period: counters their last value in it,
// gauges their peak (for rollups).
func Downsample(p *Points, cols []StoredColumn, period int64) *chunk.Chunk {
	out := &chunk.Chunk{}
	type acc struct {
		v   int64
		set bool
	}
	for j := range cols {
		if p.Has[j] {
			out.Columns = append(out.Columns, chunk.Column{ID: uint8(j)})
		}
	}
	cur := int64(-1)
	accs := make([]acc, len(out.Columns))
	var lastT int64
	flush := func() {
		if cur < 0 {
			return
		}
		out.Times = append(out.Times, lastT)
		for k := range out.Columns {
			col := &out.Columns[k]
			col.Values = append(col.Values, accs[k].v)
			col.Absent = append(col.Absent, !accs[k].set)
			accs[k] = acc{}
		}
	}
	for i, t := range p.Times {
		if t/period != cur {
			flush()
			cur = t / period
		}
		lastT = t
		for k := range out.Columns {
			j := int(out.Columns[k].ID)
			if !p.present(j, i) {
				continue
			}
			v := p.Cols[j][i]
			if cols[j].Counter || !accs[k].set || v > accs[k].v {
				accs[k].v = v
			}
			accs[k].set = true
		}
	}
	flush()
	return out
}

// ToChunk turns points back into a chunk (for compaction).
func ToChunk(p *Points, cols []StoredColumn) *chunk.Chunk {
	c := &chunk.Chunk{Times: p.Times}
	for j := range cols {
		if !p.Has[j] {
			continue
		}
		c.Columns = append(c.Columns, chunk.Column{ID: uint8(j), Values: p.Cols[j], Absent: p.Absent[j]})
	}
	return c
}

// ColumnsOf are the stored columns of the series of a kind (KindProcess:
// SampleColumns, KindAttempt: AttemptColumns, the ext kinds: ExtColumns).
func ColumnsOf(kind int) []StoredColumn {
	switch kind {
	case KindProcess:
		return SampleColumns
	case KindAttempt:
		return AttemptColumns
	}
	return ExtColumns
}

// DecodeLevels decodes a series' chunks of columns cols: its raw ones
// (fresh and merged), and its rollups before the oldest raw sample.
func DecodeLevels(raw, rollup [][]byte, cols []StoredColumn) (*Points, error) {
	p, err := Decode(raw, cols)
	if err != nil {
		return nil, err
	}
	return withRollups(p, rollup, cols)
}

// DecodeLevelsOf is DecodeLevels of raw chunks already decoded (cs is
// reordered).
func DecodeLevelsOf(raw []*chunk.Chunk, rollup [][]byte, cols []StoredColumn) (*Points, error) {
	p, err := mergeChunks(raw, cols)
	if err != nil {
		return nil, err
	}
	return withRollups(p, rollup, cols)
}

// withRollups is p (raw samples) after the rollups before its first.
func withRollups(p *Points, rollup [][]byte, cols []StoredColumn) (*Points, error) {
	if len(rollup) == 0 {
		return p, nil
	}
	r, err := Decode(rollup, cols)
	if err != nil {
		return nil, err
	}
	if len(p.Times) == 0 {
		return r, nil
	}
	return Prepend(r, p), nil
}

// Prepend returns the points of early that come before late's first
// point, followed by late (rollups before raw samples).
func Prepend(early, late *Points) *Points {
	cut := 0
	for cut < len(early.Times) && early.Times[cut] < late.Times[0] {
		cut++
	}
	if cut == 0 {
		return late
	}
	out := &Points{Times: append(append([]int64{}, early.Times[:cut]...), late.Times...),
		Cols: make([][]int64, len(late.Cols)), Absent: make([][]bool, len(late.Cols)), Has: make([]bool, len(late.Cols))}
	n := len(out.Times)
	for j := range late.Cols {
		if !early.Has[j] && !late.Has[j] {
			continue
		}
		out.Has[j] = true
		out.Cols[j] = make([]int64, n)
		abs := make([]bool, n)
		any := false
		for i := 0; i < cut; i++ {
			if early.Has[j] {
				out.Cols[j][i] = early.Cols[j][i]
			}
			abs[i] = !early.present(j, i)
			any = any || abs[i]
		}
		for i := range late.Times {
			if late.Has[j] {
				out.Cols[j][cut+i] = late.Cols[j][i]
			}
			abs[cut+i] = !late.present(j, i)
			any = any || abs[cut+i]
		}
		if any {
			out.Absent[j] = abs
		}
	}
	return out
}

// ProcessEvents adds to evs the start and the end of every process (the
// process records carry them; an exit that failed is already an event of its
// own), in time order.
func ProcessEvents(evs []Event, procs []Process) []Event {
	exited := map[Key]bool{}
	for _, e := range evs {
		if e.Kind == "process_exit" && e.Process != 0 {
			exited[e.Process] = true
		}
	}
	for _, p := range procs {
		if p.Start > 0 {
			evs = append(evs, Event{Time: p.Start, Host: p.Host, Kind: "process_start", Process: p.Key, PID: p.PID, Message: p.Role})
		}
		if p.End > 0 && !exited[p.Key] {
			evs = append(evs, Event{Time: p.End, Host: p.Host, Kind: "process_exit", Process: p.Key, PID: p.PID, Message: p.Role})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	return evs
}
