package hotspot

import (
	"bytes"
	"testing"
)

func FuzzParseThreadDump(f *testing.F) {
	for _, n := range []string{"jdk8.txt", "jdk17.txt", "jdk21.txt"} {
		f.Add(readFixture(f, n))
	}
	f.Add([]byte("\"a\" nid=0x1\n\tat x(\n"))
	f.Add([]byte("\"\" #1 nid=1 \n   java.lang.Thread.State: BLOCKED (on object monitor)\n\tat a/0x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{MaxThreads: 100, MaxFrames: 8}
		n := 0
		ParseThreadDump(b, lim, func(th *Thread) error {
			n++
			if th.TID <= 0 {
				t.Fatalf("thread %q with tid %d", th.Name, th.TID)
			}
			if len(th.Frames) > lim.MaxFrames {
				t.Fatalf("%d frames over the limit of %d", len(th.Frames), lim.MaxFrames)
			}
			for _, fr := range th.Frames {
				if bytes.IndexByte(fr, '(') >= 0 || bytes.IndexByte(fr, '\n') >= 0 {
					t.Fatalf("frame %q", fr)
				}
			}
			if bytes.IndexByte(th.Name, '\n') >= 0 {
				t.Fatalf("name %q", th.Name)
			}
			return nil
		})
		if n > lim.MaxThreads {
			t.Fatalf("%d threads over the limit of %d", n, lim.MaxThreads)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add(readFixture(f, "status.txt"))
	f.Add([]byte("Uid:\t0 0 0 0\nGid:\t0 0 0 0\nSigCgt:\t4\nNSpid:\t9 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStatus(b, 77)
		if err == nil && s.NSPID <= 0 {
			t.Fatalf("nspid %d", s.NSPID)
		}
	})
}
