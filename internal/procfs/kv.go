package procfs

import "bytes"

// eachKV calls f for every "Key: value [kB]" line of b, with the first word
// of the value. It stops early when f returns false.
func eachKV(b []byte, f func(key, val []byte) bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		val := line[colon+1:]
		for len(val) > 0 && (val[0] == ' ' || val[0] == '\t') {
			val = val[1:]
		}
		// Two scans of the assembly IndexByte: values run long (status's
		// masks and lists) and bytes.IndexAny builds its set at every call.
		if sp := bytes.IndexByte(val, ' '); sp >= 0 {
			val = val[:sp]
		}
		if tab := bytes.IndexByte(val, '\t'); tab >= 0 {
			val = val[:tab]
		}
		if !f(line[:colon], val) {
			return
		}
	}
}

// nextField returns the first blank-separated word of b and what follows it.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isBlank(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

// kB converts a count of kibibytes to bytes, refusing what would overflow.
func kB(v []byte) (uint64, bool) {
	n, ok := parseUint(v)
	return n << 10, ok && n <= 1<<54-1
}
