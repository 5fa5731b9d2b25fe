package store

import "errors"

// ErrNotFound is returned for unknown jobs and attempts.
var ErrNotFound = errors.New("not found")

// ErrDiskFull is what a store's writes fail with, in their chain
// (errors.Is), when the store cannot write because its disk (or a quota)
// is full. Each backend maps its own errors to it (DuckDB's ENOSPC in the
// text of its errors, a ClickHouse server's NOT_ENOUGH_SPACE), with
// DiskFullError. The ingest pipeline then answers every batch of a
// failed group 503 at once, rather than writing them one by one, and the
// server reports the disk full (/healthz, taskscope_store_disk_full).
var ErrDiskFull = errors.New("disk full")

// DiskFullError returns err marked as ErrDiskFull: errors.Is(e,
// ErrDiskFull) and errors.Is(e, target) for every target of err's chain
// hold, and its text is err's. It returns err itself if it is nil or
// already so marked.
func DiskFullError(err error) error {
	if err == nil || errors.Is(err, ErrDiskFull) {
		return err
	}
	return diskFull{err}
}

type diskFull struct{ err error }

func (e diskFull) Error() string   { return e.err.Error() }
func (e diskFull) Unwrap() []error { return []error{ErrDiskFull, e.err} }
