package procfs

import "bytes"

// CgroupPaths returns the paths of /proc/PID/cgroup
// ("<id>:<controllers>:<path>" per line), appended to dst.
func CgroupPaths(b []byte, dst []string) []string {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		first := bytes.IndexByte(line, ':')
		if first < 0 {
			continue
		}
		second := bytes.IndexByte(line[first+1:], ':')
		if second < 0 {
			continue
		}
		p := line[first+1+second+1:]
		if len(p) > 0 {
			dst = append(dst, string(p))
		}
	}
	return dst
}
