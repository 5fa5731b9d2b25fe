package duckdb

import (
	"errors"
	"strings"
	"syscall"

	"github.com/taskscope/taskscope/internal/store"
)

// isDiskFull reports whether err says that the disk is full: ENOSPC or
// EDQUOT, as an errno or in the text of DuckDB's error (its errors are
// text: `Could not write file "...wal": No space left on device`).
func isDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}

// mapErr is err as the store's callers get it: a full disk is
// store.ErrDiskFull in its chain.
func mapErr(err error) error {
	if isDiskFull(err) {
		return store.DiskFullError(err)
	}
	return err
}
