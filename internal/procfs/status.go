package procfs

import "fmt"

// Status is what taskscope takes from /proc/PID/status.
type Status struct {
	UID            uint32 // real uid
	HasUID         bool
	VoluntaryCtx   uint64
	InvoluntaryCtx uint64
	HasCtx         bool
	VmHWMBytes     uint64 // peak RSS
}

// ParseStatus parses /proc/PID/status.
func ParseStatus(b []byte, s *Status) error {
	*s = Status{}
	var bad []byte
	eachKV(b, func(k, v []byte) bool {
		switch string(k) {
		case "Uid":
			u, ok := parseUint(v)
			if !ok || u > 1<<32-1 {
				bad = k
				return false
			}
			s.UID, s.HasUID = uint32(u), true
		case "VmHWM":
			n, ok := kB(v)
			if !ok {
				bad = k
				return false
			}
			s.VmHWMBytes = n
		case "voluntary_ctxt_switches":
			n, ok := parseUint(v)
			if !ok {
				bad = k
				return false
			}
			s.VoluntaryCtx, s.HasCtx = n, true
		case "nonvoluntary_ctxt_switches":
			n, ok := parseUint(v)
			if !ok {
				bad = k
				return false
			}
			s.InvoluntaryCtx = n
		}
		return true
	})
	if bad != nil {
		return fmt.Errorf("cannot parse status: bad %s", bad)
	}
	if !s.HasUID {
		return fmt.Errorf("cannot parse status: no Uid line")
	}
	return nil
}
