package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// The point budget of a series: the server picks the bucket width so that a
// chart gets at most this many points.
const (
	defaultPoints = 300
	maxPoints     = 5000
	// maxMetrics bounds the metrics of one query (the catalogs hold about
	// 30): a query costs its metrics times its points at most.
	maxMetrics = 32
)

// niceSteps are the bucket widths, in ms, that series are cut into.
var niceSteps = []int64{1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000, 3600000,
	7200000, 21600000, 43200000, 86400000}

// Step returns the smallest nice bucket width that keeps [from, to) within
// points buckets once from is aligned down on the width (as seriesQuery
// aligns it).
func Step(from, to int64, points int) int64 {
	fits := func(s int64) bool {
		aligned := from - mod(from, s)
		return (to-aligned+s-1)/s <= int64(points)
	}
	for _, s := range niceSteps {
		if fits(s) {
			return s
		}
	}
	s := niceSteps[len(niceSteps)-1]
	for !fits(s) {
		s *= 2
	}
	return s
}

// mod is the remainder of a by b, from 0 to b-1 also for a negative a.
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// seriesQuery reads from, to, metrics and points, with defaults from the
// thing's own life (start .. end, or now while it runs).
func (a *API) seriesQuery(r *http.Request, q *store.SeriesQuery, start, end int64) error {
	v := r.URL.Query()
	var err error
	if q.From, err = a.parseTime("from", v.Get("from")); err != nil {
		return err
	}
	if q.To, err = a.parseTime("to", v.Get("to")); err != nil {
		return err
	}
	if q.From == 0 {
		q.From = start
	}
	if q.To == 0 {
		q.To = end
		if q.To == 0 {
			q.To = a.now().UnixMilli()
		}
		q.To++ // the last sample is in
	}
	if q.To <= q.From {
		return bad("from must be before to")
	}
	points, err := intParam(r, "points", defaultPoints, 1, maxPoints)
	if err != nil {
		return err
	}
	q.Step = Step(q.From, q.To, points)
	if v.Get("step") != "" {
		// A width the client asks for: that of a series it has, whose
		// last buckets it fetches again (a live chart).
		step, err := intParam(r, "step", 0, 1000, 1<<30)
		if err != nil {
			return err
		}
		q.Step = int64(step)
	}
	// Align buckets on the step so that charts of one page line up.
	q.From -= mod(q.From, q.Step)
	if q.Buckets() > maxPoints {
		return bad("step %d ms makes more than %d buckets of this window", q.Step, maxPoints)
	}
	if m := v.Get("metrics"); m != "" {
		if n := strings.Count(m, ",") + 1; n > maxMetrics {
			return bad("metrics: %d names, at most %d", n, maxMetrics)
		}
		q.Metrics = strings.Split(m, ",")
		for i, name := range q.Metrics {
			if slices.Contains(q.Metrics[:i], name) {
				return bad("metrics: %q is listed twice", name)
			}
		}
	}
	if _, err := store.LookupMetrics(q.Scope, q.Metrics); err != nil {
		return bad("%v", err)
	}
	return nil
}

func (a *API) jobSeries(w http.ResponseWriter, r *http.Request) {
	j, err := a.jobSummary(r.Context(), r.PathValue("job"))
	if err != nil {
		fail(w, err)
		return
	}
	q := store.SeriesQuery{Scope: store.ScopeJob, JobID: j.JobID}
	if err := a.seriesQuery(r, &q, int64(j.Start), int64(j.End)); err != nil {
		fail(w, err)
		return
	}
	a.serveSeries(w, r, q)
}

// jobSummary is the job id names (store.ReadJobSummary).
func (a *API) jobSummary(ctx context.Context, id string) (*store.Job, error) {
	return store.ReadJobSummary(ctx, a.st, id)
}

// attemptLife is what the series routes need of the attempt id names
// (store.ReadAttemptLife).
func (a *API) attemptLife(ctx context.Context, id string) (*store.AttemptLife, error) {
	return store.ReadAttemptLife(ctx, a.st, id)
}

func (a *API) attemptSeries(w http.ResponseWriter, r *http.Request) {
	d, err := a.attemptLife(r.Context(), r.PathValue("attempt"))
	if err == nil && d.JobID != r.PathValue("job") {
		err = errNoAttempt // (moved since checkPath)
	}
	if err != nil {
		fail(w, err)
		return
	}
	q := store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: d.AttemptID}
	if err := a.seriesQuery(r, &q, int64(d.Start), int64(d.End)); err != nil {
		fail(w, err)
		return
	}
	// The attempt just read, not read again (where the store can).
	res, err := store.ReadAttemptSeries(r.Context(), a.st, d, q)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *API) processSeries(w http.ResponseWriter, r *http.Request) {
	key, err := store.ParseKey(r.PathValue("key"))
	if err != nil {
		fail(w, bad("%v", err))
		return
	}
	// The process's life bounds the default window; the attempt page passes
	// its own from/to so that the charts line up.
	v := r.URL.Query()
	q := store.SeriesQuery{Scope: store.ScopeProcess, Process: key, AttemptID: v.Get("attempt")}
	if !reader(r).Operator {
		// A reader finds a process through an attempt of a job they
		// see (the store answers 404 for a process not in it).
		if q.AttemptID == "" {
			fail(w, forbidden("a process's series need attempt= (an attempt it ran in) unless you are an operator"))
			return
		}
		if err := a.checkAttempt(r, q.AttemptID); err != nil {
			fail(w, err)
			return
		}
	}
	if v.Get("from") == "" || v.Get("to") == "" {
		if v.Get("attempt") == "" {
			fail(w, bad("give from and to, or attempt"))
			return
		}
		d, err := a.attemptLife(r.Context(), v.Get("attempt"))
		if errors.Is(err, store.ErrNotFound) {
			err = errNoProcessAttempt
		}
		if err != nil {
			fail(w, err)
			return
		}
		if err := a.seriesQuery(r, &q, int64(d.Start), int64(d.End)); err != nil {
			fail(w, err)
			return
		}
	} else if err := a.seriesQuery(r, &q, 0, 0); err != nil {
		fail(w, err)
		return
	}
	res, err := a.st.Series(r.Context(), q)
	if errors.Is(err, store.ErrNotFound) {
		err = errNoProcess // unknown, or not in the attempt
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// errNoProcessAttempt answers a process's series asked through an
// attempt that is unknown, or of a job the reader may not see.
var errNoProcessAttempt = notFound("attempt not found")

// errNoProcess answers a process's series of a process that is unknown,
// or not in the attempt asked through.
var errNoProcess = notFound("process not found")

// checkAttempt returns nil if r's reader may see the job of attempt,
// errNoProcessAttempt if it is unknown or they may not. An unknown
// attempt costs the reads of a hidden one: the job of an attempt
// (store.ReadAttemptJob), then whose that job is, also when the attempt
// has none (the read of no job's owner).
func (a *API) checkAttempt(r *http.Request, attempt string) error {
	job, err := store.ReadAttemptJob(r.Context(), a.st, attempt)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	unknown := err != nil
	if err := a.checkJob(r, job); err != nil || unknown {
		if errors.Is(err, store.ErrNotFound) || unknown && err == nil {
			return errNoProcessAttempt
		}
		return err
	}
	return nil
}

func (a *API) serveSeries(w http.ResponseWriter, r *http.Request, q store.SeriesQuery) {
	res, err := a.st.Series(r.Context(), q)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
