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

func TestAttemptState(t *testing.T) {
	const stale = 1000
	for _, c := range []struct {
		ended bool
		last  int64
		state string
		end   Time
	}{
		{false, 1000, StateRunning, 0}, // seen at the boundary: still running
		{false, 5000, StateRunning, 0},
		{false, 999, StateLost, 999},
		{true, 999, StateFinished, 999}, // ended long ago: finished, not lost
		{true, 5000, StateFinished, 5000},
	} {
		state, end := AttemptState(c.ended, c.last, stale)
		if state != c.state || end != c.end {
			t.Errorf("AttemptState(ended %v, last %d) = %s, %d; want %s, %d", c.ended, c.last, state, end, c.state, c.end)
		}
	}
}

func TestJobState(t *testing.T) {
	const stale = 1000
	for _, c := range []struct {
		running int
		last    int64
		state   string
		end     Time
	}{
		{1, 1000, StateRunning, 0},
		{3, 5000, StateRunning, 0},
		{1, 999, StateFinished, 999}, // its running attempts are lost
		{0, 5000, StateFinished, 5000},
	} {
		state, end := JobState(c.running, c.last, stale)
		if state != c.state || end != c.end {
			t.Errorf("JobState(running %d, last %d) = %s, %d; want %s, %d", c.running, c.last, state, end, c.state, c.end)
		}
	}
}
