package store

import "sync"

// ExtNames are the names of the metrics agents sent with no column of
// their own (ExtColumns), by series kind (KindProcessExt, KindAttemptExt):
// each is a series of its own per process or attempt, asked for by name
// (SeriesMetric.Ext). A store reads them when it opens, the fold adds
// those its commits store (Sink.Ext). Reads do not check against them: a
// name no agent sent is a series without data (nulls), as is one sent for
// others' processes alone, so that what a reader is answered does not
// depend on data they may not see (docs/security.md). Safe for
// concurrent use; the zero value is empty.
type ExtNames struct {
	mu sync.Mutex
	m  map[extName]bool
}

type extName struct {
	kind   int
	metric string
}

// Add takes a name.
func (e *ExtNames) Add(kind int, metric string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[extName]bool{}
	}
	e.m[extName{kind, metric}] = true
}

// Known reports whether a name was taken.
func (e *ExtNames) Known(kind int, metric string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[extName{kind, metric}]
}

// Replace takes o's names in place of e's (a store that opened its data
// again).
func (e *ExtNames) Replace(o *ExtNames) {
	o.mu.Lock()
	m := o.m
	o.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m = m
}
