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
	if open < 1 {
		return fmt.Errorf("cannot parse stat %.40q: no (comm)", b)
	}
	// The last ')': nothing after comm holds one, so scan forward (the
	// assembly IndexByte) rather than back over the whole line.
	close := -1
	for i := open + 1; ; {
		j := bytes.IndexByte(b[i:], ')')
		if j < 0 {
			break
		}
		close = i + j
		i = close + 1
	}
	if close < open {
		return fmt.Errorf("cannot parse stat %.40q: no (comm)", b)
	}
	pid, ok := parseInt(bytes.TrimSpace(b[:open]))
	if !ok || pid <= 0 || pid > 1<<31-1 {
		return fmt.Errorf("cannot parse stat %.40q: bad pid", b)
	}
	s.PID = int32(pid)
	s.Comm = b[open+1 : close]
	// Fields after comm, numbered as in proc(5) from 3 (state), in one
	// pass: each number is accumulated as its digits go by, up to the last
	// one kept (startstack: the rest, a third of a line, is not read).
	rest := b[close+1:]
	field := 2 // the last field seen
	i := 0
	for field < 28 {
		for i < len(rest) && isBlank(rest[i]) {
			i++
		}
		if i == len(rest) {
			break
		}
		field++
		start := i
		if field == 3 {
			s.State = rest[i]
			for i < len(rest) && !isBlank(rest[i]) {
				i++
			}
			continue
		}
		neg := rest[i] == '-'
		if neg {
			i++
		}
		var v uint64
		digits := 0
		for ; i < len(rest) && !isBlank(rest[i]); i++ {
			c := rest[i] - '0'
			if c > 9 {
				digits = -1
				for i < len(rest) && !isBlank(rest[i]) {
					i++
				}
				break
			}
			digits++
			if v > (1<<63-1)/10 {
				v = 1<<63 - 1 // beyond int64: saturate, as parseInt does
				continue
			}
			if v = v*10 + uint64(c); v > 1<<63-1 {
				v = 1<<63 - 1
			}
		}
		if digits <= 0 || neg && v != 0 && signedField(field) == unsignedField {
			return fmt.Errorf("cannot parse stat of pid %d: field %d is %.20q", pid, field, rest[start:i])
		}
		x := int64(v)
		if neg {
			x = -x
		}
		switch field {
		case 4, 5, 6:
			if x < -1<<31 || x > 1<<31-1 {
				return fmt.Errorf("cannot parse stat of pid %d: field %d is %.20q", pid, field, rest[start:i])
			}
			switch field {
			case 4:
				s.PPID = int32(x)
			case 5:
				s.PGRP = int32(x)
			default:
				s.Session = int32(x)
			}
		case 9:
			s.Flags = v
		case 10:
			s.MinFlt = v
		case 11:
			s.CMinFlt = v
		case 12:
			s.MajFlt = v
		case 13:
			s.CMajFlt = v
		case 14:
			s.UTime = v
		case 15:
			s.STime = v
		case 16:
			s.CUTime = v
		case 17:
			s.CSTime = v
		case 20:
			s.Threads = x
		case 22:
			s.StartTime = v
		case 23:
			s.VSize = v
		case 24:
			s.RSS = x
		case 28:
			s.StartStack = v
		}
	}
	if field < 24 {
		return fmt.Errorf("cannot parse stat of pid %d: %w (%d)", pid, errShortStat, field)
	}
	return nil
}

// The sign of stat's fields: those kept as unsigned must not be negative.
const (
	signed = iota
	unsignedField
)

func signedField(field int) int {
	switch field {
	case 9, 10, 11, 12, 13, 14, 15, 16, 17, 22, 23, 28:
		return unsignedField
	}
	return signed
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
