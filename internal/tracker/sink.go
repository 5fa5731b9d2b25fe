package tracker

import "github.com/taskscope/taskscope/internal/wire"

// Sink receives what the tracker observes. Pointers and slices passed to a
// Sink are only valid during the call: copy what you keep.
type Sink interface {
	// Process is called when a process is first attributed, when its
	// command line changes (exec), and when it exits (EndMs set).
	Process(p *wire.Process)
	// Attempt is called when an attempt is first seen, changes, and ends.
	Attempt(a *wire.Attempt)
	// Membership is called when a process joins an attempt and when the
	// membership ends (ToMs set).
	Membership(m *wire.Membership)
	// ProcessSample gives one tick of a process: vals[i] is metric i of
	// Tracker.ProcessMetrics(), valid where bit i of present is set.
	ProcessSample(key uint64, ms int64, vals []int64, present uint64)
	// AttemptSample gives one tick of an attempt's sums, in the order of
	// Tracker.AttemptMetrics().
	AttemptSample(attemptID string, ms int64, vals []int64, present uint64)
	// Event reports something that happened.
	Event(e *wire.Event)
}

// NopSink discards everything.
type NopSink struct{}

func (NopSink) Process(*wire.Process)                        {}
func (NopSink) Attempt(*wire.Attempt)                        {}
func (NopSink) Membership(*wire.Membership)                  {}
func (NopSink) ProcessSample(uint64, int64, []int64, uint64) {}
func (NopSink) AttemptSample(string, int64, []int64, uint64) {}
func (NopSink) Event(*wire.Event)                            {}
