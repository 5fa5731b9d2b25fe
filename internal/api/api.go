// Package api is taskscope's REST API (docs/api.md): jobs, attempts,
// processes, their time series, hosts, events and findings, as JSON.
package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Finding is one analysis result (see package analysis).
type Finding = any

// Analyzer produces the findings of a job.
type Analyzer interface {
	Findings(ctx context.Context, jobID string) (any, error)
}

// NeighbourHider is an Analyzer that also makes a job's findings without
// looking at what else ran on its hosts (no other job's attempts, nor
// their number or CPU), for readers the access file hides them from.
type NeighbourHider interface {
	FindingsWithoutNeighbours(ctx context.Context, jobID string) (any, error)
}

// HistoryAnalyzer is an Analyzer that also compares a job with the
// earlier runs of its recurring job (GET /api/v1/jobs/{job}/history):
// up to runs of them.
type HistoryAnalyzer interface {
	JobHistory(ctx context.Context, jobID string, runs int) (any, error)
}

// WasteAnalyzer is an Analyzer that also reports the cost of waste of the
// jobs f selects, grouped by job, user, queue or day (GET /api/v1/waste).
type WasteAnalyzer interface {
	JobWaste(ctx context.Context, f store.JobFilter, by string) (any, error)
}

// FindingSearcher is an Analyzer that also keeps every job's findings:
// it lists them across jobs (GET /api/v1/findings) and names its
// heuristics (the jobs' and findings' heuristic=).
type FindingSearcher interface {
	// StoredFindings leaves out, withoutNeighbours, the findings that
	// name what else ran on a job's hosts (NeighbourHider).
	StoredFindings(ctx context.Context, f store.FindingFilter, withoutNeighbours bool) (any, error)
	Heuristics() []string
}

// API serves the REST endpoints.
type API struct {
	st       store.Store
	analyzer Analyzer
	now      func() time.Time
	live     *Live
	authn    *auth.Authenticator
	routes   []string           // what Register added
	profiles *profiling.Control // nil: the server asks for no profiles (profiles.go)
}

// New returns the API over st. analyzer may be nil (no findings); authn
// nil, or without a login configured, lets everyone see everything.
func New(st store.Store, analyzer Analyzer, live *Live, authn *auth.Authenticator) *API {
	if authn == nil {
		authn = auth.New(auth.Options{})
	}
	return &API{st: st, analyzer: analyzer, now: time.Now, live: live, authn: authn}
}

// Mux is what Register adds its routes to (an *http.ServeMux).
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Register adds the routes to mux. Every route identifies its reader
// first (401 or 403 without a login, when one is needed); then a route of
// a job (a path with {job}) checks that the reader may see the job, and a
// route of one of its attempts ({attempt}) that the attempt is in it,
// before its handler runs (route). Routes lists them.
func (a *API) Register(mux Mux) {
	a.route(mux, "GET /api/v1/jobs", a.jobs)
	a.route(mux, "GET /api/v1/jobs/{job}", a.job)
	a.route(mux, "GET /api/v1/jobs/{job}/series", a.jobSeries)
	a.route(mux, "GET /api/v1/jobs/{job}/events", a.jobEvents)
	a.route(mux, "GET /api/v1/jobs/{job}/findings", a.findings)
	a.route(mux, "GET /api/v1/jobs/{job}/history", a.history)
	a.route(mux, "GET /api/v1/waste", a.waste)
	a.route(mux, "GET /api/v1/overview", a.overview)
	a.route(mux, "GET /api/v1/heuristics", a.heuristics)
	a.route(mux, "GET /api/v1/findings", a.storedFindings)
	a.route(mux, "GET /api/v1/jobs/{job}/attempts/{attempt}", a.attempt)
	a.route(mux, "GET /api/v1/jobs/{job}/attempts/{attempt}/series", a.attemptSeries)
	a.route(mux, "GET /api/v1/processes/{key}/series", a.processSeries)
	a.operatorRoute(mux, "GET /api/v1/hosts", a.hosts)
	a.operatorRoute(mux, "GET /api/v1/hosts/{host}", a.host)
	a.route(mux, "GET /api/v1/events", a.events)
	a.route(mux, "GET /api/v1/metrics", a.metricCatalog)
	a.registerProfiles(func(pattern string, h http.HandlerFunc) { a.route(mux, pattern, h) })
	if a.live != nil {
		a.route(mux, "GET /api/v1/live", a.live.ServeHTTP)
	}
}

// Routes are the patterns Register added, in order.
func (a *API) Routes() []string { return slices.Clone(a.routes) }

// route adds a route for readers: h runs once the reader is identified
// and, for a route of a job or of one of its attempts, once checkPath
// found that they may see it. Every route of a job names it {job} and its
// attempt {attempt} (a wildcard named otherwise would not be checked:
// route refuses it).
func (a *API) route(mux Mux, pattern string, h http.HandlerFunc) { a.add(mux, pattern, false, h) }

// operatorRoute adds a route for operators only (403 for anyone else).
func (a *API) operatorRoute(mux Mux, pattern string, h http.HandlerFunc) {
	a.add(mux, pattern, true, h)
}

func (a *API) add(mux Mux, pattern string, operators bool, h http.HandlerFunc) {
	job, attempt := false, false
	for _, w := range wildcards.FindAllStringSubmatch(pattern, -1) {
		switch name := strings.TrimSuffix(w[1], "..."); {
		case name == "job":
			job = true
		case name == "attempt":
			attempt = true
		case strings.Contains(name, "job") || strings.Contains(name, "attempt"):
			panic(fmt.Sprintf("api: route %s: name a job's wildcard {job} and an attempt's {attempt}, which route checks, not {%s}", pattern, name))
		}
	}
	if attempt && !job {
		panic(fmt.Sprintf("api: route %s: an attempt's route is under its job's (/jobs/{job}/attempts/{attempt})", pattern))
	}
	var next http.Handler = h
	if job {
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := a.checkPath(r, attempt); err != nil {
				fail(w, err)
				return
			}
			h(w, r)
		})
	}
	a.routes = append(a.routes, pattern)
	mux.Handle(pattern, a.authn.Require(operators, next))
}

// wildcards finds the wildcards of a route's pattern.
var wildcards = regexp.MustCompile(`\{([^}]*)\}`)

// reader is who makes r, as Register's wrapper identified them (no one,
// who sees nothing, if a route was not wrapped).
func reader(r *http.Request) *auth.Identity {
	if id := auth.FromContext(r.Context()); id != nil {
		return id
	}
	return &auth.Identity{}
}

// The answers of a job, an attempt or a process that is unknown, or that
// the reader may not see: the same bytes for both (docs/security.md).
var (
	errNoJob     = notFound("job not found")
	errNoAttempt = notFound("attempt not found in this job")
)

// notFound is a 404 and its message, which says what was not found but
// never which id, nor why.
type notFound string

func (n notFound) Error() string        { return string(n) }
func (n notFound) Is(target error) bool { return target == store.ErrNotFound }

// checkPath returns nil if r's reader may see the job of r's path (and,
// if attempt, the attempt of the path is in that job); errNoJob or
// errNoAttempt otherwise. It reads whose the job is before anything else
// of it (store.ReadJobOwner: one read of a key, which costs about the
// same for a job that exists and one that does not), so that a job the
// reader may not see answers as an unknown one, in about the same time.
func (a *API) checkPath(r *http.Request, attempt bool) error {
	job := r.PathValue("job")
	if err := a.checkJob(r, job); err != nil {
		return err
	}
	if !attempt {
		return nil
	}
	j, err := store.ReadAttemptJob(r.Context(), a.st, r.PathValue("attempt"))
	if errors.Is(err, store.ErrNotFound) || err == nil && j != job {
		return errNoAttempt
	}
	return err
}

// checkJob returns nil if r's reader may see job, errNoJob if it is
// unknown or they may not see it. Operators see every job there is.
func (a *API) checkJob(r *http.Request, job string) error {
	o, err := store.ReadJobOwner(r.Context(), a.st, job)
	if errors.Is(err, store.ErrNotFound) || err == nil && !reader(r).Sees(o.User, o.Queue) {
		return errNoJob
	}
	return err
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

// writeJSON writes an answer: the bytes encoding/json writes (HTML
// escaped, map keys sorted), by github.com/segmentio/encoding/json,
// which writes them in half the time: a job of 10,000 attempts is 7.7 MB
// of JSON, and encoding it was the largest part of its answer's time
// (TestWriteJSONAsEncodingJSON, docs/scaling.md "Reads").
func writeJSON(w http.ResponseWriter, code int, v any) {
	startJSON(w, code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	enc.Encode(v)
}

// startJSON writes the status and headers of a JSON answer.
func startJSON(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
}

func fail(w http.ResponseWriter, err error) {
	var bad badRequest
	var no forbidden
	switch {
	case errors.As(err, &bad):
		writeJSON(w, http.StatusBadRequest, Error{bad.msg})
	case errors.As(err, &no):
		writeJSON(w, http.StatusForbidden, Error{no.Error()})
	case errors.Is(err, store.ErrUnknownMetric):
		writeJSON(w, http.StatusBadRequest, Error{err.Error()})
	case errors.Is(err, store.ErrNotFound):
		// What was not found, never which id, nor the store's words.
		msg := notFound("not found")
		errors.As(err, &msg)
		writeJSON(w, http.StatusNotFound, Error{string(msg)})
	case errors.Is(err, store.ErrUnavailable):
		// It passes; the reason names no address of the store's.
		w.Header().Set("Retry-After", retryUnavailable)
		writeJSON(w, http.StatusServiceUnavailable, Error{"the store is unavailable (" + store.UnavailableReason(err) + "); try again"})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeJSON(w, http.StatusServiceUnavailable, Error{"the query took too long"})
	default:
		writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
	}
}

// retryUnavailable is the Retry-After of an answer while the store cannot
// be reached (seconds): a ClickHouse server restarting takes a few.
const retryUnavailable = "5"

type forbidden string

func (f forbidden) Error() string { return string(f) }

type badRequest struct{ msg string }

func (b badRequest) Error() string { return b.msg }

func bad(format string, args ...any) error { return badRequest{fmt.Sprintf(format, args...)} }

// parseTime accepts unix milliseconds, RFC 3339, or a duration before now ("-1h").
func (a *API) parseTime(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 || ms > wire.MaxTimeMs {
			return 0, bad("%s: %d is not unix milliseconds from 1970 to 2100", name, ms)
		}
		return ms, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UnixMilli(), nil
	}
	if strings.HasPrefix(v, "-") {
		if d, err := time.ParseDuration(v[1:]); err == nil {
			return a.now().Add(-d).UnixMilli(), nil
		}
	}
	return 0, bad("%s: %q is not unix milliseconds, RFC 3339 or -<duration>", name, v)
}

func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, bad("%s must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}

func (a *API) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.JobFilter{User: q.Get("user"), Name: q.Get("name"), Queue: q.Get("queue"), State: q.Get("state"), Framework: q.Get("framework")}
	var err error
	if f.From, err = a.parseTime("from", q.Get("from")); err != nil {
		fail(w, err)
		return
	}
	if f.To, err = a.parseTime("to", q.Get("to")); err != nil {
		fail(w, err)
		return
	}
	if f.Limit, err = intParam(r, "limit", 50, 1, 1000); err != nil {
		fail(w, err)
		return
	}
	if f.Offset, err = intParam(r, "offset", 0, 0, math.MaxInt32); err != nil {
		fail(w, err)
		return
	}
	if f.State != "" && f.State != store.StateRunning && f.State != store.StateFinished {
		fail(w, bad("state must be running or finished"))
		return
	}
	if f.MinSeverity, f.Heuristic, err = a.severityParams(r); err != nil {
		fail(w, err)
		return
	}
	switch q.Get("sort") {
	case "", "start":
	case "severity":
		f.BySeverity = true
	default:
		fail(w, bad("sort must be start or severity"))
		return
	}
	f.CountSeverities = true
	if id := reader(r); !id.Operator {
		f.Visible = &store.Visible{Users: id.Users, Queues: id.Queues}
	}
	// Findings that name what else ran on a job's hosts are stored
	// restricted (package analysis): a reader the neighbours are hidden
	// from sees the severities of the others.
	f.WithoutRestricted = reader(r).HideNeighbours
	page, err := a.st.Jobs(r.Context(), f)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (a *API) job(w http.ResponseWriter, r *http.Request) {
	j, err := a.st.Job(r.Context(), r.PathValue("job"))
	if err == nil {
		err = a.worst(r.Context(), &j.Job, reader(r).HideNeighbours)
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJob(w, j)
}

// worst sets a job's worst severity and heuristics from its stored
// analysis, as the jobs list has them (withoutRestricted: as
// JobFilter.WithoutRestricted has them).
func (a *API) worst(ctx context.Context, j *store.Job, withoutRestricted bool) error {
	an, err := a.st.Analysis(ctx, j.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	fs, worst := an.Findings, an.Worst
	if withoutRestricted {
		fs, worst = store.Unrestricted(fs)
	}
	j.WorstSeverity = &worst
	j.Heuristics, _ = store.HeuristicsFound(fs)
	return nil
}

// severityParams reads min_severity and heuristic (a heuristic the
// analyzer has: 400 otherwise).
func (a *API) severityParams(r *http.Request) (*store.Severity, string, error) {
	q := r.URL.Query()
	var min *store.Severity
	if v := q.Get("min_severity"); v != "" {
		s, err := store.ParseSeverity(v)
		if err != nil {
			return nil, "", bad("min_severity: %v", err)
		}
		min = &s
	}
	h := q.Get("heuristic")
	if h == "" {
		return min, "", nil
	}
	fs, ok := a.analyzer.(FindingSearcher)
	if !ok {
		return nil, "", bad("heuristic: no analysis on this server")
	}
	for _, n := range fs.Heuristics() {
		if n == h {
			return min, h, nil
		}
	}
	return nil, "", bad("heuristic: no heuristic is named %q (%s)", h, strings.Join(fs.Heuristics(), ", "))
}

// storedFindings lists the stored findings of the jobs the reader sees,
// across jobs.
func (a *API) storedFindings(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.FindingFilter{User: q.Get("user"), Queue: q.Get("queue")}
	var err error
	if f.From, err = a.parseTime("from", q.Get("from")); err == nil {
		f.To, err = a.parseTime("to", q.Get("to"))
	}
	if err == nil {
		f.Limit, err = intParam(r, "limit", 100, 1, 1000)
	}
	if err == nil {
		f.Offset, err = intParam(r, "offset", 0, 0, math.MaxInt32)
	}
	if err == nil {
		f.MinSeverity, f.Heuristic, err = a.severityParams(r)
	}
	if err != nil {
		fail(w, err)
		return
	}
	fs, ok := a.analyzer.(FindingSearcher)
	if !ok {
		fail(w, fmt.Errorf("no stored findings on this server: %w", store.ErrNotFound))
		return
	}
	if id := reader(r); !id.Operator {
		f.Visible = &store.Visible{Users: id.Users, Queues: id.Queues}
	}
	v, err := fs.StoredFindings(r.Context(), f, reader(r).HideNeighbours)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// writeJob writes a job's answer as writeJSON would (the same bytes), its
// attempts encoded and written some at a time: a job of 10,000 attempts is
// 7.7 MB of JSON, which writeJSON holds whole, grown to that size, before
// it writes any. The library encodes every value; only the object is
// framed here: the job's fields, then its last one, attempt_list
// (JobDetail embeds Job, then has AttemptList).
func writeJob(w http.ResponseWriter, d *store.JobDetail) {
	const flags = json.EscapeHTML | json.SortMapKeys
	head, err := json.Append(make([]byte, 0, 64<<10), &d.Job, flags)
	if err == nil && (len(head) < 2 || head[len(head)-1] != '}') {
		err = fmt.Errorf("a job encoded as %.20q", head)
	}
	if err != nil {
		fail(w, err)
		return
	}
	startJSON(w, http.StatusOK)
	b := head[:len(head)-1]
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, `"attempt_list":`...)
	if d.AttemptList == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range d.AttemptList {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = json.Append(b, &d.AttemptList[i], flags); err != nil {
				// (The answer has begun: the client sees it cut.)
				return
			}
			if len(b) >= 32<<10 {
				if _, err := w.Write(b); err != nil {
					return
				}
				b = b[:0]
			}
		}
		b = append(b, ']')
	}
	w.Write(append(b, "}\n"...))
}

// attemptOf is the attempt of r's path, which the route's checkPath found
// in the path's job, visible to the reader.
func (a *API) attemptOf(r *http.Request) (*store.AttemptDetail, error) {
	d, err := a.st.Attempt(r.Context(), r.PathValue("attempt"))
	if err == nil && d.JobID != r.PathValue("job") {
		err = errNoAttempt // (moved since checkPath)
	}
	return d, err
}

func (a *API) attempt(w http.ResponseWriter, r *http.Request) {
	d, err := a.attemptOf(r)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (a *API) findings(w http.ResponseWriter, r *http.Request) {
	if a.analyzer == nil {
		writeJSON(w, http.StatusOK, map[string]any{"findings": []any{}})
		return
	}
	var f any
	var err error
	if reader(r).HideNeighbours {
		// What else ran on the job's hosts is operators' to see.
		nh, ok := a.analyzer.(NeighbourHider)
		if !ok {
			writeJSON(w, http.StatusOK, map[string]any{"findings": []any{}})
			return
		}
		f, err = nh.FindingsWithoutNeighbours(r.Context(), r.PathValue("job"))
	} else {
		f, err = a.analyzer.Findings(r.Context(), r.PathValue("job"))
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// history is the recurring job of a job: its runs up to this one, each
// against the median of the runs before it. The runs are of the job's user
// and queue: who sees the job sees them.
func (a *API) history(w http.ResponseWriter, r *http.Request) {
	runs, err := intParam(r, "runs", 30, 1, 200)
	if err != nil {
		fail(w, err)
		return
	}
	h, ok := a.analyzer.(HistoryAnalyzer)
	if !ok {
		fail(w, fmt.Errorf("no analysis of recurring jobs on this server: %w", store.ErrNotFound))
		return
	}
	v, err := h.JobHistory(r.Context(), r.PathValue("job"), runs)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// waste is the cost of waste of the jobs active in a window (from, to: the
// last 7 days by default), of a user or queue, by job, user, queue or day:
// of the jobs the reader sees.
func (a *API) waste(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by := q.Get("by")
	if by == "" {
		by = "user"
	}
	if by != "job" && by != "user" && by != "queue" && by != "day" {
		fail(w, bad("by must be job, user, queue or day"))
		return
	}
	f := store.JobFilter{User: q.Get("user"), Queue: q.Get("queue")}
	var err error
	if f.From, err = a.parseTime("from", q.Get("from")); err == nil {
		f.To, err = a.parseTime("to", q.Get("to"))
	}
	if err != nil {
		fail(w, err)
		return
	}
	if f.To == 0 {
		f.To = a.now().UnixMilli() + 1
	}
	if f.From == 0 {
		f.From = f.To - int64(7*24*time.Hour/time.Millisecond)
	}
	if f.From >= f.To {
		fail(w, bad("from must be before to"))
		return
	}
	if id := reader(r); !id.Operator {
		f.Visible = &store.Visible{Users: id.Users, Queues: id.Queues}
	}
	f.WithoutRestricted = reader(r).HideNeighbours // the groups' counts by severity
	wa, ok := a.analyzer.(WasteAnalyzer)
	if !ok {
		fail(w, fmt.Errorf("no waste analysis on this server: %w", store.ErrNotFound))
		return
	}
	v, err := wa.JobWaste(r.Context(), f, by)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (a *API) jobEvents(w http.ResponseWriter, r *http.Request) {
	evs, err := a.st.Events(r.Context(), store.EventFilter{JobID: r.PathValue("job"), Limit: 10000})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

func (a *API) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.EventFilter{Host: q.Get("host"), JobID: q.Get("job"), AttemptID: q.Get("attempt"), Kind: q.Get("kind")}
	var err error
	if f.From, err = a.parseTime("from", q.Get("from")); err == nil {
		f.To, err = a.parseTime("to", q.Get("to"))
	}
	if err == nil {
		f.Limit, err = intParam(r, "limit", 1000, 1, 100000)
	}
	if err == nil && !reader(r).Operator {
		// Events of hosts and of lost processes are operators'; a
		// reader lists those of a job they see.
		if f.JobID == "" {
			err = forbidden("only operators list events across jobs: give job=")
		} else {
			err = a.checkJob(r, f.JobID)
		}
	}
	if err != nil {
		fail(w, err)
		return
	}
	evs, err := a.st.Events(r.Context(), f)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

func (a *API) hosts(w http.ResponseWriter, r *http.Request) {
	hs, err := a.st.Hosts(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"hosts": hs})
}

// HostDetail is a host's attempts over a window and its orphan events.
type HostDetail struct {
	Host     string          `json:"host"`
	From     store.Time      `json:"from"`
	To       store.Time      `json:"to"`
	Attempts []store.Attempt `json:"attempts"`
	Events   []store.Event   `json:"events"`
}

func (a *API) host(w http.ResponseWriter, r *http.Request) {
	from, to, err := a.window(r, 6*time.Hour)
	if err != nil {
		fail(w, err)
		return
	}
	host := r.PathValue("host")
	atts, err := a.st.HostAttempts(r.Context(), host, from, to)
	if err != nil {
		fail(w, err)
		return
	}
	d := HostDetail{Host: host, From: store.Time(from), To: store.Time(to), Attempts: atts, Events: []store.Event{}}
	for _, kind := range []string{"orphan", "lost_jvm", "unknown_container", "outlived_job", "reap"} {
		evs, err := a.st.Events(r.Context(), store.EventFilter{Host: host, Kind: kind, From: from, To: to, Limit: 1000})
		if err != nil {
			fail(w, err)
			return
		}
		d.Events = append(d.Events, evs...)
	}
	writeJSON(w, http.StatusOK, d)
}

func (a *API) metricCatalog(w http.ResponseWriter, r *http.Request) {
	type m struct {
		Name string `json:"name"`
		Unit string `json:"unit"`
		Help string `json:"help"`
	}
	conv := func(ms []store.SeriesMetric) []m {
		out := []m{}
		for _, x := range ms {
			out = append(out, m{x.Name, x.Unit, x.Help})
		}
		return out
	}
	job := append(conv(store.AttemptSeriesMetrics), m{store.JobAttemptsMetric, "count", "attempts with data"})
	writeJSON(w, http.StatusOK, map[string]any{"process": conv(store.ProcessSeriesMetrics),
		"attempt": conv(store.AttemptSeriesMetrics), "job": job})
}
