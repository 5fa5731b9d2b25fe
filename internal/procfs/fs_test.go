package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
	"golang.org/x/sys/unix"
)

var fixturePids = []int32{2, 4242, 5005, 6006, 7007, 8008, 14598, 14599, 14600}

func TestFSPaths(t *testing.T) {
	if got := NewFS("").Root(); got != "/proc" {
		t.Errorf(`NewFS("").Root() = %q`, got)
	}
	f := NewFS("testdata/proc/")
	if f.Root() != "testdata/proc" {
		t.Errorf("Root = %q, want it cleaned", f.Root())
	}
	if got := f.Path("14599", "stat"); got != "testdata/proc/14599/stat" {
		t.Errorf("Path = %q", got)
	}
	if got := f.PidPath(14599, "io"); got != "testdata/proc/14599/io" {
		t.Errorf("PidPath = %q", got)
	}
	for file, name := range map[File]string{FileStat: "stat", FileStatus: "status", FileIO: "io", FileSchedstat: "schedstat", FileStatm: "statm"} {
		if file.String() != name {
			t.Errorf("File(%d).String() = %q, want %q", file, file, name)
		}
	}
}

func TestFixtureTree(t *testing.T) {
	f := NewFS("testdata/proc")
	for _, pid := range fixturePids {
		b, err := f.ReadPidFile(pid, "stat", nil)
		if err != nil {
			t.Fatal(err)
		}
		var s Stat
		err = ParseStat(b, &s)
		if pid == 6006 {
			if err == nil {
				t.Errorf("pid %d: a cut stat parsed", pid)
			}
			continue
		}
		if err != nil || s.PID != pid {
			t.Errorf("pid %d: stat %+v, %v", pid, s, err)
		}
	}
	if bt, err := f.BootTime(); err != nil || bt != 1796208480 {
		t.Errorf("BootTime = %d, %v", bt, err)
	}
	if _, err := NewFS(t.TempDir()).BootTime(); err == nil || !IsGone(err) {
		t.Errorf("BootTime of an empty tree: %v, want a not-exist error", err)
	}
	for _, tc := range []struct {
		pid        int32
		name, want string
	}{{14599, "cwd", "/tmp"}, {14599, "exe", "/tmp/ts/java"}, {4242, "cwd",
		"/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/work"}} {
		if got, err := f.Readlink(tc.pid, tc.name); err != nil || got != tc.want {
			t.Errorf("Readlink(%d, %s) = %q, %v; want %q", tc.pid, tc.name, got, err, tc.want)
		}
	}
	if _, err := f.Readlink(2, "exe"); !IsGone(err) {
		t.Errorf("Readlink of a kernel thread's exe: %v", err)
	}
	if n, err := f.CountFDs(14599); err != nil || n != 5 {
		t.Errorf("CountFDs = %d, %v; want 5", n, err)
	}
	if _, err := f.CountFDs(99999); !IsGone(err) {
		t.Errorf("CountFDs of a missing pid: %v", err)
	}
	b, err := f.ReadPidFile(14599, "cgroup", nil)
	if err != nil || !slices.Contains(CgroupPaths(b, nil), "/hadoop-yarn/container_e07_1700000000000_0042_01_000005") {
		t.Errorf("cgroup of 14599: %q, %v", b, err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 10000) // larger than any first buffer
	if err := os.WriteFile(dir+"/big", big, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, buf := range [][]byte{nil, make([]byte, 0, 10), make([]byte, 100, 4096), make([]byte, 0, 1<<20)} {
		got, err := ReadFile(dir+"/big", buf)
		if err != nil || !bytes.Equal(got, big) {
			t.Errorf("ReadFile with a buffer of cap %d: %d bytes, %v", cap(buf), len(got), err)
		}
	}
	// A large enough buffer is reused.
	buf := make([]byte, 0, 1<<20)
	got, _ := ReadFile(dir+"/big", buf)
	if &got[0] != &buf[:1][0] {
		t.Error("ReadFile did not reuse the buffer")
	}
	if err := os.WriteFile(dir+"/empty", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(dir+"/empty", []byte("stale")); err != nil || len(got) != 0 {
		t.Errorf("empty file: %q, %v", got, err)
	}
	_, err := ReadFile(dir+"/missing", nil)
	var pe *fs.PathError
	if !IsGone(err) || !errors.As(err, &pe) || pe.Path != dir+"/missing" || pe.Op != "open" {
		t.Errorf("missing file: %v", err)
	}
	_, err = ReadFile(dir, nil) // a directory cannot be read
	if err == nil || IsGone(err) || !errors.As(err, &pe) || pe.Op != "read" {
		t.Errorf("directory: %v", err)
	}
}

func TestProcFixture(t *testing.T) {
	f := NewFS("testdata/proc")
	p := f.OpenProc(14599)
	defer p.Close()
	var buf []byte
	for _, file := range []File{FileStat, FileStatus, FileIO, FileSchedstat, FileStatm} {
		for i := 0; i < 2; i++ { // the second read is of the held file
			var err error
			buf, err = p.Read(file, buf)
			if err != nil {
				t.Fatalf("%v: %v", file, err)
			}
			if want := fixture(t, "14599/"+file.String()); !bytes.Equal(buf, want) {
				t.Fatalf("%v read %d: %q, want %q", file, i, buf, want)
			}
		}
	}

	// An optional file that is missing while the process is there is
	// unavailable, and is not tried again.
	tree, tf := statOnlyTree(t)
	q := tf.OpenProc(4242)
	defer q.Close()
	_, err := q.Read(FileIO, nil)
	if !errors.Is(err, ErrUnavailable) || IsGone(err) || !strings.Contains(err.Error(), tree+"/4242/io") {
		t.Fatalf("missing io: %v, want ErrUnavailable naming the file", err)
	}
	if err := os.WriteFile(tree+"/4242/io", []byte("rchar: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Read(FileIO, nil); err != ErrUnavailable {
		t.Errorf("io retried: %v", err)
	}
	if b, err := q.Read(FileStat, nil); err != nil || len(b) == 0 {
		t.Errorf("stat: %q, %v", b, err)
	}

	// A process whose directory is gone is gone.
	r := tf.OpenProc(99999)
	defer r.Close()
	for _, file := range []File{FileStat, FileIO} {
		if _, err := r.Read(file, nil); !IsGone(err) || errors.Is(err, ErrUnavailable) {
			t.Errorf("%v of a missing pid: %v, want a gone error", file, err)
		}
	}
}

// TestProcHeldFileOfExitedProcess proves what Proc promises: a held file of a
// process that exited reads as an error for which IsGone is true.
func TestProcHeldFileOfExitedProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	pid := int32(cmd.Process.Pid)
	f := NewFS("")
	p := f.OpenProc(pid)
	defer p.Close()
	files := []File{FileStat, FileStatus, FileIO, FileSchedstat, FileStatm}
	var buf []byte
	for _, file := range files {
		var err error
		if buf, err = p.Read(file, buf); err != nil {
			t.Fatalf("%v of live pid %d: %v", file, pid, err)
		}
	}
	var s Stat
	if b, _ := p.Read(FileStat, buf); ParseStat(b, &s) != nil || s.PID != pid || string(s.Comm) != "sleep" {
		t.Fatalf("stat of the child: %+v", s)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // reaped: the pid is free
	for _, file := range files {
		_, err := p.Read(file, buf)
		if err == nil {
			t.Errorf("%v of exited pid %d read without error", file, pid)
			continue
		}
		if !IsGone(err) || !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%v of exited pid %d: %v, want ESRCH (IsGone)", file, pid, err)
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Path != f.PidPath(pid, file.String()) {
			t.Errorf("%v: error %v does not name the file", file, err)
		}
	}
	// Opening afresh says the same.
	q := f.OpenProc(pid)
	defer q.Close()
	if _, err := q.Read(FileStat, nil); !IsGone(err) {
		t.Errorf("fresh open of exited pid %d: %v", pid, err)
	}
}

// TestProcHoldsDescriptorZero: when standard input is closed, open(2) gives
// descriptor 0, which Proc must hold like any other.
func TestProcHoldsDescriptorZero(t *testing.T) {
	saved, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(0)
	defer func() {
		unix.Dup2(saved, 0)
		unix.Close(saved)
	}()
	f := NewFS("")
	p := f.OpenProc(int32(os.Getpid()))
	for i := 0; i < 3; i++ {
		if _, err := p.Read(FileStat, nil); err != nil {
			t.Fatal(err)
		}
	}
	statPath := fmt.Sprintf("/proc/%d/stat", os.Getpid())
	held := func() (n int) {
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == statPath {
				n++
			}
		}
		return n
	}
	if n := held(); n != 1 {
		t.Errorf("%d descriptors of %s open after three reads, want 1", n, statPath)
	}
	if l, _ := os.Readlink("/proc/self/fd/0"); l != statPath {
		t.Errorf("descriptor 0 is %q, want the held stat", l)
	}
	p.Close()
	if n := held(); n != 0 {
		t.Errorf("%d descriptors of %s open after Close", n, statPath)
	}
}

func TestProcReadDoesNotAllocate(t *testing.T) {
	p := NewFS("").OpenProc(int32(os.Getpid()))
	defer p.Close()
	buf := make([]byte, 0, 4096)
	var s Stat
	n := testing.AllocsPerRun(100, func() {
		b, err := p.Read(FileStat, buf)
		if err != nil || ParseStat(b, &s) != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("Read+ParseStat of a held stat: %v allocs, want 0", n)
	}
}

// dirent encodes one linux_dirent64 record.
func dirent(ino uint64, name string, typ byte) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	putU64(b[0:], ino)
	putU64(b[8:], 0)
	b[16], b[17] = byte(reclen), byte(reclen>>8) // little-endian: the machines this runs on
	b[18] = typ
	copy(b[19:], name)
	return b
}

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func direntBuf(names ...string) []byte {
	var b []byte
	for i, n := range names {
		b = append(b, dirent(uint64(1000+i), n, unix.DT_DIR)...)
	}
	return b
}

func TestParseDirents(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want []PidEntry
	}{
		{"pids among other entries", direntBuf(".", "..", "1", "self", "thread-self", "42", "sys", "4194304", "acpi"),
			[]PidEntry{{1, 1002}, {42, 1005}, {4194304, 1007}}},
		{"largest pid", direntBuf("2147483647"), []PidEntry{{2147483647, 1000}}},
		{"beyond 32 bits", direntBuf("2147483648", "10737418249", "99999999999999999999"), nil},
		{"leading zero, zero, signs, letters", direntBuf("0", "01", "-1", "+1", "12a", "1 2"), nil},
		{"empty name", direntBuf(""), nil},
		{"truncated record", direntBuf("1", "2")[:30], []PidEntry{{1, 1000}}},
		{"reclen too small", func() []byte { b := dirent(7, "7", 4); b[16], b[17] = 18, 0; return b }(), nil},
		{"reclen beyond the buffer", func() []byte { b := dirent(7, "7", 4); b[16] = 200; return b }(), nil},
		{"name without NUL filling the record", func() []byte { b := dirent(7, "1234", 4); b = b[:23]; b[16] = 23; return b }(), []PidEntry{{1234, 7}}},
		{"empty", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseDirents(tc.in, nil)
			if !slices.Equal(got, tc.want) {
				t.Errorf("parseDirents = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestListerFixture(t *testing.T) {
	f := NewFS("testdata/proc")
	got, err := f.NewLister().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int32
	for _, e := range got {
		pids = append(pids, e.PID)
		fi, err := os.Stat(f.Path(strconv.Itoa(int(e.PID))))
		if err != nil || fi.Sys().(*syscall.Stat_t).Ino != e.Ino {
			t.Errorf("pid %d: inode %d, stat %v", e.PID, e.Ino, err)
		}
	}
	slices.Sort(pids)
	if !slices.Equal(pids, fixturePids) {
		t.Errorf("List = %v, want %v", pids, fixturePids)
	}
	if _, err := NewFS(t.TempDir() + "/none").NewLister().List(nil); err == nil {
		t.Error("List of a missing directory: no error")
	}
}

// TestListerManyEntries lists a directory larger than one getdents buffer.
func TestListerManyEntries(t *testing.T) {
	dir := t.TempDir()
	const n = 300
	for i := 1; i <= n; i++ {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := NewFS(dir).NewLister()
	l.buf = make([]byte, 1024) // several calls
	got, err := l.List([]PidEntry{{PID: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n+1 || got[0].PID != -1 {
		t.Fatalf("List gave %d entries (first %v), want %d appended", len(got), got[0], n)
	}
	seen := map[int32]bool{}
	for _, e := range got[1:] {
		seen[e.PID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct pids, want %d", len(seen), n)
	}
}

func TestListerLive(t *testing.T) {
	f := NewFS("")
	l := f.NewLister()
	var ents []PidEntry
	for round := 0; round < 2; round++ { // the Lister is reusable
		var err error
		ents, err = l.List(ents[:0])
		if err != nil {
			t.Fatal(err)
		}
		me := int32(os.Getpid())
		fi, err := os.Stat(fmt.Sprintf("/proc/%d", me))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range ents {
			if e.PID <= 0 {
				t.Fatalf("pid %d listed", e.PID)
			}
			if e.PID == me {
				found = true
				if e.Ino != fi.Sys().(*syscall.Stat_t).Ino {
					t.Errorf("own inode %d, stat says %d", e.Ino, fi.Sys().(*syscall.Stat_t).Ino)
				}
			}
		}
		if !found {
			t.Fatalf("List of /proc (%d entries) misses our pid %d", len(ents), me)
		}
	}
	// Live boot time: in the past, after 2000.
	bt, err := f.BootTime()
	if err != nil || bt < 946684800 || bt > time.Now().Unix() {
		t.Errorf("BootTime = %d, %v", bt, err)
	}
	if n, err := f.CountFDs(int32(os.Getpid())); err != nil || n < 3 {
		t.Errorf("CountFDs(self) = %d, %v", n, err)
	}
}

// TestReadFileWhole checks that one read is enough for a file that fits and
// that a larger one is read to its end: regular files of every size around
// the buffer's, and /proc files larger than it (maps has many records).
func TestReadFileWhole(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 511, 4095, 4096, 4097, 8192, 100 << 10} {
		want := bytes.Repeat([]byte{'x'}, n)
		path := filepath.Join(dir, strconv.Itoa(n))
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, buf := range [][]byte{nil, make([]byte, 0, 4096), make([]byte, 0, n)} {
			got, err := ReadFile(path, buf)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%d bytes into a buffer of %d: got %d bytes, %v", n, cap(buf), len(got), err)
			}
		}
	}
	// An idle process's files, not this one's: the Go runtime maps memory
	// between two reads of our own maps.
	sleep := exec.Command("/bin/sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	pid := int32(sleep.Process.Pid)
	self := NewFS("")
	// Asleep: loaded, its maps settled.
	var b []byte
	if !testsrv.Poll(5*time.Second, func() bool {
		b, _ = os.ReadFile(self.PidPath(pid, "stat"))
		var st Stat
		return ParseStat(b, &st) == nil && st.State == 'S' && strings.Contains(string(b), "(sleep)")
	}) {
		t.Fatalf("sleep did not fall asleep: %s", b)
	}
	for _, name := range []string{"maps", "smaps", "environ", "status", "cmdline", "stat"} {
		got, err := self.ReadPidFile(pid, name, make([]byte, 0, 512))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(self.PidPath(pid, name))
		// smaps, stat and status change between reads (counters); compare sizes roughly.
		if name == "maps" || name == "environ" || name == "cmdline" {
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes, os.ReadFile %d", name, len(got), len(want))
			}
		} else if len(got) < len(want)*9/10 {
			t.Errorf("%s: %d bytes, os.ReadFile %d", name, len(got), len(want))
		}
	}
}

func TestGone(t *testing.T) {
	tree := NewFS("testdata/proc")
	if tree.Gone(14599) || !tree.Gone(99999) {
		t.Errorf("fixture tree: Gone(14599) %v, Gone(99999) %v", tree.Gone(14599), tree.Gone(99999))
	}
	live := NewFS("")
	cmd := exec.Command("/bin/sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := int32(cmd.Process.Pid)
	if live.Gone(pid) || live.Gone(int32(os.Getpid())) {
		t.Error("a live process is gone")
	}
	cmd.Process.Kill()
	// A zombie is not gone: it has not been reaped.
	testsrv.Poll(time.Second, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return bytes.Contains(b, []byte(") Z "))
	})
	if live.Gone(pid) {
		t.Error("a zombie is gone")
	}
	cmd.Wait()
	if !live.Gone(pid) {
		t.Error("a reaped process is not gone")
	}
}

// TestListerAgain lists a tree several times through the one directory the
// Lister holds: each listing shows the entries of the moment.
func TestListerAgain(t *testing.T) {
	dir := t.TempDir()
	l := NewFS(dir).NewLister()
	defer l.Close()
	pids := func() []int32 {
		ents, err := l.List(nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for _, e := range ents {
			out = append(out, e.PID)
		}
		slices.Sort(out)
		return out
	}
	for _, n := range []string{"1", "20", "x"} {
		os.Mkdir(filepath.Join(dir, n), 0o755)
	}
	if got := pids(); !slices.Equal(got, []int32{1, 20}) {
		t.Fatalf("first listing %v", got)
	}
	for i := 100; i < 300; i++ {
		os.Mkdir(filepath.Join(dir, strconv.Itoa(i)), 0o755)
	}
	os.Remove(filepath.Join(dir, "20"))
	if got := pids(); len(got) != 201 || got[0] != 1 || got[1] != 100 {
		t.Fatalf("second listing: %d entries, %v...", len(got), got[:3])
	}
	live := NewFS("").NewLister()
	defer live.Close()
	cmd := exec.Command("/bin/sleep", "10")
	cmd.Start()
	has := func() bool {
		ents, _ := live.List(nil)
		for _, e := range ents {
			if e.PID == int32(cmd.Process.Pid) {
				return true
			}
		}
		return false
	}
	if !has() {
		t.Error("a new process is not listed")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if has() {
		t.Error("a reaped process is listed")
	}
	if err := live.Close(); err != nil || live.Close() != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestParseLoadavg(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LoadMark
		ok   bool
	}{
		{"0.52 0.58 0.59 2/1320 123456\n", LoadMark{Threads: 1320, LastPID: 123456}, true},
		{"12.00 9.10 8.00 17/99999 4194303", LoadMark{Threads: 99999, LastPID: 4194303}, true},
		{"0.52 0.58 0.59 2/1320", LoadMark{}, false},
		{"0.52 0.58 0.59 1320 5", LoadMark{}, false},
		{"0.52 0.58 0.59 2/x 5", LoadMark{}, false},
		{"0.52 0.58 0.59 2/5 -1", LoadMark{}, false},
		{"", LoadMark{}, false},
	} {
		got, err := ParseLoadavg([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseLoadavg(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// A Lister on a tree of this process's pid namespace lists again only when
// loadavg's threads or last pid moved.
func TestListerReusesUnchanged(t *testing.T) {
	for _, self := range []string{"own", "other", "none"} {
		t.Run(self, func(t *testing.T) {
			dir := t.TempDir()
			mk := func(pid int) {
				if err := os.Mkdir(filepath.Join(dir, strconv.Itoa(pid)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			load := func(threads, last int) {
				// Rewritten in place: the Lister holds the file open.
				f, err := os.OpenFile(filepath.Join(dir, "loadavg"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(f, "0.10 0.20 0.30 1/%d %d\n", threads, last)
				f.Close()
			}
			switch self {
			case "own":
				os.Symlink(strconv.Itoa(os.Getpid()), filepath.Join(dir, "self"))
			case "other":
				os.Symlink("1", filepath.Join(dir, "self"))
			}
			mk(1)
			mk(100)
			load(50, 100)
			l := NewFS(dir).NewLister()
			defer l.Close()
			list := func() []int32 {
				t.Helper()
				ents, err := l.List([]PidEntry{{PID: -1}}) // appended to what is there
				if err != nil {
					t.Fatal(err)
				}
				var pids []int32
				for _, e := range ents[1:] {
					pids = append(pids, e.PID)
				}
				slices.Sort(pids)
				return pids
			}
			reuses := self == "own"
			if got := list(); !slices.Equal(got, []int32{1, 100}) {
				t.Fatalf("first listing %v", got)
			}
			mk(101) // not seen while the mark holds (no kernel does this)
			if got, want := list(), map[bool][]int32{true: {1, 100}, false: {1, 100, 101}}[reuses]; !slices.Equal(got, want) {
				t.Errorf("unchanged loadavg: %v, want %v", got, want)
			}
			if l.Reused() != uint64(btoi(reuses)) {
				t.Errorf("reused %d times", l.Reused())
			}
			load(51, 101) // a process made
			if got := list(); !slices.Equal(got, []int32{1, 100, 101}) {
				t.Errorf("after a new pid: %v", got)
			}
			os.Remove(filepath.Join(dir, "100"))
			load(50, 101) // one reaped
			if got := list(); !slices.Equal(got, []int32{1, 101}) {
				t.Errorf("after a reap: %v", got)
			}
			mk(102)
			os.Remove(filepath.Join(dir, "101"))
			load(50, 102) // one made, one reaped
			if got := list(); !slices.Equal(got, []int32{1, 102}) {
				t.Errorf("after one made and one reaped: %v", got)
			}
			if got := list(); !slices.Equal(got, []int32{1, 102}) || l.Reused() != uint64(2*btoi(reuses)) {
				t.Errorf("again: %v, reused %d", got, l.Reused())
			}
		})
	}
}

// On the real /proc a reused listing never hides a change: a child started
// between two listings is in the second, and one reaped is not.
func TestListerReuseLive(t *testing.T) {
	l := NewFS("").NewLister()
	defer l.Close()
	has := func(ents []PidEntry, pid int) bool {
		return slices.ContainsFunc(ents, func(e PidEntry) bool { return int(e.PID) == pid })
	}
	var ents []PidEntry
	for i := 0; i < 50; i++ {
		cmd := exec.Command("/bin/sleep", "10")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ents, _ = l.List(ents[:0])
		if !has(ents, cmd.Process.Pid) {
			t.Fatalf("round %d: the child %d started before the listing is not in it", i, cmd.Process.Pid)
		}
		cmd.Process.Kill()
		cmd.Wait()
		ents, _ = l.List(ents[:0])
		if has(ents, cmd.Process.Pid) {
			t.Fatalf("round %d: the child %d reaped before the listing is in it", i, cmd.Process.Pid)
		}
		ents, _ = l.List(ents[:0]) // most likely the same again
	}
	t.Logf("%d of 150 listings reused", l.Reused())
	if !NewFS("").OwnPIDNamespace() {
		t.Error("/proc is not of our own pid namespace")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestParseStatFlags(t *testing.T) {
	// A JVM's leader in exit_group: PF_EXITING (0x4) among its flags.
	line := "4242 (java) S 1 4242 4242 0 -1 4210756 900 0 0 0 40 5 0 0 20 0 2 0 9000 100000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	var s Stat
	if err := ParseStat([]byte(line), &s); err != nil || s.Flags != 4210756 || s.Flags&PFExiting == 0 || s.Threads != 2 {
		t.Errorf("ParseStat: flags %#x threads %d, %v", s.Flags, s.Threads, err)
	}
	line = strings.Replace(line, "4210756", "4210752", 1)
	if err := ParseStat([]byte(line), &s); err != nil || s.Flags&PFExiting != 0 {
		t.Errorf("ParseStat of a live task: flags %#x, %v", s.Flags, err)
	}
}

// TestOpenProcFileAndRelease: OpenProcFile reads a file and hands back a
// handle that holds it (the next read is of the same descriptor); Release
// closes what a handle holds and keeps it usable (its files are opened
// again), and an unavailable file stays unavailable.
func TestOpenProcFileAndRelease(t *testing.T) {
	pid := int32(os.Getpid())
	f := NewFS("")
	statPath := fmt.Sprintf("/proc/%d/stat", pid)
	held := func(path string) (n int) {
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == path {
				n++
			}
		}
		return n
	}
	p, b, err := f.OpenProcFile(pid, FileStat, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var s Stat
	if ParseStat(b, &s) != nil || s.PID != pid {
		t.Fatalf("stat read by OpenProcFile: %q", b)
	}
	if n := held(statPath); n != 1 {
		t.Fatalf("%d descriptors of %s held, want 1", n, statPath)
	}
	if _, err := p.Read(FileStat, nil); err != nil || held(statPath) != 1 {
		t.Fatalf("read of the held stat: %v, %d held", err, held(statPath))
	}
	if _, err := p.Read(FileSchedstat, nil); err != nil {
		t.Fatal(err)
	}
	p.Release()
	if n := held(statPath) + held(fmt.Sprintf("/proc/%d/schedstat", pid)); n != 0 {
		t.Fatalf("%d descriptors held after Release", n)
	}
	if _, err := p.Read(FileStat, nil); err != nil || held(statPath) != 1 {
		t.Fatalf("read after Release: %v, %d held", err, held(statPath))
	}

	// Unavailable stays unavailable through Release.
	tree, tf := statOnlyTree(t)
	q, _, err := tf.OpenProcFile(4242, FileStat, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Read(FileIO, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing io: %v", err)
	}
	q.Release()
	if _, err := q.Read(FileIO, nil); err != ErrUnavailable {
		t.Errorf("io after Release: %v, want ErrUnavailable itself", err)
	}

	// A pid that is gone: a gone error, no handle.
	if h, _, err := tf.OpenProcFile(99999, FileStat, nil); h != nil || !IsGone(err) || !strings.Contains(err.Error(), tree+"/99999/stat") {
		t.Errorf("missing pid: %v %v, want a gone error naming the file", h, err)
	}
}

// TestOwner: the owner of a process's directory, which the kernel makes its
// effective uid.
func TestOwner(t *testing.T) {
	f := NewFS("")
	uid, err := f.Owner(int32(os.Getpid()))
	if err != nil || uid != uint32(os.Geteuid()) {
		t.Errorf("owner of this process: %d, %v; want %d", uid, err, os.Geteuid())
	}
	tree := t.TempDir()
	if err := os.Mkdir(tree+"/4242", 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(tree+"/4242", 1234, 1234); err != nil {
			t.Fatal(err)
		}
		if uid, err := NewFS(tree).Owner(4242); err != nil || uid != 1234 {
			t.Errorf("owner of a fixture's directory: %d, %v; want 1234", uid, err)
		}
	}
	if _, err := NewFS(tree).Owner(99999); !IsGone(err) || !strings.Contains(err.Error(), tree+"/99999") {
		t.Errorf("owner of a missing pid: %v, want a gone error naming it", err)
	}
}

// statOnlyTree is a procfs tree of one process, 4242, with its stat alone:
// its other files are missing while it is there.
func statOnlyTree(t *testing.T) (string, FS) {
	tree := t.TempDir()
	if err := os.Mkdir(tree+"/4242", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree+"/4242/stat", fixture(t, "4242/stat"), 0o644); err != nil {
		t.Fatal(err)
	}
	return tree, NewFS(tree)
}
