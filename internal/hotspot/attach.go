// Package hotspot asks a running HotSpot JVM for its threads' stacks
// through the JVM's own dynamic attach mechanism, in pure Go: no JVM agent,
// no native library, nothing installed on the node or loaded into the JVM.
//
// The protocol (OpenJDK's attachListener_linux.cpp and the JDK's
// sun.tools.attach.VirtualMachineImpl for Linux):
//
//   - A JVM that listens has a socket /tmp/.java_pid<pid>, in its own /tmp
//     (reached through /proc/<pid>/root/tmp, whatever its mount
//     namespace) and named by the pid it has in its own pid namespace
//     (NSpid). It is owned by the JVM's effective uid, mode 0600.
//   - A JVM that does not listen yet is asked to: a file .attach_pid<pid>
//     owned by its user (or root) in its working directory (or its /tmp),
//     then SIGQUIT. Its signal handler sees the file and starts the
//     listener instead of printing a thread dump. A process that does not
//     catch SIGQUIT (a JVM started with -Xrs, or whose handlers are not
//     installed yet) dies of it: the signal is sent only to a process whose
//     /proc/<pid>/status says it catches it.
//   - A client connects with the JVM's effective uid and gid (SO_PEERCRED,
//     see creds.go), writes "1\0<command>\0<arg>\0<arg>\0<arg>\0" (protocol
//     version 1), and reads a status line ("0\n" for success) and the
//     command's output until the JVM closes the connection. One connection
//     serves one command.
//
// The command used here is threaddump (what jstack sends), without -l:
// listing the locked synchronizers walks the heap, which took tens of
// seconds on large heaps.
package hotspot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/procfs"
)

// Errors of Attach and Execute; each is wrapped with the details.
var (
	// ErrNotAttachable: the process cannot be attached to without harm,
	// or is not a JVM that listens.
	ErrNotAttachable = errors.New("the process cannot be attached to")
	// ErrWouldKill: it does not catch SIGQUIT (a JVM started with -Xrs,
	// or not yet started), so the signal that starts the attach listener
	// would kill it. It is not sent.
	ErrWouldKill = fmt.Errorf("%w: it does not catch SIGQUIT (a JVM started with -Xrs, or not yet started), which would kill it", ErrNotAttachable)
	// ErrNoListener: the JVM did not start its attach listener in time.
	ErrNoListener = fmt.Errorf("%w: no attach listener", ErrNotAttachable)
	// ErrGone: the process exited (or its pid is another process's now).
	ErrGone = errors.New("the process exited")
	// ErrCommand: the JVM answered the command with an error status.
	ErrCommand = errors.New("the JVM refused the command")
	// ErrTooLarge: the answer was longer than Options.MaxOutput.
	ErrTooLarge = errors.New("the JVM's answer is too large")
)

// Options configure Attach.
type Options struct {
	// ProcFS is the /proc of the agent's view (default "/proc"); the JVM's
	// files are reached through its <pid>/root and <pid>/cwd.
	ProcFS string
	// StartTimeout is how long a JVM that does not listen yet is given to
	// start its attach listener after SIGQUIT (default 5 s; the JDK's own
	// tools give 10).
	StartTimeout time.Duration
	// CommandTimeout bounds one command, connection to last byte (default
	// 10 s), within the context's deadline.
	CommandTimeout time.Duration
	// MaxOutput bounds a command's answer (default 16 MiB: a thread dump
	// of 2,000 threads of 50 frames is about 10 MiB).
	MaxOutput int
}

func (o *Options) defaults() {
	if o.ProcFS == "" {
		o.ProcFS = "/proc"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 5 * time.Second
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 10 * time.Second
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = 16 << 20
	}
}

// VM is a JVM that listens for attach commands.
type VM struct {
	PID    int32
	Status Status
	// Triggered says that Attach had to start the JVM's listener
	// (SIGQUIT); otherwise it was listening already.
	Triggered bool
	start     uint64 // the process's start time (ticks after boot): its identity with the pid
	socket    string
	o         Options
}

// Attach finds the attach socket of JVM pid, or has the JVM start its
// listener, and returns the VM to send commands to. It never signals a
// process that does not catch SIGQUIT (ErrWouldKill).
func Attach(ctx context.Context, pid int32, o Options) (*VM, error) {
	o.defaults()
	fsys := procfs.NewFS(o.ProcFS)
	vm := &VM{PID: pid, o: o}
	var err error
	if vm.start, err = startTime(fsys, pid); err != nil {
		return nil, err
	}
	if vm.Status, err = readStatus(fsys, pid); err != nil {
		return nil, err
	}
	vm.socket = fsys.PidPath(pid, "root/tmp/.java_pid"+strconv.Itoa(int(vm.Status.NSPID)))
	if ok, err := vm.listening(); err != nil || ok {
		return vm, err
	}
	if !vm.Status.CatchesQuit || vm.Status.IgnoresQuit {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrWouldKill)
	}
	if err := vm.trigger(ctx, fsys); err != nil {
		return nil, err
	}
	vm.Triggered = true
	return vm, nil
}

func startTime(fsys procfs.FS, pid int32) (uint64, error) {
	var buf [1024]byte
	b, err := fsys.ReadPidFile(pid, "stat", buf[:])
	if err != nil {
		if procfs.IsGone(err) {
			return 0, fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		return 0, fmt.Errorf("cannot read the stat of pid %d: %w", pid, err)
	}
	var st procfs.Stat
	if err := procfs.ParseStat(b, &st); err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return st.StartTime, nil
}

func readStatus(fsys procfs.FS, pid int32) (Status, error) {
	var buf [4096]byte
	b, err := fsys.ReadPidFile(pid, "status", buf[:])
	if err != nil {
		if procfs.IsGone(err) {
			return Status{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		return Status{}, fmt.Errorf("cannot read the status of pid %d: %w", pid, err)
	}
	return ParseStatus(b, pid)
}

// Alive reports whether the JVM is still the process it was (its pid not
// reused).
func (vm *VM) Alive() bool {
	st, err := startTime(procfs.NewFS(vm.o.ProcFS), vm.PID)
	return err == nil && st == vm.start
}

// gone is ErrGone if the JVM exited, else err. A JVM that fails a
// connection (refuses it, closes it without an answer, or has no socket
// any more) may be exiting: its listener stops before the process is gone.
// It is given a second to go.
func (vm *VM) gone(err error) error {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !vm.Alive() {
			return fmt.Errorf("pid %d: %w (%v)", vm.PID, ErrGone, err)
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// listening reports whether the JVM's socket is there. A file at its
// path that is not a socket of the JVM's user, closed to others, is
// refused: another user could have put it in a shared /tmp.
func (vm *VM) listening() (bool, error) {
	fi, err := os.Lstat(vm.socket)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if !vm.Alive() {
				return false, fmt.Errorf("pid %d: %w", vm.PID, ErrGone)
			}
			return false, nil
		}
		return false, fmt.Errorf("cannot look for the attach socket of pid %d: %w", vm.PID, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode().Type() != fs.ModeSocket:
		return false, fmt.Errorf("pid %d: %w: %s is not a socket", vm.PID, ErrNotAttachable, vm.socket)
	case !ok || st.Uid != vm.Status.EUID:
		return false, fmt.Errorf("pid %d: %w: %s is not owned by the JVM's uid %d", vm.PID, ErrNotAttachable, vm.socket, vm.Status.EUID)
	case fi.Mode().Perm()&0o077 != 0:
		return false, fmt.Errorf("pid %d: %w: %s is open to other users (%v)", vm.PID, ErrNotAttachable, vm.socket, fi.Mode().Perm())
	}
	return true, nil
}

// trigger has the JVM start its listener: .attach_pid<pid> in its working
// directory (else its /tmp), as its user, then SIGQUIT, and waits for the
// socket. The file is removed whatever happens.
func (vm *VM) trigger(ctx context.Context, fsys procfs.FS) error {
	name := ".attach_pid" + strconv.Itoa(int(vm.Status.NSPID))
	var file string
	err := asUser(vm.Status.EUID, vm.Status.EGID, func() error {
		var errs []error
		for _, dir := range []string{"cwd", "root/tmp"} {
			p := fsys.PidPath(vm.PID, dir+"/"+name)
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err == nil {
				unix.Close(fd)
				file = p
				// Only now: without the file the JVM would print a
				// thread dump to its standard output.
				return vm.quit()
			}
			errs = append(errs, fmt.Errorf("cannot create %s: %w", p, err))
		}
		return errors.Join(errs...)
	})
	if file != "" {
		defer asUser(vm.Status.EUID, vm.Status.EGID, func() error { return unix.Unlink(file) })
	}
	if err != nil {
		return vm.gone(fmt.Errorf("cannot ask pid %d to start its attach listener: %w", vm.PID, err))
	}
	deadline := time.Now().Add(vm.o.StartTimeout)
	resent := false
	for wait := 20 * time.Millisecond; ; wait = min(wait*3/2, 500*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the attach listener of pid %d: %w", vm.PID, ctx.Err())
		case <-time.After(wait):
		}
		ok, err := vm.listening()
		if err != nil || ok {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("pid %d: %w: it did not start one within %s", vm.PID, ErrNoListener, vm.o.StartTimeout)
		}
		if !resent && left < vm.o.StartTimeout/2 {
			// The JDK's tools send it again half-way: a signal that came
			// while the JVM was busy starting may have been merged.
			resent = true
			st, err := readStatus(fsys, vm.PID)
			if err != nil {
				return vm.gone(err)
			}
			if !st.CatchesQuit || st.IgnoresQuit {
				return fmt.Errorf("pid %d: %w", vm.PID, ErrWouldKill)
			}
			if err := asUser(vm.Status.EUID, vm.Status.EGID, vm.quit); err != nil {
				return vm.gone(err)
			}
		}
	}
}

// quit sends SIGQUIT to the JVM, if it is still the process it was.
func (vm *VM) quit() error {
	if !vm.Alive() {
		return fmt.Errorf("pid %d: %w", vm.PID, ErrGone)
	}
	if err := unix.Kill(int(vm.PID), unix.SIGQUIT); err != nil {
		return fmt.Errorf("cannot send SIGQUIT to pid %d: %w", vm.PID, err)
	}
	return nil
}

// connect opens a connection to the JVM's listener as the JVM's user.
func (vm *VM) connect() (net.Conn, error) {
	var fd int
	err := asUser(vm.Status.EUID, vm.Status.EGID, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cannot make a socket: %w", err)
		}
		for {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: vm.socket})
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("cannot connect to %s: %w", vm.socket, err)
		}
		return nil
	})
	if err != nil {
		return nil, vm.gone(err)
	}
	f := os.NewFile(uintptr(fd), vm.socket)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("cannot use the connection to %s: %w", vm.socket, err)
	}
	return c, nil
}

// Execute sends one command with up to three arguments and appends its
// output (after the status line) to dst. A status other than 0 is an
// error wrapping ErrCommand, with the first line the JVM wrote.
func (vm *VM) Execute(ctx context.Context, dst []byte, cmd string, args ...string) ([]byte, error) {
	if len(args) > 3 {
		return dst, fmt.Errorf("a command takes at most 3 arguments, not %d", len(args))
	}
	c, err := vm.connect()
	if err != nil {
		return dst, err
	}
	defer c.Close()
	deadline := time.Now().Add(vm.o.CommandTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := make([]byte, 0, 64)
	req = append(req, "1\x00"...)
	req = append(req, cmd...)
	req = append(req, 0)
	for i := 0; i < 3; i++ {
		if i < len(args) {
			req = append(req, args[i]...)
		}
		req = append(req, 0)
	}
	if _, err := c.Write(req); err != nil {
		return dst, vm.gone(fmt.Errorf("cannot send %s to pid %d: %w", cmd, vm.PID, err))
	}
	start := len(dst)
	dst, err = readLimited(c, dst, vm.o.MaxOutput+32)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return dst[:start], vm.gone(fmt.Errorf("cannot read the answer to %s from pid %d: %w", cmd, vm.PID, err))
	}
	out := dst[start:]
	nl := bytes.IndexByte(out, '\n')
	if nl < 0 {
		return dst[:start], vm.gone(fmt.Errorf("pid %d answered %s with no status line (%d bytes)", vm.PID, cmd, len(out)))
	}
	code, err := strconv.Atoi(string(bytes.TrimSpace(out[:nl])))
	if err != nil {
		return dst[:start], fmt.Errorf("pid %d answered %s with status %.20q: %w", vm.PID, cmd, out[:nl], ErrCommand)
	}
	body := out[nl+1:]
	if code != 0 {
		first, _, _ := bytes.Cut(body, []byte{'\n'})
		if code == 101 {
			first = []byte("attach protocol version 1 is not spoken")
		}
		return dst[:start], fmt.Errorf("pid %d answered %s with %d: %.200s: %w", vm.PID, cmd, code, first, ErrCommand)
	}
	if len(body) > vm.o.MaxOutput {
		return dst[:start], fmt.Errorf("pid %d answered %s with more than %d bytes: %w", vm.PID, cmd, vm.o.MaxOutput, ErrTooLarge)
	}
	copy(dst[start:], body)
	return dst[:start+len(body)], nil
}

// readLimited appends what r has until EOF to dst, failing with
// ErrTooLarge beyond max bytes.
func readLimited(r io.Reader, dst []byte, max int) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if left := max + 1 - (len(dst) - start); len(room) > left {
			room = room[:left]
		}
		n, err := r.Read(room)
		dst = dst[:len(dst)+n]
		if len(dst)-start > max {
			return dst, ErrTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// ThreadDump asks for the stacks of every thread (jstack's command,
// without the locked synchronizers) and appends the dump to dst. Parse it
// with ParseThreadDump.
func (vm *VM) ThreadDump(ctx context.Context, dst []byte) ([]byte, error) {
	return vm.Execute(ctx, dst, "threaddump")
}
