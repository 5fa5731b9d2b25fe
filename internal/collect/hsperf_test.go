package collect

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hsperf"
	"github.com/taskscope/taskscope/internal/procfs"
)

type valSet map[int]int64

func (v valSet) Set(i int, x int64) { v[i] = x }

// target builds the Target of a live process as the tracker does.
func target(t testing.TB, fs *procfs.FS, pid int32, age uint64, state []any, buf *[]byte) *Target {
	t.Helper()
	b, err := fs.ReadPidFile(pid, "stat", nil)
	if err != nil {
		t.Fatal(err)
	}
	var st procfs.Stat
	if err := procfs.ParseStat(b, &st); err != nil {
		t.Fatal(err)
	}
	return &Target{PID: pid, Age: age, Proc: fs.OpenProc(pid), Stat: &st, IsJVM: true, Buf: buf, State: state}
}

func hsperfFixture(t *testing.T, vmStartMs int64) (string, *Config) {
	root := t.TempDir()
	dir := filepath.Join(root, "hsperfdata_someone")
	os.MkdirAll(dir, 0o755)
	b := hsperf.Build(binary.LittleEndian, 8192, []hsperf.BuildEntry{
		{Name: "sun.rt.createVmBeginTime", Long: vmStartMs},
		{Name: "java.threads.live", Long: 9},
		{Name: "sun.gc.generation.0.capacity", Long: 10 << 20},
		{Name: "sun.gc.generation.0.maxCapacity", Long: 20 << 20},
		{Name: "sun.gc.generation.0.space.0.used", Long: 3 << 20},
		{Name: "sun.gc.collector.0.invocations", Long: 4},
		{Name: "sun.gc.collector.0.time", Long: 5_000_000},
	})
	path := filepath.Join(dir, itoa(os.Getpid()))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fs := procfs.NewFS("/proc")
	return path, &Config{FS: &fs, JVM: true, HsperfRoot: root}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestHsperfSourceFixture(t *testing.T) {
	_, cfg := hsperfFixture(t, time.Now().UnixMilli())
	src := hsperfSource{}
	state := make([]any, 1)
	var buf []byte
	v := valSet{}
	if err := src.Sample(cfg, target(t, cfg.FS, int32(os.Getpid()), 0, state, &buf), 0, v); err != nil {
		t.Fatal(err)
	}
	want := valSet{0: 3 << 20, 1: 10 << 20, 2: 20 << 20, 3: 4, 4: 5, 5: 9}
	if len(v) != len(want) {
		t.Fatalf("got %v, want %v", v, want)
	}
	for i, x := range want {
		if v[i] != x {
			t.Errorf("%s = %d, want %d", src.Metrics()[i], v[i], x)
		}
	}
	src.Forget(state[0])
}

func TestHsperfSourceStaleFile(t *testing.T) {
	// A file written by a JVM that started before this process: an earlier
	// process of the same pid left it.
	_, cfg := hsperfFixture(t, time.Now().Add(-time.Hour).UnixMilli())
	state := make([]any, 1)
	var buf []byte
	v := valSet{}
	if err := (hsperfSource{}).Sample(cfg, target(t, cfg.FS, int32(os.Getpid()), 0, state, &buf), 0, v); err != nil || len(v) != 0 {
		t.Errorf("stale file: %v, %v", v, err)
	}
}

func TestHsperfSourceMissing(t *testing.T) {
	fs := procfs.NewFS("/proc")
	cfg := &Config{FS: &fs, JVM: true, HsperfRoot: t.TempDir()}
	state := make([]any, 1)
	var buf []byte
	looks := 0
	for age := uint64(0); age < 200; age++ {
		v := valSet{}
		st, _ := state[0].(*hsperfState)
		before := 0
		if st != nil {
			before = st.tries
		}
		if err := (hsperfSource{}).Sample(cfg, target(t, cfg.FS, int32(os.Getpid()), age, state, &buf), 0, v); err != nil || len(v) != 0 {
			t.Fatalf("age %d: %v, %v", age, v, err)
		}
		if state[0].(*hsperfState).tries > before {
			looks++
		}
	}
	if looks > 12 {
		t.Errorf("looked for a missing file %d times in 200 ticks", looks)
	}
	// Not a JVM: not even looked for.
	tg := target(t, cfg.FS, int32(os.Getpid()), 0, make([]any, 1), &buf)
	tg.IsJVM = false
	if err := (hsperfSource{}).Sample(cfg, tg, 0, valSet{}); err != nil || tg.State[0] != nil {
		t.Errorf("non-JVM: %v %v", tg.State[0], err)
	}
}

func TestHsperfSourceRealJVM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	java, err := exec.LookPath("java")
	if err != nil {
		t.Skip("no java")
	}
	src := filepath.Join(t.TempDir(), "Gc.java")
	os.WriteFile(src, []byte(`public class Gc { public static void main(String[] a) throws Exception {
  byte[][] k = new byte[16][]; for (int i = 0; i < 16; i++) { k[i] = new byte[1 << 20]; System.gc(); }
  System.out.println("ready"); System.out.flush(); Thread.sleep(120000); } }`), 0o644)
	cmd := exec.Command(java, "-Xmx48m", "-XX:+UseSerialGC", src)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ready := make(chan struct{})
	go func() { out.Read(make([]byte, 8)); close(ready) }()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("the JVM did not start")
	}
	fs := procfs.NewFS("/proc")
	cfg := &Config{FS: &fs, JVM: true}
	state := make([]any, 1)
	var buf []byte
	v := valSet{}
	tg := target(t, &fs, int32(cmd.Process.Pid), 0, state, &buf)
	tg.IsJVM = false // found by its comm, "java"
	if err := (hsperfSource{}).Sample(cfg, tg, 0, v); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", v)
	if v[2] < 46<<20 || v[2] > 49<<20 || v[0] < 10<<20 || v[3] < 16 || v[5] < 2 {
		t.Errorf("heap used %d max %d, %d collections, %d threads", v[0], v[2], v[3], v[5])
	}
	(hsperfSource{}).Forget(state[0])
}

// BenchmarkHsperfSample is the per-tick cost of the source for one JVM
// whose file is open (a copy of a real JVM's file).
func BenchmarkHsperfSample(b *testing.B) {
	root := b.TempDir()
	dir := filepath.Join(root, "hsperfdata_x")
	os.MkdirAll(dir, 0o755)
	data, err := os.ReadFile("../hsperf/testdata/jdk17-serial.hsperf")
	if err != nil {
		b.Fatal(err)
	}
	// Make it look started now.
	p, entries, err := hsperf.Entries(data)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "sun.rt.createVmBeginTime" {
			p.Order.PutUint64(data[e.Offset:], uint64(time.Now().UnixMilli()))
		}
	}
	os.WriteFile(filepath.Join(dir, itoa(os.Getpid())), data, 0o600)
	fs := procfs.NewFS("/proc")
	cfg := &Config{FS: &fs, JVM: true, HsperfRoot: root}
	state := make([]any, 1)
	var buf []byte
	tg := target(b, &fs, int32(os.Getpid()), 0, state, &buf)
	v := valSet{}
	if err := (hsperfSource{}).Sample(cfg, tg, 0, v); err != nil || len(v) != 6 {
		b.Fatalf("%v %v", v, err)
	}
	var sink nopValues
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tg.Age++
		if err := (hsperfSource{}).Sample(cfg, tg, 0, sink); err != nil {
			b.Fatal(err)
		}
	}
}

type nopValues struct{}

func (nopValues) Set(int, int64) {}
