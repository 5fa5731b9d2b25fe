package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// BootTime returns the boot time in unix seconds (the btime line of /proc/stat).
func (f FS) BootTime() (int64, error) {
	b, err := os.ReadFile(f.Path("stat"))
	if err != nil {
		return 0, fmt.Errorf("cannot read boot time: %w", err)
	}
	return ParseBootTime(b)
}

// ParseBootTime finds the btime line of /proc/stat.
func ParseBootTime(b []byte) (int64, error) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("cannot parse btime %q", v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no btime line in /proc/stat")
}

// CountFDs counts the entries of /proc/PID/fd (needs ptrace access). It costs
// one directory read per call: callers make it optional.
func (f FS) CountFDs(pid int32) (int, error) {
	d, err := os.Open(f.PidPath(pid, "fd"))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	return len(names), err
}
