package tracker

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/taskstats"
)

// TestAgentOverhead measures a real taskscope-agent process (built from
// ./cmd/taskscope-agent) on a node of helper processes shaped like Hadoop's:
// its CPU (user+system, from wait4) over its run, its CPU in the steady state
// (after a warmup, to its last tick), and its peak RSS (VmHWM, wait4's
// ru_maxrss). The targets: under 0.2% of one core in the steady state of
// "quiet" and "working", a peak RSS under 25 MB in all. It takes minutes,
// and its CPU figures are only worth anything on a quiet machine, so it
// runs only when asked:
//
//	TASKSCOPE_OVERHEAD=quiet go test -run TestAgentOverhead -v -timeout 10m ./internal/tracker/
//	TASKSCOPE_OVERHEAD=working go test -run TestAgentOverhead -v -timeout 10m ./internal/tracker/
//	TASKSCOPE_OVERHEAD=busy  go test -run TestAgentOverhead -v -timeout 10m ./internal/tracker/
//
// quiet: 50 task processes among 300, a tick every second for 60 s (the
// agent's defaults otherwise), all asleep; working: the same, with each
// container's JVM, mapper and sort running a little every 50 ms (30 of the
// 50 never idle between ticks; the wrappers sleep, as Hadoop's do); busy:
// 200 task processes among 3,000 and 500 new processes a second, a tick
// every 250 ms for 30 s.
func TestAgentOverhead(t *testing.T) {
	mode := os.Getenv("TASKSCOPE_OVERHEAD")
	if mode == "" {
		t.Skip("set TASKSCOPE_OVERHEAD=quiet, working or busy")
	}
	// TASKSCOPE_OVERHEAD_AGENT runs another build (an earlier commit's, to
	// compare in the same conditions).
	bin := os.Getenv("TASKSCOPE_OVERHEAD_AGENT")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "taskscope-agent")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "../../cmd/taskscope-agent")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hs.Close()
	var interval time.Duration
	var ticks int
	switch mode {
	case "quiet", "working":
		startNodeWorking(t, 10, 0, 0, 0, mode == "working").fillTo(t, 300)
		interval, ticks = time.Second, 60
	case "busy":
		s := startNode(t, 40, 0, 300, 200)
		time.Sleep(time.Second)
		s.fillTo(t, 3000)
		interval, ticks = 250*time.Millisecond, 120
	default:
		t.Fatalf("TASKSCOPE_OVERHEAD=%s: quiet, working or busy", mode)
	}
	time.Sleep(time.Second)
	if n, err := strconv.Atoi(os.Getenv("TASKSCOPE_OVERHEAD_TICKS")); err == nil {
		ticks = n
	}
	args := []string{"run", "--server", hs.URL, "--interval", interval.String(), "--max-ticks", strconv.Itoa(ticks),
		"--spool-dir", t.TempDir(), "--log-level", "warn"}
	args = append(args, strings.Fields(os.Getenv("TASKSCOPE_OVERHEAD_ARGS"))...)
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The steady state: the agent's CPU (processCPU, ns) from a warmup on
	// to its last tick, without its start (the first tick classifies every
	// process) and its final flush.
	warm := 10 * interval
	if mode == "busy" {
		warm = 20 * interval
	}
	steady := make(chan [2]float64, 1)
	q, qerr := taskstats.NewQuerier()
	if qerr != nil {
		t.Logf("steady state from the threads' schedstat (taskstats: %v)", qerr)
	} else {
		defer q.Close()
	}
	go func() {
		pid := cmd.Process.Pid
		time.Sleep(warm)
		c0, t0 := processCPU(q, pid), time.Now()
		c1, t1 := c0, t0
		for time.Since(start) < time.Duration(ticks-1)*interval {
			time.Sleep(interval / 4)
			if c := processCPU(q, pid); c > 0 {
				c1, t1 = c, time.Now()
			}
		}
		steady <- [2]float64{float64(c1 - c0), float64(t1.Sub(t0).Nanoseconds())}
	}()
	var last string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		last = sc.Text()
		t.Log(last)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent: %v", err)
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	t.Logf("%s: %s", mode, strings.Join(args, " "))
	t.Logf("last line %q", last)
	t.Logf("CPU %v (user %v, system %v) over %v: %.3f%% of one core, %.0f us a tick; peak RSS (VmHWM) %.1f MB",
		cpu, time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), wall.Round(time.Millisecond),
		100*cpu.Seconds()/wall.Seconds(), float64(cpu.Microseconds())/float64(max(ticks, 1)), float64(ru.Maxrss)/1024)
	st := <-steady
	steadyPct := 100 * st[0] / st[1]
	t.Logf("steady state (from %v on): CPU %v over %v: %.3f%% of one core, %.0f us a tick",
		warm, time.Duration(st[0]).Round(time.Microsecond), time.Duration(st[1]).Round(time.Millisecond), steadyPct,
		st[0]/1e3/(st[1]/float64(interval)))
	if !strings.HasPrefix(last, fmt.Sprintf("ticks=%d tracked=", ticks)) {
		t.Errorf("last line %q", last)
	}
	if rss := float64(ru.Maxrss) / 1024; rss > 25 {
		t.Errorf("peak RSS %.1f MB, over 25 MB", rss)
	}
	if mode != "busy" && steadyPct > 0.2 {
		t.Errorf("%.3f%% of one core at a 1 s interval in the steady state, over 0.2%%", steadyPct)
	}
}

// processCPU is the CPU of a process so far (ns), all its threads', exited
// ones included: taskstats' thread group runtime where the test may ask,
// else the sum of its live threads' schedstat (a thread that exits between
// two reads takes its CPU with it). 0 when it is gone.
func processCPU(q *taskstats.Querier, pid int) int64 {
	if q != nil {
		var g taskstats.Group
		if q.ThreadGroup(int32(pid), &g) == nil {
			return int64(g.RunNs)
		}
		return 0
	}
	return threadsCPU(pid)
}

// threadsCPU is the CPU of a process's live threads so far (the sum of
// their /proc/PID/task/TID/schedstat run times, ns), 0 when it is gone.
func threadsCPU(pid int) int64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var sum int64
	for _, tid := range tids {
		b, err := os.ReadFile(dir + "/" + tid.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += n
		}
	}
	return sum
}
