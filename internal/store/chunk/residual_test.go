package chunk

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestResidualRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	c := sample(300, r)
	var w Writer
	procs, counts := []uint64{1, 1<<64 - 1, 42}, []int{300, 0, 17}
	data := w.EncodeResidual(nil, procs, counts, c)
	if !IsResidual(data) {
		t.Fatal("not a residual")
	}
	if _, err := Decode(data); !errors.Is(err, ErrResidual) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode of a residual: %v, want ErrResidual (not ErrCorrupt: compaction drops what is corrupt)", err)
	}
	gotP, gotC, body, err := Residual(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotP, procs) || !slices.Equal(gotC, counts) {
		t.Fatalf("processes %v %v, want %v %v", gotP, gotC, procs, counts)
	}
	back, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normal(back), normal(c)) {
		t.Fatal("the differences decode otherwise")
	}
	// A chunk of another format is not one.
	if _, _, _, err := Residual(EncodeLevel(nil, c, Packed), nil, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Residual of a format 3 chunk: %v", err)
	}
	// Cut anywhere, it is refused.
	for i := 1; i < len(data)-1; i++ {
		p, _, b, err := Residual(data[:i], nil, nil)
		if err == nil {
			if _, err := Decode(b); err == nil {
				t.Fatalf("cut at %d of %d: decodes (%d processes)", i, len(data), len(p))
			}
		}
	}
}

// FuzzResidual: a residual's header and body are read without panics or
// unbounded memory, and what reads writes back the same.
func FuzzResidual(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	var w Writer
	f.Add(w.EncodeResidual(nil, []uint64{3, 4}, []int{20, 5}, sample(20, r)))
	f.Add(w.EncodeResidual(nil, nil, nil, sample(70, r)))
	f.Add([]byte{4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0})
	f.Add([]byte{4, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		procs, counts, body, err := Residual(data, nil, nil)
		if err != nil {
			return
		}
		if len(procs) != len(counts) || len(procs) > MaxResidualProcesses {
			t.Fatalf("%d processes, %d counts", len(procs), len(counts))
		}
		c, err := Decode(body)
		if err != nil {
			return
		}
		var w Writer
		p2, c2, b2, err := Residual(w.EncodeResidual(nil, procs, counts, c), nil, nil)
		if err != nil {
			t.Fatalf("re-encoded residual: %v", err)
		}
		again, err := Decode(b2)
		if err != nil {
			t.Fatalf("re-encoded residual's body: %v", err)
		}
		if !slices.Equal(p2, procs) || !slices.Equal(c2, counts) || !reflect.DeepEqual(normal(again), normal(c)) {
			t.Fatal("re-encoded residual differs")
		}
	})
}
