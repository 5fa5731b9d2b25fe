package hotspot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/testjvm"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// The test binary runs again as another user (childMain) to attach
// without the privileges root has.
const envChild = "TASKSCOPE_HOTSPOT_TEST_ATTACH"

func TestMain(m *testing.M) {
	if pid := os.Getenv(envChild); pid != "" {
		childMain(pid)
		return
	}
	os.Exit(m.Run())
}

// childMain attaches to pid, takes a dump and prints the main thread's
// first frame, or "error: <err>" and the error's kind.
func childMain(pid string) {
	p, _ := strconv.Atoi(pid)
	vm, err := Attach(context.Background(), int32(p), Options{StartTimeout: 3 * time.Second})
	var dump []byte
	if err == nil {
		dump, err = vm.ThreadDump(context.Background(), nil)
	}
	switch {
	case errors.Is(err, ErrPermission):
		fmt.Println("error: permission:", err)
	case err != nil:
		fmt.Println("error:", err)
	default:
		ParseThreadDump(dump, Limits{}, func(t *Thread) error {
			if string(t.Name) == "main" && len(t.Frames) > 0 {
				fmt.Println("main:", string(t.Frames[0]))
			}
			return nil
		})
	}
	os.Exit(0)
}

// startBusy starts testdata/Busy.java (exiting after exitMs, 0: never)
// with the java options given, as uid (0: as the test).
func startBusy(t testing.TB, uid uint32, exitMs int, opts ...string) *testjvm.JVM {
	t.Helper()
	return testjvm.Start(t, testjvm.Options{Classes: testjvm.Classes(t, "testdata/Busy.java"), Class: "Busy",
		Args: []string{strconv.Itoa(exitMs)}, Java: opts, UID: uid})
}

// spinning dumps vm until its main thread is in Busy.spin (it may still
// be printing "ready").
func spinning(t testing.TB, vm *VM) {
	t.Helper()
	f := ""
	testsrv.WaitUntil(t, "the main thread in Busy.spin", 10*time.Second, func() bool {
		dump, err := vm.ThreadDump(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		f = mainFrame(t, dump)
		return f == "Busy.spin"
	})
}

func mainFrame(t testing.TB, dump []byte) string {
	t.Helper()
	first := ""
	if err := ParseThreadDump(dump, Limits{}, func(th *Thread) error {
		if string(th.Name) == "main" && len(th.Frames) > 0 {
			first = string(th.Frames[0])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return first
}

func TestAttachAndDump(t *testing.T) {
	j := startBusy(t, 0, 0)
	ctx := context.Background()
	vm, err := Attach(ctx, j.PID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !vm.Triggered {
		t.Error("a JVM that had not listened yet: not triggered")
	}
	spinning(t, vm)
	// Each dump is a connection of its own.
	for i := 0; i < 3; i++ {
		dump, err := vm.ThreadDump(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var blocked, holder *parsed
		ts, err := parseAll(t, dump, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		blocked, holder = find(ts, "blocked"), find(ts, "holder")
		if m := find(ts, "main"); m == nil || len(m.Frames) == 0 || m.Frames[0] != "Busy.spin" || m.State != StateRunnable {
			t.Errorf("main: %+v", m)
		}
		if blocked == nil || blocked.State != StateBlocked || blocked.Frames[0] != "Busy.enter" {
			t.Errorf("blocked: %+v", blocked)
		}
		if holder == nil || holder.Wait != WaitSleeping || len(holder.Frames) < 2 || holder.Frames[1] != "Busy.hold" {
			t.Errorf("holder: %+v", holder)
		}
	}
	// The dumps' pauses, from the JVM's own counters.
	sp, err := vm.OpenSafepoints()
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	before, err := sp.Stopped()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.ThreadDump(ctx, nil); err != nil {
		t.Fatal(err)
	}
	after, err := sp.Stopped()
	if err != nil || after <= before || after-before > 5*time.Second {
		t.Errorf("stopped at safepoints %v before a dump, %v after (%v)", before, after, err)
	}
	// Listening now: a second attach sends no signal.
	vm2, err := Attach(ctx, j.PID, Options{})
	if err != nil || vm2.Triggered {
		t.Errorf("second attach: %v, triggered %v", err, vm2 != nil && vm2.Triggered)
	}
	// The trigger file is gone; the JVM printed no thread dump of its own.
	if _, err := os.Stat(filepath.Join(j.Dir, fmt.Sprintf(".attach_pid%d", j.PID))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".attach_pid left behind: %v", err)
	}
	if out := j.Out.String(); strings.Contains(out, "Full thread dump") {
		t.Errorf("the JVM printed a thread dump on SIGQUIT: %.200s", out)
	}
	if _, err := vm.Execute(ctx, nil, "no-such-command"); !errors.Is(err, ErrCommand) {
		t.Errorf("an unknown command: %v", err)
	}
	j.Running(t)
}

// A JVM started with -Xrs does not catch SIGQUIT: HotSpot then starts its
// listener at startup, and the agent uses it without a signal; without
// that listener (-XX:+DisableAttachMechanism) it is refused, and lives on.
func TestAttachXrs(t *testing.T) {
	ctx := context.Background()
	j := startBusy(t, 0, 0, "-Xrs")
	vm, err := Attach(ctx, j.PID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Triggered || vm.Status.CatchesQuit {
		t.Errorf("-Xrs: triggered %v, catches SIGQUIT %v", vm.Triggered, vm.Status.CatchesQuit)
	}
	spinning(t, vm)
	j.Running(t)

	k := startBusy(t, 0, 0, "-Xrs", "-XX:+DisableAttachMechanism")
	if _, err := Attach(ctx, k.PID, Options{StartTimeout: time.Second}); !errors.Is(err, ErrWouldKill) {
		t.Errorf("-Xrs without a listener: %v, want ErrWouldKill", err)
	}
	time.Sleep(200 * time.Millisecond) // a SIGQUIT, had one been sent, would have killed it by now
	k.Running(t)
}

// A process that does not catch SIGQUIT (as a JVM that has not installed
// its handlers yet) is never sent it.
func TestAttachRefusesNonCatcher(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := Attach(context.Background(), int32(cmd.Process.Pid), Options{}); !errors.Is(err, ErrWouldKill) {
		t.Errorf("sleep: %v, want ErrWouldKill", err)
	}
	if err := unix.Kill(cmd.Process.Pid, 0); err != nil {
		t.Errorf("sleep is gone: %v", err)
	}
}

func TestAttachGone(t *testing.T) {
	if _, err := Attach(context.Background(), 1<<30, Options{}); !errors.Is(err, ErrGone) {
		t.Errorf("no such pid: %v, want ErrGone", err)
	}
}

// A JVM that exits while it is dumped: the next dump fails with ErrGone.
func TestAttachExitMidway(t *testing.T) {
	j := startBusy(t, 0, 1500)
	ctx := context.Background()
	vm, err := Attach(ctx, j.PID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	testsrv.WaitUntil(t, "the JVM's exit to fail a dump", 30*time.Second, func() bool {
		_, last = vm.ThreadDump(ctx, nil)
		return last != nil
	})
	<-j.Done
	if !errors.Is(last, ErrGone) {
		t.Errorf("dump of an exited JVM: %v, want ErrGone", last)
	}
	if vm.Alive() {
		t.Error("Alive after exit")
	}
}

const (
	jvmUID   = 54321 // the JVM's user in the tests of other users
	agentUID = 54322 // an agent that is neither root nor the JVM's user
)

// asRoot skips nothing: these tests need root (CI runs as root) to start
// processes as other users.
func asRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("this test starts processes as other users: it needs root (uid %d)", os.Geteuid())
	}
}

// runChild runs this test binary as agentUID with the ambient
// capabilities given, attaching to pid, and returns what it printed.
func runChild(t *testing.T, pid int32, caps ...uintptr) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is root's alone: a copy others may run.
	dir, err := os.MkdirTemp("", "taskscope-hotspot-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "hotspot.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), envChild+"="+strconv.Itoa(int(pid)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agentUID, Gid: agentUID}, AmbientCaps: caps}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// A JVM of another user: root attaches as that user; an agent of its own
// user with CAP_SETUID and CAP_SETGID (the systemd unit's) does too;
// without them it fails cleanly, and the JVM lives on.
func TestAttachOtherUser(t *testing.T) {
	asRoot(t)
	j := startBusy(t, jvmUID, 0)
	// The unit's capabilities before profiles: /proc/PID/root of other
	// users' processes, and their directories.
	unit := []uintptr{unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH, unix.CAP_NET_ADMIN}
	if got := runChild(t, j.PID, unit...); !strings.HasPrefix(got, "error: permission:") {
		t.Errorf("an agent without CAP_SETUID: %q, want a permission error", got)
	}
	j.Running(t)
	if got := runChild(t, j.PID, append(unit, unix.CAP_SETUID, unix.CAP_SETGID)...); got != "main: Busy.spin" {
		t.Errorf("an agent with CAP_SETUID and CAP_SETGID: %q", got)
	}
	vm, err := Attach(context.Background(), j.PID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Status.EUID != jvmUID || vm.Triggered {
		t.Errorf("status %+v, triggered %v (the child had started its listener)", vm.Status, vm.Triggered)
	}
	spinning(t, vm)
	// This process's own credentials are untouched.
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Errorf("the test now runs as %d:%d", os.Geteuid(), os.Getegid())
	}
	j.Running(t)
}

// A socket another user put where the JVM's would be is not used.
func TestAttachRefusesForeignSocket(t *testing.T) {
	asRoot(t)
	j := startBusy(t, jvmUID, 0)
	path := fmt.Sprintf("/proc/%d/root/tmp/.java_pid%d", j.PID, j.PID)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	os.Chmod(path, 0o600) // root's, closed to others, but not the JVM's user's
	if _, err := Attach(context.Background(), j.PID, Options{}); !errors.Is(err, ErrNotAttachable) {
		t.Errorf("a socket of root's: %v, want ErrNotAttachable", err)
	}
	j.Running(t)
}
