package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func addFixtures(f *testing.F, name string) {
	files, _ := filepath.Glob("testdata/proc/*/" + name)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// renderStat writes s back in the kernel's format (the fields ParseStat
// does not keep as 0).
func renderStat(s *Stat) []byte {
	fields := map[int]string{3: string([]byte{s.State}), 9: fmt.Sprint(s.Flags), 4: fmt.Sprint(s.PPID), 5: fmt.Sprint(s.PGRP), 6: fmt.Sprint(s.Session),
		10: fmt.Sprint(s.MinFlt), 11: fmt.Sprint(s.CMinFlt), 12: fmt.Sprint(s.MajFlt), 13: fmt.Sprint(s.CMajFlt),
		14: fmt.Sprint(s.UTime), 15: fmt.Sprint(s.STime), 16: fmt.Sprint(s.CUTime), 17: fmt.Sprint(s.CSTime),
		20: fmt.Sprint(s.Threads), 22: fmt.Sprint(s.StartTime), 23: fmt.Sprint(s.VSize), 24: fmt.Sprint(s.RSS), 28: fmt.Sprint(s.StartStack)}
	return []byte(statLine(fmt.Sprint(s.PID), string(s.Comm), fields))
}

func FuzzParseStat(f *testing.F) {
	addFixtures(f, "stat")
	f.Add([]byte("1 () S"))
	f.Add([]byte("1 ()) ) S 1 1 1 0 -1 0 1 2 3 4 5 6 7 8 20 0 3 0 100 4096 -1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Stat
		if err := ParseStat(b, &s); err != nil {
			return
		}
		// Comm is what lies between the first '(' and the last ')'.
		if open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')'); !bytes.Equal(s.Comm, b[open+1:close]) {
			t.Fatalf("Comm %q, want %q", s.Comm, b[open+1:close])
		}
		if s.PID <= 0 || s.State == ' ' || s.State == '\n' || s.State == '\t' {
			t.Fatalf("pid %d state %q", s.PID, s.State)
		}
		// Written back in the kernel's format, it parses to the same.
		var again Stat
		line := renderStat(&s)
		if err := ParseStat(line, &again); err != nil {
			t.Fatalf("written back %q: %v", line, err)
		}
		if !bytes.Equal(s.Comm, again.Comm) || !reflect.DeepEqual(stripComm(s), stripComm(again)) {
			t.Fatalf("written back:\n got %+v\nwant %+v", again, s)
		}
	})
}

func stripComm(s Stat) Stat { s.Comm = nil; return s }

func FuzzParseStatus(f *testing.F) {
	addFixtures(f, "status")
	f.Add([]byte("Uid:\t0\nVmHWM:\t18014398509481983 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Status
		if err := ParseStatus(b, &s); err != nil {
			return
		}
		if !s.HasUID || s.VmHWMBytes%1024 != 0 || (!s.HasCtx && s.VoluntaryCtx != 0) {
			t.Fatalf("inconsistent %+v", s)
		}
		line := fmt.Sprintf("Name:\tx\nUid:\t%d\t0\t0\t0\nVmHWM:\t%8d kB\nvoluntary_ctxt_switches:\t%d\nnonvoluntary_ctxt_switches:\t%d\n",
			s.UID, s.VmHWMBytes>>10, s.VoluntaryCtx, s.InvoluntaryCtx)
		var again Status
		if err := ParseStatus([]byte(line), &again); err != nil {
			t.Fatalf("written back: %v", err)
		}
		again.HasCtx = s.HasCtx // always present when written back
		if again != s {
			t.Fatalf("written back:\n got %+v\nwant %+v", again, s)
		}
	})
}

// ParseStatusCtx gives the context switches of the last line of each key,
// as a plain split into lines finds them, and what ParseStatus gives where
// it parses the file and each key is there once.
func FuzzParseStatusCtx(f *testing.F) {
	addFixtures(f, "status")
	f.Add([]byte("voluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches: 3"))
	f.Add([]byte("Uid:\t0\nvoluntary_ctxt_switches:\tx\nvoluntary_ctxt_switches:\t4 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Status
		err := ParseStatusCtx(b, &s)
		last, count := map[string][]byte{}, map[string]int{}
		for _, line := range bytes.Split(b, []byte{'\n'}) {
			k, v, ok := bytes.Cut(line, []byte{':'})
			if !ok || len(k) == 0 {
				continue
			}
			v = bytes.TrimLeft(v, " \t")
			if i := bytes.IndexAny(v, " \t"); i >= 0 {
				v = v[:i]
			}
			last[string(k)] = v
			count[string(k)]++
		}
		var want Status
		var wantErr bool
		for _, k := range []string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
			v, ok := last[k]
			if !ok {
				continue
			}
			n, ok := parseUint(v) // (numbers as the package reads them: the lines are what is tested)
			if !ok {
				wantErr = true
				break
			}
			if k == "voluntary_ctxt_switches" {
				want.VoluntaryCtx, want.HasCtx = n, true
			} else {
				want.InvoluntaryCtx = n
			}
		}
		if (err != nil) != wantErr || err == nil && s != want {
			t.Fatalf("got %+v (%v), want %+v (error %v)", s, err, want, wantErr)
		}
		var full Status
		if ParseStatus(b, &full) == nil && count["voluntary_ctxt_switches"] <= 1 && count["nonvoluntary_ctxt_switches"] <= 1 &&
			(err != nil || full.VoluntaryCtx != s.VoluntaryCtx || full.InvoluntaryCtx != s.InvoluntaryCtx || full.HasCtx != s.HasCtx) {
			t.Fatalf("ParseStatus %+v, ParseStatusCtx %+v (%v)", full, s, err)
		}
	})
}

func FuzzParseIO(f *testing.F) {
	addFixtures(f, "io")
	f.Add([]byte("rchar: 1\nrchar: 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var io IO
		if err := ParseIO(b, &io); err != nil {
			return
		}
		line := fmt.Sprintf("rchar: %d\nwchar: %d\nsyscr: 0\nsyscw: 0\nread_bytes: %d\nwrite_bytes: %d\ncancelled_write_bytes: %d\n",
			io.RChar, io.WChar, io.ReadBytes, io.WriteBytes, io.CancelledWriteBytes)
		var again IO
		if err := ParseIO([]byte(line), &again); err != nil || again != io {
			t.Fatalf("written back: %+v, %v; want %+v", again, err, io)
		}
	})
}

// blankFields splits b at the blanks /proc uses (space, tab, newline).
func blankFields(b []byte) [][]byte {
	return bytes.FieldsFunc(b, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' })
}

func FuzzParseSchedstat(f *testing.F) {
	addFixtures(f, "schedstat")
	f.Add([]byte("1 2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Schedstat
		err := ParseSchedstat(b, &s)
		w := blankFields(b)
		want := len(w) >= 3
		for i := 0; want && i < 3; i++ {
			_, ok := parseUint(w[i])
			want = ok
		}
		if (err == nil) != want {
			t.Fatalf("%q: %v; want an error: %v", b, err, !want)
		}
		if err != nil {
			return
		}
		for i, v := range []uint64{s.RunNs, s.WaitNs, s.Timeslices} {
			if n, err := strconv.ParseUint(string(w[i]), 10, 64); err == nil && n != v && n < 1<<63 {
				t.Fatalf("field %d of %q is %d, parsed %d", i, b, n, v)
			}
		}
	})
}

func FuzzParseSmapsRollup(f *testing.F) {
	addFixtures(f, "smaps_rollup")
	f.Add([]byte("Pss: 1 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s SmapsRollup
		if err := ParseSmapsRollup(b, &s); err != nil {
			return
		}
		line := fmt.Sprintf("00400000-7ffe21673000 ---p 00000000 00:00 0  [rollup]\nRss: %d kB\nPss: %d kB\nPss_Anon: %d kB\nAnonymous: %d kB\nSwap: %d kB\n",
			s.RSSBytes>>10, s.PSSBytes>>10, s.PSSAnonBytes>>10, s.AnonBytes>>10, s.SwapBytes>>10)
		var again SmapsRollup
		if err := ParseSmapsRollup([]byte(line), &again); err != nil || again != s {
			t.Fatalf("written back: %+v, %v; want %+v", again, err, s)
		}
	})
}

func FuzzSplitCmdline(f *testing.F) {
	addFixtures(f, "cmdline")
	f.Add([]byte("a\x00\x00b\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		argv := SplitCmdline(b, nil)
		for _, a := range argv {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("word %q holds a NUL", a)
			}
		}
		// Lossless up to the trailing NULs.
		if joined := strings.Join(argv, "\x00"); joined != string(bytes.TrimRight(b, "\x00")) {
			t.Fatalf("joined %q, input %q", joined, b)
		}
		if len(argv) > 0 && argv[len(argv)-1] == "" {
			t.Fatalf("trailing empty word in %q", argv)
		}
	})
}

func FuzzCgroupPaths(f *testing.F) {
	addFixtures(f, "cgroup")
	f.Add([]byte("0::/a:b\n1:x:\n:::"))
	f.Fuzz(func(t *testing.T, b []byte) {
		paths := CgroupPaths(b, nil)
		lines := bytes.Split(b, []byte("\n"))
		i := 0
		for _, line := range lines {
			if bytes.Count(line, []byte(":")) < 2 {
				continue
			}
			_, rest, _ := bytes.Cut(line, []byte(":"))
			_, p, _ := bytes.Cut(rest, []byte(":"))
			if len(p) == 0 {
				continue
			}
			if i >= len(paths) || paths[i] != string(p) {
				t.Fatalf("path %d: got %q, want %q", i, paths, p)
			}
			i++
		}
		if i != len(paths) {
			t.Fatalf("%d paths, want %d", len(paths), i)
		}
	})
}

func FuzzParseBootTime(f *testing.F) {
	f.Add([]byte("cpu 1 2 3\nbtime 1700000000\n"))
	if b, err := os.ReadFile("testdata/proc/stat"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseBootTime(b)
		if err != nil {
			return
		}
		if n <= 0 {
			t.Fatalf("boot time %d", n)
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "btime "); ok {
				m, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil || m != n {
					t.Fatalf("first btime line %q, parsed %d", line, n)
				}
				found = true
				break
			}
		}
		if !found {
			t.Fatal("no btime line")
		}
	})
}

func FuzzParseDirents(f *testing.F) {
	f.Add(direntBuf(".", "..", "1", "self", "42", "2147483648"))
	f.Add(dirent(7, "12345", 4)[:22])
	f.Fuzz(func(t *testing.T, b []byte) {
		ents := parseDirents(b, nil)
		if len(ents) > len(b)/19 {
			t.Fatalf("%d entries from %d bytes", len(ents), len(b))
		}
		for _, e := range ents {
			if e.PID <= 0 {
				t.Fatalf("pid %d", e.PID)
			}
			if !bytes.Contains(b, []byte(strconv.Itoa(int(e.PID)))) {
				t.Fatalf("pid %d is not in the input", e.PID)
			}
		}
	})
}

func FuzzParseLoadavg(f *testing.F) {
	f.Add([]byte("0.52 0.58 0.59 2/1320 123456\n"))
	f.Add([]byte("0.00 0.00 0.00 0/1 1"))
	f.Add([]byte("0.52 0.58 0.59 2/ 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseLoadavg(b)
		if err != nil {
			return
		}
		// Laid out again, it parses to itself.
		again, err := ParseLoadavg([]byte(fmt.Sprintf("0.00 0.00 0.00 1/%d %d\n", m.Threads, m.LastPID)))
		if err != nil || again != m {
			t.Fatalf("%q: %+v, laid out again %+v, %v", b, m, again, err)
		}
	})
}
