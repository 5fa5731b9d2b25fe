package store

import "time"

// Attempt states beyond the jobs' (StateRunning, StateFinished).
const (
	// StateLost is an attempt that did not end but has not been heard of
	// for Clock.StaleAfter: its agent or its node went away.
	StateLost = "lost"
)

// DefaultStaleAfter is how long an attempt may go unheard before it is
// lost, unless a store is told otherwise: agents send a batch every 5 s
// by default, and retry with backoff.
const DefaultStaleAfter = 2 * time.Minute

// Clock is a store's time: what time it is now, and how long an attempt
// that has not ended may go unheard before it is lost (and its job, with
// no other attempt running, finished). Every backend takes one in its
// options; the conformance suite (storetest) passes its own.
type Clock struct {
	Now        func() time.Time // nil: time.Now
	StaleAfter time.Duration    // 0 or less: DefaultStaleAfter
}

// WithDefaults is c with its zero fields set to their defaults.
func (c Clock) WithDefaults() Clock {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	return c
}

// StaleBefore is the time (unix ms) before which an attempt last seen then
// is stale: now less StaleAfter. A read computes it once and decides every
// row's state by it (AttemptState, JobState), or puts it in its query.
func (c Clock) StaleBefore() int64 {
	c = c.WithDefaults()
	return c.Now().Add(-c.StaleAfter).UnixMilli()
}

// AttemptState is an attempt's state, and its end (0 while it runs):
// finished once its agent said it ended, lost when it was last seen before
// staleBefore (Clock.StaleBefore), running otherwise. Both ends are its
// last sighting.
func AttemptState(ended bool, lastMs, staleBefore int64) (state string, end Time) {
	switch {
	case ended:
		return StateFinished, Time(lastMs)
	case lastMs < staleBefore:
		return StateLost, Time(lastMs)
	}
	return StateRunning, 0
}

// JobState is a job's state, and its end (0 while it runs): running while
// one of its attempts runs (running, from JobTotals) and it was seen at
// or after staleBefore; finished, at its last sighting, otherwise. A
// query that filters jobs by state says the same: running > 0 AND last_ms
// >= staleBefore.
func JobState(running int, lastMs, staleBefore int64) (state string, end Time) {
	if running > 0 && lastMs >= staleBefore {
		return StateRunning, 0
	}
	return StateFinished, Time(lastMs)
}
