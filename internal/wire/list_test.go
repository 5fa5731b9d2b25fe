package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/dynamicpb"
)

// TestZstdList: a list written of batches compressed one by one, as an
// agent spools them, decompresses to a BatchList that SplitList and
// Unmarshal read back, and that protobuf's own decoder reads too.
func TestZstdList(t *testing.T) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	want := []*Batch{fullBatch(), realisticBatch(50, 10), minimalBatch()}
	var body []byte
	for i, b := range want {
		data := Marshal(nil, b)
		size := len(data)
		if i == 0 {
			size = 0 // from the frame's header
		}
		if body, err = AppendZstdListEntry(body, enc.EncodeAll(data, nil), size, enc); err != nil {
			t.Fatal(err)
		}
	}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	data, err := dec.DecodeAll(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := SplitList(data, MaxListBatches)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(want) {
		t.Fatalf("%d batches, want %d", len(parts), len(want))
	}
	for i, p := range parts {
		got, err := Unmarshal(p, DefaultLimits)
		if err != nil {
			t.Fatalf("batches[%d]: %v", i, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("batches[%d]:\n%+v\nwant:\n%+v", i, *got, *want[i])
		}
	}
	file, err := protodesc.NewFile(fileDescriptor(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dm := dynamicpb.NewMessage(file.Messages().ByName("BatchList"))
	if err := proto.Unmarshal(data, dm); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	var got BatchList
	fromDynamic(dm, reflect.ValueOf(&got).Elem())
	for i := range want {
		if i >= len(got.Batches) || !reflect.DeepEqual(&got.Batches[i], want[i]) {
			t.Errorf("protobuf's batches[%d] differ", i)
		}
	}
}

// TestZstdListRefuses frames that cannot go into a list as they are: a
// small one (its header does not say its size) of unknown size, one
// needing a window over ListWindow.
func TestZstdListRefuses(t *testing.T) {
	enc, _ := zstd.NewWriter(nil)
	small := enc.EncodeAll(Marshal(nil, minimalBatch()), nil)
	big := enc.EncodeAll(bytes.Repeat([]byte("x"), 2<<20), nil)
	for name, frame := range map[string][]byte{"small": small, "big": big} {
		if _, err := AppendZstdListEntry(nil, frame, 0, enc); !errors.Is(err, ErrNotListable) {
			t.Errorf("%s: %v, want ErrNotListable", name, err)
		}
	}
	if _, err := AppendZstdListEntry(nil, big, 1<<20, enc); err == nil || errors.Is(err, ErrNotListable) {
		t.Errorf("a size the frame contradicts: %v", err)
	}
}

func TestSplitListRejects(t *testing.T) {
	one := AppendListEntry(nil, 2)
	one = append(one, 0x08, 0x01)
	for name, data := range map[string][]byte{
		"empty":      nil,
		"truncated":  one[:len(one)-1],
		"wrong type": {0x08, 0x01},
		"bad tag":    {0xff},
		"too many":   append(append([]byte(nil), one...), one...),
	} {
		if _, err := SplitList(data, 1); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// Unknown fields are skipped.
	got, err := SplitList(append([]byte{0x10, 0x05}, one...), 1)
	if err != nil || len(got) != 1 {
		t.Errorf("with an unknown field: %d batches, %v", len(got), err)
	}
}

func FuzzSplitList(f *testing.F) {
	one := append(AppendListEntry(nil, 2), 0x08, 0x01)
	f.Add(one)
	f.Add(append(append([]byte(nil), one...), one...))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		parts, err := SplitList(data, 8)
		if err != nil {
			return
		}
		if len(parts) == 0 || len(parts) > 8 {
			t.Fatalf("%d batches", len(parts))
		}
		// Written again, the list is the batches' entries (unknown
		// fields dropped): split again, the same parts.
		var again []byte
		for _, p := range parts {
			again = append(AppendListEntry(again, len(p)), p...)
		}
		back, err := SplitList(again, 8)
		if err != nil || !reflect.DeepEqual(back, parts) {
			t.Fatalf("written again: %v, %v", back, err)
		}
	})
}
