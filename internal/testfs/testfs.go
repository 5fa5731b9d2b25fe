// Package testfs gives a test a small filesystem of its own, to fill up:
// the full-disk tests of the store, the server and the agent's spool run
// against a real ENOSPC, not an injected error.
//
// As root, Run mounts a tmpfs of the size asked on a temporary directory.
// Otherwise it runs the test again, alone, in a user and mount namespace of
// its own (`unshare --user --map-root-user --mount`), where mounting a tmpfs
// is allowed, and passes or fails with that run; it skips only when neither
// is possible (not root, and no user namespaces).
package testfs

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inNamespace is set in the environment of the test run again in a namespace.
const inNamespace = "TASKSCOPE_TESTFS_NS"

// Run mounts a tmpfs of size bytes on a new temporary directory and calls
// body with it; the filesystem is unmounted when the test ends.
func Run(t *testing.T, size int64, body func(t *testing.T, dir string)) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv(inNamespace) == "" {
		again(t)
		return
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("cannot mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	// Registered after TempDir's cleanup, so it runs before it.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("cannot unmount %s: %v", dir, err)
		}
	})
	body(t, dir)
}

// again runs this one test in a user and mount namespace.
func again(t *testing.T) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("not root, and no unshare(1) to mount a tmpfs in a namespace: %v", err)
	}
	var parts []string
	for _, p := range strings.Split(t.Name(), "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	args := []string{"--user", "--map-root-user", "--mount", "--", os.Args[0],
		"-test.run", strings.Join(parts, "/"), "-test.count", "1", "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), inNamespace+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil && !strings.Contains(string(out), "=== RUN") {
		t.Skipf("not root, and cannot make a user and mount namespace: %v\n%s", err, out)
	}
	t.Logf("run again in a user and mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the run in a namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the run in a namespace did not pass %s", t.Name())
	}
}

// Free is what the filesystem of dir has available to an unprivileged
// writer, in bytes.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// Fill writes a ballast file in dir that leaves about leave bytes free on
// its filesystem, and returns its name: removing it makes room again.
func Fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "ballast-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	name := f.Name()
	if n := Free(t, dir) - leave; n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			t.Fatalf("cannot fill %s with %d bytes: %v", dir, n, err)
		}
	}
	return name
}
