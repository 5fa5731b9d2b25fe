package wire

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"
)

// ListContentType is the media type of several batches in one body: a
// BatchList message of wire.proto (field 1, each batch's encoding). An
// agent sends what waited in its spool this way: one request, and so one
// commit on a server that paces its commits (ClickHouse), for many
// batches.
const ListContentType = "application/x-taskscope-batches"

// BatchList is several batches (wire.proto's BatchList). The server reads
// a list's batches one by one (SplitList, Unmarshal); agents write a list
// of batches they compressed already (AppendZstdListEntry).
type BatchList struct {
	Batches []Batch
}

// MaxListBatches is the most batches a list may hold.
const MaxListBatches = 1024

const fListBatch = 1

// SplitList returns the encodings of the batches of a BatchList (views
// into data, in order) without decoding them. Unknown fields are skipped;
// a field 1 of another wire type, a truncated field, no batch, or more than
// max batches is an error wrapping ErrMalformed.
func SplitList(data []byte, max int) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		n, t, l := protowire.ConsumeTag(data)
		if l < 0 {
			return nil, fmt.Errorf("%w: batch list: bad tag", ErrMalformed)
		}
		data = data[l:]
		if n != fListBatch {
			if l = protowire.ConsumeFieldValue(n, t, data); l < 0 {
				return nil, fmt.Errorf("%w: batch list: field %d truncated", ErrMalformed, n)
			}
			data = data[l:]
			continue
		}
		if t != protowire.BytesType {
			return nil, fmt.Errorf("%w: batch list: field 1: wrong wire type %d", ErrMalformed, t)
		}
		v, l := protowire.ConsumeBytes(data)
		if l < 0 {
			return nil, fmt.Errorf("%w: batch list: batches[%d] truncated", ErrMalformed, len(out))
		}
		if len(out) == max {
			return nil, fmt.Errorf("%w: batch list: more than %d batches", ErrMalformed, max)
		}
		out = append(out, v)
		data = data[l:]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: batch list: no batch", ErrMalformed)
	}
	return out, nil
}

// Bodies returns the encodings of the batches of a request's body
// (decompressed) of media type contentType: the body itself for
// ContentType, the list's batches (SplitList, at most MaxListBatches) for
// ListContentType; another type is an error.
func Bodies(contentType string, data []byte) ([][]byte, error) {
	switch contentType {
	case ContentType:
		return [][]byte{data}, nil
	case ListContentType:
		return SplitList(data, MaxListBatches)
	}
	return nil, fmt.Errorf("media type %q: neither %s nor %s", contentType, ContentType, ListContentType)
}

// AppendListEntry appends to a BatchList being written the head of a
// batch's entry (its tag and its length, n bytes): the batch's encoding
// follows.
func AppendListEntry(dst []byte, n int) []byte {
	dst = protowire.AppendTag(dst, fListBatch, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(n))
}

// ErrNotListable is a zstd frame that cannot go into a list as it is: its
// content's size is not known (not given, and its header does not say it:
// small frames' headers do not), or it needs a window over ListWindow.
var ErrNotListable = errors.New("zstd frame that cannot go into a batch list as it is")

// ListWindow is the largest window a frame of a zstd list may need: the
// server takes any frame's within the first frame's window or 1 MiB,
// whichever is larger, and a list's first frame is a small one.
const ListWindow = 1 << 20

// AppendZstdListEntry appends to a zstd BatchList body being written a
// batch already compressed as one zstd frame (what an agent sends and
// spools): a small frame with the entry's head, then the batch's frame as
// it is. (A zstd body may be several frames: it decompresses to their
// contents one after the other, so the batches are not compressed again.)
// size is the batch's encoded length, 0 if not known: then the frame's
// header must say it. A frame that cannot go into a list is
// ErrNotListable: send it alone.
func AppendZstdListEntry(dst, frame []byte, size int, enc *zstd.Encoder) ([]byte, error) {
	var h zstd.Header
	if err := h.Decode(frame); err != nil {
		return nil, fmt.Errorf("cannot read a batch's zstd frame: %w", err)
	}
	window := h.WindowSize
	if h.SingleSegment {
		window = h.FrameContentSize
	}
	if h.HasFCS && size > 0 && h.FrameContentSize != uint64(size) {
		return nil, fmt.Errorf("a batch's zstd frame holds %d bytes, not %d", h.FrameContentSize, size)
	}
	if size <= 0 && h.HasFCS {
		size = int(h.FrameContentSize)
	}
	if size <= 0 || h.Skippable || window > ListWindow {
		return nil, ErrNotListable
	}
	var head [16]byte
	dst = enc.EncodeAll(AppendListEntry(head[:0], size), dst)
	return append(dst, frame...), nil
}
