package hotspot

import (
	"bytes"
	"fmt"
	"strconv"
)

// Status is what /proc/PID/status says of a JVM that matters for attaching
// to it: whose it is (HotSpot accepts a client with its effective uid and
// gid), the pid it knows itself by (its files are named by the pid of its
// own pid namespace), and what it does with SIGQUIT (the signal that starts
// its attach listener kills a process that does not catch it).
type Status struct {
	EUID, EGID uint32
	// NSPID is the pid in the process's innermost pid namespace (the last
	// of NSpid): HotSpot names .java_pid<pid> and .attach_pid<pid> by it.
	// Kernels before 4.1 have no NSpid line: it is then the pid given.
	NSPID int32
	// CatchesQuit: SIGQUIT has a handler (SigCgt bit 2); IgnoresQuit: it
	// is ignored (SigIgn). A HotSpot JVM catches SIGQUIT once its signal
	// handlers are installed, unless it was started with -Xrs.
	CatchesQuit, IgnoresQuit bool
}

// sigquitBit is SIGQUIT's bit in the Sig* masks of /proc/PID/status:
// signal n is bit n-1, and SIGQUIT is 3.
const sigquitBit = 1 << 2

// ParseStatus reads a process's status (proc(5)): the Uid and Gid lines'
// effective ids, NSpid, and the SigCgt and SigIgn masks. Every one of Uid,
// Gid and SigCgt is required.
func ParseStatus(b []byte, pid int32) (Status, error) {
	s := Status{NSPID: pid}
	var has [3]bool // Uid, Gid, SigCgt
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(k) {
		case "Uid", "Gid":
			// real, effective, saved, filesystem
			f := bytes.Fields(v)
			if len(f) < 2 {
				return s, fmt.Errorf("cannot parse status of pid %d: bad %s line", pid, k)
			}
			id, err := strconv.ParseUint(string(f[1]), 10, 32)
			if err != nil {
				return s, fmt.Errorf("cannot parse status of pid %d: bad %s line: %w", pid, k, err)
			}
			if k[0] == 'U' {
				s.EUID, has[0] = uint32(id), true
			} else {
				s.EGID, has[1] = uint32(id), true
			}
		case "NSpid":
			f := bytes.Fields(v)
			if len(f) == 0 {
				continue
			}
			n, err := strconv.ParseInt(string(f[len(f)-1]), 10, 32)
			if err != nil || n <= 0 {
				return s, fmt.Errorf("cannot parse status of pid %d: bad NSpid line", pid)
			}
			s.NSPID = int32(n)
		case "SigCgt", "SigIgn":
			m, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
			if err != nil {
				return s, fmt.Errorf("cannot parse status of pid %d: bad %s line: %w", pid, k, err)
			}
			if k[3] == 'C' {
				s.CatchesQuit, has[2] = m&sigquitBit != 0, true
			} else {
				s.IgnoresQuit = m&sigquitBit != 0
			}
		}
	}
	switch {
	case !has[0]:
		return s, fmt.Errorf("cannot parse status of pid %d: no Uid line", pid)
	case !has[1]:
		return s, fmt.Errorf("cannot parse status of pid %d: no Gid line", pid)
	case !has[2]:
		return s, fmt.Errorf("cannot parse status of pid %d: no SigCgt line", pid)
	}
	return s, nil
}
