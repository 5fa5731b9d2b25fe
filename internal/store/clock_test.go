package store

import (
	"testing"
	"time"
)

func TestClockStaleBefore(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	c := Clock{Now: func() time.Time { return now }, StaleAfter: 30 * time.Second}
	if got := c.StaleBefore(); got != 970_000 {
		t.Errorf("StaleBefore = %d, want 970000", got)
	}
	c.StaleAfter = 0
	if got := c.StaleBefore(); got != 1_000_000-DefaultStaleAfter.Milliseconds() {
		t.Errorf("StaleBefore with no StaleAfter = %d, want now less the default", got)
	}
	d := Clock{}.WithDefaults()
	if d.Now == nil || d.StaleAfter != DefaultStaleAfter {
		t.Errorf("defaults: %+v", d)
	}
}

// An attempt's and a job's states at the edges of staleness.
func TestStates(t *testing.T) {
	const stale = 1000
	attempt := func(ended bool, last int64) func() (string, Time) {
		return func() (string, Time) { return AttemptState(ended, last, stale) }
	}
	job := func(running int, last int64) func() (string, Time) {
		return func() (string, Time) { return JobState(running, last, stale) }
	}
	for _, c := range []struct {
		what  string
		state func() (string, Time)
		want  string
		end   Time
	}{
		{"an attempt seen at the boundary runs", attempt(false, 1000), StateRunning, 0},
		{"an attempt seen since runs", attempt(false, 5000), StateRunning, 0},
		{"an attempt not seen since is lost", attempt(false, 999), StateLost, 999},
		{"an attempt that ended long ago is finished, not lost", attempt(true, 999), StateFinished, 999},
		{"an attempt that ended is finished", attempt(true, 5000), StateFinished, 5000},
		{"a job seen at the boundary with an attempt running runs", job(1, 1000), StateRunning, 0},
		{"a job with attempts running runs", job(3, 5000), StateRunning, 0},
		{"a job whose running attempts are lost is finished", job(1, 999), StateFinished, 999},
		{"a job with no attempt running is finished", job(0, 5000), StateFinished, 5000},
	} {
		if state, end := c.state(); state != c.want || end != c.end {
			t.Errorf("%s: %s, end %d; want %s, end %d", c.what, state, end, c.want, c.end)
		}
	}
}
