package procfs

import "bytes"

// SplitCmdline splits /proc/PID/cmdline (NUL-separated argv) into words,
// appended to dst. A process that rewrote its argv with spaces instead of
// NULs (setproctitle) gives one word, which callers may split further.
func SplitCmdline(b []byte, dst []string) []string {
	b = bytes.TrimRight(b, "\x00")
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			dst = append(dst, string(b))
			break
		}
		dst = append(dst, string(b[:i]))
		b = b[i+1:]
	}
	return dst
}
