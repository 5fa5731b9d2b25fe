package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"
)

// text is n bytes that compress a few times (words drawn at random).
func text(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := strings.Fields("cpu rss io read write attempt container job map reduce 1 2 3 42 1700000000000 node001 java -Xmx")
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

// TestReadAll: what a reader gives is read whole, however it gives it and
// whatever size was guessed, up to the limit and not a byte beyond
// (errFull); its errors come back; the budget is given back every time.
func TestReadAll(t *testing.T) {
	const limit = 1 << 20
	budget := NewBudget(64 << 20)
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, n := range []int{0, 1, minGrow - 1, minGrow, minGrow + 1, 100_000, 3*minGrow + 5, limit - 1, limit, limit + 1, 3 * limit} {
		data := text(n, uint64(n))
		for _, size := range []int{0, n / 2, n, 2 * n} {
			for name, wrap := range readers {
				if name == "one byte" && n > 100_000 {
					continue
				}
				l := &lease{b: budget, max: 16 << 20}
				out, err := readAll(wrap(bytes.NewReader(data)), l, size, limit)
				what := fmt.Sprintf("%d bytes (size %d, %s)", n, size, name)
				switch {
				case n > limit:
					if !errors.Is(err, errFull) {
						t.Errorf("%s: %v, want errFull", what, err)
					}
				case err != nil:
					t.Errorf("%s: %v", what, err)
				case !bytes.Equal(out.b, data):
					t.Errorf("%s: read %d bytes, not what was written", what, len(out.b))
				case size == n && size > maxPooledBuf && cap(out.b) != n:
					t.Errorf("%s: a buffer of %d bytes for %d, guessed right", what, cap(out.b), n)
				}
				if err == nil && int64(cap(out.b)) > l.held {
					t.Errorf("%s: a buffer of %d bytes, %d charged", what, cap(out.b), l.held)
				}
				if err == nil {
					out.drop()
				}
				if l.held != 0 || budget.InUse() != 0 {
					t.Fatalf("%s: %d bytes still held (budget %d)", what, l.held, budget.InUse())
				}
			}
		}
	}
	broken := errors.New("connection reset")
	l := &lease{b: budget, max: 16 << 20}
	if _, err := readAll(io.MultiReader(bytes.NewReader(text(200_000, 1)), iotest.ErrReader(broken)), l, 0, limit); !errors.Is(err, broken) {
		t.Errorf("a reader that fails: %v", err)
	}
	if budget.InUse() != 0 {
		t.Errorf("after a failure, %d bytes in use", budget.InUse())
	}
}

// TestZstdWindows: a zstd body is decoded as a stream within a window that
// is its first frame's (within the limit) or 1 MiB; a frame that needs more
// is refused (413), a header that announces more than the limit at once;
// only decoders of windows up to 8 MiB are kept (the one of 16 MiB, taken
// from the pool, is let go); a body of the limit is
// taken, one byte more is not.
func TestZstdWindows(t *testing.T) {
	h := NewHandler(nil, HandlerOptions{})
	stream := func(data []byte, window int) []byte {
		var out bytes.Buffer
		enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(window))
		if err != nil {
			t.Fatal(err)
		}
		enc.Write(data)
		enc.Close()
		return out.Bytes()
	}
	decode := func(body []byte) ([]byte, error) {
		l := &lease{b: h.o.Budget, max: h.o.MaxRequestBytes}
		defer l.release()
		data, buf, err := h.unzstd(body, l)
		if err != nil {
			return nil, err
		}
		defer buf.drop()
		return bytes.Clone(data), nil
	}
	small, big := text(6<<20, 1), text(20<<20, 2)
	for _, c := range []struct {
		name   string
		data   []byte
		window int
		kept   int
	}{{"4 MiB window", small, 4 << 20, 1}, {"16 MiB window", big, 16 << 20, 0}, {"8 MiB window", big, 8 << 20, 1}} {
		got, err := decode(stream(c.data, c.window))
		if err != nil || !bytes.Equal(got, c.data) {
			t.Errorf("%s: %d bytes, %v", c.name, len(got), err)
		}
		if len(h.zstd) != c.kept {
			t.Errorf("after a %s, %d decoders kept, want %d", c.name, len(h.zstd), c.kept)
		}
	}
	// A small frame (its window is its content) and then one of a 4 MiB window.
	enc, _ := zstd.NewWriter(nil)
	two := append(enc.EncodeAll(text(5000, 3), nil), stream(small, 4<<20)...)
	if _, err := decode(two); !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), "a zstd frame needs a window of more than 1048576 bytes") {
		t.Errorf("a second frame of a larger window: %v", err)
	}
	// A frame header announcing a window of 128 MiB, then an empty last block.
	if _, err := decode([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 17 << 3, 0x01, 0x00, 0x00}); !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), "window of more than 67108864") {
		t.Errorf("a window of 128 MiB: %v", err)
	}
	if u := h.o.Budget.InUse(); u != 0 {
		t.Errorf("%d bytes of the budget still taken", u)
	}

	h = NewHandler(nil, HandlerOptions{MaxDecodedBytes: 1 << 20})
	full := text(1<<20, 4)
	if got, err := decode(stream(full, 256<<10)); err != nil || !bytes.Equal(got, full) {
		t.Errorf("a stream of the limit: %d bytes, %v", len(got), err)
	}
	if _, err := decode(stream(append(full, 'x'), 256<<10)); !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), "decompressed body too large: limit 1048576 bytes") {
		t.Errorf("a stream of the limit and a byte: %v", err)
	}
	if _, err := decode(enc.EncodeAll(append(full, 'x'), nil)); !errors.Is(err, errTooLarge) {
		t.Errorf("a frame saying it holds the limit and a byte: %v", err)
	}
}

// FuzzInflate: any body said to be zstd or gzip is decompressed as a
// reference decoder does, whole and within the limit, or refused with an
// error of the handler's (413 beyond the limit, 400 otherwise); the memory
// it took always goes back.
//
//	go test -run '^$' -fuzz FuzzInflate -fuzztime 1m ./internal/ingest/
func FuzzInflate(f *testing.F) {
	const limit = 64 << 10
	h := NewHandler(nil, HandlerOptions{MaxDecodedBytes: limit})
	ref, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
	if err != nil {
		f.Fatal(err)
	}
	enc, _ := zstd.NewWriter(nil)
	for _, data := range [][]byte{nil, []byte("x"), text(5000, 1), text(limit, 2), text(limit+1, 3)} {
		f.Add(enc.EncodeAll(data, nil), true)
		f.Add(gzipBytes(f, data), false)
		var s bytes.Buffer
		w, _ := zstd.NewWriter(&s, zstd.WithWindowSize(32<<10))
		w.Write(data)
		w.Close()
		f.Add(s.Bytes(), true)
		f.Add(append(bytes.Clone(s.Bytes()), s.Bytes()...), true)
	}
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 17 << 3, 0x01, 0x00, 0x00}, true)
	f.Fuzz(func(t *testing.T, body []byte, isZstd bool) {
		l := &lease{b: h.o.Budget, max: h.o.MaxRequestBytes}
		var data []byte
		var buf *buffer
		var err error
		if isZstd {
			data, buf, err = h.unzstd(body, l)
		} else {
			data, buf, err = h.gunzip(body, l)
		}
		switch {
		case err == nil:
			if len(data) > limit {
				t.Errorf("%d bytes out, beyond the limit of %d", len(data), limit)
			}
			if isZstd {
				want, rerr := ref.DecodeAll(body, nil)
				if rerr != nil || !bytes.Equal(data, want) {
					t.Errorf("decoded %d bytes; the reference decoder %d, %v", len(data), len(want), rerr)
				}
			}
		case errors.Is(err, errTooLarge):
		case strings.HasPrefix(err.Error(), "cannot decompress zstd body: "), strings.HasPrefix(err.Error(), "cannot decompress gzip body: "):
		default:
			t.Errorf("an error that is not the handler's: %v", err)
		}
		buf.drop()
		l.release()
		if u := h.o.Budget.InUse(); u != 0 {
			t.Fatalf("%d bytes of the budget still taken", u)
		}
	})
}
