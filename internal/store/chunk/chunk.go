// Package chunk is the storage format of taskscope's time series: a run of
// samples of one series (a process or an attempt) as compressed columns, the
// way time-series databases keep them.
//
// Every column (the times too) is written as its first value, then its
// differences, divided by their greatest common divisor, either as they are
// (delta) or as differences of differences (delta of delta), whichever is
// shorter for this column in this chunk: a counter that grows steadily
// costs a byte or less per value in delta of delta, a noisy one less in
// delta; a gauge that moves a little is cheapest in delta; a column whose
// values never change, or change by the same amount every time, costs its
// first value and that amount. Every number is a
// zigzag varint, absent values a bitmap. Chunks may be zstd-compressed on
// top (compaction does, when it helps). A chunk is self-contained: it starts
// from absolute values, so any chunk decodes alone.
package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Format version and flags (first byte).
const (
	version  = 2
	flagZstd = 0x10
)

// Column flags.
const (
	colAbsent = 1 // an absent bitmap follows
	colGCD    = 2 // differences are multiples of a divisor that follows
	encShift  = 2 // two bits: how the differences are written
	encMask   = 3 << encShift
)

// Encodings of a column's differences.
const (
	encDelta = iota // differences
	encDoD          // differences of differences
	encConst        // one difference, the same between every two values (0: a constant)
)

// Limits protect the decoder from damaged data.
const (
	MaxSamples = 1 << 20
	MaxColumns = 64
)

// Column is one metric of a chunk. Values has one entry per time; Absent
// marks missing values (nil: none missing).
type Column struct {
	ID     uint8 // the metric's position in the series' column list
	Values []int64
	Absent []bool
}

// Chunk is a decoded run of samples.
type Chunk struct {
	Times   []int64
	Columns []Column
}

// Slice is samples [i, j) of c, sharing its arrays; a column absent from
// all of them is left out (a chunk cut in time, each part decoding alone).
func (c *Chunk) Slice(i, j int) *Chunk {
	out := &Chunk{Times: c.Times[i:j]}
	for _, col := range c.Columns {
		nc := Column{ID: col.ID, Values: col.Values[i:j]}
		if col.Absent != nil {
			all, some := true, false
			for _, a := range col.Absent[i:j] {
				all, some = all && a, some || a
			}
			if all {
				continue
			}
			if some {
				nc.Absent = col.Absent[i:j]
			}
		}
		out.Columns = append(out.Columns, nc)
	}
	return out
}

// ErrCorrupt wraps every decoding error.
var ErrCorrupt = errors.New("corrupt chunk")

// Level is how hard compaction compresses.
type Level int

// Levels: zstd's fastest, default, better and best (Level is not stored:
// a chunk says only whether it is compressed).
const (
	None Level = iota
	Fast
	Default
	Better
	Best
)

// Encode appends c's encoding to dst. compress adds zstd at level Better
// (kept only when it makes the chunk smaller).
func Encode(dst []byte, c *Chunk, compress bool) []byte {
	lvl := None
	if compress {
		lvl = Better
	}
	return EncodeLevel(dst, c, lvl)
}

// EncodeLevel appends c's encoding to dst, compressed at lvl.
func EncodeLevel(dst []byte, c *Chunk, lvl Level) []byte {
	var w Writer
	return w.Encode(dst, c, lvl)
}

// Encode is EncodeLevel with the Writer's buffers.
func (w *Writer) Encode(dst []byte, c *Chunk, lvl Level) []byte {
	if lvl == Packed {
		return w.encodePacked(dst, c)
	}
	w.Begin(c.Times)
	for i := range c.Columns {
		col := &c.Columns[i]
		var bm []byte
		if col.Absent != nil {
			w.bm = append(w.bm[:0], make([]byte, (len(c.Times)+7)/8)...)
			bm = w.bm
			for j, a := range col.Absent {
				if a {
					bm[j/8] |= 1 << (j % 8)
				}
			}
		}
		w.Column(col.ID, col.Values, bm, 1)
	}
	return w.Finish(dst, lvl)
}

// Writer builds one chunk column by column, reusing its buffers: a
// Writer that is used again allocates nothing. Not safe for concurrent use.
type Writer struct {
	body  []byte
	n     int
	ncols int
	diffs []int64
	bm    []byte
	// format 3's
	pos, present []int64
	rdd, rg      []int64
	u, o, z      [riceBlock]uint64
}

// Begin starts a chunk of these times (at most MaxSamples, increasing).
func (w *Writer) Begin(times []int64) {
	w.body = w.body[:0]
	w.n = len(times)
	w.ncols = 0
	w.body = binary.AppendUvarint(w.body, uint64(len(times)))
	w.body = append(w.body, 0) // column count, set by Finish (MaxColumns < 128: one byte)
	w.body = w.values(w.body, times, nil, 1)
}

// Column adds a column: values (one per time; those whose bit is set in the
// absent bitmap, LSB first, are missing), each divided by div (the stored
// unit: 1024 for bytes kept in KiB, ...).
func (w *Writer) Column(id uint8, values []int64, absent []byte, div int64) {
	has := false
	for _, b := range absent {
		if b != 0 {
			has = true
			break
		}
	}
	if !has {
		absent = nil
	} else if len(absent) < (w.n+7)/8 {
		full := make([]byte, (w.n+7)/8)
		copy(full, absent)
		absent = full
	}
	w.ncols++
	w.body = append(w.body, id)
	w.body = w.values(w.body, values[:w.n], absent, div)
}

// Finish appends the chunk to dst, compressed at lvl when that makes it
// smaller (Packed, format 3, is made by Encode only: here it is None).
func (w *Writer) Finish(dst []byte, lvl Level) []byte {
	if lvl == Packed {
		lvl = None
	}
	lead := binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(w.n))
	w.body[lead] = byte(w.ncols)
	start := len(dst)
	dst = append(dst, version)
	if lvl != None && len(w.body) > 48 {
		z := encoder(lvl).EncodeAll(w.body, dst)
		if len(z)-start-1 < len(w.body) {
			z[start] |= flagZstd
			return z
		}
		dst = z[:start+1]
	}
	return append(dst, w.body...)
}

// values writes a column (or the times): flags (columns only), the absent
// bitmap, the divisor, the first value and the differences in the cheaper
// encoding.
func (w *Writer) values(b []byte, v []int64, absent []byte, div int64) []byte {
	first, seen, g, enc := w.differences(v, absent, div)
	d := w.diffs
	if enc != encConst {
		var cd, cdd int
		var pd int64
		for _, q := range d {
			cd += uvarintLen(zz(q))
			cdd += uvarintLen(zz(q - pd)) // the first difference is written as it is (pd = 0)
			pd = q
		}
		if cdd < cd {
			enc = encDoD
		}
	}
	flags := byte(enc << encShift)
	if absent != nil {
		flags |= colAbsent
	}
	if g > 1 {
		flags |= colGCD
	}
	b = append(b, flags)
	if absent != nil {
		b = append(b, absent[:(w.n+7)/8]...)
	}
	if g > 1 {
		b = binary.AppendUvarint(b, uint64(g))
	}
	if !seen {
		return b
	}
	b = binary.AppendVarint(b, first)
	if enc == encConst {
		if len(d) > 0 {
			b = binary.AppendUvarint(b, zz(d[0]))
		}
		return b
	}
	if enc == encDoD {
		var pd int64
		for _, q := range d {
			b = binary.AppendUvarint(b, zz(q-pd))
			pd = q
		}
		return b
	}
	for _, q := range d {
		b = binary.AppendUvarint(b, zz(q))
	}
	return b
}

// differences sets w.diffs to the differences between v's values that
// are not absent (each value divided by div first), divided by their
// greatest common divisor g (0 or 1: none), and returns the first value
// (seen: there is one) and encConst when every difference is the same
// (w.diffs[0], not divided), else encDelta: the caller chooses between
// delta and delta of delta. (It divides without a division instruction,
// which costs more than the rest: refValues in the tests is the plain
// version it matches.)
func (w *Writer) differences(v []int64, absent []byte, div int64) (first int64, seen bool, g int64, enc int) {
	d := w.diffs[:0]
	var prev int64
	shift := -1 // div as a shift, for values that are not negative
	if div > 1 && div&(div-1) == 0 {
		shift = bits.TrailingZeros64(uint64(div))
	}
	for i, x := range v {
		if absent != nil && absent[i/8]&(1<<(i%8)) != 0 {
			continue
		}
		if div > 1 {
			if shift >= 0 && x >= 0 {
				x >>= shift
			} else {
				x /= div
			}
		}
		if !seen {
			first, seen = x, true
		} else {
			d = append(d, x-prev)
		}
		prev = x
	}
	w.diffs = d
	var dv divisor
	for _, x := range d {
		if x < 0 {
			x = -x
		}
		if x < 0 { // math.MinInt64
			g = 1
			break
		}
		if g != 0 && dv.divides(x) {
			continue
		}
		for x != 0 {
			g, x = x, g%x
		}
		if g == 1 {
			break
		}
		if g != 0 {
			dv = newDivisor(g)
		}
	}
	enc = encConst
	for _, x := range d {
		if x != d[0] {
			enc = encDelta
			break
		}
	}
	if enc == encConst {
		return first, seen, 0, enc
	}
	if g > 1 {
		// Every difference is a multiple of g: divide them once.
		for i, x := range d {
			d[i] = dv.exact(x)
		}
	}
	return first, seen, g, enc
}

// divisor tests divisibility by, and divides exactly by, a positive g
// without a division: g = m·2^k with m odd, and m has an inverse modulo
// 2^64 (Granlund and Montgomery; Hacker's Delight 10-16).
type divisor struct {
	k   int
	inv uint64 // m · inv = 1 (mod 2^64)
	lim uint64 // (2^64 - 1) / m: u is a multiple of m when u · inv <= lim
}

func newDivisor(g int64) divisor {
	k := bits.TrailingZeros64(uint64(g))
	m := uint64(g) >> k
	inv := m // right to 3 bits (m·m = 1 mod 8); each step doubles them
	for i := 0; i < 5; i++ {
		inv *= 2 - m*inv
	}
	return divisor{k: k, inv: inv, lim: math.MaxUint64 / m}
}

// divides reports whether g divides x (x >= 0).
func (dv divisor) divides(x int64) bool {
	if x&(1<<dv.k-1) != 0 {
		return false
	}
	return (uint64(x)>>dv.k)*dv.inv <= dv.lim
}

// exact is x / g for a multiple x of g.
func (dv divisor) exact(x int64) int64 {
	return int64(uint64(x>>dv.k) * dv.inv)
}

func uvarintLen(u uint64) int { return (bits.Len64(u|1) + 6) / 7 }

func zz(v int64) uint64 { return uint64((v << 1) ^ (v >> 63)) }

func unzz(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// Decode decodes a chunk.
func Decode(data []byte) (*Chunk, error) {
	var d Decoder
	return d.Decode(data)
}

// Decoder decodes chunks; it keeps a buffer for decompression between
// calls. Not safe for concurrent use.
type Decoder struct {
	buf       []byte
	pos, vals []int64 // format 3's

	// Want, if not 0, are the columns (bit i: column id i) a reader
	// needs: a format 3 chunk is decoded only until all of them have
	// been read (a bit stream cannot skip a column, but the columns after
	// the last one wanted are left out, and their bits unchecked). 0: all.
	Want uint64
}

// Decode decodes data into a new Chunk.
func (dc *Decoder) Decode(data []byte) (*Chunk, error) {
	c := &Chunk{}
	if err := dc.DecodeTo(data, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Samples is the number of samples a chunk says it holds, read from its
// header without decoding it; ok is false for a compressed chunk (its
// header is compressed too) or a damaged one.
func Samples(data []byte) (n int, ok bool) {
	if len(data) < 2 || data[0] != version && data[0] != versionPacked {
		return 0, false
	}
	u, l := binary.Uvarint(data[1:])
	if l <= 0 || u > MaxSamples || claimsTooMany(u, len(data)-1) {
		return 0, false
	}
	return int(u), true
}

// claimsTooMany reports whether a body of size bytes cannot hold n samples.
// A column whose values change steadily takes a few bytes whatever its
// length: this bound only keeps damaged data from claiming samples by the
// million in a few bytes (what is decoded is (columns+1) × n × 8 bytes).
func claimsTooMany(n uint64, size int) bool {
	return n > MaxDenseSamples && n > 64*uint64(size)
}

// MaxDenseSamples is the most samples a chunk may hold in fewer than a
// byte for every 64 of them (claimsTooMany). Regular times and values that
// do not change (a process asleep for days, rolled up a point a minute)
// take a few bytes whatever their length, so a writer cuts a longer series
// into chunks of at most this many samples.
const MaxDenseSamples = 4096

// DecodeTo decodes data into c, reusing its slices: what c held before is
// overwritten (a chunk decoded again and again allocates nothing once its
// slices are large enough).
func (dc *Decoder) DecodeTo(data []byte, c *Chunk) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrCorrupt)
	}
	if data[0] == versionPacked {
		return dc.decodePacked(data, c)
	}
	if data[0] == versionResidual {
		return ErrResidual
	}
	if data[0]&0x0f != version || data[0]&^(0x0f|flagZstd) != 0 {
		return fmt.Errorf("%w: version %d", ErrCorrupt, data[0]&0x0f)
	}
	body := data[1:]
	if data[0]&flagZstd != 0 {
		var err error
		dc.buf, err = decoder().DecodeAll(body, dc.buf[:0])
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		body = dc.buf
	}
	r := reader{b: body}
	n := r.uvarint()
	ncols := r.uvarint()
	if r.err != nil || n > MaxSamples || ncols > MaxColumns {
		return fmt.Errorf("%w: header (n %d, columns %d)", ErrCorrupt, n, ncols)
	}
	if claimsTooMany(n, len(body)) {
		return fmt.Errorf("%w: %d samples in %d bytes", ErrCorrupt, n, len(body))
	}
	c.Times = resize(c.Times, int(n))
	r.column(c.Times, nil)
	if r.err == nil && !increasing(c.Times) {
		r.fail("times do not increase")
	}
	cols := reusable(c.Columns, ncols)
	for i := uint64(0); i < ncols && r.err == nil; i++ {
		old := previous(cols, i)
		col := Column{ID: r.byte(), Values: resize(old.Values, int(n))}
		col.Absent = r.column(col.Values, &old.Absent)
		cols = append(cols, col)
	}
	c.Columns = cols
	if r.err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, r.err)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.b))
	}
	return nil
}

// reusable is cols emptied for ncols columns decoded into it (nil for
// none).
func reusable(cols []Column, ncols uint64) []Column {
	if ncols == 0 {
		return nil
	}
	return cols[:0]
}

// previous is the column decoded at place i before (its slices are
// reused), or none.
func previous(cols []Column, i uint64) Column {
	if int(i) < cap(cols) {
		return cols[:i+1][i]
	}
	return Column{}
}

// increasing reports whether every time is later than the one before.
func increasing(times []int64) bool {
	for i := 1; i < len(times); i++ {
		if times[i] <= times[i-1] {
			return false
		}
	}
	return true
}

// resize returns s with length n, reusing its array when it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = errors.New(msg)
	}
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, l := binary.Uvarint(r.b)
	if l <= 0 {
		r.fail("truncated varint")
		return 0
	}
	r.b = r.b[l:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, l := binary.Varint(r.b)
	if l <= 0 {
		r.fail("truncated varint")
		return 0
	}
	r.b = r.b[l:]
	return v
}

func (r *reader) byte() uint8 {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail("truncated bitmap")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// column reads what Writer.values wrote into dst; it returns the absent
// marks (nil: none), in *reuse's array when it is large enough (reuse nil:
// the times, which have none). A column's flags byte comes first; the
// times have one too.
func (r *reader) column(dst []int64, reuse *[]bool) []bool {
	isColumn := reuse != nil
	n := len(dst)
	flags := r.byte()
	if flags&^(colAbsent|colGCD|encMask) != 0 {
		r.fail("bad column flags")
		return nil
	}
	enc := (flags & encMask) >> encShift
	if enc > encConst {
		r.fail("bad column encoding")
		return nil
	}
	var absent []bool
	if flags&colAbsent != 0 {
		if !isColumn {
			r.fail("absent times")
			return nil
		}
		bm := r.bytes((n + 7) / 8)
		if bm == nil {
			return nil
		}
		absent = resize(*reuse, n)
		for j := range absent {
			absent[j] = bm[j/8]&(1<<(j%8)) != 0
		}
	}
	g := int64(1)
	if flags&colGCD != 0 {
		u := r.uvarint()
		if u < 2 || u > math.MaxInt64 {
			r.fail("bad divisor")
			return nil
		}
		g = int64(u)
	}
	var prev, pd int64
	k := 0
	for i := range dst {
		if absent != nil && absent[i] {
			dst[i] = 0
			continue
		}
		switch {
		case k == 0:
			prev = r.varint()
		case enc == encConst:
			if k == 1 {
				pd = unzz(r.uvarint())
			}
			prev += pd
		case enc == encDoD && k > 1:
			pd += unzz(r.uvarint())
			prev += pd * g
		default:
			pd = unzz(r.uvarint())
			prev += pd * g
		}
		if r.err != nil {
			return nil
		}
		dst[i] = prev
		k++
	}
	return absent
}

// CompressBlock appends data compressed with zstd at lvl to dst.
func CompressBlock(dst, data []byte, lvl Level) []byte {
	return encoder(lvl).EncodeAll(data, dst)
}

var (
	encMu   sync.Mutex
	encs    = map[Level]*zstd.Encoder{}
	decOnce sync.Once
	dec     *zstd.Decoder
)

func encoder(l Level) *zstd.Encoder {
	encMu.Lock()
	defer encMu.Unlock()
	if e := encs[l]; e != nil {
		return e
	}
	zl := map[Level]zstd.EncoderLevel{Fast: zstd.SpeedFastest, Default: zstd.SpeedDefault, Better: zstd.SpeedBetterCompression,
		Best: zstd.SpeedBestCompression}[l]
	e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zl), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20),
		zstd.WithLowerEncoderMem(true))
	encs[l] = e
	return e
}

func decoder() *zstd.Decoder {
	decOnce.Do(func() {
		dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(256<<20))
	})
	return dec
}
