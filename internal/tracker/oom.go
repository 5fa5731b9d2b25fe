package tracker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/cgroups"
)

// The kernel's OOM killer in a container's memory cgroup (YARN's strict
// memory enforcement, yarn.nodemanager.resource.memory.enforced, limits
// each container's cgroup to its size): the JVM it kills dies of SIGKILL,
// which alone reads as a kill -9; the cgroup's oom_kill count tells them
// apart. The NodeManager removes the cgroup a few milliseconds after the
// container's last process exits, long before an agent's tick could read
// the count, so the agent watches it the way cgroup v1 offers: an eventfd
// registered on memory.oom_control (cgroup.event_control), which the
// kernel signals at each OOM of the cgroup and once more, a moment after
// the cgroup is removed (a work item), and which outlives it. A second
// eventfd, a threshold on memory.usage_in_bytes that is never reached,
// is signalled only at the removal, after the first (registered before
// it: the kernel removes the later registered first). Nothing is read at
// ticks: the count is taken when the container's last process is gone,
// from memory.oom_control while the cgroup is there, else from the
// eventfd, less the removal's signal when the marker shows it came (the
// marker is waited for up to removalWait when there were signals). Only
// cgroups with a memory limit are watched (four descriptors each). On
// cgroup v2, memory.events has the count and no eventfds: it is watched
// with inotify (oomEvents, package cgroups).

// oomWatch is one container's registration (cgroup v1).
type oomWatch struct {
	control, usage *os.File // memory.oom_control, memory.usage_in_bytes
	efd, marker    int      // the eventfds: OOMs and removal, removal only
}

// removalWait bounds the wait for the marker's removal signal.
const removalWait = 20 * time.Millisecond

// oomCounter counts the kernel's OOM kills in one container's memory
// cgroup, from when the container was found to when its last process is
// gone (one way per cgroup version: oomWatch for v1, oomEvents for v2).
type oomCounter interface {
	// kills is the count: called once, when the container's last process
	// is gone (its cgroup may be removed by then).
	kills() uint32
	// close releases what the count was watched with.
	close()
}

// watchOOM starts counting the OOM kills of u's container, in the memory
// cgroup found from the cgroup file of a member (package cgroups: v1's
// memory controller, else v2's unified hierarchy), if it has a memory
// limit (nil: none to count).
func (o *outcomes) watchOOM(u *unit) oomCounter {
	if o.cgroupRoot == "-" {
		return nil
	}
	var path cgroups.Path
	found := false
	for _, p := range u.members {
		if p.t == nil || p.t.vanished {
			continue
		}
		b, err := o.fs.ReadPidFile(p.pid, "cgroup", o.buf)
		o.buf = b
		if err != nil {
			continue
		}
		path, found = cgroups.ContainerPath(b, o.hier.Names(), u.containerID)
		break
	}
	if !found {
		return nil
	}
	dir := path.Dir(o.cgroupRoot)
	if limited, err := cgroups.HasMemoryLimit(dir, path.V2); !limited || err != nil {
		return nil // no limit: no OOM of its own
	}
	if path.V2 {
		return o.watchOOMEvents(dir)
	}
	w := &oomWatch{efd: -1, marker: -1}
	if err := w.register(dir); err != nil {
		w.close()
		o.errs.count("oom", err)
		return nil
	}
	return w
}

// oomEvents counts a cgroup v2 container's OOM kills: its memory.events,
// read by the outcomes' OOM watcher when the kernel marks it modified.
type oomEvents struct {
	w    *cgroups.Watch
	errs *readErrors
}

func (o *outcomes) watchOOMEvents(dir string) oomCounter {
	if o.oomV2 == nil {
		w, err := cgroups.NewOOMWatcher()
		if err != nil {
			o.errs.count("oom", err)
			return nil
		}
		o.oomV2 = w
	}
	w, err := o.oomV2.Watch(dir)
	if err != nil {
		o.errs.count("oom", err)
		return nil
	}
	return &oomEvents{w: w, errs: o.errs}
}

func (e *oomEvents) kills() uint32 {
	n, err := e.w.Kills()
	if err != nil {
		e.errs.count("oom", err)
	}
	return uint32(min(n, 1<<31))
}

func (e *oomEvents) close() { e.w.Close() }

// register opens the files and registers the eventfds: the marker first.
func (w *oomWatch) register(dir string) error {
	var err error
	if w.usage, err = os.Open(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return fmt.Errorf("cannot watch the OOM kills of %s: %w", dir, err)
	}
	if w.control, err = os.Open(filepath.Join(dir, "memory.oom_control")); err != nil {
		return fmt.Errorf("cannot watch the OOM kills of %s: %w", dir, err)
	}
	if w.marker, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("cannot make an eventfd for the OOM kills of %s: %w", dir, err)
	}
	if w.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("cannot make an eventfd for the OOM kills of %s: %w", dir, err)
	}
	for _, reg := range []string{
		fmt.Sprintf("%d %d %d", w.marker, w.usage.Fd(), uint64(1)<<62),
		fmt.Sprintf("%d %d", w.efd, w.control.Fd()),
	} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(reg), 0); err != nil {
			return fmt.Errorf("cannot register an eventfd for the OOM kills of %s: %w", dir, err)
		}
	}
	return nil
}

// kills takes the count of OOM kills: from memory.oom_control while the
// cgroup is there, else from the eventfd (one signal per OOM, one for the
// removal).
func (w *oomWatch) kills() uint32 {
	buf := make([]byte, 256)
	if n, _ := w.control.ReadAt(buf, 0); n > 0 { // a removed cgroup's reads fail (ENODEV)
		if v, ok := oomKillField(buf[:n]); ok {
			return v
		}
	}
	v := readEventfd(w.efd)
	if v == 0 {
		return 0
	}
	// Signals came: was one the removal's? The marker's follows it.
	fds := []unix.PollFd{{Fd: int32(w.marker), Events: unix.POLLIN}}
	unix.Poll(fds, int(removalWait.Milliseconds()))
	if readEventfd(w.marker) > 0 {
		v += readEventfd(w.efd) // the removal's, if it came since
		v--
	}
	return uint32(min(v, 1<<31))
}

// readEventfd reads an eventfd's count (0 when none or on error).
func readEventfd(fd int) uint64 {
	var b [8]byte
	if n, err := unix.Read(fd, b[:]); err != nil || n != 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(b[:])
}

// oomKillField reads "oom_kill N" of memory.oom_control.
func oomKillField(b []byte) (uint32, bool) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32)
			return uint32(n), err == nil
		}
	}
	return 0, false
}

func (w *oomWatch) close() {
	for _, f := range []*os.File{w.control, w.usage} {
		if f != nil {
			f.Close()
		}
	}
	for _, fd := range []int{w.efd, w.marker} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
