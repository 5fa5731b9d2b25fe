package procfs

import (
	"encoding/binary"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// PidEntry is one numeric entry of the /proc directory. Ino is the inode
// number the kernel gives /proc/<pid>: it changes when the pid is reused by a
// new process (a new inode is made for it), so it tells the caller, for free,
// which known pids must be looked at again.
type PidEntry struct {
	PID int32
	Ino uint64
}

// Lister lists the pids under /proc with one directory held open (read
// from its start again at every listing) and one reused buffer.
//
// On a procfs of its own pid namespace it lists only when the listing can
// have changed: /proc/loadavg gives the last pid the kernel allocated and
// the number of threads on the system; while both hold, no process or thread
// has been created (that allocates a pid) or reaped (that lowers the count;
// one reaped and one created moves the pid), and the last listing is
// returned again without reading the directory, which costs a dentry lookup
// per process.
type Lister struct {
	fs  FS
	buf []byte
	fd  int // the directory, +1 (0: not open)

	watch  watchState
	loadFD int       // /proc/loadavg, held open
	load   [128]byte // its content
	mark   LoadMark  // at the last listing
	last   []PidEntry
	reused uint64
}

type watchState uint8

const (
	watchUnknown watchState = iota
	watchOn
	watchOff
)

// NewLister returns a Lister for f. Close releases its directory.
func (f FS) NewLister() *Lister { return &Lister{fs: f, buf: make([]byte, 32<<10)} }

// Close closes the directory the Lister holds.
func (l *Lister) Close() error {
	if l.watch == watchOn {
		unix.Close(l.loadFD)
		l.watch = watchUnknown
	}
	l.last = l.last[:0]
	if l.fd == 0 {
		return nil
	}
	err := unix.Close(l.fd - 1)
	l.fd = 0
	return err
}

// Reused is how many listings were the last one again (see Lister).
func (l *Lister) Reused() uint64 { return l.reused }

// LoadMark is what /proc/loadavg says of tasks: the number of threads on
// the system and the last pid allocated in the reader's pid namespace.
type LoadMark struct {
	Threads uint64
	LastPID uint64
}

// ParseLoadavg reads the tasks' figures of /proc/loadavg
// ("0.52 0.58 0.59 2/1320 123456").
func ParseLoadavg(b []byte) (LoadMark, error) {
	rest := b
	var tok []byte
	for i := 0; i < 4; i++ {
		if tok, rest = nextField(rest); len(tok) == 0 {
			return LoadMark{}, fmt.Errorf("cannot parse loadavg %.60q: want 5 fields", b)
		}
	}
	slash := -1
	for i, c := range tok {
		if c == '/' {
			slash = i
			break
		}
	}
	var m LoadMark
	var ok1, ok2 bool
	if slash > 0 {
		m.Threads, ok1 = parseUint(tok[slash+1:])
	}
	tok, _ = nextField(rest)
	m.LastPID, ok2 = parseUint(tok)
	if !ok1 || !ok2 {
		return LoadMark{}, fmt.Errorf("cannot parse loadavg %.60q: want running/threads and a last pid", b)
	}
	return m, nil
}

// loadMark reads /proc/loadavg; false when the tree is not of this
// process's pid namespace (the last pid would be another namespace's) or
// the file cannot be read.
func (l *Lister) loadMark() (LoadMark, bool) {
	if l.watch == watchUnknown {
		l.watch = watchOff
		if l.fs.OwnPIDNamespace() {
			if fd, err := l.fs.openPidless("loadavg"); err == nil {
				l.loadFD, l.watch = fd, watchOn
			}
		}
	}
	if l.watch != watchOn {
		return LoadMark{}, false
	}
	n, err := unix.Pread(l.loadFD, l.load[:], 0)
	if err != nil || n <= 0 {
		return LoadMark{}, false
	}
	m, err := ParseLoadavg(l.load[:n])
	return m, err == nil
}

// List appends every pid entry to dst and returns it.
func (l *Lister) List(dst []PidEntry) ([]PidEntry, error) {
	// Read before the directory: a process made between the two shows in
	// this listing and moves the mark the next time.
	mark, watched := l.loadMark()
	if watched && len(l.last) > 0 && mark == l.mark {
		l.reused++
		return append(dst, l.last...), nil
	}
	n := len(dst)
	dst, err := l.list(dst)
	l.last = l.last[:0]
	if err == nil && watched {
		l.last = append(l.last, dst[n:]...)
		l.mark = mark
	}
	return dst, err
}

// list reads the directory from its start.
func (l *Lister) list(dst []PidEntry) ([]PidEntry, error) {
	if l.fd != 0 {
		if _, err := unix.Seek(l.fd-1, 0, io.SeekStart); err != nil {
			l.Close()
		}
	}
	if l.fd == 0 {
		fd, err := unix.Open(l.fs.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return dst, fmt.Errorf("cannot open %s: %w", l.fs.root, err)
		}
		l.fd = fd + 1
	}
	fd := l.fd - 1
	for {
		n, err := unix.Getdents(fd, l.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			l.Close()
			return dst, fmt.Errorf("cannot list %s: %w", l.fs.root, err)
		}
		if n <= 0 {
			return dst, nil
		}
		dst = parseDirents(l.buf[:n], dst)
	}
}

// parseDirents decodes linux_dirent64 records: ino u64, off s64, reclen u16,
// type u8, name NUL-terminated.
func parseDirents(b []byte, dst []PidEntry) []PidEntry {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			return dst
		}
		ino := binary.NativeEndian.Uint64(b[0:8])
		name := b[19:reclen]
		pid, ok := 0, len(name) > 0 && name[0] >= '1' && name[0] <= '9'
		for _, c := range name {
			if c == 0 {
				break
			}
			if c < '0' || c > '9' {
				ok = false
				break
			}
			if pid = pid*10 + int(c-'0'); pid > 1<<31-1 {
				ok = false
				break
			}
		}
		if ok {
			dst = append(dst, PidEntry{PID: int32(pid), Ino: ino})
		}
		b = b[reclen:]
	}
	return dst
}
