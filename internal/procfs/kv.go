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
		if sp := bytes.IndexAny(val, " \t"); sp >= 0 {
			val = val[:sp]
		}
		if !f(line[:colon], val) {
			return
		}
	}
}
