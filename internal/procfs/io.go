package procfs

import "fmt"

// IO is /proc/PID/io (needs ptrace access to the process: root, or the same user).
type IO struct {
	RChar               uint64
	WChar               uint64
	ReadBytes           uint64
	WriteBytes          uint64
	CancelledWriteBytes uint64
}

// ParseIO parses /proc/PID/io.
func ParseIO(b []byte, io *IO) error {
	*io = IO{}
	n := 0
	var bad []byte
	eachKV(b, func(k, v []byte) bool {
		var dst *uint64
		switch string(k) {
		case "rchar":
			dst = &io.RChar
		case "wchar":
			dst = &io.WChar
		case "read_bytes":
			dst = &io.ReadBytes
		case "write_bytes":
			dst = &io.WriteBytes
		case "cancelled_write_bytes":
			dst = &io.CancelledWriteBytes
		default:
			return true
		}
		x, ok := parseUint(v)
		if !ok {
			bad = k
			return false
		}
		*dst = x
		n++
		return true
	})
	if bad != nil {
		return fmt.Errorf("cannot parse io: bad %s", bad)
	}
	if n == 0 {
		return fmt.Errorf("cannot parse io: no known field")
	}
	return nil
}
