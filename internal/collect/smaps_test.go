package collect

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskscope/taskscope/internal/procfs"
)

type valuesMap map[int]int64

func (v valuesMap) Set(i int, x int64) { v[i] = x }

// TestPSSKeptWhileRSSHolds: smaps_rollup is read every PSSEvery ticks, but
// a process whose RSS holds still keeps its last PSS for PSSStaleEvery
// periods; one whose RSS moves is read again.
func TestPSSKeptWhileRSSHolds(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "42")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	setPSS := func(kb int) {
		s := fmt.Sprintf("00400000-7fff0000 ---p 00000000 00:00 0 [rollup]\nRss: 4000 kB\nPss: %d kB\n", kb)
		if err := os.WriteFile(filepath.Join(dir, "smaps_rollup"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := procfs.NewFS(root)
	cfg := &Config{FS: &fs, PSSEvery: 2}
	h := fs.OpenProc(42)
	defer h.Close()
	var buf []byte
	stat := procfs.Stat{RSS: 1000}
	state := make([]any, 1)
	src := smapsSource{}
	sample := func(age uint64) (int64, bool) {
		out := valuesMap{}
		tg := &Target{PID: 42, Age: age, Proc: h, Stat: &stat, Buf: &buf, State: state}
		if err := src.Sample(cfg, tg, 0, out); err != nil {
			t.Fatal(err)
		}
		v, ok := out[0]
		return v, ok
	}
	setPSS(100)
	if _, ok := sample(0); ok {
		t.Fatal("PSS at the first sample")
	}
	if v, ok := sample(1); !ok || v != 100<<10 {
		t.Fatalf("second sample: %d %v", v, ok)
	}
	if _, ok := sample(3); ok {
		t.Fatal("PSS between periods")
	}
	setPSS(200)
	stat.RSS = 1050 // within 1/16
	// Read at age 1: kept up to age 1 + PSSStaleEvery periods.
	for age := uint64(2); age <= 2*PSSStaleEvery; age += 2 {
		if v, _ := sample(age); v != 100<<10 {
			t.Fatalf("age %d: PSS %d, want the value kept while RSS holds", age, v)
		}
	}
	if v, _ := sample(2*PSSStaleEvery + 2); v != 200<<10 {
		t.Fatalf("PSS %d after %d periods, want it read again", v, PSSStaleEvery)
	}
	setPSS(300)
	stat.RSS = 1200
	if v, _ := sample(2*PSSStaleEvery + 4); v != 300<<10 {
		t.Fatalf("PSS %d after RSS moved, want it read again", v)
	}
}

// TestPSSNotAtTheAgentsFirstTick: the processes the agent finds when it
// starts get their first PSS at their second period, not at its first tick;
// one that starts later gets it at its second sample, not at its first (most
// processes of a churn are seen once); with PSSEvery 1 (a snapshot) at once.
func TestPSSNotAtTheAgentsFirstTick(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "42")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "smaps_rollup"), []byte("Rss: 4000 kB\nPss: 100 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := procfs.NewFS(root)
	h := fs.OpenProc(42)
	defer h.Close()
	var buf []byte
	read := func(every int, tick, age uint64) bool {
		out := valuesMap{}
		tg := &Target{PID: 42, Tick: tick, Age: age, Proc: h, Stat: &procfs.Stat{RSS: 1000}, Buf: &buf, State: make([]any, 1)}
		if err := (smapsSource{}).Sample(&Config{FS: &fs, PSSEvery: every}, tg, 0, out); err != nil {
			t.Fatal(err)
		}
		_, ok := out[0]
		return ok
	}
	for _, c := range []struct {
		every     int
		tick, age uint64
		want      bool
	}{
		{10, 1, 0, false}, // there at the agent's start
		{10, 10, 9, false},
		{10, 11, 10, true}, // its second period
		{10, 2, 1, false},
		{10, 5, 0, false}, // started later: not at its first sample,
		{10, 6, 1, true},  // at its second
		{10, 7, 2, false},
		{10, 15, 10, true},
		{2, 5, 0, false},
		{2, 6, 1, true},
		{2, 7, 2, true},
		{1, 1, 0, true}, // a snapshot
		{1, 5, 0, true},
	} {
		if got := read(c.every, c.tick, c.age); got != c.want {
			t.Errorf("PSSEvery %d, tick %d, age %d: read %v, want %v", c.every, c.tick, c.age, got, c.want)
		}
	}
}
