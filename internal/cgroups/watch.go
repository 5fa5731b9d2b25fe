package cgroups

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// The NodeManager removes a container's cgroup a moment after its last
// process exits, before an agent's tick could read its memory.events. On
// cgroup v2 the kernel marks memory.events modified at each event (a
// kernfs notification, seen by inotify as IN_MODIFY), so the agent reads
// it when it changes: one inotify descriptor for every container, read by
// one goroutine through the runtime's poller, which reads the container's
// file at once and keeps its last oom_kill. Nothing is read at ticks.
// Watching costs one inotify watch per container with a memory limit
// (fs.inotify.max_user_watches, 8192 and more by default, bounds them:
// beyond it Watch fails, and is counted by the caller).

// OOMWatcher counts OOM kills in cgroup v2 containers. Its methods are
// safe for concurrent use.
type OOMWatcher struct {
	fd int      // the inotify descriptor, non-blocking
	f  *os.File // fd, in the runtime's poller (never f.Fd(): that makes it blocking)

	mu   sync.Mutex
	byWD map[int32]*Watch
	done chan struct{}
}

// Watch is one container's memory.events.
type Watch struct {
	w     *OOMWatcher
	path  string
	wd    int32
	count func([]byte) (uint64, error) // what is counted in the file

	mu      sync.Mutex
	kills   uint64
	err     error // the last read, if it failed while the file was there
	removed bool  // the watch is gone (IN_IGNORED: on tmpfs at once; cgroupfs may never say)
}

// NewOOMWatcher starts watching (no container yet).
func NewOOMWatcher() (*OOMWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("cannot watch memory.events: inotify: %w", err)
	}
	w := &OOMWatcher{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), byWD: map[int32]*Watch{}, done: make(chan struct{})}
	go w.run()
	return w, nil
}

// Watch starts counting the OOM kills of the v2 cgroup at dir (its
// memory.events, read now and at each change). Two watches of one cgroup
// are one.
func (w *OOMWatcher) Watch(dir string) (*Watch, error) {
	return w.watchFile(filepath.Join(dir, "memory.events"), oomKills)
}

// oomKills is memory.events' oom_kill.
func oomKills(b []byte) (uint64, error) {
	ev, err := ParseMemoryEvents(b)
	return ev.OOMKill, err
}

// watchFile watches a cgroup file whose count comes from count.
func (w *OOMWatcher) watchFile(path string, count func([]byte) (uint64, error)) (*Watch, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byWD == nil {
		return nil, errors.New("the OOM watcher is closed")
	}
	wd, err := unix.InotifyAddWatch(w.fd, path, unix.IN_MODIFY)
	if err != nil {
		return nil, fmt.Errorf("cannot watch %s: %w", path, err)
	}
	cw := w.byWD[int32(wd)]
	if cw == nil { // a second watch of the same file shares its descriptor
		cw = &Watch{w: w, path: path, wd: int32(wd), count: count}
		w.byWD[int32(wd)] = cw
	}
	cw.read()
	return cw, nil
}

// run reads the inotify events until Close.
func (w *OOMWatcher) run() {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || errors.Is(err, io.EOF) {
				return
			}
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent + nameLen
			w.mu.Lock()
			cw := w.byWD[wd]
			if cw != nil && mask&unix.IN_IGNORED != 0 {
				delete(w.byWD, wd)
			}
			w.mu.Unlock()
			if cw == nil {
				continue
			}
			if mask&unix.IN_IGNORED != 0 {
				cw.mu.Lock()
				cw.removed = true
				cw.mu.Unlock()
				continue
			}
			cw.read()
		}
	}
}

// read reads the file and keeps the highest count seen (a cgroup's
// counters never go back).
func (cw *Watch) read() {
	b, err := os.ReadFile(cw.path)
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if err != nil {
		// ENODEV, ENOENT: removed; the count stays what it was.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENODEV) {
			cw.err = err
		}
		return
	}
	v, err := cw.count(b)
	if err != nil {
		cw.err = err
		return
	}
	cw.kills, cw.err = max(cw.kills, v), nil
}

// Kills is the count of OOM kills seen in the cgroup, read once more if
// it is still there; err is the last read that failed (nil if none).
func (cw *Watch) Kills() (kills uint64, err error) {
	cw.mu.Lock()
	removed := cw.removed
	cw.mu.Unlock()
	if !removed {
		cw.read()
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.kills, cw.err
}

// Seen is the count read so far (when the kernel marked the file
// modified, or when the watch began), without reading again.
func (cw *Watch) Seen() uint64 {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.kills
}

// Close stops watching the cgroup.
func (cw *Watch) Close() {
	w := cw.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byWD == nil || w.byWD[cw.wd] != cw {
		return
	}
	delete(w.byWD, cw.wd)
	unix.InotifyRmWatch(w.fd, uint32(cw.wd))
}

// Watching is how many cgroups are watched now.
func (w *OOMWatcher) Watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byWD)
}

// Close stops the watcher and every watch.
func (w *OOMWatcher) Close() error {
	w.mu.Lock()
	if w.byWD == nil {
		w.mu.Unlock()
		return nil
	}
	w.byWD = nil
	w.mu.Unlock()
	err := w.f.Close()
	<-w.done
	return err
}
