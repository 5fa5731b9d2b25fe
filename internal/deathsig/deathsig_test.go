package deathsig_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/taskscope/taskscope/internal/deathsig"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestOutlivesTheStartingThread: a child started from a thread that then
// ends is not sent its parent-death signal (it is, started with a plain
// cmd.Start: the kernel's behaviour the package exists for), and is sent
// it when it is stopped otherwise.
func TestOutlivesTheStartingThread(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	// The control: cmd.Start with Pdeathsig on a thread that ends.
	plain := exec.Command(sleep, "600")
	plain.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var startErr error
	testsrv.OnEndingThread(t, func() { startErr = plain.Start() })
	if startErr != nil {
		t.Fatal(startErr)
	}
	t.Cleanup(func() { plain.Process.Kill(); plain.Wait() })
	if !killed(t, plain.Process.Pid, nil) {
		t.Error("a child started with cmd.Start was not sent its parent-death signal when its thread ended: the test shows nothing")
	}

	cmd := exec.Command(sleep, "600")
	var done <-chan struct{}
	testsrv.OnEndingThread(t, func() { done, startErr = deathsig.Start(cmd, syscall.SIGKILL) })
	if startErr != nil {
		t.Fatal(startErr)
	}
	if killed(t, cmd.Process.Pid, done) {
		t.Fatal("the child was sent its parent-death signal when the thread that started it ended")
	}
	cmd.Process.Kill()
	<-done
	if cmd.ProcessState == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("done closed with %v", cmd.ProcessState)
	}
	if _, err := deathsig.Start(exec.Command("/nonexistent/program"), syscall.SIGKILL); err == nil {
		t.Error("a program that does not exist started")
	}
}

// killed says whether the process pid was sent SIGKILL: it exited (done
// closed), is a zombie, or has SIGKILL pending. The signal is sent while
// the thread ends, before its /proc entry goes (what OnEndingThread
// waits for), so this needs no waiting.
func killed(t *testing.T, pid int, done <-chan struct{}) bool {
	t.Helper()
	select {
	case <-done:
		return true
	default:
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			mask, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				t.Fatalf("%s: %q", k, v)
			}
			if mask&(1<<(syscall.SIGKILL-1)) != 0 {
				return true
			}
		}
	}
	return false
}
