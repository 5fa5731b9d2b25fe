package analysis

import "time"

// SetClock replaces the analyzer's clock (tests).
func (a *Analyzer) SetClock(now func() time.Time) { a.now = now }
