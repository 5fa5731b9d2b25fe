package hsperf

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func serialEntries(used0, used1 int64) []BuildEntry {
	return []BuildEntry{
		{Name: "sun.rt.createVmBeginTime", Long: 1700000000000},
		{Name: "java.threads.live", Long: 7},
		{Name: "sun.gc.policy.name", Type: TypeByte, Str: "Copy:MSC"},
		{Name: "sun.gc.generation.0.name", Type: TypeByte, Str: "new"},
		{Name: "sun.gc.generation.0.maxCapacity", Long: 64 << 20},
		{Name: "sun.gc.generation.0.capacity", Long: 32 << 20},
		{Name: "sun.gc.collector.0.invocations", Long: 10},
		{Name: "sun.gc.collector.0.time", Long: 1_500_000_000}, // 1.5 s at 1 GHz
		{Name: "sun.gc.generation.0.space.0.name", Type: TypeByte, Str: "eden"},
		{Name: "sun.gc.generation.0.space.0.used", Long: used0},
		{Name: "sun.gc.generation.0.space.0.capacity", Long: 24 << 20},
		{Name: "sun.gc.generation.0.space.1.used", Long: 1 << 20},
		{Name: "sun.gc.generation.1.name", Type: TypeByte, Str: "old"},
		{Name: "sun.gc.generation.1.maxCapacity", Long: 128 << 20},
		{Name: "sun.gc.generation.1.capacity", Long: 64 << 20},
		{Name: "sun.gc.collector.1.invocations", Long: 2},
		{Name: "sun.gc.collector.1.time", Long: 250_000_000},
		{Name: "sun.gc.generation.1.space.0.used", Long: used1},
		{Name: "sun.gc.metaspace.used", Long: 5 << 20},
		{Name: "sun.gc.metaspace.capacity", Long: 6 << 20},
		{Name: "sun.gc.metaspace.maxCapacity", Long: 1 << 30},
		{Name: "sun.os.hrt.frequency", Long: 1_000_000_000},
	}
}

func TestBuiltFiles(t *testing.T) {
	cases := []struct {
		name    string
		order   binary.ByteOrder
		entries []BuildEntry
		want    Snapshot
	}{
		{"serial little endian", binary.LittleEndian, serialEntries(3<<20, 40<<20), Snapshot{
			HeapUsed: 44 << 20, HeapCommitted: 96 << 20, HeapMax: 192 << 20, MetaUsed: 5 << 20, MetaCommitted: 6 << 20, MetaMax: 1 << 30,
			GCCount: 12, GCTimeMs: 1750, Threads: 7, Has: HasHeap | HasMeta | HasGC | HasThreads}},
		{"serial big endian", binary.BigEndian, serialEntries(3<<20, 40<<20), Snapshot{
			HeapUsed: 44 << 20, HeapCommitted: 96 << 20, HeapMax: 192 << 20, MetaUsed: 5 << 20, MetaCommitted: 6 << 20, MetaMax: 1 << 30,
			GCCount: 12, GCTimeMs: 1750, Threads: 7, Has: HasHeap | HasMeta | HasGC | HasThreads}},
		{"G1: each generation's maximum is the heap's", binary.LittleEndian, []BuildEntry{
			{Name: "sun.gc.policy.name", Type: TypeByte, Str: "GarbageFirst"},
			{Name: "sun.gc.generation.0.maxCapacity", Long: 256 << 20},
			{Name: "sun.gc.generation.0.capacity", Long: 16 << 20},
			{Name: "sun.gc.generation.0.space.0.used", Long: 4 << 20},
			{Name: "sun.gc.generation.1.maxCapacity", Long: 256 << 20},
			{Name: "sun.gc.generation.1.capacity", Long: 100 << 20},
			{Name: "sun.gc.generation.1.space.0.used", Long: 50 << 20},
			{Name: "sun.os.hrt.frequency", Long: 1000},
			{Name: "sun.gc.collector.0.time", Long: 2500}, // 2.5 s at 1 kHz
		}, Snapshot{HeapUsed: 54 << 20, HeapCommitted: 116 << 20, HeapMax: 256 << 20, GCTimeMs: 2500, Has: HasHeap | HasGC}},
		{"Java 7: the permanent generation is not heap", binary.LittleEndian, []BuildEntry{
			{Name: "sun.gc.generation.0.capacity", Long: 10 << 20},
			{Name: "sun.gc.generation.0.maxCapacity", Long: 20 << 20},
			{Name: "sun.gc.generation.0.space.0.used", Long: 1 << 20},
			{Name: "sun.gc.generation.2.name", Type: TypeByte, Str: "perm"},
			{Name: "sun.gc.generation.2.capacity", Long: 21 << 20},
			{Name: "sun.gc.generation.2.maxCapacity", Long: 82 << 20},
			{Name: "sun.gc.generation.2.space.0.used", Long: 9 << 20},
		}, Snapshot{HeapUsed: 1 << 20, HeapCommitted: 10 << 20, HeapMax: 20 << 20, MetaUsed: 9 << 20, MetaCommitted: 21 << 20,
			MetaMax: 82 << 20, Has: HasHeap | HasMeta}},
		{"Parallel: capacities of the spaces only", binary.LittleEndian, []BuildEntry{
			{Name: "sun.gc.generation.0.space.0.capacity", Long: 10 << 20},
			{Name: "sun.gc.generation.0.space.0.maxCapacity", Long: 30 << 20},
			{Name: "sun.gc.generation.0.space.0.used", Long: 2 << 20},
			{Name: "sun.gc.generation.0.space.1.capacity", Long: 1 << 20},
			{Name: "sun.gc.generation.0.space.1.maxCapacity", Long: 10 << 20},
		}, Snapshot{HeapUsed: 2 << 20, HeapCommitted: 11 << 20, HeapMax: 40 << 20, Has: HasHeap}},
		{"no counters taskscope reads", binary.LittleEndian, []BuildEntry{{Name: "sun.rt.safepoints", Long: 3}}, Snapshot{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := Build(tc.order, 4096, tc.entries)
			got, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	good := Build(binary.LittleEndian, 4096, serialEntries(1, 2))
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	cases := map[string][]byte{
		"short":        good[:20],
		"magic":        mod(func(b []byte) { b[0] = 0 }),
		"byte order":   mod(func(b []byte) { b[4] = 7 }),
		"version":      mod(func(b []byte) { b[5] = 1 }),
		"entry offset": mod(func(b []byte) { binary.LittleEndian.PutUint32(b[24:], 1<<30) }),
		"entries":      mod(func(b []byte) { binary.LittleEndian.PutUint32(b[28:], 1000) }),
		"entry length": mod(func(b []byte) { binary.LittleEndian.PutUint32(b[32:], 3) }),
		"name offset":  mod(func(b []byte) { binary.LittleEndian.PutUint32(b[36:], 1<<20) }),
		"data offset":  mod(func(b []byte) { binary.LittleEndian.PutUint32(b[48:], 1<<20) }),
		"negative vec": mod(func(b []byte) { binary.LittleEndian.PutUint32(b[40:], 0xffffffff) }),
		"not ready":    mod(func(b []byte) { b[7] = 0 }),
		"unterminated": mod(func(b []byte) {
			l := binary.LittleEndian.Uint32(b[32:])
			for i := 52; i < 32+int(l); i++ {
				b[i] = 'x'
			}
		}),
		"negative used": mod(func(b []byte) {
			binary.LittleEndian.PutUint32(b[8:], 0xfffffff0)
			binary.LittleEndian.PutUint32(b[28:], 1000)
		}),
	}
	for name, b := range cases {
		if _, err := Parse(b); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err %v, want ErrFormat", name, err)
		}
	}
	if _, err := Parse(mod(func(b []byte) { b[7] = 0 })); !errors.Is(err, ErrNotReady) {
		t.Errorf("not ready: %v", err)
	}
}

func TestFixtures(t *testing.T) {
	// Files of real JVMs (JDK 17, -Xmx256m) that had called System.gc() 100
	// times while holding 100 MB.
	for _, tc := range []struct {
		file   string
		maxMin int64
	}{{"jdk17-serial.hsperf", 250 << 20}, {"jdk17-g1.hsperf", 255 << 20}, {"jdk17-parallel.hsperf", 240 << 20}} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		t.Logf("%s: %+v", tc.file, s)
		if s.Has != HasHeap|HasMeta|HasGC|HasThreads {
			t.Errorf("%s: has %b", tc.file, s.Has)
		}
		if s.HeapMax < tc.maxMin || s.HeapMax > 257<<20 {
			t.Errorf("%s: heap max %d MB, the JVM had -Xmx256m", tc.file, s.HeapMax>>20)
		}
		if s.HeapUsed < 100<<20 || s.HeapUsed > s.HeapCommitted || s.HeapCommitted > s.HeapMax {
			t.Errorf("%s: heap used %d committed %d max %d", tc.file, s.HeapUsed, s.HeapCommitted, s.HeapMax)
		}
		if s.GCCount < 100 || s.GCTimeMs <= 0 || s.Threads < 2 || s.MetaUsed <= 0 {
			t.Errorf("%s: gc %d in %d ms, %d threads, metaspace %d", tc.file, s.GCCount, s.GCTimeMs, s.Threads, s.MetaUsed)
		}
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	// Rewrite in place, as the JVM does through its mapping.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestReaderFollowsChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "123")
	writeFile(t, path, Build(binary.LittleEndian, 8192, serialEntries(1<<20, 2<<20)))
	r, err := Open(path, OpenOptions{UID: uint32(os.Getuid()), CheckUID: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var s Snapshot
	if err := r.Read(&s); err != nil || s.HeapUsed != 4<<20 {
		t.Fatalf("read %+v, %v", s, err)
	}
	// Values change in place.
	writeFile(t, path, Build(binary.LittleEndian, 8192, serialEntries(5<<20, 2<<20)))
	if err := r.Read(&s); err != nil || s.HeapUsed != 8<<20 {
		t.Fatalf("after a change: %+v, %v", s, err)
	}
	// The JVM adds entries while it starts: the layout is parsed again.
	more := append([]BuildEntry{{Name: "sun.cls.time", Long: 5}}, serialEntries(9<<20, 2<<20)...)
	writeFile(t, path, Build(binary.LittleEndian, 8192, more))
	if err := r.Read(&s); err != nil || s.HeapUsed != 12<<20 {
		t.Fatalf("after new entries: %+v, %v", s, err)
	}
	if r.Layout().Names != len(more) {
		t.Errorf("layout of %d entries, want %d", r.Layout().Names, len(more))
	}
	if _, err := Open(path, OpenOptions{UID: uint32(os.Getuid()) + 1, CheckUID: true}); !errors.Is(err, ErrFormat) {
		t.Errorf("a file of another user: %v", err)
	}
	link := filepath.Join(t.TempDir(), "456")
	os.Symlink(path, link)
	if _, err := Open(link, OpenOptions{}); err == nil {
		t.Errorf("followed a symbolic link")
	}
	r.Close()
	if err := r.Read(&s); err == nil {
		t.Errorf("read after close")
	}
}

func TestParseStatus(t *testing.T) {
	st := []byte("Name:\tjava\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t1\n" +
		"Uid:\t1000\t1001\t1001\t1001\nGid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t17\nNSpgid:\t4242\t17\n")
	o, err := ParseStatus(st, 4242)
	if err != nil || o.EUID != 1001 || o.NSPID != 17 {
		t.Errorf("got %+v, %v", o, err)
	}
	o, err = ParseStatus([]byte("Uid:\t0\t0\t0\t0\n"), 99)
	if err != nil || o.NSPID != 99 {
		t.Errorf("without NSpid: %+v, %v", o, err)
	}
	if _, err := ParseStatus([]byte("Name:\tx\n"), 1); err == nil {
		t.Error("no Uid line accepted")
	}
}

func TestLocate(t *testing.T) {
	tmp := t.TempDir()
	os.MkdirAll(filepath.Join(tmp, "hsperfdata_yarn"), 0o755)
	os.MkdirAll(filepath.Join(tmp, "hsperfdata_other"), 0o755)
	os.WriteFile(filepath.Join(tmp, "hsperfdata_other", "17"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(tmp, "hsperfdata_yarn", "18"), []byte("x"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(tmp, "hsperfdata_yarn", "19"))
	if p, err := Locate(tmp, 18, "yarn"); err != nil || p != filepath.Join(tmp, "hsperfdata_yarn", "18") {
		t.Errorf("18: %q %v", p, err)
	}
	if p, err := Locate(tmp, 17, "yarn"); err != nil || p != filepath.Join(tmp, "hsperfdata_other", "17") {
		t.Errorf("17 (another user name in a container): %q %v", p, err)
	}
	if _, err := Locate(tmp, 19, "yarn"); !errors.Is(err, ErrNoFile) {
		t.Errorf("a symbolic link: %v", err)
	}
	if _, err := Locate(filepath.Join(tmp, "nope"), 18, ""); !errors.Is(err, ErrNoFile) {
		t.Errorf("no /tmp: %v", err)
	}
}

// startJVM runs a small Java program (source launcher) that collects
// garbage and then sleeps; it returns once the JVM is up.
func startJVM(t testing.TB, opts ...string) *exec.Cmd {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Skip("no java")
	}
	src := filepath.Join(t.TempDir(), "Hold.java")
	os.WriteFile(src, []byte(`public class Hold { public static void main(String[] a) throws Exception {
  byte[][] k = new byte[20][]; for (int i = 0; i < 20; i++) { k[i] = new byte[1 << 20]; System.gc(); }
  System.out.println("ready"); System.out.flush(); Thread.sleep(120000); } }`), 0o644)
	args := append(append([]string{"-Xmx64m", "-XX:+UseSerialGC", "-Xshare:auto"}, opts...), src)
	cmd := exec.Command(java, args...)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	buf := make([]byte, 16)
	done := make(chan struct{})
	go func() { out.Read(buf); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the JVM did not start")
	}
	return cmd
}

func TestRealJVM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	cmd := startJVM(t)
	pid := int32(cmd.Process.Pid)
	st, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseStatus(st, pid)
	if err != nil {
		t.Fatal(err)
	}
	path, err := Locate("/proc/"+strconv.Itoa(int(pid))+"/root/tmp", o.NSPID, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, OpenOptions{UID: o.EUID, CheckUID: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var s Snapshot
	if err := r.Read(&s); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v (span %d bytes)", path, s, r.Layout().Span())
	if s.HeapMax < 60<<20 || s.HeapMax > 65<<20 {
		t.Errorf("heap max %d, the JVM has -Xmx64m", s.HeapMax)
	}
	if s.HeapUsed < 15<<20 || s.GCCount < 20 || s.Threads < 2 {
		t.Errorf("heap used %d, %d collections, %d threads", s.HeapUsed, s.GCCount, s.Threads)
	}
	if vs := r.Layout().VMStartMs(); vs < time.Now().Add(-2*time.Minute).UnixMilli() || vs > time.Now().UnixMilli() {
		t.Errorf("VM start %d", vs)
	}
}

func TestPerfDataDisabled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	cmd := startJVM(t, "-XX:-UsePerfData")
	pid := cmd.Process.Pid
	if _, err := Locate("/proc/"+strconv.Itoa(pid)+"/root/tmp", int32(pid), ""); !errors.Is(err, ErrNoFile) {
		t.Errorf("-XX:-UsePerfData: %v", err)
	}
}

func BenchmarkRead(b *testing.B) {
	path := filepath.Join(b.TempDir(), "1")
	data, err := os.ReadFile("testdata/jdk17-serial.hsperf")
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(path, data, 0o600)
	r, err := Open(path, OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	b.SetBytes(int64(r.Layout().Span()))
	var s Snapshot
	for i := 0; i < b.N; i++ {
		if err := r.Read(&s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewLayout(b *testing.B) {
	data, err := os.ReadFile("testdata/jdk17-serial.hsperf")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := NewLayout(data); err != nil {
			b.Fatal(err)
		}
	}
}
