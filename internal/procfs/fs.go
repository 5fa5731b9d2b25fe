// Package procfs reads Linux /proc from a configurable root, cheaply: files
// of a watched process are opened once and re-read with pread, buffers are
// the caller's, and parsers work on bytes without allocating. Every file but
// stat and cmdline is optional: a missing or unreadable one is reported as an
// error the caller may count and ignore. A process that vanished gives an
// error for which IsGone is true.
package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UserHZ is the unit of the clock-tick fields of /proc (USER_HZ), which is
// 100 on every Linux architecture that Hadoop runs on.
const UserHZ = 100

// FS is a /proc mount, real or a fixture tree.
type FS struct {
	root string
}

// NewFS returns the /proc tree at root ("/proc" when empty).
func NewFS(root string) FS {
	if root == "" {
		root = "/proc"
	}
	return FS{root: filepath.Clean(root)}
}

// Root is the directory the FS reads.
func (f FS) Root() string { return f.root }

// Path joins elements under the root.
func (f FS) Path(elem ...string) string {
	return filepath.Join(append([]string{f.root}, elem...)...)
}

// PidPath is <root>/<pid>/<file>.
func (f FS) PidPath(pid int32, file string) string {
	return f.root + "/" + strconv.Itoa(int(pid)) + "/" + file
}

// IsGone reports whether err means that the process no longer exists.
func IsGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// ReadFile reads a whole file into buf (grown as needed) and returns it.
func ReadFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf[:0], &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return readAll(fd, path, buf, false)
}

func readAll(fd int, path string, buf []byte, once bool) ([]byte, error) {
	buf = buf[:0]
	if cap(buf) < 512 {
		buf = make([]byte, 0, 4096)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if once && len(buf) < cap(buf) {
			// A short read is the end of a file made in one piece (see
			// onePiece). Reading again to see the end would make the kernel
			// generate the whole file a second time: a seq_file read at an
			// offset starts over and skips.
			return buf, nil
		}
	}
}

// onePiece are the per-process files whose read returns all of the file
// when the buffer has room (single_open seq_files, and cmdline and environ,
// whose readers loop until the buffer is full): a short read of them is
// their end. Files of many records (maps, smaps) come a page at a time.
var onePiece = map[string]bool{"stat": true, "status": true, "io": true, "schedstat": true, "statm": true,
	"cmdline": true, "environ": true, "cgroup": true, "smaps_rollup": true, "limits": true, "comm": true}

// File names a per-process file that a Proc can hold open.
type File uint8

// The per-process files read every tick.
const (
	FileStat File = iota
	FileStatus
	FileIO
	FileSchedstat
	FileStatm
	FileSmapsRollup
	fileCount
)

var fileNames = [fileCount]string{"stat", "status", "io", "schedstat", "statm", "smaps_rollup"}

func (f File) String() string { return fileNames[f] }

// Proc is one process directory whose files are held open between reads: a
// held file of a process that exited reads as ESRCH even if the pid was
// reused, so a Proc never reads another process's data.
type Proc struct {
	PID int32
	fs  FS
	// fds holds fd+1 for each open file (descriptor 0 is a valid one when
	// standard input is closed), or notOpened, or unavailable.
	fds [fileCount]int32
}

const (
	notOpened   = 0
	unavailable = -1 // cannot be opened: do not retry
)

// OpenProc returns a handle on pid's directory. Nothing is opened yet.
func (f FS) OpenProc(pid int32) *Proc {
	return &Proc{PID: pid, fs: f}
}

// Read returns the content of file, read into buf. Files are opened on the
// first read and kept open; a file that cannot be opened (permissions, an
// older kernel) is not tried again: the first read says why, in an error
// that wraps ErrUnavailable, and later ones return ErrUnavailable itself.
func (p *Proc) Read(file File, buf []byte) ([]byte, error) {
	fd := p.fds[file] - 1
	path := ""
	switch p.fds[file] {
	case unavailable:
		return buf[:0], ErrUnavailable
	case notOpened:
		nfd, err := p.fs.openPid(p.PID, fileNames[file])
		if err != nil {
			path = p.fs.PidPath(p.PID, fileNames[file])
			if err == unix.ENOENT || err == unix.ESRCH {
				// The whole process may be gone: let the caller know.
				if _, serr := os.Stat(p.fs.PidPath(p.PID, "")); serr != nil {
					return buf[:0], &fs.PathError{Op: "open", Path: path, Err: err}
				}
			}
			p.fds[file] = unavailable
			return buf[:0], fmt.Errorf("%w: %s: %v", ErrUnavailable, path, err)
		}
		fd = int32(nfd)
		p.fds[file] = fd + 1
	}
	b, err := readAll(int(fd), "", buf, true) // every File is one piece
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			if path == "" {
				path = p.fs.PidPath(p.PID, fileNames[file])
			}
			pe.Path = path
		}
	}
	return b, err
}

// OpenProcFile reads file of pid into buf and returns a handle on pid's
// directory that holds it open (the next Read of file preads it again),
// or the error of its open or read, as ReadPidFile does (then no handle).
func (f FS) OpenProcFile(pid int32, file File, buf []byte) (*Proc, []byte, error) {
	name := fileNames[file]
	fd, err := f.openPid(pid, name)
	if err != nil {
		return nil, buf[:0], &fs.PathError{Op: "open", Path: f.PidPath(pid, name), Err: err}
	}
	b, err := f.readPid(fd, pid, name, buf)
	if err != nil {
		unix.Close(fd)
		return nil, b, err
	}
	p := &Proc{PID: pid, fs: f}
	p.fds[file] = int32(fd) + 1
	return p, b, nil
}

// Release closes the held files of a process that is still alive and keeps
// the handle: its next reads open them again, and a file found unavailable
// is not tried again. (Closing a file of a process that is gone makes the
// closing process free its /proc entries; closed while it lives, they are
// freed by its exit.)
func (p *Proc) Release() {
	for i, fd := range p.fds {
		if fd > 0 {
			unix.Close(int(fd - 1))
			p.fds[i] = notOpened
		}
	}
}

// Owner is the owner of <root>/<pid> (a stat of the directory: no read of
// status): the kernel makes it the process's effective uid (a directory's
// owner is not made root's for a process that is not dumpable, as its
// files' are), the USER that ps shows.
func (f FS) Owner(pid int32) (uint32, error) {
	var b [256]byte
	p := f.pidPathZ(b[:0], pid, "")
	var st unix.Stat_t
	for {
		_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, atFDCWD, uintptr(unsafe.Pointer(&p[0])),
			uintptr(unsafe.Pointer(&st)), 0, 0, 0)
		switch errno {
		case 0:
			return st.Uid, nil
		case unix.EINTR:
			continue
		}
		return 0, &fs.PathError{Op: "stat", Path: f.PidPath(pid, ""), Err: errno}
	}
}

// Close closes every held file.
func (p *Proc) Close() {
	for i, fd := range p.fds {
		if fd > 0 {
			unix.Close(int(fd - 1))
		}
		p.fds[i] = notOpened
	}
}

// ErrUnavailable says that an optional file cannot be read for this process
// (it does not exist on this kernel, or permission is denied).
var ErrUnavailable = errors.New("file unavailable")

// ReadPidFile reads <root>/<pid>/<file> once, without holding it open.
func (f FS) ReadPidFile(pid int32, file string, buf []byte) ([]byte, error) {
	fd, err := f.openPid(pid, file)
	if err != nil {
		return buf[:0], &fs.PathError{Op: "open", Path: f.PidPath(pid, file), Err: err}
	}
	defer unix.Close(fd)
	return f.readPid(fd, pid, file, buf)
}

// readPid reads fd, pid's file open, into buf; an error names the file's
// path.
func (f FS) readPid(fd int, pid int32, file string, buf []byte) ([]byte, error) {
	b, err := readAll(fd, "", buf, onePiece[file])
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = f.PidPath(pid, file)
		}
	}
	return b, err
}

// atFDCWD is AT_FDCWD as a system call argument.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

// openPid opens <root>/<pid>/<file> read-only with the path built on the
// stack: the opens of every new process's files allocate nothing (the
// path is made as a string only for an error).
func (f FS) openPid(pid int32, file string) (int, error) {
	var b [256]byte
	p := f.pidPathZ(b[:0], pid, file)
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(&p[0])),
			uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, errno
	}
}

// pidPathZ appends <root>/<pid>, and /<file> unless file is "", with a
// NUL for a system call, to b (on the caller's stack).
func (f FS) pidPathZ(b []byte, pid int32, file string) []byte {
	b = append(b, f.root...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(pid), 10)
	if file != "" {
		b = append(b, '/')
		b = append(b, file...)
	}
	return append(b, 0)
}

// openPidless opens <root>/<file>, a file of the whole system.
func (f FS) openPidless(file string) (int, error) {
	return unix.Open(f.root+"/"+file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// OwnPIDNamespace reports whether the tree is a procfs of this process's
// pid namespace (its "self" names this process): then the pids it lists
// are the ones the kernel's other interfaces (taskstats, loadavg's last
// pid) use here.
func (f FS) OwnPIDNamespace() bool {
	s, err := os.Readlink(f.root + "/self")
	return err == nil && s == strconv.Itoa(os.Getpid())
}

// Readlink reads the symbolic link <root>/<pid>/<name> (cwd, exe).
func (f FS) Readlink(pid int32, name string) (string, error) {
	return os.Readlink(f.PidPath(pid, name))
}

// Gone reports whether <root>/<pid> no longer exists: the process has been
// reaped (a zombie still has its directory). For the agent's own /proc it
// asks the kernel directly (kill with signal 0), which costs no path lookup.
func (f FS) Gone(pid int32) bool {
	if f.root == "/proc" {
		return pid > 0 && unix.Kill(int(pid), 0) == unix.ESRCH
	}
	var st unix.Stat_t
	err := unix.Stat(f.root+"/"+strconv.Itoa(int(pid)), &st)
	return err == unix.ENOENT
}
