package tracker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
// cgroups with a memory limit are watched (four descriptors each). Not
// done for cgroup v2 (memory.events has the count; no eventfds).

// oomWatch is one container's registration (cgroup v1).
type oomWatch struct {
	control, usage *os.File // memory.oom_control, memory.usage_in_bytes
	efd, marker    int      // the eventfds: OOMs and removal, removal only
}

// removalWait bounds the wait for the marker's removal signal.
const removalWait = 20 * time.Millisecond

// oomCounter counts the kernel's OOM kills in one container's memory
// cgroup, from when the container was found to when its last process is
// gone (one way per cgroup version: oomWatch for v1).
type oomCounter interface {
	// kills is the count: called once, when the container's last process
	// is gone (its cgroup may be removed by then).
	kills() uint32
	// close releases what the count was watched with.
	close()
}

// watchOOM starts counting the OOM kills of u's container, in the memory
// cgroup found from the cgroup file of a member, if it has a memory
// limit (nil: none to count).
func (o *outcomes) watchOOM(u *unit) oomCounter {
	if o.cgroupRoot == "-" {
		return nil
	}
	var rel string
	for _, p := range u.members {
		if p.t == nil || p.t.vanished {
			continue
		}
		b, err := o.fs.ReadPidFile(p.pid, "cgroup", o.buf)
		o.buf = b
		if err != nil {
			continue
		}
		rel = memoryCgroup(b, o.cgroupPrefix, u.containerID)
		break
	}
	if rel == "" {
		return nil
	}
	dir := filepath.Join(o.cgroupRoot, "memory", rel)
	limit, err := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil {
		return nil
	}
	if v, err := strconv.ParseUint(strings.TrimSpace(string(limit)), 10, 64); err != nil || v >= 1<<62 {
		return nil // no limit: no OOM of its own
	}
	w := &oomWatch{efd: -1, marker: -1}
	if err := w.register(dir); err != nil {
		w.close()
		o.errs.count("oom", err)
		return nil
	}
	return w
}

// register opens the files and registers the eventfds: the marker first.
func (w *oomWatch) register(dir string) error {
	var err error
	if w.usage, err = os.Open(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return err
	}
	if w.control, err = os.Open(filepath.Join(dir, "memory.oom_control")); err != nil {
		return err
	}
	if w.marker, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	if w.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	for _, reg := range []string{
		fmt.Sprintf("%d %d %d", w.marker, w.usage.Fd(), uint64(1)<<62),
		fmt.Sprintf("%d %d", w.efd, w.control.Fd()),
	} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(reg), 0); err != nil {
			return err
		}
	}
	return nil
}

// memoryCgroup is the path of the memory controller's cgroup of a
// container in a cgroup file, if it is the container's
// (<prefix>/<container>).
func memoryCgroup(b []byte, prefix, container string) string {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		parts := bytes.SplitN(line, []byte(":"), 3)
		if len(parts) != 3 {
			continue
		}
		isMemory := false
		for _, c := range bytes.Split(parts[1], []byte(",")) {
			isMemory = isMemory || string(c) == "memory"
		}
		p := string(parts[2])
		if isMemory && strings.Contains(p, "/"+prefix+"/") && strings.HasSuffix(p, "/"+container) {
			return p
		}
	}
	return ""
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
