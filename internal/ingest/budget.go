package ingest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Budget is the memory that requests' bodies take while they are read,
// decompressed and decoded, all requests together: a request takes from it
// before it allocates, and is refused (503, retry) when it is spent, so
// that a burst of hostile bodies (zip bombs, batches built to decode into
// much memory) costs at most the budget, never what they announce or
// expand to. A request that holds more than an eighth of it (a big one)
// may only take while at most half of it is in use: the rest stays for
// ordinary batches.
type Budget struct {
	max  int64
	used atomic.Int64
	peak atomic.Int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// InUse is the memory taken now.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Max is the budget's size.
func (b *Budget) Max() int64 { return b.max }

// Peak is the most that was in use at once.
func (b *Budget) Peak() int64 { return b.peak.Load() }

func (b *Budget) take(n int64, big bool) bool {
	limit := b.max
	if big {
		limit = b.max / 2
	}
	u := b.used.Add(n)
	if u > limit {
		b.used.Add(-n)
		return false
	}
	for p := b.peak.Load(); u > p && !b.peak.CompareAndSwap(p, u); p = b.peak.Load() {
	}
	return true
}

func (b *Budget) give(n int64) { b.used.Add(-n) }

var (
	// errBusy: the budget is spent by other requests (503, retry).
	errBusy = errors.New("the server is busy: its memory for request bodies is in use; retry")
	// errRequestMemory: this request alone needs more than it may (413).
	errRequestMemory = errors.New("the batch needs too much memory to decode")
)

// lease is what one request holds of the budget, up to max.
type lease struct {
	b    *Budget
	held int64
	max  int64
}

func (l *lease) take(n int64) error {
	if l.held+n > l.max {
		return fmt.Errorf("%w: more than %d bytes; send smaller batches", errRequestMemory, l.max)
	}
	if !l.b.take(n, l.held+n > l.b.max/8) {
		return errBusy
	}
	l.held += n
	return nil
}

func (l *lease) give(n int64) {
	l.held -= n
	l.b.give(n)
}

// release gives back everything the request holds.
func (l *lease) release() { l.give(l.held) }

// buffer is a byte slice whose capacity is taken from a lease. Small ones
// (up to maxPooledBuf) come from a pool and go back to it.
type buffer struct {
	b []byte
	l *lease
}

const (
	maxPooledBuf = 256 << 10
	minGrow      = 32 << 10
)

var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// newBuffer returns an empty buffer charged to l.
func newBuffer(l *lease) (*buffer, error) {
	p := bufPool.Get().(*[]byte)
	b := (*p)[:0]
	if err := l.take(int64(cap(b))); err != nil {
		bufPool.Put(p)
		return nil, err
	}
	return &buffer{b: b, l: l}, nil
}

// room makes room for at least one more byte, growing the buffer up to
// limit bytes of capacity; errFull when it is there already.
func (x *buffer) room(limit int) error {
	if len(x.b) < cap(x.b) {
		return nil
	}
	if cap(x.b) >= limit {
		return errFull
	}
	n := min(max(2*cap(x.b), minGrow), limit)
	if 2*n > limit {
		n = limit // not a last step of a few bytes that copies all
	}
	return x.grow(n)
}

// grow moves the buffer to one of capacity n.
func (x *buffer) grow(n int) error {
	if err := x.l.take(int64(n)); err != nil {
		return err
	}
	nb := make([]byte, len(x.b), n)
	copy(nb, x.b)
	x.drop()
	x.b = nb
	return nil
}

var errFull = errors.New("buffer at its limit")

// drop gives the buffer back: to the pool if it is small.
func (x *buffer) drop() {
	if x == nil || x.b == nil {
		return
	}
	x.l.give(int64(cap(x.b)))
	if cap(x.b) <= maxPooledBuf {
		b := x.b[:0]
		bufPool.Put(&b)
	}
	x.b = nil
}
