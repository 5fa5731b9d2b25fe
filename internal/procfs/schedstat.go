package procfs

import "fmt"

// Schedstat is /proc/PID/schedstat: time on a CPU, time runnable but waiting
// for one (the sign of a noisy neighbour), and the number of timeslices run.
type Schedstat struct {
	RunNs      uint64
	WaitNs     uint64
	Timeslices uint64
}

// ParseSchedstat parses /proc/PID/schedstat ("<run ns> <wait ns> <slices>").
func ParseSchedstat(b []byte, s *Schedstat) error {
	var v [3]uint64
	rest := b
	for i := range v {
		var tok []byte
		tok, rest = nextField(rest)
		n, ok := parseUint(tok)
		if !ok {
			return fmt.Errorf("cannot parse schedstat %.40q: want 3 numbers", b)
		}
		v[i] = n
	}
	s.RunNs, s.WaitNs, s.Timeslices = v[0], v[1], v[2]
	return nil
}
