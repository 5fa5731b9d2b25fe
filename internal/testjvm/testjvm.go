// Package testjvm starts small real JVMs for tests (the attach and the
// profiles of packages hotspot, sampler and agent): it compiles Java
// sources once per test binary into a directory every user may read, and
// starts a class, as the test's user or another one, waiting until it
// prints "ready".
package testjvm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/deathsig"
	"github.com/taskscope/taskscope/internal/testsrv"
)

var (
	mu       sync.Mutex
	compiled = map[string]string{} // sources -> directory
)

// Classes compiles the Java source files once per test binary into a
// directory every user may read, and returns it.
func Classes(t testing.TB, files ...string) string {
	t.Helper()
	key := strings.Join(files, "\x00")
	mu.Lock()
	defer mu.Unlock()
	if dir, ok := compiled[key]; ok {
		return dir
	}
	if _, err := exec.LookPath("javac"); err != nil {
		t.Fatalf("javac is needed (these tests run real JVMs): %v", err)
	}
	dir, err := os.MkdirTemp("", "taskscope-testjvm-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("javac", append([]string{"-d", dir}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("javac: %v: %s", err, out)
	}
	compiled[key] = dir
	return dir
}

// Options say which JVM to start.
type Options struct {
	Classes string   // the class path (Classes' directory)
	Class   string   // the main class
	Args    []string // its arguments
	Java    []string // java options, beside a small heap and a serial collector
	// UID, when not 0, runs the JVM as that uid and gid, in a working
	// directory of its own (as a YARN container's is its user's).
	UID uint32
}

// JVM is a JVM a test started; it is killed when the test ends.
type JVM struct {
	Cmd  *exec.Cmd
	PID  int32
	Dir  string // its working directory
	Done chan struct{}
	Err  error              // its wait's, once Done is closed
	Out  testsrv.SyncBuffer // its standard output after "ready"
}

// Start starts the JVM and waits until it prints a line "ready" (60 s at
// most); what it prints before that (a report line of a thread it started
// first, say) is skipped. The JVM is killed when the test ends, or when
// the test binary dies without its cleanup (a panic, a timeout).
func Start(t testing.TB, o Options) *JVM {
	t.Helper()
	work := t.TempDir()
	args := append([]string{"-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}, o.Java...)
	args = append(append(args, "-cp", o.Classes, o.Class), o.Args...)
	cmd := exec.Command("java", args...)
	cmd.Dir = work
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if o.UID != 0 {
		if err := os.Chmod(filepath.Dir(work), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(work, int(o.UID), int(o.UID)); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: o.UID, Gid: o.UID}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Forked from a thread kept until it exits (package deathsig: the
	// signal goes when the forking thread ends, and hotspot's credential
	// switches end theirs).
	exited, err := deathsig.Start(cmd, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	j := &JVM{Cmd: cmd, PID: int32(cmd.Process.Pid), Dir: work, Done: make(chan struct{})}
	// ready is closed on "ready"; before is what came before it (its last
	// lines, for the failure's message), read once ready is closed or the
	// output ended (readDone).
	ready, readDone := make(chan struct{}), make(chan struct{})
	var before []string
	go func() {
		defer close(readDone)
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if strings.TrimSpace(line) == "ready" {
				close(ready)
				io.Copy(&j.Out, r)
				return
			}
			if line != "" {
				before = append(before[max(len(before)-4, 0):], strings.TrimSpace(line))
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		<-exited
		if !cmd.ProcessState.Success() {
			j.Err = &exec.ExitError{ProcessState: cmd.ProcessState}
		}
		close(j.Done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-j.Done
	})
	select {
	case <-ready:
	case <-readDone:
		select {
		case <-ready:
		default:
			cmd.Process.Kill()
			<-j.Done
			t.Fatalf("the JVM ended without saying ready (%v); its last lines: %q", j.Err, before)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the JVM did not start in 60 s")
	}
	return j
}

// Running fails the test if the JVM has ended.
func (j *JVM) Running(t testing.TB) {
	t.Helper()
	select {
	case <-j.Done:
		t.Fatalf("the JVM ended: %v", j.Err)
	default:
	}
	if err := unix.Kill(int(j.PID), 0); err != nil {
		t.Fatalf("the JVM is gone: %v", err)
	}
}

// String names the JVM in messages.
func (j *JVM) String() string { return fmt.Sprintf("JVM pid %s", strconv.Itoa(int(j.PID))) }
