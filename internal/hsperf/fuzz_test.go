package hsperf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

func FuzzLayout(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.hsperf")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:4096])
	}
	f.Add(Build(binary.LittleEndian, 0, serialEntries(1, 2)))
	f.Add(Build(binary.BigEndian, 0, serialEntries(3, 4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, entries, err := Entries(b)
		l, lerr := NewLayout(b)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("Entries says %v, NewLayout %v", err, lerr)
		}
		if err != nil {
			return
		}
		if len(entries) != int(p.NumEntries) || l.Names != len(entries) {
			t.Fatalf("%d entries of %d, layout %d", len(entries), p.NumEntries, l.Names)
		}
		for _, e := range entries {
			if e.Offset < PrologueSize || e.Offset > len(b) {
				t.Fatalf("entry %q at %d of %d bytes", e.Name, e.Offset, len(b))
			}
			_ = e.String(b)
		}
		if l.Span() > len(b) {
			t.Fatalf("span %d of %d bytes", l.Span(), len(b))
		}
		var s Snapshot
		if err := l.Read(b, &s); err != nil {
			t.Fatalf("read of the file parsed: %v", err)
		}
		if err := l.Read(b[:l.Span()], &s); err != nil {
			t.Fatalf("read of the span: %v", err)
		}
	})
}
