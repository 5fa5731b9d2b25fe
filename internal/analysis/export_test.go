package analysis

import (
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// SetClock replaces the analyzer's clock (tests).
func (a *Analyzer) SetClock(now func() time.Time) { a.now = now }

// ToStored is toStored (tests): r as the store keeps it.
func (a *Analyzer) ToStored(r *Report) (*store.Analysis, error) { return a.toStored(r) }
