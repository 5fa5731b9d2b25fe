package hotspot

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HotSpot takes a client only if the client connects with the JVM's own
// effective uid and gid (SO_PEERCRED; JDK 9 and later also take root, JDK 8
// takes nobody else), and creates .attach_pid<pid> as that user. The agent
// runs as root or as its own user: for each of those steps it takes the
// JVM's uid and gid on one OS thread of its own (Linux credentials are a
// thread's; the kernel records the connecting thread's in SO_PEERCRED),
// which exits afterwards. No other goroutine ever runs on that thread: it
// is locked to the goroutine that changed it, which returns without
// unlocking it, and the Go runtime then ends the thread (and makes new
// threads from a clean one, never from a locked thread). This needs
// CAP_SETUID and CAP_SETGID (root has them), and nothing else: the agent's
// other threads keep its own credentials.

// ErrPermission says that the agent may not act as the JVM's user: it runs
// as another user without CAP_SETUID and CAP_SETGID.
var ErrPermission = errors.New("the agent may not act as the JVM's user")

// asUser runs fn with uid and gid as its effective, real and saved ids
// (and gid as its only group), on a thread of its own. When they are the
// agent's own already, fn runs where it is.
func asUser(uid, gid uint32, fn func() error) error {
	if uint32(os.Geteuid()) == uid && uint32(os.Getegid()) == gid {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine.
		runtime.LockOSThread()
		done <- switchThenRun(uid, gid, fn)
	}()
	return <-done
}

// switchThenRun changes the calling thread's credentials (it must be
// locked to it) and runs fn. The order matters: groups and gids first,
// while the thread still has CAP_SETGID (a change of uid away from root
// drops its capabilities).
func switchThenRun(uid, gid uint32, fn func() error) error {
	// Raw system calls: syscall.Setresuid and its kind change every
	// thread of the process (they are made for a whole program).
	groups := [1]uint32{gid}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return credError("groups", gid, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return credError("gid", gid, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return credError("uid", uid, e)
	}
	return fn()
}

func credError(what string, id uint32, e syscall.Errno) error {
	if e == syscall.EPERM {
		return fmt.Errorf("%w: cannot take the JVM's %s %d as uid %d (it needs CAP_SETUID and CAP_SETGID): %w",
			ErrPermission, what, id, os.Geteuid(), e)
	}
	return fmt.Errorf("cannot take the JVM's %s %d: %w", what, id, e)
}
