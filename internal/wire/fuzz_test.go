package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

var fuzzLimits = Limits{MaxStringBytes: 4 << 10, MaxMetrics: 64, MaxRecords: 1 << 10, MaxPoints: 1 << 16}

// FuzzUnmarshal: decoding never panics and stays in its limits; what
// decodes is written back to bytes that decode to the same batch and are
// canonical, and stays so after another batch is decoded (the decoder's
// pooled slabs); and where the batch is also valid, protobuf's own decoder,
// given docs/wire.proto, reads the same values.
func FuzzUnmarshal(f *testing.F) {
	for _, b := range []*Batch{fullBatch(), minimalBatch(), exampleBatch(), realisticBatch(2, 3)} {
		f.Add(Marshal(nil, b))
	}
	f.Add([]byte{0x52, 0x04, 0x1a, 0x02, 0x02, 0x80})
	md := batchDescriptor(f)
	other := Marshal(nil, realisticBatch(3, 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Unmarshal(data, fuzzLimits)
		if err != nil {
			if b != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v with batch %v", err, b)
			}
			return
		}
		if len(b.Metrics) > fuzzLimits.MaxMetrics {
			t.Fatalf("%d metrics", len(b.Metrics))
		}
		again := Marshal(nil, b)
		b2, err := Unmarshal(again, fuzzLimits)
		if err != nil {
			t.Fatalf("Marshal(Unmarshal(x)) does not decode: %v", err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("Marshal(Unmarshal(x)) decodes differently:\n%+v\n%+v", *b, *b2)
		}
		if !bytes.Equal(Marshal(nil, b2), again) {
			t.Fatal("Marshal is not canonical")
		}
		if len(again) > len(data) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(data), len(again))
		}
		// The decoder's slabs go back to their pools once a batch is
		// moved out of them (compact): a later decode, of a batch that
		// fills them, never changes an earlier batch.
		if _, err := Unmarshal(other, fuzzLimits); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(Marshal(nil, b), again) {
			t.Fatal("a later decode changed the batch")
		}
		verr := Validate(b)
		if verr != nil {
			if !errors.Is(verr, ErrInvalid) {
				t.Fatalf("validation error %v is not ErrInvalid", verr)
			}
			return
		}
		dm := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(data, dm); err != nil {
			t.Fatalf("valid batch that protobuf cannot read: %v", err)
		}
		var got Batch
		fromDynamic(dm, reflect.ValueOf(&got).Elem())
		if !reflect.DeepEqual(&got, b) {
			t.Fatalf("protobuf reads:\n%+v\nUnmarshal:\n%+v", got, *b)
		}
	})
}

// FuzzDeltas: any values, extremes and wrap-arounds included, survive the
// delta encoding.
func FuzzDeltas(f *testing.F) {
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 1<<63), 1<<63-1))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var vals []int64
		for len(raw) >= 8 {
			vals = append(vals, int64(binary.LittleEndian.Uint64(raw)))
			raw = raw[8:]
		}
		b := &Batch{ProcSeries: []Series{{Key: 1, Times: vals, Columns: []Column{{Metric: 1, Values: vals}}}}}
		got, err := Unmarshal(Marshal(nil, b), Limits{MaxMetrics: 2, MaxRecords: 1, MaxPoints: 2 * len(vals)})
		if err != nil {
			t.Fatal(err)
		}
		if s := got.ProcSeries[0]; !reflect.DeepEqual(s.Times, vals) || !reflect.DeepEqual(s.Columns[0].Values, vals) {
			t.Fatalf("got %v / %v, want %v", s.Times, s.Columns[0].Values, vals)
		}
	})
}

func FuzzSanitizeText(f *testing.F) {
	for _, s := range []string{"", "java", "a\x00b", "\xff", `\x00`, `\\x`, "ünï\xc3", "\xed\xa0\x80"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := SanitizeText(b)
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			t.Fatalf("SanitizeText(%q) = %q: not valid UTF-8 without NUL", b, s)
		}
		if back := unsanitize(s); !bytes.Equal(back, b) {
			t.Fatalf("SanitizeText(%q) = %q decodes to %q", b, s, back)
		}
		if utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 && !bytes.Contains(b, []byte(`\x`)) && s != string(b) {
			t.Fatalf("clean text %q changed to %q", b, s)
		}
		if utf(s) != nil {
			t.Fatalf("Validate would refuse %q", s)
		}
	})
}
