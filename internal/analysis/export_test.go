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

// Passes are the background analyser's passes over jobs taken together
// (tests and benchmarks): their reads together, and their analyses stored
// together; each job's report, whether it reused its last pass's reads,
// and its error, in the order of ids.
func (a *Analyzer) Passes(ctx context.Context, ids []string) (rs []*Report, incremental []bool, errs []error) {
	for _, o := range a.passes(ctx, ids, func() {}) {
		rs, incremental, errs = append(rs, o.r), append(incremental, o.reused), append(errs, o.err)
	}
	return rs, incremental, errs
}

// Look is one of the background's looks at the store, queueing nothing
// (tests): what it notes of the jobs written lately (lateLog).
func (a *Analyzer) Look(ctx context.Context) error {
	states, err := a.st.AnalysisStates(ctx, a.now().Add(-a.opt.Window).UnixMilli(), maxStates)
	if err != nil {
		return err
	}
	a.late.note(states, len(states) < maxStates)
	return nil
}

// ReusedHistories counts the passes that took the earlier runs their
// last pass read again (tests).
func (a *Analyzer) ReusedHistories() int64 { return a.reusedHistories.Load() }
