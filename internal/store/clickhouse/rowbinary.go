package clickhouse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// RowBinary is ClickHouse's binary row format: each row its columns in
// order, integers and floats little-endian at their width, a String its
// length (unsigned varint) and bytes, a Date its days since 1970 (UInt16).

// Block builds the RowBinary body of an insert. The zero value is ready.
type Block struct {
	buf  []byte
	rows int
	// grew counts the times the block grew as it was written since its
	// last Reset (not by Grow).
	grew int
}

// Row counts a row (call once per row, before or after its columns).
func (b *Block) Row() { b.rows++ }

// Rows is the number of rows counted.
func (b *Block) Rows() int { return b.rows }

// Len is the body's size in bytes.
func (b *Block) Len() int { return len(b.buf) }

// Bytes is the body.
func (b *Block) Bytes() []byte { return b.buf }

// Reset empties the block, keeping its memory.
func (b *Block) Reset() { b.buf, b.rows, b.grew = b.buf[:0], 0, 0 }

// Grow makes room for n more bytes, so that the next n are written
// without the block growing. Only the bytes written are copied (not the
// whole of an emptied block's memory, as slices.Grow does).
func (b *Block) Grow(n int) {
	if n > cap(b.buf)-len(b.buf) {
		buf := make([]byte, len(b.buf), len(b.buf)+n)
		copy(buf, b.buf)
		b.buf = buf
	}
}

// room makes room for n more bytes (n small): a block that is full
// doubles, where append would grow a large one by a quarter, copying it
// each time into memory fresh from the system (runtime.growslice and its
// memmove, 0.5-0.7 s of the commits' 2 s in a 2-shard run of
// BenchmarkStoresIngest).
func (b *Block) room(n int) {
	if n > cap(b.buf)-len(b.buf) {
		b.double(n)
	}
}

// double grows the block by n bytes, its size, or minBlockGrow, whichever
// is largest (out of line: room is inlined into every write).
//
//go:noinline
func (b *Block) double(n int) {
	b.Grow(max(n, cap(b.buf), minBlockGrow))
	b.grew++
}

// minBlockGrow is the least a block grows by.
const minBlockGrow = 4096

func (b *Block) UInt8(v uint8) {
	b.room(1)
	b.buf = append(b.buf, v)
}

func (b *Block) UInt16(v uint16) {
	b.room(2)
	b.buf = binary.LittleEndian.AppendUint16(b.buf, v)
}

func (b *Block) UInt32(v uint32) {
	b.room(4)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, v)
}

func (b *Block) UInt64(v uint64) {
	b.room(8)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, v)
}

func (b *Block) Int32(v int32) { b.UInt32(uint32(v)) }
func (b *Block) Int64(v int64) { b.UInt64(uint64(v)) }
func (b *Block) Float64(v float64) {
	b.UInt64(math.Float64bits(v))
}
func (b *Block) Bool(v bool) {
	if v {
		b.UInt8(1)
	} else {
		b.UInt8(0)
	}
}

// Date is the day of a time in unix milliseconds (UTC), as ClickHouse's
// Date.
func (b *Block) Date(ms int64) { b.UInt16(DayOf(ms)) }

// DayOf is the Date of a time in unix milliseconds: days since 1970 (UTC),
// clamped to Date's range.
func DayOf(ms int64) uint16 {
	d := ms / 86_400_000
	if ms < 0 {
		d = 0
	}
	return uint16(min(d, math.MaxUint16))
}

func (b *Block) String(s string) {
	b.room(binary.MaxVarintLen64 + len(s))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(s)))
	b.buf = append(b.buf, s...)
}

func (b *Block) Blob(p []byte) {
	b.room(binary.MaxVarintLen64 + len(p))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(p)))
	b.buf = append(b.buf, p...)
}

// Rows reads a RowBinary answer: the caller reads each row's columns in
// order, with the types of the query's columns. A read past the end or of
// a malformed value sets Err, and every read after it returns zero values.
type Rows struct {
	buf    []byte
	pos    int
	err    error
	shared map[string]string // Shared's strings
}

// ErrMalformed is a RowBinary answer that does not parse as the columns
// asked for.
var ErrMalformed = errors.New("malformed RowBinary answer")

// Next reports whether another row follows (and no error was met).
func (r *Rows) Next() bool { return r.err == nil && r.pos < len(r.buf) }

// Err is the first error met.
func (r *Rows) Err() error { return r.err }

// Len is the answer's size in bytes.
func (r *Rows) Len() int { return len(r.buf) }

func (r *Rows) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.buf)-r.pos {
		r.err = fmt.Errorf("%w: %d bytes wanted at %d of %d", ErrMalformed, n, r.pos, len(r.buf))
		return nil
	}
	p := r.buf[r.pos : r.pos+n : r.pos+n]
	r.pos += n
	return p
}

func (r *Rows) UInt8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *Rows) UInt16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *Rows) UInt32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *Rows) UInt64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *Rows) Int32() int32     { return int32(r.UInt32()) }
func (r *Rows) Int64() int64     { return int64(r.UInt64()) }
func (r *Rows) Float64() float64 { return math.Float64frombits(r.UInt64()) }
func (r *Rows) Bool() bool       { return r.UInt8() != 0 }

// Bytes reads a String as bytes that share the answer's memory (valid as
// long as the Rows are; copy what is kept longer).
func (r *Rows) Bytes() []byte {
	if r.err != nil {
		return nil
	}
	n, k := binary.Uvarint(r.buf[r.pos:])
	if k <= 0 {
		r.err = fmt.Errorf("%w: bad string length at %d", ErrMalformed, r.pos)
		return nil
	}
	if n > uint64(len(r.buf)-r.pos-k) {
		r.err = fmt.Errorf("%w: a string of %d bytes at %d of %d", ErrMalformed, n, r.pos, len(r.buf))
		return nil
	}
	r.pos += k
	return r.take(int(n))
}

// String reads a String.
func (r *Rows) String() string { return string(r.Bytes()) }

// Shared reads a String, as one string shared by every equal value that
// Shared read of this answer: one allocation for a column whose values
// repeat (hosts, types, the job's names) rather than one a row.
func (r *Rows) Shared() string {
	b := r.Bytes()
	if s, ok := r.shared[string(b)]; ok {
		return s
	}
	if r.shared == nil {
		r.shared = map[string]string{}
	}
	s := string(b)
	r.shared[s] = s
	return s
}

// Quote is s as a ClickHouse string literal. 18.16 has no query
// parameters, so values go into the text: every byte but the backslash
// and the quote is literal inside quotes (ClickHouse reads the query's
// bytes, not characters), and those two are escaped.
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// QuoteList is strings as a list of literals for IN (...).
func QuoteList(ss []string) string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(Quote(s))
	}
	return b.String()
}

// LikeEscape escapes LIKE's wildcards (and the backslash) in s, to match s
// literally inside a LIKE pattern.
func LikeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
