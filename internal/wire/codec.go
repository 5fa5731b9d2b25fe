package wire

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers, as in docs/wire.proto.
const (
	fBatchVersion   = 1
	fBatchAgent     = 2
	fBatchSeq       = 3
	fBatchHost      = 4
	fBatchSent      = 5
	fBatchMetrics   = 6
	fBatchProcesses = 7
	fBatchAttempts  = 8
	fBatchMembers   = 9
	fBatchProcSer   = 10
	fBatchAttSer    = 11
	fBatchEvents    = 12
	fBatchStats     = 13
	fBatchKeyOffset = 14
	fBatchProfiles  = 15
)

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("malformed batch")

// ErrWireType is wrapped (beside ErrMalformed) by the error of a known field
// sent with the wrong wire type: the body is protobuf, but not a batch's.
var ErrWireType = errors.New("wrong wire type")

// Marshal appends the encoding of b to dst and returns it.
func Marshal(dst []byte, b *Batch) []byte {
	e := enc{b: dst}
	e.uint(fBatchVersion, uint64(b.Version))
	e.str(fBatchAgent, b.AgentID)
	e.uint(fBatchSeq, b.Seq)
	e.str(fBatchHost, b.Host)
	e.sint(fBatchSent, b.SentMs)
	for _, m := range b.Metrics {
		e.strAlways(fBatchMetrics, m)
	}
	for i := range b.Processes {
		at := e.open(fBatchProcesses)
		b.Processes[i].marshal(&e)
		e.close(at)
	}
	for i := range b.Attempts {
		at := e.open(fBatchAttempts)
		b.Attempts[i].marshal(&e)
		e.close(at)
	}
	for i := range b.Members {
		at := e.open(fBatchMembers)
		b.Members[i].marshal(&e)
		e.close(at)
	}
	for i := range b.ProcSeries {
		at := e.open(fBatchProcSer)
		b.ProcSeries[i].marshal(&e)
		e.close(at)
	}
	for i := range b.AttemptSeries {
		at := e.open(fBatchAttSer)
		b.AttemptSeries[i].marshal(&e)
		e.close(at)
	}
	for i := range b.Events {
		at := e.open(fBatchEvents)
		b.Events[i].marshal(&e)
		e.close(at)
	}
	if b.Stats != (AgentStats{}) {
		at := e.open(fBatchStats)
		b.Stats.marshal(&e)
		e.close(at)
	}
	e.sint(fBatchKeyOffset, b.KeyStartOffsetMs)
	for i := range b.Profiles {
		at := e.open(fBatchProfiles)
		b.Profiles[i].marshal(&e)
		e.close(at)
	}
	return e.b
}

func (p *Process) marshal(e *enc) {
	e.fixed(1, p.Key)
	e.sint(2, int64(p.PID))
	e.sint(3, int64(p.PPID))
	e.sint(4, p.StartMs)
	e.str(5, p.Cmdline)
	e.str(6, p.Comm)
	e.str(7, p.Role)
	e.uint(8, uint64(p.UID))
	e.str(9, p.User)
	e.sint(10, p.EndMs)
	e.sint(11, int64(p.SID))
}

func (a *Attempt) marshal(e *enc) {
	e.str(1, a.AttemptID)
	e.str(2, a.JobID)
	e.str(3, a.ContainerID)
	e.str(4, a.Type)
	e.str(5, a.Framework)
	e.sint(6, a.FirstMs)
	e.sint(7, a.LastMs)
	e.bool(8, a.Ended)
	e.str(9, a.JobName)
	e.str(10, a.User)
	e.str(11, a.Queue)
	e.sint(12, a.MemoryMB)
	e.str(13, a.JavaOpts)
	e.sint(14, a.XmxBytes)
	e.bool(15, a.Streaming)
	e.str(16, a.AppID)
	for i, x := range [...]*ExitStatus{&a.JVMExit, &a.RootExit, &a.FileExit, &a.NMExit} {
		if x.Seen() {
			at := e.open(protowire.Number(17 + i))
			e.sint(1, int64(x.Status))
			e.sint(2, x.Ms)
			e.close(at)
		}
	}
	e.str(21, a.ExitDiagnostics)
	e.uint(22, uint64(a.OOMKills))
	if a.TaskLog.Seen() {
		at := e.open(23)
		e.sint(1, int64(a.TaskLog.Status))
		e.sint(2, a.TaskLog.Ms)
		e.close(at)
	}
	e.sint(24, a.VCores)
	e.sint(25, a.CPUDoubtMs)
}

func (m *Membership) marshal(e *enc) {
	e.fixed(1, m.Process)
	e.str(2, m.AttemptID)
	e.sint(3, m.FromMs)
	e.sint(4, m.ToMs)
	e.sint(5, m.CPUBaseMs)
	e.str(6, m.Role)
}

func (s *Series) marshal(e *enc) {
	e.fixed(1, s.Key)
	e.str(2, s.AttemptID)
	e.deltas(3, s.Times)
	for i := range s.Columns {
		c := &s.Columns[i]
		at := e.open(4)
		e.uint(1, uint64(c.Metric))
		e.deltas(2, c.Values)
		if len(c.Absent) > 0 {
			e.bytes(3, c.Absent)
		}
		e.close(at)
	}
}

func (ev *Event) marshal(e *enc) {
	e.sint(1, ev.Ms)
	e.str(2, ev.Kind)
	e.fixed(3, ev.Process)
	e.str(4, ev.AttemptID)
	e.str(5, ev.JobID)
	e.str(6, ev.Message)
	e.sint(7, ev.Value)
	e.sint(8, int64(ev.PID))
}

func (s *AgentStats) marshal(e *enc) {
	e.uint(1, s.DroppedSamples)
	e.uint(2, s.DroppedBatches)
	e.uint(3, s.SpoolBytes)
	e.uint(4, s.Ticks)
	e.uint(5, s.Overruns)
	e.uint(6, s.ReadErrors)
}

type enc struct{ b []byte }

func (e *enc) uint(n protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, v)
	}
}

func (e *enc) sint(n protowire.Number, v int64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeZigZag(v))
	}
}

func (e *enc) bool(n protowire.Number, v bool) {
	if v {
		e.uint(n, 1)
	}
}

func (e *enc) fixed(n protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, v)
	}
}

func (e *enc) str(n protowire.Number, s string) {
	if s != "" {
		e.strAlways(n, s)
	}
}

func (e *enc) strAlways(n protowire.Number, s string) {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *enc) bytes(n protowire.Number, v []byte) {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, v)
}

// open starts a length-delimited field (a sub-message, a packed list) with
// a placeholder one-byte length; close sets the length, moving the body if
// the length needs more bytes. open returns where the placeholder is.
func (e *enc) open(n protowire.Number) int {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = append(e.b, 0)
	return len(e.b) - 1
}

func (e *enc) close(at int) {
	l := len(e.b) - at - 1
	sz := protowire.SizeVarint(uint64(l))
	if sz > 1 {
		e.b = append(e.b, make([]byte, sz-1)...)
		copy(e.b[at+sz:], e.b[at+1:at+1+l])
	}
	protowire.AppendVarint(e.b[at:at], uint64(l))
}

// deltas writes values as a packed sint64 field: the first value, then each
// value's difference from the one before.
func (e *enc) deltas(n protowire.Number, vs []int64) {
	if len(vs) == 0 {
		return
	}
	at := e.open(n)
	var prev int64
	for _, v := range vs {
		e.b = protowire.AppendVarint(e.b, protowire.EncodeZigZag(v-prev))
		prev = v
	}
	e.close(at)
}

// Limits bound what a decoded batch may hold, so that a hostile body cannot
// make the server allocate without end.
type Limits struct {
	MaxStringBytes int // any one string
	MaxMetrics     int
	MaxRecords     int // processes + attempts + memberships + series + events
	MaxPoints      int // all values of all columns of all series, and all times
	// Reserve, if set, is called before decoding allocates beyond what it
	// reserved before, with the bytes it is about to take (at least
	// ReserveStep at a time). An error stops decoding and is returned
	// wrapped: the caller bounds the memory that decoding bodies takes,
	// together.
	Reserve func(bytes int64) error
	// Release, if set (with Reserve), is given back what decoding reserved
	// beyond what the batch takes, once it is decoded: a batch holds its
	// memory, not the rounding of its last step (a request whose batch
	// waits for its commit holds its reservation until it is answered).
	Release func(bytes int64)
}

// ReserveStep is the least that Limits.Reserve is asked for at a time.
const ReserveStep = 256 << 10

// Sizes of what decoding allocates.
const (
	sizeProcess = int(unsafe.Sizeof(Process{}))
	sizeAttempt = int(unsafe.Sizeof(Attempt{}))
	sizeMember  = int(unsafe.Sizeof(Membership{}))
	sizeSeries  = int(unsafe.Sizeof(Series{}))
	sizeEvent   = int(unsafe.Sizeof(Event{}))
	sizeColumn  = int(unsafe.Sizeof(Column{}))
	sizeString  = int(unsafe.Sizeof(""))
	sizeProfile = int(unsafe.Sizeof(Profile{}))
	sizeStack   = int(unsafe.Sizeof(ProfileStack{}))
)

// DefaultLimits fit a batch of several minutes from a busy node many times over.
var DefaultLimits = Limits{MaxStringBytes: 64 << 10, MaxMetrics: 256, MaxRecords: 1 << 20, MaxPoints: 64 << 20}

// Unmarshal decodes a batch strictly: a field of a known number with the
// wrong wire type, a truncated field, or an exceeded limit is an error
// wrapping ErrMalformed. Unknown fields are skipped (newer agents may add
// some). It does not validate meaning; see Validate. The batch refers to
// nothing of data: the caller may use data again.
func Unmarshal(data []byte, lim Limits) (*Batch, error) {
	d := dec{lim: lim}
	b := &Batch{}
	if err := d.batch(data, b); err != nil {
		d.putSlabs() // (the batch is dropped)
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if d.compact(b) {
		d.putSlabs()
	}
	if d.lim.Release != nil && d.reserved > d.mem {
		d.lim.Release(d.reserved - d.mem)
	}
	return b, nil
}

// maxCompact bounds the series' memory of a batch that compact copies.
const maxCompact = 1 << 20

// Sizes of the decoder's buffers (its slabs): a batch's values, columns and
// bitmaps are cut from them.
const (
	valsSlab = 4096
	colsSlab = 256
	bitsSlab = 4096
)

// The slabs of batches compact moved out of them, for the next batches.
var (
	valsPool = sync.Pool{New: func() any { s := make([]int64, 0, valsSlab); return &s }}
	colsPool = sync.Pool{New: func() any { s := make([]Column, 0, colsSlab); return &s }}
	bitsPool = sync.Pool{New: func() any { s := make([]byte, 0, bitsSlab); return &s }}
)

// compact moves the batch's times, values, columns and bitmaps out of the
// decoder's slabs (a slab holds thousands of values: a small batch of 2,300
// values took 32 KiB of them and 27 KiB of columns for 14 KiB) into
// allocations of their size, and says whether it did (then nothing of the
// batch is in the slabs, which go back to their pools: putSlabs). A
// decoded batch holds its own size while it waits for its commit
// (Limits.Release gives the rest back), not the decoder's; and with the
// slabs used again, decoding allocates its batches' size, not the slabs'
// (a loadgen batch of 5 s of 18 processes held 72 KB and allocated 77 KB;
// it holds 51 KB and allocates 53 KB). A
// batch whose series take more than maxCompact is left in its slabs. The
// copy is reserved (Limits.Reserve) before it is made.
func (d *dec) compact(b *Batch) bool {
	if d.samples == 0 || d.samples > maxCompact {
		return false
	}
	var vals, cols, bits int
	for _, ss := range [][]Series{b.ProcSeries, b.AttemptSeries} {
		for i := range ss {
			s := &ss[i]
			vals += len(s.Times)
			cols += len(s.Columns)
			for j := range s.Columns {
				vals += len(s.Columns[j].Values)
				bits += len(s.Columns[j].Absent)
			}
		}
	}
	size := int64(8*vals+sizeColumn*cols+bits) * 9 / 8 // (9/8: the allocator's size classes)
	if err := d.charge(int(size)); err != nil {
		d.mem -= size // (not made)
		return false
	}
	v := make([]int64, 0, vals)
	c := make([]Column, 0, cols)
	var bs []byte
	if bits > 0 {
		bs = make([]byte, 0, bits)
	}
	take := func(x []int64) []int64 {
		if len(x) == 0 {
			return x[:0:0] // (nil stays nil; an append copies)
		}
		l := len(v)
		v = append(v, x...)
		return v[l:len(v):len(v)]
	}
	for _, ss := range [][]Series{b.ProcSeries, b.AttemptSeries} {
		for i := range ss {
			s := &ss[i]
			s.Times = take(s.Times)
			if len(s.Columns) == 0 {
				continue
			}
			l := len(c)
			c = append(c, s.Columns...)
			s.Columns = c[l:len(c):len(c)]
			for j := range s.Columns {
				col := &s.Columns[j]
				col.Values = take(col.Values)
				if len(col.Absent) > 0 {
					l := len(bs)
					bs = append(bs, col.Absent...)
					col.Absent = bs[l:len(bs):len(bs)]
				}
			}
		}
	}
	d.mem -= d.samples // (the slabs')
	d.samples = size
	return true
}

// putSlabs gives the slabs of a batch that compact moved out of them (or
// of a batch dropped) back to their pools, emptied of references.
func (d *dec) putSlabs() {
	d.vals.put(&valsPool, false)
	d.cs.put(&colsPool, true)
	d.bits.put(&bitsPool, false)
}

// PeekID reads agent_id and seq from the top level of a batch's encoding
// as far as it can be read (the rest may be broken), without decoding
// anything else; ok says both were found.
func PeekID(data []byte) (agentID string, seq uint64, ok bool) {
	var hasAgent, hasSeq bool
	for len(data) > 0 {
		n, t, l := protowire.ConsumeTag(data)
		if l < 0 {
			break
		}
		data = data[l:]
		switch {
		case n == fBatchAgent && t == protowire.BytesType:
			v, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return agentID, seq, hasAgent && hasSeq
			}
			agentID, hasAgent = string(v), len(v) > 0
			data = data[l:]
			continue
		case n == fBatchSeq && t == protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 {
				return agentID, seq, hasAgent && hasSeq
			}
			seq, hasSeq = v, v > 0
			data = data[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, t, data); l < 0 {
			break
		}
		data = data[l:]
	}
	return agentID, seq, hasAgent && hasSeq
}

type dec struct {
	lim     Limits
	records int
	points  int
	// mem is the estimate of the memory the batch takes, reserved the
	// memory Reserve granted; samples is the part of mem that the series'
	// times, values, columns and bitmaps take (compact).
	mem, reserved, samples int64
	// A batch's values, columns and bitmaps are cut from a few large
	// allocations (a batch has some 25 columns of 5 to 10 values per
	// series: one allocation each cost more than decoding them).
	vals slab[int64]
	cols []Column // the columns of the series being decoded
	cs   slab[Column]
	bits slab[byte]
}

// slab is where a batch's slices of one kind are cut from, and the slabs
// it took from their pool.
type slab[T any] struct {
	buf    []T
	pooled []*[]T
}

// take returns the next n elements of s (as the slab held them: the
// caller fills them), first taking a new slab when the one held has no
// room: one of size elements from pool, or one of its own for more, whose
// cost(elements) is charged to the batch.
func take[T any](d *dec, s *slab[T], n, size int, pool *sync.Pool, cost func(int) int) ([]T, error) {
	if cap(s.buf)-len(s.buf) < n {
		if err := d.chargeSamples(cost(max(n, size))); err != nil {
			return nil, err
		}
		if n <= size {
			p := pool.Get().(*[]T)
			s.pooled = append(s.pooled, p)
			s.buf = (*p)[:0]
		} else {
			s.buf = make([]T, 0, n)
		}
	}
	l := len(s.buf)
	s.buf = s.buf[:l+n]
	return s.buf[l : l+n : l+n], nil
}

// put gives the slabs s took back to pool, emptied (of references too, if
// refs).
func (s *slab[T]) put(pool *sync.Pool, refs bool) {
	for _, p := range s.pooled {
		if refs {
			clear((*p)[:cap(*p)])
		}
		*p = (*p)[:0]
		pool.Put(p)
	}
	s.pooled = nil
}

// What n values, columns and bytes of bitmaps take of the budget.
func valsCost(n int) int { return 8 * n }
func colsCost(n int) int { return sizeColumn * n * 9 / 8 } // 9/8: the allocator's size classes
func bitsCost(n int) int { return n }

// takeVals returns an empty slice with room for n values (and no more: an
// append beyond them copies).
func (d *dec) takeVals(n int) ([]int64, error) {
	v, err := take(d, &d.vals, n, valsSlab, &valsPool, valsCost)
	return v[:0], err
}

// takeCols returns a copy of cols.
func (d *dec) takeCols(cols []Column) ([]Column, error) {
	if len(cols) == 0 {
		return nil, nil
	}
	c, err := take(d, &d.cs, len(cols), colsSlab, &colsPool, colsCost)
	copy(c, cols)
	return c, err
}

// takeBytes returns a copy of b.
func (d *dec) takeBytes(b []byte) ([]byte, error) {
	c, err := take(d, &d.bits, len(b), bitsSlab, &bitsPool, bitsCost)
	copy(c, b)
	return c, err
}

// fields calls f for each field of a message, with the field's bytes (v) for
// length-delimited fields and its value (u) for the others. Fields that f
// does not know it leaves alone: they are skipped.
func (d *dec) fields(data []byte, f func(n protowire.Number, t protowire.Type, v []byte, u uint64) error) error {
	for len(data) > 0 {
		n, t, l := protowire.ConsumeTag(data)
		if l < 0 {
			return parseError(l)
		}
		data = data[l:]
		var v []byte
		var u uint64
		switch t {
		case protowire.VarintType:
			u, l = protowire.ConsumeVarint(data)
		case protowire.Fixed64Type:
			u, l = protowire.ConsumeFixed64(data)
		case protowire.Fixed32Type:
			var u32 uint32
			u32, l = protowire.ConsumeFixed32(data)
			u = uint64(u32)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(data)
		default:
			l = protowire.ConsumeFieldValue(n, t, data)
		}
		if l < 0 {
			return fmt.Errorf("field %d: %v", n, parseError(l))
		}
		data = data[l:]
		if err := f(n, t, v, u); err != nil {
			return fmt.Errorf("field %d: %w", n, err)
		}
	}
	return nil
}

// parseError words protowire's negative lengths (its error codes) in stable
// terms: protowire's own messages vary on purpose from build to build.
func parseError(code int) error {
	switch code {
	case -1:
		return errors.New("unexpected end of data")
	case -2:
		return errors.New("invalid field number")
	case -3:
		return errors.New("varint longer than 10 bytes")
	case -4:
		return errors.New("reserved wire type")
	case -5:
		return errors.New("end group without start group")
	case -6:
		return errors.New("groups nested too deep")
	}
	return protowire.ParseError(code)
}

func want(t, w protowire.Type) error {
	if t != w {
		return fmt.Errorf("%w %d, want %d", ErrWireType, t, w)
	}
	return nil
}

func (d *dec) str(t protowire.Type, v []byte) (string, error) {
	if err := want(t, protowire.BytesType); err != nil {
		return "", err
	}
	if len(v) > d.lim.MaxStringBytes {
		return "", fmt.Errorf("string of %d bytes exceeds the limit of %d", len(v), d.lim.MaxStringBytes)
	}
	if err := d.charge(len(v)); err != nil {
		return "", err
	}
	return string(v), nil
}

func (d *dec) record() error {
	d.records++
	if d.records > d.lim.MaxRecords {
		return fmt.Errorf("more than %d records", d.lim.MaxRecords)
	}
	return nil
}

// charge counts n more bytes of the decoded batch, reserving them first.
func (d *dec) charge(n int) error {
	d.mem += int64(n)
	if d.mem <= d.reserved {
		return nil
	}
	if d.lim.Reserve == nil {
		d.reserved = d.mem
		return nil
	}
	step := max(d.mem-d.reserved, ReserveStep)
	if err := d.lim.Reserve(step); err != nil {
		return err
	}
	d.reserved += step
	return nil
}

// chargeSamples is charge of the series' times, values, columns or
// bitmaps.
func (d *dec) chargeSamples(n int) error {
	d.samples += int64(n)
	return d.charge(n)
}

func varint(t protowire.Type, u uint64) (uint64, error) { return u, want(t, protowire.VarintType) }

func svarint(t protowire.Type, u uint64) (int64, error) {
	return protowire.DecodeZigZag(u), want(t, protowire.VarintType)
}

func int32of(t protowire.Type, u uint64) (int32, error) {
	v, err := svarint(t, u)
	if err == nil && (v > math.MaxInt32 || v < math.MinInt32) {
		err = fmt.Errorf("value %d does not fit 32 bits", v)
	}
	return int32(v), err
}

func fixed(t protowire.Type, u uint64) (uint64, error) { return u, want(t, protowire.Fixed64Type) }

func (d *dec) batch(data []byte, b *Batch) error {
	if err := d.sizeLists(data, b); err != nil {
		return err
	}
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case fBatchVersion:
			var x uint64
			x, err = varint(t, u)
			if x > math.MaxUint32 {
				err = fmt.Errorf("version %d out of range", x)
			}
			b.Version = uint32(x)
		case fBatchAgent:
			b.AgentID, err = d.str(t, v)
		case fBatchSeq:
			b.Seq, err = varint(t, u)
		case fBatchHost:
			b.Host, err = d.str(t, v)
		case fBatchSent:
			b.SentMs, err = svarint(t, u)
		case fBatchMetrics:
			var s string
			if s, err = d.str(t, v); err == nil {
				if len(b.Metrics) >= d.lim.MaxMetrics {
					return fmt.Errorf("more than %d metrics", d.lim.MaxMetrics)
				}
				b.Metrics = append(b.Metrics, s)
			}
		case fBatchProcesses:
			if err = d.sub(t); err == nil {
				b.Processes = append(b.Processes, Process{})
				err = d.process(v, &b.Processes[len(b.Processes)-1])
			}
		case fBatchAttempts:
			if err = d.sub(t); err == nil {
				b.Attempts = append(b.Attempts, Attempt{})
				err = d.attempt(v, &b.Attempts[len(b.Attempts)-1])
			}
		case fBatchMembers:
			if err = d.sub(t); err == nil {
				b.Members = append(b.Members, Membership{})
				err = d.member(v, &b.Members[len(b.Members)-1])
			}
		case fBatchProcSer:
			if err = d.sub(t); err == nil {
				b.ProcSeries = append(b.ProcSeries, Series{})
				err = d.series(v, &b.ProcSeries[len(b.ProcSeries)-1])
			}
		case fBatchAttSer:
			if err = d.sub(t); err == nil {
				b.AttemptSeries = append(b.AttemptSeries, Series{})
				err = d.series(v, &b.AttemptSeries[len(b.AttemptSeries)-1])
			}
		case fBatchEvents:
			if err = d.sub(t); err == nil {
				b.Events = append(b.Events, Event{})
				err = d.event(v, &b.Events[len(b.Events)-1])
			}
		case fBatchStats:
			if err = want(t, protowire.BytesType); err == nil {
				err = d.stats(v, &b.Stats)
			}
		case fBatchKeyOffset:
			b.KeyStartOffsetMs, err = svarint(t, u)
		case fBatchProfiles:
			if err = d.sub(t); err == nil {
				b.Profiles = append(b.Profiles, Profile{})
				err = d.profile(v, &b.Profiles[len(b.Profiles)-1])
			}
		}
		return err
	})
}

// sizeLists counts the batch's records and metric names (their tags only)
// and allocates its lists at their size: a batch's lists are allocated
// once, and what they take is known (and reserved) before decoding.
func (d *dec) sizeLists(data []byte, b *Batch) error {
	var count [fBatchProfiles + 1]int
	for len(data) > 0 {
		n, t, l := protowire.ConsumeTag(data)
		if l < 0 {
			break // decoding says where
		}
		data = data[l:]
		if l = protowire.ConsumeFieldValue(n, t, data); l < 0 {
			break
		}
		data = data[l:]
		if t == protowire.BytesType && (n >= fBatchMetrics && n <= fBatchEvents || n == fBatchProfiles) {
			count[n]++
		}
	}
	records := count[fBatchProcesses] + count[fBatchAttempts] + count[fBatchMembers] + count[fBatchProcSer] + count[fBatchAttSer] + count[fBatchEvents] +
		count[fBatchProfiles]
	if records > d.lim.MaxRecords {
		return fmt.Errorf("more than %d records", d.lim.MaxRecords)
	}
	metrics := min(count[fBatchMetrics], d.lim.MaxMetrics)
	if err := d.charge(metrics*sizeString + count[fBatchProcesses]*sizeProcess + count[fBatchAttempts]*sizeAttempt +
		count[fBatchMembers]*sizeMember + (count[fBatchProcSer]+count[fBatchAttSer])*sizeSeries + count[fBatchEvents]*sizeEvent +
		count[fBatchProfiles]*sizeProfile); err != nil {
		return err
	}
	b.Metrics = alloc[string](metrics)
	b.Processes = alloc[Process](count[fBatchProcesses])
	b.Attempts = alloc[Attempt](count[fBatchAttempts])
	b.Members = alloc[Membership](count[fBatchMembers])
	b.ProcSeries = alloc[Series](count[fBatchProcSer])
	b.AttemptSeries = alloc[Series](count[fBatchAttSer])
	b.Events = alloc[Event](count[fBatchEvents])
	b.Profiles = alloc[Profile](count[fBatchProfiles])
	return nil
}

// alloc is an empty list with room for n, nil for none.
func alloc[T any](n int) []T {
	if n == 0 {
		return nil
	}
	return make([]T, 0, n)
}

func (d *dec) sub(t protowire.Type) error {
	if err := want(t, protowire.BytesType); err != nil {
		return err
	}
	return d.record()
}

func (d *dec) process(data []byte, p *Process) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			p.Key, err = fixed(t, u)
		case 2:
			p.PID, err = int32of(t, u)
		case 3:
			p.PPID, err = int32of(t, u)
		case 4:
			p.StartMs, err = svarint(t, u)
		case 5:
			p.Cmdline, err = d.str(t, v)
		case 6:
			p.Comm, err = d.str(t, v)
		case 7:
			p.Role, err = d.str(t, v)
		case 8:
			var x uint64
			x, err = varint(t, u)
			if x > math.MaxUint32 {
				err = fmt.Errorf("uid %d out of range", x)
			}
			p.UID = uint32(x)
		case 9:
			p.User, err = d.str(t, v)
		case 10:
			p.EndMs, err = svarint(t, u)
		case 11:
			p.SID, err = int32of(t, u)
		}
		return err
	})
}

func (d *dec) attempt(data []byte, a *Attempt) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			a.AttemptID, err = d.str(t, v)
		case 2:
			a.JobID, err = d.str(t, v)
		case 3:
			a.ContainerID, err = d.str(t, v)
		case 4:
			a.Type, err = d.str(t, v)
		case 5:
			a.Framework, err = d.str(t, v)
		case 6:
			a.FirstMs, err = svarint(t, u)
		case 7:
			a.LastMs, err = svarint(t, u)
		case 8:
			var x uint64
			x, err = varint(t, u)
			a.Ended = x != 0
		case 9:
			a.JobName, err = d.str(t, v)
		case 10:
			a.User, err = d.str(t, v)
		case 11:
			a.Queue, err = d.str(t, v)
		case 12:
			a.MemoryMB, err = svarint(t, u)
		case 13:
			a.JavaOpts, err = d.str(t, v)
		case 14:
			a.XmxBytes, err = svarint(t, u)
		case 15:
			var x uint64
			x, err = varint(t, u)
			a.Streaming = x != 0
		case 16:
			a.AppID, err = d.str(t, v)
		case 17, 18, 19, 20:
			if err = want(t, protowire.BytesType); err == nil {
				err = d.exit(v, [...]*ExitStatus{&a.JVMExit, &a.RootExit, &a.FileExit, &a.NMExit}[n-17])
			}
		case 21:
			a.ExitDiagnostics, err = d.str(t, v)
		case 22:
			var x uint64
			x, err = varint(t, u)
			if x > math.MaxUint32 {
				err = fmt.Errorf("oom_kills %d out of range", x)
			}
			a.OOMKills = uint32(x)
		case 23:
			if err = want(t, protowire.BytesType); err == nil {
				err = d.exit(v, &a.TaskLog)
			}
		case 24:
			a.VCores, err = svarint(t, u)
		case 25:
			a.CPUDoubtMs, err = svarint(t, u)
		}
		return err
	})
}

func (d *dec) exit(data []byte, x *ExitStatus) error {
	*x = ExitStatus{}
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			x.Status, err = int32of(t, u)
		case 2:
			x.Ms, err = svarint(t, u)
		}
		return err
	})
}

func (d *dec) member(data []byte, m *Membership) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			m.Process, err = fixed(t, u)
		case 2:
			m.AttemptID, err = d.str(t, v)
		case 3:
			m.FromMs, err = svarint(t, u)
		case 4:
			m.ToMs, err = svarint(t, u)
		case 5:
			m.CPUBaseMs, err = svarint(t, u)
		case 6:
			m.Role, err = d.str(t, v)
		}
		return err
	})
}

func (d *dec) series(data []byte, s *Series) error {
	d.cols = d.cols[:0]
	err := d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			s.Key, err = fixed(t, u)
		case 2:
			s.AttemptID, err = d.str(t, v)
		case 3:
			s.Times, err = d.deltas(t, v, u, s.Times)
		case 4:
			if err = want(t, protowire.BytesType); err == nil {
				// A column per metric at most (a valid series has no more).
				if len(d.cols) >= d.lim.MaxMetrics {
					return fmt.Errorf("more than %d columns", d.lim.MaxMetrics)
				}
				d.cols = append(d.cols, Column{})
				err = d.column(v, &d.cols[len(d.cols)-1])
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	s.Columns, err = d.takeCols(d.cols)
	return err
}

func (d *dec) column(data []byte, c *Column) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			var x uint64
			x, err = varint(t, u)
			if x > math.MaxUint32 {
				err = fmt.Errorf("metric index %d out of range", x)
			}
			c.Metric = uint32(x)
		case 2:
			c.Values, err = d.deltas(t, v, u, c.Values)
		case 3:
			if err = want(t, protowire.BytesType); err == nil {
				d.points += len(v)
				if d.points > d.lim.MaxPoints {
					return fmt.Errorf("more than %d points", d.lim.MaxPoints)
				}
				c.Absent = nil // an empty bitmap is protobuf's default: none absent
				if len(v) > 0 {
					c.Absent, err = d.takeBytes(v)
				}
			}
		}
		return err
	})
}

// deltas decodes a repeated sint64 field of deltas (see enc.deltas) and
// appends the values to dst: packed, as Marshal writes it, or one element
// per field, which protobuf decoders must accept too. Every occurrence of the
// field continues the list, so deltas run on from the last value of dst.
func (d *dec) deltas(t protowire.Type, v []byte, u uint64, dst []int64) ([]int64, error) {
	var prev int64
	if len(dst) > 0 {
		prev = dst[len(dst)-1]
	}
	switch t {
	case protowire.VarintType:
		if d.points++; d.points > d.lim.MaxPoints {
			return dst, fmt.Errorf("more than %d points", d.lim.MaxPoints)
		}
		if len(dst) == cap(dst) {
			// Appended one at a time: the list grows (to at most twice).
			if err := d.chargeSamples(16 * (cap(dst) + 4)); err != nil {
				return dst, err
			}
		}
		return append(dst, prev+protowire.DecodeZigZag(u)), nil
	case protowire.BytesType:
	default:
		return dst, fmt.Errorf("%w %d, want packed sint64", ErrWireType, t)
	}
	// The last byte of every varint is below 0x80: count before allocating.
	n := 0
	for _, c := range v {
		if c < 0x80 {
			n++
		}
	}
	if d.points+n > d.lim.MaxPoints {
		return dst, fmt.Errorf("more than %d points", d.lim.MaxPoints)
	}
	d.points += n
	if len(dst) == 0 && n > 0 {
		var err error
		if dst, err = d.takeVals(n); err != nil {
			return nil, err
		}
	} else if cap(dst)-len(dst) < n {
		if err := d.chargeSamples(8 * (len(dst) + n)); err != nil {
			return dst, err
		}
		dst = slices.Grow(dst, n)
	}
	for len(v) > 0 {
		x, l := protowire.ConsumeVarint(v)
		if l < 0 {
			return dst, parseError(l)
		}
		v = v[l:]
		prev += protowire.DecodeZigZag(x)
		dst = append(dst, prev)
	}
	return dst, nil
}

func (d *dec) event(data []byte, e *Event) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			e.Ms, err = svarint(t, u)
		case 2:
			e.Kind, err = d.str(t, v)
		case 3:
			e.Process, err = fixed(t, u)
		case 4:
			e.AttemptID, err = d.str(t, v)
		case 5:
			e.JobID, err = d.str(t, v)
		case 6:
			e.Message, err = d.str(t, v)
		case 7:
			e.Value, err = svarint(t, u)
		case 8:
			e.PID, err = int32of(t, u)
		}
		return err
	})
}

func (d *dec) stats(data []byte, s *AgentStats) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			s.DroppedSamples, err = varint(t, u)
		case 2:
			s.DroppedBatches, err = varint(t, u)
		case 3:
			s.SpoolBytes, err = varint(t, u)
		case 4:
			s.Ticks, err = varint(t, u)
		case 5:
			s.Overruns, err = varint(t, u)
		case 6:
			s.ReadErrors, err = varint(t, u)
		}
		return err
	})
}
