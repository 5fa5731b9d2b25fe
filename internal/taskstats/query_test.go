package taskstats

import (
	"bufio"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHelperBurner is not a test: run as a child by TestQuerierLive, it
// burns CPU on four threads for a while, says so, and sleeps.
func TestHelperBurner(t *testing.T) {
	if os.Getenv("TASKSTATS_BURNER") != "1" {
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			runtime.LockOSThread() // each burns on a thread of its own, which stays
			var ts unix.Timespec
			for ts.Nano() < int64(100*time.Millisecond) {
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
			}
			wg.Done()
			select {} // keep the thread: it must not exit
		}()
	}
	wg.Wait()
	os.Stdout.WriteString("burnt\n")
	time.Sleep(time.Minute) // alive, its threads too, until TestQuerierLive kills it
}

// threadsSchedstat sums the run and wait of every thread of pid, and
// their context switches.
func threadsSchedstat(t *testing.T, pid int) (run, wait, ctx uint64, threads int) {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		r, _ := strconv.ParseUint(f[0], 10, 64)
		w, _ := strconv.ParseUint(f[1], 10, 64)
		run, wait, threads = run+r, wait+w, threads+1
		st, err := os.ReadFile(dir + "/" + e.Name() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(st), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				ctx += n
			}
		}
	}
	return run, wait, ctx, threads
}

// TestQuerierLive asks the kernel for the totals of a child whose four
// threads burnt CPU: they are the sums over its threads of what their own
// schedstat files say, far more than its leader's schedstat alone.
func TestQuerierLive(t *testing.T) {
	if testing.Short() {
		t.Skip("live taskstats in -short mode")
	}
	q, err := NewQuerier()
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("not root: %v", err)
		}
		t.Fatalf("NewQuerier as root: %v", err)
	}
	defer q.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBurner$")
	cmd.Env = append(os.Environ(), "TASKSTATS_BURNER=1")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "burnt\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	var g Group
	run, wait, ctx, threads := threadsSchedstat(t, pid)
	if err := q.ThreadGroup(int32(pid), &g); err != nil {
		t.Fatal(err)
	}
	run2, wait2, ctx2, _ := threadsSchedstat(t, pid)
	leader, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	leaderRun, _ := strconv.ParseUint(strings.Fields(string(leader))[0], 10, 64)
	t.Logf("context switches: taskstats %d+%d, the threads' status %d..%d", g.VolCtx, g.InvolCtx, ctx, ctx2)
	t.Logf("%d threads: taskstats run %v wait %v; threads' schedstat run %v..%v wait %v..%v; leader's run %v",
		threads, time.Duration(g.RunNs), time.Duration(g.WaitNs), time.Duration(run), time.Duration(run2),
		time.Duration(wait), time.Duration(wait2), time.Duration(leaderRun))
	// Threads that exited before the first read count in g and in neither
	// sum: the child's burners stay, the Go runtime's rarely leave.
	if g.RunNs < run || g.RunNs > run2+uint64(20*time.Millisecond) {
		t.Errorf("run %v, the threads' schedstat says %v..%v", time.Duration(g.RunNs), time.Duration(run), time.Duration(run2))
	}
	if g.RunNs < uint64(4*100*time.Millisecond) {
		t.Errorf("run %v: four threads burnt 100 ms each", time.Duration(g.RunNs))
	}
	if g.WaitNs < wait || g.WaitNs > wait2+uint64(20*time.Millisecond) {
		t.Errorf("wait %v, the threads' schedstat says %v..%v", time.Duration(g.WaitNs), time.Duration(wait), time.Duration(wait2))
	}
	if c := g.VolCtx + g.InvolCtx; c < ctx || c > ctx2+10 {
		t.Errorf("context switches %d+%d, the threads' status says %d..%d", g.VolCtx, g.InvolCtx, ctx, ctx2)
	}
	if leaderRun*2 > g.RunNs {
		t.Errorf("the leader's own run %v is not the small part of %v", time.Duration(leaderRun), time.Duration(g.RunNs))
	}
	if n := testing.AllocsPerRun(100, func() { q.ThreadGroup(int32(pid), &g) }); n != 0 {
		t.Errorf("%v allocations per query", n)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := q.ThreadGroup(int32(pid), &g); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("a reaped process: %v, want ESRCH", err)
	}
}

// groupReply lays out the kernel's answer to request seq.
func groupReply(family uint16, seq uint32, tgid uint32, run, wait uint64) []byte {
	st := make([]byte, sizeV14)
	binary.NativeEndian.PutUint16(st, 14)
	binary.NativeEndian.PutUint64(st[offCPUDelayTotal:], wait)
	binary.NativeEndian.PutUint64(st[offCPURunVirtTotal:], run)
	binary.NativeEndian.PutUint64(st[offNVCSW:], run/2)
	binary.NativeEndian.PutUint64(st[offNIVCSW:], wait/2)
	tg := make([]byte, 4)
	binary.NativeEndian.PutUint32(tg, tgid)
	msg := append([]byte{1, 1, 0, 0}, nest(typeAggrTGID, append(attr(typeTGID, tg), attr(typeStats, st)...))...)
	return nlmsgSeq(family, seq, msg)
}

func TestParseGroupReply(t *testing.T) {
	var g Group
	if ok, err := parseGroupReply(groupReply(27, 7, 42, 5e9, 3e6), 27, 7, &g); !ok || err != nil || g != (Group{RunNs: 5e9, WaitNs: 3e6, VolCtx: 2.5e9, InvolCtx: 1.5e6}) {
		t.Errorf("reply: %v %v %+v", ok, err, g)
	}
	// A late reply to an earlier request, then this one's.
	two := append(groupReply(27, 6, 42, 1, 1), groupReply(27, 7, 42, 9, 8)...)
	if ok, err := parseGroupReply(two, 27, 7, &g); !ok || err != nil || g.RunNs != 9 || g.WaitNs != 8 {
		t.Errorf("two replies: %v %v %+v", ok, err, g)
	}
	if ok, err := parseGroupReply(groupReply(27, 6, 42, 1, 1), 27, 7, &g); ok || err != nil {
		t.Errorf("another request's reply: %v %v", ok, err)
	}
	esrch := -int32(syscall.ESRCH)
	errMsg := nlmsgSeq(2, 7, binary.NativeEndian.AppendUint32(nil, uint32(esrch)))
	if ok, err := parseGroupReply(errMsg, 27, 7, &g); !ok || !errors.Is(err, syscall.ESRCH) {
		t.Errorf("netlink error: %v %v", ok, err)
	}
	short := nlmsgSeq(27, 7, append([]byte{1, 1, 0, 0}, nest(typeAggrTGID, attr(typeStats, make([]byte, 40)))...))
	if ok, err := parseGroupReply(short, 27, 7, &g); !ok || err == nil {
		t.Errorf("short stats: %v %v", ok, err)
	}
	empty := nlmsgSeq(27, 7, []byte{1, 1, 0, 0})
	if ok, err := parseGroupReply(empty, 27, 7, &g); !ok || !errors.Is(err, errNoStats) {
		t.Errorf("no stats: %v %v", ok, err)
	}
	if _, err := parseGroupReply([]byte{200, 0, 0, 0, 27, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0}, 27, 7, &g); err == nil {
		t.Error("a message longer than the datagram")
	}
}

func FuzzParseGroupReply(f *testing.F) {
	f.Add(groupReply(27, 7, 42, 5e9, 3e6))
	f.Add(nlmsgSeq(2, 7, []byte{253, 255, 255, 255}))
	f.Add(append(groupReply(27, 6, 1, 1, 1), groupReply(27, 7, 2, 2, 2)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var g Group
		ok, err := parseGroupReply(b, 27, 7, &g)
		if !ok && err == nil && g != (Group{}) {
			t.Fatalf("no reply, but %+v", g)
		}
	})
}
