package analysis

import (
	"context"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// SetClock replaces the analyzer's clock (tests).
func (a *Analyzer) SetClock(now func() time.Time) { a.now = now }

// ToStored is toStored (tests): r as the store keeps it.
func (a *Analyzer) ToStored(r *Report) (*store.Analysis, error) { return a.toStored(r) }

// Pass is one of the background analyser's passes over a job (tests and
// benchmarks): its report made, reusing what the job's last pass read,
// and stored; incremental says there was a last pass's reads to reuse.
func (a *Analyzer) Pass(ctx context.Context, jobID string) (r *Report, incremental bool, err error) {
	return a.pass(ctx, jobID, func() {})
}
