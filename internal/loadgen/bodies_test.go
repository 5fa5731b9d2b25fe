package loadgen

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A bodies file gives back what Prepare makes, in order, and a file cut
// short is an error, not a shorter run.
func TestBodiesFile(t *testing.T) {
	cfg := Config{Nodes: 3, Slots: 2, Duration: 2 * time.Minute, Seed: 4, Start: time.Unix(1_700_000_000, 0)}
	want := Prepare(cfg)
	path := filepath.Join(t.TempDir(), "bodies")
	p, err := PrepareFile(cfg, path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Batches != len(want) || p.Batches != 3*24 {
		t.Fatalf("%d batches in the file, Prepare made %d", p.Batches, len(want))
	}
	br, err := OpenBodies(path)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for i := 0; ; i++ {
		b, err := br.Next()
		if errors.Is(err, io.EOF) {
			if i != len(want) {
				t.Errorf("%d bodies read, %d written", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if b.Agent != w.Agent || b.Seq != w.Seq || b.SentMs != w.SentMs || b.Samples != w.Samples || !bytes.Equal(b.Data, w.Data) {
			t.Fatalf("body %d: %s/%d %d samples %d bytes, want %s/%d %d samples %d bytes", i, b.Agent, b.Seq, b.Samples,
				len(b.Data), w.Agent, w.Seq, w.Samples, len(w.Data))
		}
		samples += int64(b.Samples)
	}
	br.Close()
	if samples != p.Samples {
		t.Errorf("%d samples read, %d written", samples, p.Samples)
	}
	fi, _ := os.Stat(path)
	os.Truncate(path, fi.Size()-10)
	br, _ = OpenBodies(path)
	defer br.Close()
	var last error
	for last == nil {
		_, last = br.Next()
	}
	if !errors.Is(last, io.ErrUnexpectedEOF) {
		t.Errorf("a file cut short ends with %v", last)
	}
}
