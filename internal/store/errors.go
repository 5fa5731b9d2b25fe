package store

import (
	"errors"
	"fmt"
)

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

// ErrUnavailable is what a store's reads and writes fail with, in their
// chain (errors.Is), while the store cannot be reached: its server does
// not answer (ClickHouse: refused, reset, timed out, or a shard with no
// replica that answers), its database is being opened again (DuckDB,
// after a fatal error). It passes: the API answers 503 with Retry-After
// and the reason UnavailableReason gives (which names no internal
// address), the ingest endpoint 503 (the agents keep their batches and
// send them again). Each backend marks its own errors with Unavailable.
var ErrUnavailable = errors.New("store unavailable")

// Unavailable returns err marked as ErrUnavailable, for the reason given:
// what a user may be told of why, naming no internal address (the
// error's text, for the logs, is err's). It returns err itself if it is
// nil or already so marked.
func Unavailable(reason string, err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return unavailable{reason, err}
}

// UnavailableReason is the reason the first error of err's chain marked
// by Unavailable gives ("" if none).
func UnavailableReason(err error) string {
	var u unavailable
	if errors.As(err, &u) {
		return u.reason
	}
	return ""
}

type unavailable struct {
	reason string
	err    error
}

func (e unavailable) Error() string   { return e.err.Error() }
func (e unavailable) Unwrap() []error { return []error{ErrUnavailable, e.err} }

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

// WrapErr prefixes *errp with what was being done, in the "cannot <do
// what>: %w" style, unless it is nil or the caller's own (ErrNotFound,
// ErrUnknownMetric: the API says those as they are): a deferred call at
// the top of a backend's method says where its failures happened.
func WrapErr(errp *error, format string, args ...any) {
	if err := *errp; err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnknownMetric) {
		*errp = fmt.Errorf(format+": %w", append(args, err)...)
	}
}
