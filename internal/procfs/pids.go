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
type Lister struct {
	fs  FS
	buf []byte
	fd  int // the directory, +1 (0: not open)
}

// NewLister returns a Lister for f. Close releases its directory.
func (f FS) NewLister() *Lister { return &Lister{fs: f, buf: make([]byte, 32<<10)} }

// Close closes the directory the Lister holds.
func (l *Lister) Close() error {
	if l.fd == 0 {
		return nil
	}
	err := unix.Close(l.fd - 1)
	l.fd = 0
	return err
}

// List appends every pid entry to dst and returns it.
func (l *Lister) List(dst []PidEntry) ([]PidEntry, error) {
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
