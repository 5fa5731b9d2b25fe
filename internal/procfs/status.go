package procfs

import (
	"bytes"
	"fmt"
)

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

// ParseStatusCtx parses the context switches alone out of /proc/PID/status
// into s (reset first; HasCtx when the voluntary line is there): the last
// voluntary_ctxt_switches and nonvoluntary_ctxt_switches lines, found with
// the assembly search, the rest of the file unread (a process's status is
// 1.4 KB, these are its last two lines). A value that is no number is an
// error; no Uid line is needed.
func ParseStatusCtx(b []byte, s *Status) error {
	*s = Status{}
	v, found := lastValue(b, "voluntary_ctxt_switches")
	if found {
		n, ok := parseUint(v)
		if !ok {
			return fmt.Errorf("cannot parse status: bad voluntary_ctxt_switches")
		}
		s.VoluntaryCtx, s.HasCtx = n, true
	}
	if v, found = lastValue(b, "nonvoluntary_ctxt_switches"); found {
		n, ok := parseUint(v)
		if !ok {
			return fmt.Errorf("cannot parse status: bad nonvoluntary_ctxt_switches")
		}
		s.InvoluntaryCtx = n
	}
	return nil
}

// lastValue is the value of the last "key: value" line of b whose key is
// key (which holds no ':'), as eachKV gives it: its first word.
func lastValue(b []byte, key string) ([]byte, bool) {
	// From the end: the lines looked for are the file's last.
	at := -1
	for end := len(b); end >= len(key); {
		i := bytes.LastIndex(b[:end], []byte(key))
		if i < 0 {
			break
		}
		if (i == 0 || b[i-1] == '\n') && i+len(key) < len(b) && b[i+len(key)] == ':' {
			at = i
			break
		}
		end = i + len(key) - 1 // (nonvoluntary_ctxt_switches ends with the other key)
	}
	if at < 0 {
		return nil, false
	}
	val := b[at+len(key)+1:]
	if nl := bytes.IndexByte(val, '\n'); nl >= 0 {
		val = val[:nl]
	}
	for len(val) > 0 && (val[0] == ' ' || val[0] == '\t') {
		val = val[1:]
	}
	for i, c := range val {
		if c == ' ' || c == '\t' {
			return val[:i], true
		}
	}
	return val, true
}
