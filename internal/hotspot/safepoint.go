package hotspot

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/hsperf"
)

// Safepoints reads how long a JVM's threads have been stopped at
// safepoints, from its hsperfdata (package hsperf): the time they took to
// stop (sun.rt.safepointSyncTime) and the time stopped
// (sun.rt.safepointTime), in ticks of sun.os.hrt.frequency. A thread dump
// is taken at a safepoint: the difference across a dump is the pause it
// cost the task (and any other safepoint that happened meanwhile, a
// garbage collection's).
type Safepoints struct {
	f      *os.File
	order  binary.ByteOrder
	sync   int64 // offsets of the counters
	total  int64
	freq   int64
	buffer [8]byte
}

// OpenSafepoints opens the hsperfdata file of the JVM vm.
func (vm *VM) OpenSafepoints() (*Safepoints, error) {
	tmp := vm.o.ProcFS + "/" + strconv.Itoa(int(vm.PID)) + "/root/tmp"
	path, err := hsperf.Locate(tmp, vm.Status.NSPID, "")
	if err != nil {
		return nil, fmt.Errorf("cannot find the hsperfdata of pid %d: %w", vm.PID, err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	b := make([]byte, hsperf.MaxFileSize)
	n, err := f.ReadAt(b, 0)
	if n == 0 {
		f.Close()
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	p, entries, err := hsperf.Entries(b[:n])
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Safepoints{f: f, order: p.Order, sync: -1, total: -1}
	for _, e := range entries {
		if e.Type != hsperf.TypeLong || e.Vector != 0 {
			continue
		}
		switch e.Name {
		case "sun.rt.safepointSyncTime":
			s.sync = int64(e.Offset)
		case "sun.rt.safepointTime":
			s.total = int64(e.Offset)
		case "sun.os.hrt.frequency":
			s.freq = int64(p.Order.Uint64(b[e.Offset:]))
		}
	}
	if s.sync < 0 || s.total < 0 || s.freq <= 0 {
		f.Close()
		return nil, fmt.Errorf("%s has no safepoint counters", path)
	}
	return s, nil
}

// Stopped is the time the JVM's threads have spent stopping and stopped
// at safepoints since it started.
func (s *Safepoints) Stopped() (time.Duration, error) {
	var ticks int64
	for _, off := range [2]int64{s.sync, s.total} {
		if _, err := s.f.ReadAt(s.buffer[:], off); err != nil {
			return 0, fmt.Errorf("cannot read the safepoint counters: %w", err)
		}
		ticks += int64(s.order.Uint64(s.buffer[:]))
	}
	return time.Duration(float64(ticks) / float64(s.freq) * float64(time.Second)), nil
}

// Close closes the file.
func (s *Safepoints) Close() error { return s.f.Close() }
