package procfs

import (
	"bytes"
	"errors"
	"fmt"
)

// Stat is /proc/PID/stat (proc(5)). Times are in clock ticks (UserHZ).
type Stat struct {
	PID   int32
	Comm  []byte // inside the buffer that was parsed: copy it to keep it
	State byte
	// Flags are the kernel's PF_* flags of the thread group leader
	// (PFExiting: it is exiting).
	Flags     uint64
	PPID      int32
	PGRP      int32
	Session   int32
	MinFlt    uint64
	CMinFlt   uint64
	MajFlt    uint64
	CMajFlt   uint64
	UTime     uint64
	STime     uint64
	CUTime    uint64
	CSTime    uint64
	Threads   int64
	StartTime uint64 // ticks after boot
	VSize     uint64 // bytes
	RSS       int64  // pages
	// StartStack is the address of the bottom of the stack. Address space
	// randomisation makes it new at every exec, so a change tells that the
	// process exec'd (it reads as 0 without ptrace access to the process).
	StartStack uint64
	BlkioTicks uint64 // delayacct_blkio_ticks: time waiting for block IO
}

// PFExiting is the PF_EXITING flag of Stat.Flags: the task is exiting.
const PFExiting = 0x4

var errShortStat = errors.New("stat has too few fields")

// ParseStat parses the content of /proc/PID/stat into s, which it resets
// first. The command name may hold spaces and parentheses: it ends at the
// LAST ')'. The fields kept as unsigned must not be negative.
func ParseStat(b []byte, s *Stat) error {
	*s = Stat{}
	open := bytes.IndexByte(b, '(')
	close := bytes.LastIndexByte(b, ')')
	if open < 1 || close < open {
		return fmt.Errorf("cannot parse stat %.40q: no (comm)", b)
	}
	pid, ok := parseInt(bytes.TrimSpace(b[:open]))
	if !ok || pid <= 0 || pid > 1<<31-1 {
		return fmt.Errorf("cannot parse stat %.40q: bad pid", b)
	}
	s.PID = int32(pid)
	s.Comm = b[open+1 : close]
	rest := b[close+1:]
	// Fields after comm, numbered as in proc(5) from 3 (state).
	field := 3
	for ; field <= 42; field++ {
		var tok []byte
		if tok, rest = nextField(rest); len(tok) == 0 {
			break
		}
		if field == 3 {
			s.State = tok[0]
			continue
		}
		var v int64
		var u uint64
		switch field {
		case 4, 5, 6: // pids
			v, ok = parseInt(tok)
			ok = ok && v >= -1<<31 && v <= 1<<31-1
		case 9, 10, 11, 12, 13, 14, 15, 16, 17, 22, 23, 28, 42: // kept as unsigned
			u, ok = parseUint(tok)
		default: // tpgid, nice, ... may be negative
			v, ok = parseInt(tok)
		}
		if !ok {
			return fmt.Errorf("cannot parse stat of pid %d: field %d is %.20q", pid, field, tok)
		}
		switch field {
		case 9:
			s.Flags = u
		case 4:
			s.PPID = int32(v)
		case 5:
			s.PGRP = int32(v)
		case 6:
			s.Session = int32(v)
		case 10:
			s.MinFlt = u
		case 11:
			s.CMinFlt = u
		case 12:
			s.MajFlt = u
		case 13:
			s.CMajFlt = u
		case 14:
			s.UTime = u
		case 15:
			s.STime = u
		case 16:
			s.CUTime = u
		case 17:
			s.CSTime = u
		case 20:
			s.Threads = v
		case 22:
			s.StartTime = u
		case 23:
			s.VSize = u
		case 24:
			s.RSS = v
		case 28:
			s.StartStack = u
		case 42:
			s.BlkioTicks = u
		}
	}
	if field <= 24 {
		return fmt.Errorf("cannot parse stat of pid %d: %w (%d)", pid, errShortStat, field-1)
	}
	return nil
}

// parseInt parses a decimal integer, optionally negative. Values beyond
// int64 (the kernel prints some unsigned 64-bit fields) saturate.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (1<<63-1)/10 {
			v = 1<<63 - 1
			continue
		}
		v = v*10 + uint64(c-'0')
		if v > 1<<63-1 {
			v = 1<<63 - 1
		}
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// parseUint parses a decimal unsigned integer.
func parseUint(b []byte) (uint64, bool) {
	v, ok := parseInt(b)
	return uint64(v), ok && v >= 0
}
