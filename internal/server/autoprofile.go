package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/profiling"
)

// autoProfiles is the analyser's listener that asks for the profiles of
// the attempts a running job's analysis names as stragglers or outliers
// (analysis.SlowAttempts), each with a healthy sibling: the control keeps
// to one profile at a time per node, --auto-profiles-per-hour an hour, and
// none of an attempt profiled lately (profiling.Control.Auto).
func autoProfiles(c *profiling.Control, log *slog.Logger) analysis.Listener {
	var mu sync.Mutex
	var logged time.Time
	return func(ctx context.Context, a *analysis.Analysed) {
		if a.Ended || a.Report == nil {
			return
		}
		ids := analysis.SlowAttempts(a.Report)
		if len(ids) == 0 {
			return
		}
		if _, err := c.Auto(ctx, profiling.Named{JobID: a.JobID, Attempts: ids}); err != nil && ctx.Err() == nil {
			mu.Lock()
			if time.Since(logged) > time.Minute {
				logged = time.Now()
				log.Warn("cannot ask for the profiles of a job's stragglers", "job", a.JobID, "err", err)
			}
			mu.Unlock()
		}
	}
}
