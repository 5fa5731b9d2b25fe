package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Format 4, a residual: an attempt's chunk stored as its difference from
// the sums of some processes' samples at the same times (package store
// makes it and adds the processes back; the processes' own chunks are
// stored beside it). It names the processes, each with the number of its
// samples that were subtracted (a reader checks it finds as many), and
// holds the differences as a format 3 chunk:
//
//	the version byte (4), the number of processes (uvarint), each
//	process's key (8 bytes, little-endian), each one's count (uvarint),
//	then the format 3 chunk.
//
// Decode refuses it (ErrResidual): its values mean nothing without the
// processes'.
const versionResidual = 4

// MaxResidualProcesses bounds the processes a residual names.
const MaxResidualProcesses = 1 << 12

// ErrResidual is Decode's error for a residual chunk (Residual reads it).
var ErrResidual = errors.New("chunk is an attempt's difference from its processes' samples")

// IsResidual reports whether data is a residual chunk.
func IsResidual(data []byte) bool { return len(data) > 0 && data[0] == versionResidual }

// EncodeResidual appends to dst the residual of c (the differences, as
// format 3) against the processes procs, of which counts[k] samples were
// subtracted.
func (w *Writer) EncodeResidual(dst []byte, procs []uint64, counts []int, c *Chunk) []byte {
	return w.encodePacked(ResidualHeader(dst, procs, counts), c)
}

// ResidualHeader appends to dst a residual's header: the differences, a
// format 3 chunk (Encode at level Packed), follow it.
func ResidualHeader(dst []byte, procs []uint64, counts []int) []byte {
	dst = append(dst, versionResidual)
	dst = binary.AppendUvarint(dst, uint64(len(procs)))
	for _, p := range procs {
		dst = binary.LittleEndian.AppendUint64(dst, p)
	}
	for _, n := range counts {
		dst = binary.AppendUvarint(dst, uint64(n))
	}
	return dst
}

// Residual splits a residual chunk into its processes (appended to
// procs), their counts (appended to counts) and its differences (a
// format 3 chunk, a part of data, for Decode).
func Residual(data []byte, procs []uint64, counts []int) ([]uint64, []int, []byte, error) {
	if !IsResidual(data) {
		return procs, counts, nil, fmt.Errorf("%w: not a residual", ErrCorrupt)
	}
	b := data[1:]
	n, l := binary.Uvarint(b)
	if l <= 0 || n > MaxResidualProcesses || uint64(len(b)-l) < 9*n {
		return procs, counts, nil, fmt.Errorf("%w: residual header (%d processes)", ErrCorrupt, n)
	}
	b = b[l:]
	for i := uint64(0); i < n; i++ {
		procs = append(procs, binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	for i := uint64(0); i < n; i++ {
		c, l := binary.Uvarint(b)
		if l <= 0 || c > MaxSamples {
			return procs, counts, nil, fmt.Errorf("%w: residual count", ErrCorrupt)
		}
		counts = append(counts, int(c))
		b = b[l:]
	}
	if len(b) == 0 || b[0] != versionPacked {
		return procs, counts, nil, fmt.Errorf("%w: residual body", ErrCorrupt)
	}
	return procs, counts, b, nil
}
