// Package chunk is the storage format of taskscope's time series: a run of
// samples of one series (a process or an attempt) as compressed columns, the
// way time-series databases keep them. Times are delta-of-delta encoded;
// counters (which grow at a steady rate) delta-of-delta, gauges delta; every
// number a zigzag varint; absent values a bitmap. Compacted chunks are
// zstd-compressed on top. A chunk is self-contained: it starts from absolute
// values, so any chunk decodes alone.
package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Format version and flags (first byte).
const (
	version  = 1
	flagZstd = 0x10
)

// Column flags.
const (
	colAbsent = 1 // an absent bitmap follows
	colGCD    = 2 // values are multiples of a divisor that follows (pages, sectors)
)

// Limits protect the decoder from damaged data.
const (
	MaxSamples = 1 << 20
	MaxColumns = 64
)

// Column is one metric of a chunk. Values has one entry per time; Absent
// marks missing values (nil: none missing).
type Column struct {
	ID      uint8 // the metric's position in the series' column list
	Counter bool  // delta-of-delta (set by the caller's schema, not stored)
	Values  []int64
	Absent  []bool
}

// Chunk is a decoded run of samples.
type Chunk struct {
	Times   []int64
	Columns []Column
}

// ErrCorrupt wraps every decoding error.
var ErrCorrupt = errors.New("corrupt chunk")

// Encode appends c's encoding to dst. compress adds zstd (worth it for
// chunks of more than a few dozen samples).
func Encode(dst []byte, c *Chunk, compress bool) []byte {
	start := len(dst)
	dst = append(dst, version)
	body := encodeBody(nil, c)
	if compress {
		dst[start] |= flagZstd
		return encoder().EncodeAll(body, dst)
	}
	return append(dst, body...)
}

func encodeBody(b []byte, c *Chunk) []byte {
	n := len(c.Times)
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(len(c.Columns)))
	b = appendDoD(b, c.Times, nil)
	for i := range c.Columns {
		col := &c.Columns[i]
		b = append(b, col.ID)
		hasAbsent := false
		for _, a := range col.Absent {
			if a {
				hasAbsent = true
				break
			}
		}
		absent := absentOrNil(col.Absent, hasAbsent)
		g := gcd(col.Values, absent)
		var flags byte
		if hasAbsent {
			flags |= colAbsent
		}
		if g > 1 {
			flags |= colGCD
		}
		b = append(b, flags)
		if hasAbsent {
			bm := make([]byte, (n+7)/8)
			for j := 0; j < n; j++ {
				if col.Absent[j] {
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
		if col.Counter {
			b = appendDoD(b, vals, absent)
		} else {
			b = appendDelta(b, vals, absent)
		}
	}
	return b
}

func absentOrNil(a []bool, has bool) []bool {
	if has {
		return a
	}
	return nil
}

// gcd is the greatest common divisor of the present values (0 or 1: none worth using).
func gcd(v []int64, absent []bool) int64 {
	var g int64
	for i, x := range v {
		if absent != nil && absent[i] {
			continue
		}
		if x < 0 {
			x = -x
		}
		if x < 0 { // math.MinInt64
			return 1
		}
		for x != 0 {
			g, x = x, g%x
		}
		if g == 1 {
			return 1
		}
	}
	return g
}

func zz(v int64) uint64 { return uint64((v << 1) ^ (v >> 63)) }

func unzz(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// appendDelta writes present values: the first absolute, then differences.
func appendDelta(b []byte, v []int64, absent []bool) []byte {
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
			b = binary.AppendUvarint(b, zz(x-prev))
		}
		prev = x
	}
	return b
}

// appendDoD writes present values: the first absolute, the second as a
// difference, then differences of differences.
func appendDoD(b []byte, v []int64, absent []bool) []byte {
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
			b = binary.AppendUvarint(b, zz(prevD))
		default:
			d := x - prev
			b = binary.AppendUvarint(b, zz(d-prevD))
			prevD = d
		}
		prev = x
		k++
	}
	return b
}

// Decode decodes data. isCounter tells, for a column id, whether it was
// encoded as a counter; the caller's schema knows.
func Decode(data []byte, isCounter func(id uint8) bool) (*Chunk, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrCorrupt)
	}
	if data[0]&0x0f != version {
		return nil, fmt.Errorf("%w: version %d", ErrCorrupt, data[0]&0x0f)
	}
	body := data[1:]
	if data[0]&flagZstd != 0 {
		var err error
		body, err = decoder().DecodeAll(body, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	r := reader{b: body}
	n := r.uvarint()
	ncols := r.uvarint()
	if r.err != nil || n > MaxSamples || ncols > MaxColumns {
		return nil, fmt.Errorf("%w: header (n %d, columns %d)", ErrCorrupt, n, ncols)
	}
	// Every value takes at least a byte: a chunk cannot claim more than it holds.
	if n > uint64(len(body)) {
		return nil, fmt.Errorf("%w: %d samples in %d bytes", ErrCorrupt, n, len(body))
	}
	c := &Chunk{Times: make([]int64, n)}
	r.dod(c.Times, nil)
	for i := uint64(0); i < ncols && r.err == nil; i++ {
		var col Column
		col.ID = r.byte()
		col.Counter = isCounter(col.ID)
		flags := r.byte()
		col.Values = make([]int64, n)
		if flags&^(colAbsent|colGCD) != 0 {
			r.fail("bad column flags")
		}
		if flags&colAbsent != 0 {
			bm := r.bytes(int((n + 7) / 8))
			col.Absent = make([]bool, n)
			for j := range col.Absent {
				col.Absent[j] = bm != nil && bm[j/8]&(1<<(j%8)) != 0
			}
		}
		g := int64(1)
		if flags&colGCD != 0 {
			u := r.uvarint()
			if u < 2 || u > math.MaxInt64 {
				r.fail("bad divisor")
			}
			g = int64(u)
		}
		if col.Counter {
			r.dod(col.Values, col.Absent)
		} else {
			r.delta(col.Values, col.Absent)
		}
		if g > 1 {
			for j := range col.Values {
				col.Values[j] *= g
			}
		}
		c.Columns = append(c.Columns, col)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.b))
	}
	return c, nil
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

func (r *reader) delta(dst []int64, absent []bool) {
	var prev int64
	first := true
	for i := range dst {
		if absent != nil && absent[i] {
			continue
		}
		if first {
			prev = r.varint()
			first = false
		} else {
			prev += unzz(r.uvarint())
		}
		dst[i] = prev
	}
}

func (r *reader) dod(dst []int64, absent []bool) {
	var prev, prevD int64
	k := 0
	for i := range dst {
		if absent != nil && absent[i] {
			continue
		}
		switch k {
		case 0:
			prev = r.varint()
		case 1:
			prevD = unzz(r.uvarint())
			prev += prevD
		default:
			prevD += unzz(r.uvarint())
			prev += prevD
		}
		dst[i] = prev
		k++
	}
}

var (
	encOnce sync.Once
	enc     *zstd.Encoder
	decOnce sync.Once
	dec     *zstd.Decoder
)

func encoder() *zstd.Encoder {
	encOnce.Do(func() {
		enc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20))
	})
	return enc
}

func decoder() *zstd.Decoder {
	decOnce.Do(func() {
		dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(256<<20))
	})
	return dec
}
