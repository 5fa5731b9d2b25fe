package store

import (
	"errors"
	"strings"
	"syscall"
)

// DiskFull reports whether err says that the store's disk is full: ENOSPC
// or EDQUOT, as an errno or in the text of a database's error (DuckDB's
// errors are text: `Could not write file "...wal": No space left on
// device`).
func DiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}
