package store

import (
	"encoding/binary"
	"errors"
)

// EncodeState packs a series state for storage (stores keep it with the
// process or attempt, to continue increments after a restart).
func EncodeState(s *SeriesState) []byte {
	if s == nil {
		return nil
	}
	b := make([]byte, 0, 16+len(s.Last)*3)
	b = binary.AppendUvarint(b, uint64(len(s.Last)))
	var mask uint64
	for i, h := range s.Have {
		if h {
			mask |= 1 << uint(i)
		}
	}
	b = binary.AppendUvarint(b, mask)
	for i, v := range s.Last {
		if s.Have[i] {
			b = binary.AppendVarint(b, v)
		}
	}
	b = binary.AppendVarint(b, s.LastMs)
	b = binary.AppendVarint(b, s.LastRSSKB)
	return b
}

var errBadState = errors.New("store: damaged series state")

// DecodeState unpacks EncodeState's output for a series of n columns.
func DecodeState(b []byte, n int) (*SeriesState, error) {
	s := &SeriesState{Last: make([]int64, n), Have: make([]bool, n)}
	cnt, l := binary.Uvarint(b)
	if l <= 0 || int(cnt) != n {
		return nil, errBadState
	}
	b = b[l:]
	mask, l := binary.Uvarint(b)
	if l <= 0 {
		return nil, errBadState
	}
	b = b[l:]
	for i := 0; i < n; i++ {
		if mask&(1<<uint(i)) == 0 {
			continue
		}
		v, l := binary.Varint(b)
		if l <= 0 {
			return nil, errBadState
		}
		s.Last[i], s.Have[i] = v, true
		b = b[l:]
	}
	var l2 int
	s.LastMs, l2 = binary.Varint(b)
	if l2 <= 0 {
		return nil, errBadState
	}
	b = b[l2:]
	s.LastRSSKB, l2 = binary.Varint(b)
	if l2 <= 0 {
		return nil, errBadState
	}
	return s, nil
}
