package procfs

import (
	"bytes"
	"errors"
	"fmt"
)

// Stat is /proc/PID/stat (proc(5)). Times are in clock ticks (UserHZ).
type Stat struct {
	PID        int32
	Comm       []byte // inside the buffer that was parsed: copy it to keep it
	State      byte
	PPID       int32
	PGRP       int32
	Session    int32
	MinFlt     uint64
	CMinFlt    uint64
	MajFlt     uint64
	CMajFlt    uint64
	UTime      uint64
	STime      uint64
	CUTime     uint64
	CSTime     uint64
	Threads    int64
	StartTime  uint64 // ticks after boot
	VSize      uint64 // bytes
	RSS        int64  // pages
	BlkioTicks uint64 // delayacct_blkio_ticks: time waiting for block IO
}

var errShortStat = errors.New("stat has too few fields")

// ParseStat parses the content of /proc/PID/stat. The command name may hold
// spaces and parentheses: it ends at the LAST ')'.
func ParseStat(b []byte, s *Stat) error {
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
	for len(rest) > 0 && field <= 42 {
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		end := bytes.IndexByte(rest, ' ')
		var tok []byte
		if end < 0 {
			tok, rest = bytes.TrimRight(rest, "\n"), nil
		} else {
			tok, rest = rest[:end], rest[end+1:]
		}
		if len(tok) == 0 {
			break
		}
		if field == 3 {
			s.State = tok[0]
			field++
			continue
		}
		v, ok := parseInt(tok)
		if !ok {
			return fmt.Errorf("cannot parse stat of pid %d: field %d is %.20q", pid, field, tok)
		}
		switch field {
		case 4:
			s.PPID = int32(v)
		case 5:
			s.PGRP = int32(v)
		case 6:
			s.Session = int32(v)
		case 10:
			s.MinFlt = uint64(v)
		case 11:
			s.CMinFlt = uint64(v)
		case 12:
			s.MajFlt = uint64(v)
		case 13:
			s.CMajFlt = uint64(v)
		case 14:
			s.UTime = uint64(v)
		case 15:
			s.STime = uint64(v)
		case 16:
			s.CUTime = uint64(v)
		case 17:
			s.CSTime = uint64(v)
		case 20:
			s.Threads = v
		case 22:
			s.StartTime = uint64(v)
		case 23:
			s.VSize = uint64(v)
		case 24:
			s.RSS = v
		case 42:
			s.BlkioTicks = uint64(v)
		}
		field++
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
