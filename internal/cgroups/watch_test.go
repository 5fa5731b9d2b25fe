package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// seen is the count the watcher has read so far, without reading again.
func (cw *Watch) seen() (uint64, bool) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.kills, cw.removed
}

// On a fixture tree: the count is read when memory.events changes, and
// kept once the cgroup is removed (as the NodeManager does at once).
func TestOOMWatcherFixture(t *testing.T) {
	w, err := NewOOMWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	root := t.TempDir()
	dir := filepath.Join(root, "hadoop-yarn", c1)
	os.MkdirAll(dir, 0o755)
	events := filepath.Join(dir, "memory.events")
	os.WriteFile(events, []byte("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"), 0o644)
	cw, err := w.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := w.Watch(dir); err != nil || again != cw || w.Watching() != 1 {
		t.Errorf("a second watch of the cgroup: %p %v, %d watched", again, err, w.Watching())
	}
	// The kernel rewrites the counters in place.
	os.WriteFile(events, []byte("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n"), 0o644)
	testsrv.WaitUntil(t, "the change read", 5*time.Second, func() bool { n, _ := cw.seen(); return n == 1 })
	os.WriteFile(events, []byte("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n"), 0o644)
	testsrv.WaitUntil(t, "the second change read", 5*time.Second, func() bool { n, _ := cw.seen(); return n == 2 })
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testsrv.WaitUntil(t, "the removal seen", 5*time.Second, func() bool { _, gone := cw.seen(); return gone })
	if n, err := cw.Kills(); n != 2 || err != nil {
		t.Errorf("after the removal: %d %v", n, err)
	}
	if w.Watching() != 0 {
		t.Errorf("%d watched after the removal", w.Watching())
	}
	cw.Close()
	// A file that is not memory.events' shape is an error, said by Kills.
	dir2 := filepath.Join(root, "hadoop-yarn", "c2")
	os.MkdirAll(dir2, 0o755)
	os.WriteFile(filepath.Join(dir2, "memory.events"), []byte("garbage"), 0o644)
	cw2, err := w.Watch(dir2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cw2.Kills(); err == nil {
		t.Error("garbage: no error")
	}
	cw2.Close()
	if w.Watching() != 0 {
		t.Errorf("%d watched after Close", w.Watching())
	}
	if _, err := w.Watch(filepath.Join(root, "missing")); err == nil {
		t.Error("a missing cgroup watched")
	}
	w.Close()
	if _, err := w.Watch(dir2); err == nil {
		t.Error("watched after the watcher's Close")
	}
}

// mountCgroup2 mounts the unified hierarchy in a temporary directory
// (root only), unmounted when the test ends.
func mountCgroup2(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting cgroup2 needs root")
	}
	mnt := t.TempDir()
	if err := unix.Mount("none", mnt, "cgroup2", 0, ""); err != nil {
		t.Skipf("the kernel refuses to mount cgroup2: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	if !Unified(mnt) {
		t.Fatalf("%s: mounted cgroup2 without cgroup.controllers", mnt)
	}
	return mnt
}

// newCgroup makes a cgroup under parent, removed when the test ends.
func newCgroup(t *testing.T, parent string) string {
	t.Helper()
	dir := filepath.Join(parent, "taskscope-test-"+strconv.Itoa(os.Getpid())+"-"+strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// On a real cgroup2 mount: the kernel's notifications of a cgroup file
// (kernfs, the way it marks memory.events modified) reach the watcher.
// Here with cgroup.events' "populated", which every cgroup2 has: a
// process moved in makes it 1, read by the watcher before anything asks,
// and kept once the cgroup is removed.
func TestOOMWatcherCgroup2Notifications(t *testing.T) {
	mnt := mountCgroup2(t)
	dir := newCgroup(t, mnt)
	w, err := NewOOMWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cw, err := w.watchFile(filepath.Join(dir, "cgroup.events"), func(b []byte) (uint64, error) {
		if strings.Contains(string(b), "populated 1") {
			return 1, nil
		}
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatalf("cannot move a process into %s: %v", dir, err)
	}
	testsrv.WaitUntil(t, "the kernel's notification read", 5*time.Second, func() bool { n, _ := cw.seen(); return n == 1 })
	sleeper.Process.Kill()
	sleeper.Wait()
	testsrv.WaitUntil(t, "the cgroup emptied", 5*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		return strings.Contains(string(b), "populated 0")
	})
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	// Gone: what Kills says was read when the kernel said.
	if _, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil {
		t.Fatal("a removed cgroup's file is still read")
	}
	if n, err := cw.Kills(); n != 1 || err != nil {
		t.Errorf("after the removal: %d %v", n, err)
	}
	cw.Close()
	if w.Watching() != 0 {
		t.Errorf("%d watched after Close", w.Watching())
	}
}

// On a real cgroup2 mount with the memory controller: a process over its
// cgroup's memory.max is killed by the kernel's OOM killer, the count is
// read from memory.events when it changes, and kept after the cgroup is
// removed at once (as the NodeManager does).
func TestOOMWatcherCgroup2OOMKill(t *testing.T) {
	mnt := mountCgroup2(t)
	ctrl, _ := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
	if !slices.Contains(strings.Fields(string(ctrl)), "memory") {
		t.Skipf("the kernel mounts cgroup2, but its memory controller is bound to a cgroup v1 hierarchy on this machine (cgroup2's controllers: %q)", strings.TrimSpace(string(ctrl)))
	}
	sub, _ := os.ReadFile(filepath.Join(mnt, "cgroup.subtree_control"))
	if !strings.Contains(string(sub), "memory") {
		if err := os.WriteFile(filepath.Join(mnt, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			t.Skipf("the kernel refuses the memory controller under cgroup2's root: %v", err)
		}
		t.Cleanup(func() { os.WriteFile(filepath.Join(mnt, "cgroup.subtree_control"), []byte("-memory"), 0) })
	}
	dir := newCgroup(t, mnt)
	for file, v := range map[string]string{"memory.max": "16777216", "memory.swap.max": "0"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if ok, err := HasMemoryLimit(dir, true); !ok || err != nil {
		t.Fatalf("memory.max set, limit %v %v", ok, err)
	}
	w, err := NewOOMWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cw, err := w.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	// It moves itself into the cgroup, then allocates without end.
	hog := exec.Command("sh", "-c", "echo $$ > "+filepath.Join(dir, "cgroup.procs")+" && exec tail /dev/zero")
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- hog.Wait() }()
	select {
	case err := <-done:
		ws, _ := hog.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the process over its memory ended %v, not killed", err)
		}
	case <-time.After(60 * time.Second):
		hog.Process.Kill()
		t.Fatal("the process over its memory was not killed")
	}
	if err := os.Remove(dir); err != nil { // at once, as the NodeManager
		t.Fatal(err)
	}
	n, err := cw.Kills()
	if n < 1 || err != nil {
		t.Errorf("OOM kills %d %v, want at least 1", n, err)
	}
}
