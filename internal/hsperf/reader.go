package hsperf

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// Reader keeps one JVM's hsperfdata file open and reads its counters: the
// layout is parsed once, and each Read is one pread of the file's first
// Span bytes (a few KiB) into a buffer the Reader owns. A Reader is not safe
// for concurrent use.
type Reader struct {
	fd     int
	path   string
	layout *Layout
	buf    []byte
}

// OpenOptions restrict which files Open accepts.
type OpenOptions struct {
	// UID, when CheckUID is set, must own the file: a JVM's file belongs
	// to the JVM's user, and a file owned by anyone else is not its.
	UID      uint32
	CheckUID bool
}

// Open opens and parses the file at path. It does not follow a symbolic
// link in the last element (the directory is writable by the JVM's user),
// and takes regular files of at most MaxFileSize bytes only.
func Open(path string, o OpenOptions) (*Reader, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	r := &Reader{fd: fd, path: path}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		r.Close()
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("%w: %s is not a regular file", ErrFormat, path)
	case st.Size < PrologueSize || st.Size > MaxFileSize:
		err = fmt.Errorf("%w: %s has %d bytes", ErrFormat, path, st.Size)
	case o.CheckUID && st.Uid != o.UID:
		err = fmt.Errorf("%w: %s belongs to uid %d, not %d", ErrFormat, path, st.Uid, o.UID)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	r.buf = make([]byte, st.Size)
	if err := r.parse(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// parse reads the whole file and parses its layout.
func (r *Reader) parse() error {
	n, err := r.pread(r.buf[:cap(r.buf)])
	if err != nil {
		return err
	}
	l, err := NewLayout(r.buf[:n])
	if err != nil {
		return fmt.Errorf("%s: %w", r.path, err)
	}
	r.layout = l
	return nil
}

func (r *Reader) pread(b []byte) (int, error) {
	got := 0
	for got < len(b) {
		n, err := unix.Pread(r.fd, b[got:], int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return got, &fs.PathError{Op: "read", Path: r.path, Err: err}
		}
		if n == 0 {
			break
		}
		got += n
	}
	return got, nil
}

// Layout is the parsed layout.
func (r *Reader) Layout() *Layout { return r.layout }

// Path is the file read.
func (r *Reader) Path() string { return r.path }

// Read fills s with the counters now. When the JVM added entries since the
// layout was parsed (it does while it starts), the file is parsed again.
func (r *Reader) Read(s *Snapshot) error {
	if r.fd < 0 {
		return fs.ErrClosed
	}
	n, err := r.pread(r.buf[:r.layout.Span()])
	if err != nil {
		return err
	}
	err = r.layout.Read(r.buf[:n], s)
	if !errors.Is(err, ErrLayoutChange) {
		return err
	}
	if err := r.parse(); err != nil {
		return err
	}
	n, err = r.pread(r.buf[:r.layout.Span()])
	if err != nil {
		return err
	}
	return r.layout.Read(r.buf[:n], s)
}

// Close closes the file.
func (r *Reader) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}
