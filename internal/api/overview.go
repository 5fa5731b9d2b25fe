package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// OverviewAnalyzer is an Analyzer that also makes the overview (GET
// /api/v1/overview): what is in trouble now and what the window cost, of
// the jobs visible (nil: all) active within [from, to).
type OverviewAnalyzer interface {
	JobOverview(ctx context.Context, from, to int64, visible *store.Visible) (any, error)
}

// overview answers GET /api/v1/overview?from=&to= (the last 24 hours by
// default), of the jobs the reader sees.
func (a *API) overview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := a.parseTime("from", q.Get("from"))
	var to int64
	if err == nil {
		to, err = a.parseTime("to", q.Get("to"))
	}
	if err != nil {
		fail(w, err)
		return
	}
	if to == 0 {
		to = a.now().UnixMilli() + 1
	}
	if from == 0 {
		from = to - int64(24*time.Hour/time.Millisecond)
	}
	if from >= to {
		fail(w, bad("from must be before to"))
		return
	}
	oa, ok := a.analyzer.(OverviewAnalyzer)
	if !ok {
		fail(w, fmt.Errorf("no overview on this server: %w", store.ErrNotFound))
		return
	}
	var vis *store.Visible
	if id := reader(r); !id.Operator {
		vis = &store.Visible{Users: id.Users, Queues: id.Queues}
	}
	v, err := oa.JobOverview(r.Context(), from, to, vis)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
