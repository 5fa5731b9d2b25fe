package taskstats

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestListenerLive registers for exit records (root, CAP_NET_ADMIN) and
// checks the record of a child that exits with status 3.
func TestListenerLive(t *testing.T) {
	if testing.Short() {
		t.Skip("live taskstats in -short mode")
	}
	l := listenOrSkip(t)
	cmd := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3")
	start := time.Now()
	if err := cmd.Run(); err == nil {
		t.Fatal("the child exited 0")
	}
	elapsed := time.Since(start)
	pid := int32(cmd.Process.Pid)
	var rec *Record
	testsrv.Poll(3*time.Second, func() bool {
		if err := l.Drain(func(r *Record) {
			if r.PID == pid && r.TID == pid {
				c := *r
				rec = &c
			}
		}); err != nil {
			t.Fatal(err)
		}
		return rec != nil
	})
	if rec == nil {
		t.Fatalf("no exit record of pid %d", pid)
	}
	if rec.PPID != int32(os.Getpid()) || rec.Comm != "sh" || rec.ExitCode != 3<<8 {
		t.Errorf("record %+v: want ppid %d, comm sh, exit code %d", *rec, os.Getpid(), 3<<8)
	}
	if bt := time.Unix(rec.BtimeSec, 0); bt.Before(start.Add(-2*time.Second)) || bt.After(time.Now().Add(time.Second)) {
		t.Errorf("start %v, the child started at %v", bt, start)
	}
	if life := time.Duration(rec.EtimeUs) * time.Microsecond; life <= 0 || life > elapsed {
		t.Errorf("life %v, the child ran within %v", life, elapsed)
	}
	if rec.UTimeUs+rec.STimeUs == 0 && rec.RunNs == 0 {
		t.Errorf("no CPU in %+v", *rec)
	}
	// The scheduler's runtime is wait4's CPU (scaled user and system
	// time), but for the exit's own cost after the record.
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	w := ru.Utime.Nano() + ru.Stime.Nano()
	if rec.RunNs == 0 {
		t.Logf("the kernel leaves the runtime 0 (wait4 %v)", time.Duration(w))
	} else if d := w - int64(rec.RunNs); d < -int64(time.Millisecond) || d > int64(5*time.Millisecond) {
		t.Errorf("runtime %v, wait4 %v", time.Duration(rec.RunNs), time.Duration(w))
	}
	if l.Lost() != 0 {
		t.Logf("%d overflows", l.Lost())
	}
}

// TestDrainAll checks that one Drain delivers every record queued, however
// many: the tracker relies on having the records of every process that left
// /proc before it listed it.
func TestDrainAll(t *testing.T) {
	if testing.Short() {
		t.Skip("live taskstats in -short mode")
	}
	l := listenOrSkip(t)
	const n = 300
	want := runTrue(t, n)
	if err := l.Drain(func(r *Record) { delete(want, r.PID) }); err != nil {
		t.Fatal(err)
	}
	if len(want) != 0 || l.Lost() != 0 {
		t.Errorf("%d of %d records not delivered by one Drain (%d overflows)", len(want), n, l.Lost())
	}
	// Nothing queued: Drain returns at once.
	start := time.Now()
	if err := l.Drain(func(*Record) {}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("an empty Drain took %v", d)
	}
}

// TestDropped fills a small socket buffer with the records of short-lived
// children, not drained meanwhile: the kernel drops what does not fit, and
// Dropped counts every record it dropped (with those delivered, at least
// one for each child).
func TestDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("live taskstats in -short mode")
	}
	l, err := listen(64 << 10)
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("not root: %v", err)
		}
		t.Fatal(err)
	}
	defer l.Close()
	if d := l.Dropped(); d != 0 {
		t.Fatalf("dropped %d before anything", d)
	}
	want := runTrue(t, 20)
	if mi, err := l.memInfo(); err == nil {
		t.Logf("%d bytes queued after 20 children (and what else exited meanwhile)", mi[memInfoRmemAlloc])
	}
	const n = 300
	for pid := range runTrue(t, n-20) {
		want[pid] = true
	}
	got := 0
	if err := l.Drain(func(r *Record) {
		if want[r.PID] {
			got++
		}
	}); err != nil {
		t.Fatal(err)
	}
	dropped := l.Dropped()
	mi, err := l.memInfo()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(mi[memInfoDrops]) != dropped {
		t.Errorf("Dropped says %d, the socket %d", dropped, mi[memInfoDrops])
	}
	t.Logf("%d children: %d records delivered, %d dropped (%d overflows seen)", n, got, dropped, l.Lost())
	if dropped == 0 || l.Lost() == 0 {
		t.Errorf("nothing dropped in a 64 KiB buffer by %d exits", n)
	}
	if got+int(dropped) < n {
		t.Errorf("%d delivered and %d dropped: fewer than the %d children", got, dropped, n)
	}
}

// runTrue runs /bin/true n times, one after the other, and returns their pids.
func runTrue(t *testing.T, n int) map[int32]bool {
	t.Helper()
	pids := map[int32]bool{}
	for i := 0; i < n; i++ {
		cmd := exec.Command("/bin/true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pids[int32(cmd.Process.Pid)] = true
	}
	return pids
}

// TestListenPIDNamespace runs a child in a new pid namespace (root only):
// there Listen refuses, since exit records carry the host's pids.
func TestListenPIDNamespace(t *testing.T) {
	if os.Getenv("TASKSCOPE_PIDNS_CHILD") != "" {
		if InInitialPIDNamespace() {
			t.Fatal("a new pid namespace looks like the initial one")
		}
		if _, err := Listen(); !errors.Is(err, ErrPIDNamespace) {
			t.Fatalf("Listen in a pid namespace: %v", err)
		}
		return
	}
	if !InInitialPIDNamespace() {
		t.Skip("not in the initial pid namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestListenPIDNamespace$")
	cmd.Env = append(os.Environ(), "TASKSCOPE_PIDNS_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("cannot make a pid namespace: %v", err)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestListenerOutsidePoller: the listener's socket is a blocking one, which
// the Go runtime's poller never watches (it only takes non-blocking
// descriptors): a record queued on it, one for every thread that exits on
// the machine, must not wake the agent.
func TestListenerOutsidePoller(t *testing.T) {
	if testing.Short() {
		t.Skip("live taskstats in -short mode")
	}
	l := listenOrSkip(t)
	flags, err := unix.FcntlInt(uintptr(l.fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.O_NONBLOCK != 0 {
		t.Errorf("the listener's socket is non-blocking (flags %#x): the runtime's poller may watch it", flags)
	}
	// Drain reads what is queued without waiting (MSG_DONTWAIT): with
	// nothing queued it returns, twice.
	for i := 0; i < 2; i++ {
		if err := l.Drain(func(*Record) {}); err != nil {
			t.Fatal(err)
		}
	}
}

// listenOrSkip is a Listener for the test, which is skipped when not root.
func listenOrSkip(t *testing.T) *Listener {
	t.Helper()
	l, err := Listen()
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("not root: %v", err)
		}
		t.Fatalf("Listen as root: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestExitThread checks the probe's thread: each call ends a thread of this
// process's own, never the main one, also with one P (where the goroutine
// may start on the main thread).
func TestExitThread(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for range 20 {
		tid := exitThread()
		if int(tid) == os.Getpid() || tid <= 0 {
			t.Fatalf("exitThread returned %d (pid %d)", tid, os.Getpid())
		}
		testsrv.WaitUntil(t, fmt.Sprintf("thread %d to exit", tid), 5*time.Second, func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid))
			return errors.Is(err, fs.ErrNotExist)
		})
	}
}
