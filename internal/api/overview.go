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
// the jobs visible (nil: all) active within [from, to); withoutNeighbours,
// its severities are of the findings that name nothing else run on the
// jobs' hosts (store.JobFilter.WithoutRestricted).
type OverviewAnalyzer interface {
	JobOverview(ctx context.Context, from, to int64, visible *store.Visible, withoutNeighbours bool) (any, error)
}

// overview answers GET /api/v1/overview?from=&to= (the last 24 hours by
// default), of the jobs the reader sees.
func (a *API) overview(w http.ResponseWriter, r *http.Request) {
	from, to, err := a.window(r, 24*time.Hour)
	if err == nil && from >= to {
		err = bad("from must be before to")
	}
	if err != nil {
		fail(w, err)
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
	v, err := oa.JobOverview(r.Context(), from, to, vis, reader(r).HideNeighbours)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// heuristics names the analysis' heuristics, what the jobs' and
// findings' heuristic= take (the UI's filter offers them).
func (a *API) heuristics(w http.ResponseWriter, r *http.Request) {
	fs, ok := a.analyzer.(FindingSearcher)
	if !ok {
		fail(w, fmt.Errorf("no stored findings on this server: %w", store.ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Heuristics []string `json:"heuristics"`
	}{fs.Heuristics()})
}

// window reads a request's from and to: to defaults to now, from to def
// before to.
func (a *API) window(r *http.Request, def time.Duration) (from, to int64, err error) {
	q := r.URL.Query()
	if from, err = a.parseTime("from", q.Get("from")); err != nil {
		return 0, 0, err
	}
	if to, err = a.parseTime("to", q.Get("to")); err != nil {
		return 0, 0, err
	}
	if to == 0 {
		to = a.now().UnixMilli() + 1
	}
	if from == 0 {
		from = to - def.Milliseconds()
	}
	return from, to, nil
}
