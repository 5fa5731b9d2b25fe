package procfs

import (
	"bytes"
	"fmt"
)

// Schedstat is /proc/PID/schedstat: time on a CPU, time runnable but waiting
// for one (the sign of a noisy neighbour), and the number of timeslices run.
type Schedstat struct {
	RunNs      uint64
	WaitNs     uint64
	Timeslices uint64
}

// ParseSchedstat parses /proc/PID/schedstat ("<run ns> <wait ns> <slices>").
func ParseSchedstat(b []byte, s *Schedstat) error {
	f := bytes.Fields(b)
	if len(f) < 3 {
		return fmt.Errorf("cannot parse schedstat %.40q: want 3 fields", b)
	}
	var ok1, ok2, ok3 bool
	s.RunNs, ok1 = parseUint(f[0])
	s.WaitNs, ok2 = parseUint(f[1])
	s.Timeslices, ok3 = parseUint(f[2])
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("cannot parse schedstat %.40q", b)
	}
	return nil
}
