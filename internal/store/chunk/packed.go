package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Format 3, packed: what compaction writes (Encode at level Packed). The
// columns are those of format 2 (a first value, then the differences
// divided by their greatest common divisor, as they are, as differences
// of differences, or one constant step), but the differences are
// Rice-coded in blocks of riceBlock with a parameter each, not written as
// varints for zstd to squeeze: a value of b significant bits costs about
// b+1 bits, where a varint takes a byte for every 7 and zstd's one
// Huffman table over all the columns' bytes gets back only part of it.
// Absent values are the list of their positions (or of the present ones,
// whichever is shorter), coded as a column's values: a metric read every
// tenth sample costs a few bytes a chunk, not a bit a sample.
//
// Layout: the version byte, the number of samples (uvarint, so that
// Samples reads it), then one bit stream (least significant bit first):
// the number of columns (7 bits), the times (ints), then each column: its
// id (8 bits), its absent mode (2 bits: none, absent positions, present
// positions), with a mode the positions' count (uvarint) and the positions
// (ints), then its present values (ints). ints: the encoding (2 bits),
// a divisor flag (1 bit) and the divisor (uvarint), the first value
// (varint), then the constant step (uvarint, zigzag) or the Rice blocks.
const versionPacked = 3

// Packed is the level of format 3 (not a zstd level): compaction's.
const Packed Level = 100

// encGrid (format 3): each value is first + its index × a step + a
// distance; the distances are coded.
const encGrid = 3

const (
	riceBlock  = 32 // differences per Rice parameter
	riceEscape = 20 // a quotient this large is written as the value's length and bits
	absentNone = 0
	absentList = 1 // the absent positions
	presentLst = 2 // the present positions
)

// encodePacked appends c in format 3 to dst.
func (w *Writer) encodePacked(dst []byte, c *Chunk) []byte {
	n := len(c.Times)
	w.n = n
	dst = append(dst, versionPacked)
	dst = binary.AppendUvarint(dst, uint64(n))
	bw := bitWriter{b: dst}
	bw.put(uint64(len(c.Columns)), 7)
	w.packInts(&bw, c.Times, true)
	for i := range c.Columns {
		col := &c.Columns[i]
		bw.put(uint64(col.ID), 8)
		absent := 0
		for j := range col.Absent[:min(len(col.Absent), n)] {
			if col.Absent[j] {
				absent++
			}
		}
		vals := col.Values[:n]
		if absent == 0 {
			bw.put(absentNone, 2)
		} else {
			mode, want := uint64(absentList), true
			if 2*absent > n {
				mode, want = presentLst, false
			}
			bw.put(mode, 2)
			w.pos, w.present = w.pos[:0], w.present[:0]
			for j, x := range vals {
				a := j < len(col.Absent) && col.Absent[j]
				if a == want {
					w.pos = append(w.pos, int64(j))
				}
				if !a {
					w.present = append(w.present, x)
				}
			}
			bw.uvarint(uint64(len(w.pos)))
			w.packInts(&bw, w.pos, false)
			vals = w.present
		}
		w.packInts(&bw, vals, false)
	}
	return bw.finish()
}

// packInts writes v (its length is known to the reader) as ints; grid:
// the grid encoding is tried too (the times').
func (w *Writer) packInts(bw *bitWriter, v []int64, grid bool) {
	if len(v) == 0 {
		return
	}
	first, _, g, enc := w.differences(v, nil, 1)
	d := w.diffs
	if enc == encConst {
		bw.put(encConst, 2)
		bw.put(0, 1)
		bw.varint(first)
		if len(d) > 0 {
			bw.uvarint(zz(d[0]))
		}
		return
	}
	// Delta or delta of delta, whichever has the shorter values.
	w.rdd = w.rdd[:0]
	var pd int64
	ld, ldd := 0, 0
	for _, q := range d {
		w.rdd = append(w.rdd, q-pd)
		ld += bits.Len64(zz(q))
		ldd += bits.Len64(zz(q - pd))
		pd = q
	}
	res := d
	if ldd < ld {
		enc, res = encDoD, w.rdd
	}
	// Or each value's distance from a grid of one step from the first
	// (times a few ms late at each tick: the distance is that lateness,
	// where a difference holds two of them).
	var step int64
	if m := len(v); grid && m >= 3 {
		step = (v[m-1] - v[0]) / int64(m-1)
		w.rg = w.rg[:0]
		lg := 0
		for i := 1; i < m; i++ {
			dev := v[i] - v[0] - int64(i)*step
			w.rg = append(w.rg, dev)
			lg += bits.Len64(zz(dev))
		}
		if lg < min(ld, ldd) {
			enc, res, g = encGrid, w.rg, 1
		}
	}
	bw.put(uint64(enc), 2)
	if g > 1 {
		bw.put(1, 1)
		bw.uvarint(uint64(g))
	} else {
		bw.put(0, 1)
	}
	bw.varint(first)
	if enc == encGrid {
		bw.varint(step)
	}
	for i := 0; i < len(res); i += riceBlock {
		w.packBlock(bw, res[i:min(i+riceBlock, len(res))])
	}
}

// Block modes: what a block's values are Rice-coded as.
const (
	blockZigzag = 0 // zigzag (signed values)
	blockOffset = 1 // the value less the block's least (a uvarint; none is negative)
	blockZeros  = 2 // a bit each (not zero), then, if not, its zigzag less one
)

// packBlock writes a block of at most riceBlock values: its mode (2
// bits), its Rice parameter (6 bits), the mode's least value, and the
// values, in the mode that the values' lengths say is shortest.
func (w *Writer) packBlock(bw *bitWriter, blk []int64) {
	u, o, z := &w.u, &w.o, &w.z
	n := len(blk)
	least, zeros := blk[0], 0
	for i, x := range blk {
		u[i] = zz(x)
		least = min(least, x)
		if x == 0 {
			zeros++
		}
	}
	mode := blockZigzag
	var k int
	var best float64
	if least > 0 {
		for i, x := range blk {
			o[i] = uint64(x - least)
		}
		ko, c := riceEstimate(o[:n])
		c += float64(8 * uvarintLen(uint64(least)))
		// Values none of which is negative cost a bit each more as
		// zigzag values (x·2): coded less their least they cost no
		// more, and the least costs less than those bits.
		if 8*uvarintLen(uint64(least)) < n {
			mode, k = blockOffset, ko
		} else if k, best = riceEstimate(u[:n]); c < best {
			mode, k = blockOffset, ko
		}
	} else {
		k, best = riceEstimate(u[:n])
	}
	if zeros*4 >= n {
		m := 0
		for i, x := range blk {
			if x != 0 {
				z[m] = u[i] - 1
				m++
			}
		}
		kz, c := 0, 0.0
		if m > 0 {
			kz, c = riceEstimate(z[:m])
		}
		if c+float64(n) < best {
			mode, k = blockZeros, kz
		}
	}
	bw.put(uint64(mode), 2)
	bw.put(uint64(k), 6)
	switch mode {
	case blockZigzag:
		for _, x := range u[:n] {
			bw.rice(x, uint(k))
		}
	case blockOffset:
		bw.uvarint(uint64(least))
		for _, x := range o[:n] {
			bw.rice(x, uint(k))
		}
	case blockZeros:
		for i, x := range blk {
			if x == 0 {
				bw.put(0, 1)
				continue
			}
			bw.put(1, 1)
			bw.rice(u[i]-1, uint(k))
		}
	}
}

// quotients[d] is the mean quotient of a value of k+d bits by 2^k.
var quotients = func() (q [65]float64) {
	for d := 1; d <= 64; d++ {
		q[d] = 0.75*math.Exp2(float64(d)) - 0.5
	}
	return q
}()

// riceEstimate is the Rice parameter that codes u shortest, and about
// how many bits it takes, from the values' lengths alone (an outlier, a
// GC's drop of the heap, costs its escape whatever the parameter).
func riceEstimate(u []uint64) (int, float64) {
	var hist [65]uint8 // (at most riceBlock values)
	maxL := 0
	for _, x := range u {
		l := bits.Len64(x)
		hist[l]++
		maxL = max(maxL, l)
	}
	var lens [65]uint8 // the lengths there are
	nl := 0
	for l := 1; l <= maxL; l++ {
		if hist[l] > 0 {
			lens[nl] = uint8(l)
			nl++
		}
	}
	// The best parameter is near the median length less one: try a few
	// below it and one above.
	med, seen := 0, int(hist[0])
	for _, l := range lens[:nl] {
		if 2*seen >= len(u) {
			break
		}
		seen += int(hist[l])
		if 2*seen >= len(u) {
			med = int(l)
			break
		}
	}
	bestK, best := 0, math.Inf(1)
	for k := max(med-3, 0); k <= min(med, 63); k++ {
		est := float64(len(u) * (1 + k))
		for _, l := range lens[:nl] {
			if d := int(l) - k; d > 0 {
				est += float64(hist[l]) * min(quotients[d], float64(riceEscape+6+int(l)-1-k))
			}
		}
		if est < best {
			bestK, best = k, est
		}
	}
	return bestK, best
}

type bitWriter struct {
	b   []byte
	acc uint64
	n   uint
}

// put writes the k low bits of v (k <= 64).
func (w *bitWriter) put(v uint64, k uint) {
	if k > 32 {
		w.put(v&(1<<32-1), 32)
		w.put(v>>32, k-32)
		return
	}
	w.acc |= (v & (1<<k - 1)) << w.n // (w.n < 32)
	w.n += k
	if w.n >= 32 {
		w.b = binary.LittleEndian.AppendUint32(w.b, uint32(w.acc))
		w.acc >>= 32
		w.n -= 32
	}
}

func (w *bitWriter) uvarint(u uint64) {
	for u >= 0x80 {
		w.put(u&0x7f|0x80, 8)
		u >>= 7
	}
	w.put(u, 8)
}

func (w *bitWriter) varint(v int64) { w.uvarint(zz(v)) }

// rice writes x with parameter k: its quotient in unary (ones, then a
// zero) and its k low bits; a quotient of riceEscape or more as
// riceEscape ones, the value's length less one (6 bits) and its bits.
func (w *bitWriter) rice(x uint64, k uint) {
	q := x >> k
	if q >= riceEscape {
		w.put(1<<riceEscape-1, riceEscape)
		l := uint(bits.Len64(x))
		w.put(uint64(l-1), 6)
		w.put(x, l)
		return
	}
	if q+1+uint64(k) <= 32 {
		w.put(1<<q-1|(x&(1<<k-1))<<(q+1), uint(q)+1+k)
		return
	}
	w.put(1<<q-1, uint(q)+1)
	w.put(x, k)
}

func (w *bitWriter) finish() []byte {
	for w.n > 0 {
		w.b = append(w.b, byte(w.acc))
		w.acc >>= 8
		w.n -= min(w.n, 8)
	}
	return w.b
}

type bitReader struct {
	b   []byte
	i   int // the next byte of b to read
	acc uint64
	n   uint
	err error
}

func (r *bitReader) fail(msg string) {
	if r.err == nil {
		r.err = errors.New(msg)
	}
}

func (r *bitReader) fill() {
	if r.i+8 <= len(r.b) {
		// As many whole bytes of the next 8 as acc has room for.
		r.acc |= binary.LittleEndian.Uint64(r.b[r.i:]) << r.n
		take := (63 - r.n) / 8
		r.i += int(take)
		r.n += 8 * take
		r.acc &= 1<<r.n - 1
		return
	}
	for r.n <= 56 && r.i < len(r.b) {
		r.acc |= uint64(r.b[r.i]) << r.n
		r.i++
		r.n += 8
	}
}

// get reads k bits (k <= 64).
func (r *bitReader) get(k uint) uint64 {
	if k > 32 {
		lo := r.get(32)
		return lo | r.get(k-32)<<32
	}
	if r.n < k {
		r.fill()
		if r.n < k {
			r.fail("truncated")
			r.n = 0
			return 0
		}
	}
	v := r.acc & (1<<k - 1)
	r.acc >>= k
	r.n -= k
	return v
}

func (r *bitReader) uvarint() uint64 {
	var u uint64
	for s := uint(0); s < 64 && r.err == nil; s += 7 {
		b := r.get(8)
		u |= (b & 0x7f) << s
		if b < 0x80 {
			return u
		}
	}
	r.fail("bad varint")
	return 0
}

func (r *bitReader) varint() int64 { return unzz(r.uvarint()) }

// rice reads what bitWriter.rice wrote.
func (r *bitReader) rice(k uint) uint64 {
	if r.n < 32 {
		r.fill()
	}
	// Most values: the quotient, its zero and the k bits are all here.
	if ones := uint(bits.TrailingZeros64(^r.acc)); ones < riceEscape && ones+1+k <= r.n {
		v := uint64(ones)<<k | (r.acc>>(ones+1))&(1<<k-1)
		r.acc >>= ones + 1 + k
		r.n -= ones + 1 + k
		return v
	}
	q := uint(0)
	for q < riceEscape {
		if r.n == 0 {
			r.fill()
			if r.n == 0 {
				r.fail("truncated")
				return 0
			}
		}
		ones := uint(bits.TrailingZeros64(^r.acc))
		if ones > r.n {
			ones = r.n
		}
		if q+ones >= riceEscape {
			take := riceEscape - q
			r.acc >>= take
			r.n -= take
			q = riceEscape
			break
		}
		if ones < r.n {
			r.acc >>= ones + 1
			r.n -= ones + 1
			return (uint64(q+ones) << k) | r.get(k)
		}
		q += ones
		r.acc, r.n = 0, 0
	}
	l := uint(r.get(6)) + 1
	return r.get(l)
}

// unpackInts reads ints into dst (its length is the count written).
func (r *bitReader) unpackInts(dst []int64) {
	if len(dst) == 0 {
		return
	}
	enc := r.get(2)
	g := int64(1)
	if r.get(1) != 0 {
		u := r.uvarint()
		if u < 2 || u > math.MaxInt64 {
			r.fail("bad divisor")
			return
		}
		g = int64(u)
	}
	prev := r.varint()
	dst[0] = prev
	switch enc {
	case encConst:
		if g != 1 {
			r.fail("divisor of a constant step")
			return
		}
		if len(dst) > 1 {
			step := unzz(r.uvarint())
			for i := 1; i < len(dst); i++ {
				prev += step
				dst[i] = prev
			}
		}
	case encDelta, encDoD, encGrid:
		var pd, least, step int64
		if enc == encGrid {
			if g != 1 {
				r.fail("divisor of a grid")
				return
			}
			step = r.varint()
		}
		first := prev
		var k uint
		var mode uint64
		for i := 1; i < len(dst) && r.err == nil; i++ {
			if (i-1)%riceBlock == 0 {
				mode, k = r.get(2), uint(r.get(6))
				switch mode {
				case blockOffset:
					u := r.uvarint()
					if u < 1 || u > math.MaxInt64 {
						r.fail("bad least value")
						return
					}
					least = int64(u)
				case blockZigzag, blockZeros:
				default:
					r.fail("bad block mode")
					return
				}
			}
			var q int64
			switch mode {
			case blockZigzag:
				q = unzz(r.rice(k))
			case blockOffset:
				q = int64(r.rice(k)) + least
			case blockZeros:
				if r.get(1) != 0 {
					q = unzz(r.rice(k) + 1)
				}
			}
			switch enc {
			case encGrid:
				dst[i] = first + int64(i)*step + q
				continue
			case encDoD:
				pd += q
			default:
				pd = q
			}
			prev += pd * g
			dst[i] = prev
		}
	}
}

// decodePacked decodes format 3 (data[0] is its version) into c.
func (dc *Decoder) decodePacked(data []byte, c *Chunk) error {
	n, l := binary.Uvarint(data[1:])
	if l <= 0 || n > MaxSamples || claimsTooMany(n, len(data)-1) {
		return fmt.Errorf("%w: header (n %d)", ErrCorrupt, n)
	}
	r := bitReader{b: data[1+l:]}
	ncols := r.get(7)
	if r.err != nil || ncols > MaxColumns {
		return fmt.Errorf("%w: header (columns %d)", ErrCorrupt, ncols)
	}
	c.Times = resize(c.Times, int(n))
	r.unpackInts(c.Times)
	if r.err == nil && !increasing(c.Times) {
		r.fail("times do not increase")
	}
	cols := reusable(c.Columns, ncols)
	wanted := dc.Want
	for i := uint64(0); i < ncols && r.err == nil; i++ {
		if dc.Want != 0 && wanted == 0 {
			c.Columns = cols // every column wanted is read: the rest are left out
			return nil
		}
		old := previous(cols, i)
		col := Column{ID: uint8(r.get(8)), Values: resize(old.Values, int(n))}
		if col.ID < 64 {
			wanted &^= 1 << col.ID
		}
		mode := r.get(2)
		present := int(n)
		switch mode {
		case absentNone:
		case absentList, presentLst:
			m := r.uvarint()
			if m > n || r.err != nil {
				r.fail("bad positions")
				break
			}
			dc.pos = resize(dc.pos, int(m))
			r.unpackInts(dc.pos)
			col.Absent = resize(old.Absent, int(n))
			for j := range col.Absent {
				col.Absent[j] = mode == presentLst
			}
			last := int64(-1)
			for _, p := range dc.pos {
				if p <= last || p >= int64(n) {
					r.fail("bad positions")
					break
				}
				col.Absent[p] = mode == absentList
				last = p
			}
			if mode == absentList {
				present = int(n) - int(m)
			} else {
				present = int(m)
			}
		default:
			r.fail("bad absent mode")
		}
		if r.err != nil {
			break
		}
		if col.Absent == nil {
			r.unpackInts(col.Values)
		} else {
			dc.vals = resize(dc.vals, present)
			r.unpackInts(dc.vals)
			k := 0
			for j := range col.Values {
				if col.Absent[j] {
					col.Values[j] = 0
					continue
				}
				col.Values[j] = dc.vals[k]
				k++
			}
		}
		cols = append(cols, col)
	}
	c.Columns = cols
	if r.err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, r.err)
	}
	if r.i != len(r.b) || r.acc != 0 || r.n >= 8 {
		return fmt.Errorf("%w: trailing bits", ErrCorrupt)
	}
	return nil
}
