// Package testsrv is for tests that start servers of their own on loopback
// (taskscope's, ClickHouse, ZooKeeper, VictoriaMetrics, a Kerberos KDC): a free address to
// give one, a buffer for their output, and the one way tests wait for a
// condition (polling, never a fixed sleep).
package testsrv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/minikdc"
)

// FreeAddr is a loopback address with a port that was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// FreePort is the port of FreeAddr.
func FreePort(tb testing.TB) int {
	tb.Helper()
	_, p, err := net.SplitHostPort(FreeAddr(tb))
	if err != nil {
		tb.Fatal(err)
	}
	port, err := net.LookupPort("tcp", p)
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// WaitUntil polls cond every 10 ms until it holds, and fails the test if it
// does not within d.
func WaitUntil(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	if !Poll(d, cond) {
		tb.Fatalf("timed out waiting for %s", what)
	}
}

// Poll polls cond every 10 ms until it holds (true) or d has passed
// (false): WaitUntil for a caller that handles the timeout itself.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// SyncBuffer is a bytes.Buffer that a server or daemon under test may
// write (its log) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// NeedKDC fails the test under CI, and skips it elsewhere, when MIT
// Kerberos's KDC programs are not installed.
func NeedKDC(tb testing.TB) {
	tb.Helper()
	if err := minikdc.Available(); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
}

// StartKDC starts a Kerberos KDC of its own realm on loopback
// (minikdc; Debian's krb5-kdc and krb5-admin-server, which
// scripts/test-deps.sh installs) in a temporary directory, stopped when
// the test ends. Without them the test fails under CI and is skipped
// elsewhere.
func StartKDC(tb testing.TB, opt minikdc.Options) *minikdc.KDC {
	tb.Helper()
	NeedKDC(tb)
	if opt.Dir == "" {
		opt.Dir = tb.TempDir()
	}
	k, err := minikdc.Start(context.Background(), opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { k.Stop() })
	return k
}

// OnEndingThread runs fn on an OS thread that ends when fn returns (as
// the agent's taskstats probe and hotspot's credential switches end
// threads of their process), and returns once that thread is gone: a
// child process fn forked with a parent-death signal has then been sent
// it, unless something keeps the forking thread alive (package deathsig).
func OnEndingThread(tb testing.TB, fn func()) {
	tb.Helper()
	tids := make(chan int, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine. The
		// runtime keeps the main thread though: found on it, hold it
		// while fn runs on another.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread()
				fn()
				tids <- unix.Gettid()
			}()
			<-done
			runtime.UnlockOSThread()
			return
		}
		fn()
		tids <- unix.Gettid()
	}()
	tid := <-tids
	WaitUntil(tb, fmt.Sprintf("the end of thread %d", tid), 10*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid))
		return errors.Is(err, fs.ErrNotExist)
	})
}
