package simulator

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// testScale keeps the tests' JVMs short.
const testScale = 0.5

// startCluster starts a cluster for a test and checks, at the end, that
// Close leaves no process behind.
func startCluster(t *testing.T, o Options) *Cluster {
	t.Helper()
	if o.Scale == 0 {
		o.Scale = testScale
	}
	if o.Log == nil && testing.Verbose() {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("cluster %s started in %v", c.ID(), c.StartupTime())
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left := markedProcs(EnvCluster, c.ID()); len(left) != 0 {
			t.Errorf("processes left after Close: %+v", left)
		}
	})
	return c
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// proc reads what a test checks of a live process.
type procView struct {
	PID     int
	Argv    []string
	Cwd     string
	Env     map[string]string
	Stat    procEntry
	Environ []byte
}

func readProc(t *testing.T, pid int) procView {
	t.Helper()
	v, err := tryReadProc(pid)
	if err != nil {
		t.Fatalf("cannot read process %d: %v", pid, err)
	}
	return v
}

func tryReadProc(pid int) (procView, error) {
	v := procView{PID: pid, Env: map[string]string{}}
	base := "/proc/" + strconv.Itoa(pid) + "/"
	b, err := os.ReadFile(base + "cmdline")
	if err != nil {
		return v, err
	}
	v.Argv = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	// A starting JVM briefly sits in /tmp/hsperfdata_<user> (HotSpot creates
	// its perf data file from there, then goes back): look again.
	for i := 0; ; i++ {
		if v.Cwd, err = os.Readlink(base + "cwd"); err != nil {
			return v, err
		}
		if !strings.HasPrefix(v.Cwd, "/tmp/hsperfdata_") || i == 100 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if v.Environ, err = readEnviron(pid, make([]byte, 1<<20)); err != nil {
		return v, err
	}
	if len(v.Environ) == 0 {
		return v, errors.New("no environment: the process is exiting")
	}
	for _, e := range bytes.Split(v.Environ, []byte{0}) {
		if k, val, ok := strings.Cut(string(e), "="); ok {
			v.Env[k] = val
		}
	}
	if v.Stat, err = statOf(pid); err != nil {
		return v, err
	}
	if len(v.Argv) == 0 || v.Argv[0] == "" || v.Stat.State == 'Z' {
		return v, errors.New("no command line (zombie?)")
	}
	// The same program still: it did not exec while being read.
	if b2, err := os.ReadFile(base + "cmdline"); err != nil || !bytes.Equal(b, b2) {
		return v, errors.New("the process changed while being read")
	}
	return v, nil
}

// children lists the live children of pid.
func children(pid int) []procEntry {
	ps, _ := listProcs()
	var out []procEntry
	for _, p := range ps {
		if p.PPID == pid && p.State != 'Z' {
			out = append(out, p)
		}
	}
	return out
}

func wantEnv(t *testing.T, v procView, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got, ok := v.Env[k]; !ok || got != w {
			t.Errorf("pid %d (%s): env %s = %q (set %v), want %q", v.PID, filepath.Base(v.Argv[0]), k, got, ok, w)
		}
	}
}

func wantClassify(t *testing.T, argv []string, kind hadoop.Kind) hadoop.Launch {
	t.Helper()
	l := hadoop.Classify(argv)
	if l.Kind != kind {
		t.Errorf("Classify(%.200q) = %v, want %v", argv, l.Kind, kind)
	}
	return l
}

func readConf(t *testing.T, path string) hadoop.Conf {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("cannot open %s: %v", path, err)
	}
	defer f.Close()
	c, err := hadoop.ParseConf(f)
	if err != nil {
		t.Fatalf("cannot parse %s: %v", path, err)
	}
	return c
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("cannot read %s: %v", path, err)
	}
	return string(b)
}

func wantFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("missing %s in %s: %v", n, dir, err)
		}
	}
}

// findProc returns the first process tree of the results matching f.
func findProc(rs []AttemptResult, f func(AttemptResult) bool) (AttemptResult, bool) {
	i := slices.IndexFunc(rs, f)
	if i < 0 {
		return AttemptResult{}, false
	}
	return rs[i], true
}

// wantCPU checks that the wait4 CPU of a tree is close to what was asked
// on top of its JVM's start, which the JVM logs (from 0.2 s to well over a
// second of CPU, with the machine's load).
func wantCPU(t *testing.T, what string, r AttemptResult, asked time.Duration) {
	t.Helper()
	wantCPUBeside(t, what, r, asked, 0)
}

// wantCPUBeside is wantCPU for a tree that does more beside the asked work
// and its JVM's start: up to beside more is allowed above.
func wantCPUBeside(t *testing.T, what string, r AttemptResult, asked, beside time.Duration) {
	t.Helper()
	start := startCPU(t, r)
	want := asked + start
	// Above: the JIT and GC threads' work after the start, the exit.
	lo := want * 95 / 100
	hi := want*13/10 + 400*time.Millisecond + beside
	if r.CPU < lo || r.CPU > hi {
		t.Errorf("%s: wait4 CPU %v, want %v asked + %v start (between %v and %v)", what, r.CPU, asked, start, lo, hi)
	} else {
		t.Logf("%s: wait4 CPU %v for %v asked + %v start", what, r.CPU, asked, start)
	}
}

var workStart = regexp.MustCompile(`taskscope simulator work start: process cpu (\d+) ms`)

// startCPU is the CPU the tree's JVM had used when its first attempt's
// work began, from the logs of its container (syslog, Tez's
// syslog_<attempt>, a Spark executor's stderr): the smallest such figure.
func startCPU(t *testing.T, r AttemptResult) time.Duration {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(r.LogDir, "syslog*"))
	logs = append(logs, filepath.Join(r.LogDir, "stderr"))
	least := time.Duration(-1)
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
		for _, m := range workStart.FindAllStringSubmatch(string(b), -1) {
			ms, _ := strconv.Atoi(m[1])
			if d := time.Duration(ms) * time.Millisecond; least < 0 || d < least {
				least = d
			}
		}
	}
	if least < 0 {
		t.Errorf("%s: no work start logged in %s", r.Unit, r.LogDir)
		return 0
	}
	return least
}

// exitCodeOf reads the exit code of a zombie from its stat (field 52).
func zombieExitCode(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 50 || f[0] != "Z" {
		return 0, false
	}
	code, err := strconv.Atoi(f[49])
	if err != nil {
		return 0, false
	}
	return code >> 8, true
}
