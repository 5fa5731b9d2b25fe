// Package analysis turns a job's stored data into findings: what is wrong,
// how badly (Dr. Elephant's severities), the numbers behind it, and the
// change to make. Heuristics run on running jobs as well as finished ones.
package analysis

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// Severity grades a finding (store.Severity: the store selects jobs by
// it).
type Severity = store.Severity

// Severities, as Dr. Elephant names them.
const (
	None     = store.SeverityNone
	Low      = store.SeverityLow
	Moderate = store.SeverityModerate
	Severe   = store.SeveritySevere
	Critical = store.SeverityCritical
)

// grade maps a value to a severity by ascending thresholds (low, moderate,
// severe, critical), as Dr. Elephant's heuristics do.
func grade(v float64, t [4]float64) Severity {
	s := None
	for i, x := range t {
		if v >= x {
			s = Severity(i + 1)
		}
	}
	return s
}

// gradeBelow is grade for values where smaller is worse.
func gradeBelow(v float64, t [4]float64) Severity {
	s := None
	for i, x := range t {
		if v <= x {
			s = Severity(i + 1)
		}
	}
	return s
}

// Number is one figure behind a finding.
type Number struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Finding is one result of a heuristic.
type Finding struct {
	Heuristic      string   `json:"heuristic"`
	Severity       Severity `json:"severity"`
	TaskType       string   `json:"task_type,omitempty"`
	AttemptIDs     []string `json:"attempt_ids"`
	Message        string   `json:"message"`
	Recommendation string   `json:"recommendation"`
	Parameter      string   `json:"parameter,omitempty"` // the setting to change
	Value          string   `json:"value,omitempty"`     // its recommended value
	Cause          string   `json:"cause,omitempty"`     // outlier: the main measured cause
	Numbers        []Number `json:"numbers"`
}

// Report is the findings of one job.
type Report struct {
	JobID     string     `json:"job_id"`
	State     string     `json:"state"`
	Evaluated store.Time `json:"evaluated"`
	Worst     Severity   `json:"worst"`
	Findings  []Finding  `json:"findings"`
	// Path is the critical path, the waves and the what-ifs (nil for a
	// job without task attempts).
	Path *Path `json:"critical_path,omitempty"`
	// Version is the analysis' (stored.go): of this server, or of the
	// one that stored the report.
	Version string `json:"version"`
	// job is the job's summary as the report read it; hosts the hosts
	// of the attempts its findings name (Listener); readCPU the CPU its
	// reads took on threads of their own.
	job     store.Job
	hosts   map[string]string
	readCPU time.Duration
}

// Analyzer computes reports from a store.
type Analyzer struct {
	st       store.Store
	now      func() time.Time
	opt      Options
	version  string          // Revision and Options.Build
	settings string          // Options.Settings.Text()
	skip     map[string]bool // Options.Settings.Skip

	mu              sync.Mutex
	reports         map[string]*cachedReport // Findings' last reports, by job
	runs            runCache                 // measures of recurring jobs' runs
	attempts        attemptCache             // finished jobs' attempts, for waste reports
	incr            map[string]incremental   // running jobs' reads, for their next analysis in the background
	live            *liveCache               // the gauges the background's passes read, as samples (live.go)
	bg              *background              // while Run runs
	late            lateLog                  // the finished jobs the background's looks saw written (history.go)
	reusedHistories atomic.Int64             // passes that took their last pass's earlier runs again
}

// cachedReport is a report being made (done open) or made at `at`.
type cachedReport struct {
	done chan struct{}
	at   time.Time
	r    *Report
	err  error
	kept kept // what r read of ended attempts, for the next report
}

// A job's findings are computed at most every findingsTTL for the API
// (every open page of a running job refetches them at each live update);
// at most maxCachedReports jobs are kept.
const (
	findingsTTL      = 5 * time.Second
	maxCachedReports = 512
)

// New returns an Analyzer over st with the default Options.
func New(st store.Store) *Analyzer { return NewWith(st, Options{}) }

// NewWith returns an Analyzer over st (Settings.Check says whether its
// settings hold; heuristics it does not know are not skipped).
func NewWith(st store.Store, o Options) *Analyzer {
	o.defaults()
	a := &Analyzer{st: st, now: o.Now, opt: o, reports: map[string]*cachedReport{}, incr: map[string]incremental{},
		live:    newLiveCache(o.MaxLiveSamples),
		version: fmt.Sprintf("%d+%s", Revision, o.Build), settings: o.Settings.Text(), skip: map[string]bool{}}
	for _, h := range o.Settings.Skip {
		a.skip[h] = true
	}
	return a
}

// Job is what a heuristic looks at.
type Job struct {
	*store.JobDetail
	st    store.Store
	ctx   context.Context
	reads reads
	byID  map[string]int
	err   error // the first store error met: the report fails with it

	medians map[string]typeStats       // by task type
	types   map[string][]store.Attempt // byType's
	// waveSets are waves' (nil: not made yet).
	waveSets []waveSet
	// private: what else ran on the job's hosts is not looked at
	// (FindingsWithoutNeighbours).
	private bool
	runs    *runCache       // the analyzer's
	skip    map[string]bool // heuristics not run (Settings.Skip)
	// readCPU is the CPU of its reads made on threads of their own
	// (atOnce), in ns.
	readCPU atomic.Int64
	// live keeps the gauges it reads, as samples (a background pass's;
	// nil: read whole); now is the analyser's clock.
	live *liveCache
	now  func() time.Time
}

// fail records a store error met while reading for the report: the report
// fails with the first (a heuristic that met one says nothing rather than
// something made of half its data).
func (j *Job) fail(err error) {
	if err != nil && j.err == nil {
		j.err = err
	}
}

// heuristic is one check: what it reads beyond the job's summaries
// (reads, nil when the summaries are all it needs: the report reads what
// all of them name at once, before any runs) and what it computes (run,
// which returns findings, possibly none, and finds what it named read).
// Adding one is adding it to heuristics.
type heuristic struct {
	name  string
	reads func(j *Job, p *plan)
	run   func(j *Job) []Finding
}

// heuristics, in the order reports list findings of equal severity.
var heuristics = []heuristic{
	{"straggler", nil, stragglers},
	{"noisy_neighbours", neighbourReads, noisyNeighbours},
	{"outlier", outlierReads, outliers},
	{"skew", nil, skew},
	{"last_wave", nil, lastWave},
	{recurringHeuristic, recurringReads, recurring},
	{"waste", nil, waste},
	{"memory_headroom", nil, memoryHeadroom},
	{"heap_headroom", heapReads, heapHeadroom},
	{"memory_growth", growthReads, memoryGrowth},
	{"cpu_efficiency", nil, cpuEfficiency},
	{"gc_pressure", nil, gcPressure},
	{"streaming_bottleneck", streamingReads, streamingBottleneck},
	{"short_lived_processes", shortLivedReads, shortLived},
	{"lost_processes", lostReads, lostProcesses},
}

// heuristicRank is each heuristic's place in heuristics.
var heuristicRank = func() map[string]int {
	m := map[string]int{}
	for i, h := range heuristics {
		m[h.name] = i
	}
	return m
}()

// Findings implements api.Analyzer: the job's report, made at most
// findingsTTL ago (its Evaluated says when); requests that arrive while it
// is being made wait for it rather than make it again.
//
// A finished job's report is the one stored (by the background analyser,
// or by an earlier request) while it is current: made of the job as it
// is, by this version with these settings. A report made here of a
// finished job is stored.
func (a *Analyzer) Findings(ctx context.Context, jobID string) (any, error) {
	return a.findings(ctx, jobID, false)
}

// FindingsWithoutNeighbours is Findings made without looking at what else
// ran on the job's hosts (the access file's "neighbours operators": no
// other job's attempt, nor their number or CPU, in what a reader who is
// not an operator is shown): the noisy-neighbour finding and an outlier's
// wait for a CPU say what was measured of the job's own attempts alone.
func (a *Analyzer) FindingsWithoutNeighbours(ctx context.Context, jobID string) (any, error) {
	return a.findings(ctx, jobID, true)
}

func (a *Analyzer) findings(ctx context.Context, jobID string, private bool) (any, error) {
	key := jobID
	if private {
		key = "\x00private " + jobID
	}
	a.mu.Lock()
	c := a.reports[key]
	if c != nil {
		select {
		case <-c.done:
			if a.now().Sub(c.at) >= findingsTTL || c.err != nil {
				c = nil
			}
		default:
		}
	}
	if c == nil {
		var prev kept
		if old := a.reports[key]; old != nil {
			prev = old.kept // done: a report being made is waited for above
		}
		c = &cachedReport{done: make(chan struct{})}
		a.evictLocked()
		a.reports[key] = c
		a.mu.Unlock()
		if private {
			// (The stored reports look at the neighbours: this one is
			// made, and not stored.)
			c.r, c.kept, c.err = a.report(ctx, jobID, prev, true)
		} else if c.r, c.err = a.storedReport(ctx, jobID); c.r != nil || c.err != nil {
			c.kept = prev
		} else {
			c.r, c.kept, c.err = a.report(ctx, jobID, prev, false)
			if c.err == nil && c.r.State == store.StateFinished && a.owns(jobID) {
				c.err = a.keep(ctx, c.r)
			}
		}
		c.at = a.now()
		close(c.done)
		if c.err != nil {
			a.mu.Lock()
			if a.reports[key] == c {
				delete(a.reports, key)
			}
			a.mu.Unlock()
		}
		return c.r, c.err
	}
	a.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.err != nil {
		r, _, err := a.report(ctx, jobID, nil, private)
		return r, err
	}
	return c.r, nil
}

// evictLocked makes room for one more report: the oldest finished one goes.
func (a *Analyzer) evictLocked() {
	if len(a.reports) < maxCachedReports {
		return
	}
	var oldest string
	var at time.Time
	for id, c := range a.reports {
		select {
		case <-c.done:
			if oldest == "" || c.at.Before(at) {
				oldest, at = id, c.at
			}
		default:
		}
	}
	delete(a.reports, oldest)
}

// Report analyses one job.
func (a *Analyzer) Report(ctx context.Context, jobID string) (*Report, error) {
	r, _, err := a.report(ctx, jobID, nil, false)
	return r, err
}

// report analyses one job, taking again what prev (an earlier report's)
// read of the attempts that have not changed since (reusable); it returns
// what it used of the ended attempts, for the next.
// Without neighbours (private), it does not look at what else ran on the
// job's hosts.
func (a *Analyzer) report(ctx context.Context, jobID string, prev kept, private bool) (*Report, kept, error) {
	r, k, _, err := a.reportWith(ctx, jobID, prev, nil, private)
	return r, k, err
}

// reportWith is report that takes again the earlier runs a running job's
// last pass read (hist), while they hold (takeHistory), and returns those
// it used.
func (a *Analyzer) reportWith(ctx context.Context, jobID string, prev kept, hist *keptHistory, private bool) (*Report, kept,
	*keptHistory, error) {
	o := a.reportsOf(ctx, []reportIn{{jobID: jobID, prev: prev, hist: hist}}, private)[0]
	return o.r, o.k, o.hist, o.err
}

// reportIn is a job to report on, with what its last report read (prev)
// and the earlier runs its last pass read (hist); live: its gauges are
// read through the analyser's live cache (the background's passes).
type reportIn struct {
	jobID string
	prev  kept
	hist  *keptHistory
	live  bool
}

// reportOut is a job's report as reportWith returns it.
type reportOut struct {
	r    *Report
	k    kept
	hist *keptHistory
	err  error
}

// reportsOf makes the reports of jobs, each as reportWith makes it, their
// reads together (readAhead: the jobs with their attempts in one read,
// their series in one, ...). The CPU of the reads made on threads of
// their own is the first report made's (readCPU).
func (a *Analyzer) reportsOf(ctx context.Context, ins []reportIn, private bool) []reportOut {
	seen := a.late.now()
	out := make([]reportOut, len(ins))
	ds := make([]*store.JobDetail, len(ins))
	if len(ins) == 1 {
		ds[0], out[0].err = a.st.Job(ctx, ins[0].jobID)
	} else {
		ids := make([]string, len(ins))
		for i, in := range ins {
			ids[i] = in.jobID
		}
		m, err := store.ReadJobs(ctx, a.st, ids)
		for i, in := range ins {
			switch {
			case err != nil:
				out[i].err = err
			case m[in.jobID] == nil:
				out[i].err = fmt.Errorf("cannot read job %s: %w", in.jobID, store.ErrNotFound)
			default:
				ds[i] = m[in.jobID]
			}
		}
	}
	var jobs []*Job
	at := make([]*Job, len(ins))
	for i, in := range ins {
		d := ds[i]
		if d == nil {
			continue
		}
		linkAttempts(d.AttemptList)
		j := &Job{JobDetail: d, st: a.st, ctx: ctx, runs: &a.runs, skip: a.skip, private: private, reads: reads{series: map[string]*store.SeriesResult{},
			owner: map[string]string{}, procs: map[string][]store.Process{}, heapMax: map[string]int64{},
			prev: reusable(in.prev, d.AttemptList, a.now()), prevHistory: a.takeHistory(in.hist, &d.Job), historySeen: seen},
			now: a.now}
		if in.live {
			j.live = a.live
		}
		jobs = append(jobs, j)
		at[i] = j
	}
	readAhead(jobs)
	var readCPU time.Duration
	if len(jobs) > 0 {
		readCPU = time.Duration(jobs[0].readCPU.Load())
	}
	for i, j := range at {
		if j == nil {
			continue
		}
		out[i].r, out[i].k, out[i].hist, out[i].err = a.findAll(j)
		if out[i].err == nil {
			out[i].r.readCPU, readCPU = readCPU, 0 // (the first report's)
		}
	}
	return out
}

// findAll runs the heuristics on a job whose reads were made ahead.
func (a *Analyzer) findAll(j *Job) (*Report, kept, *keptHistory, error) {
	d, jobID := j.JobDetail, j.JobID
	r := &Report{JobID: jobID, State: d.State, Evaluated: store.Time(a.now().UnixMilli()), Findings: []Finding{},
		Version: a.version, job: d.Job, hosts: map[string]string{}}
	if j.err != nil {
		return nil, nil, nil, fmt.Errorf("analysis of job %s: %w", jobID, j.err)
	}
	for _, h := range heuristics {
		if a.skip[h.name] {
			continue
		}
		for _, f := range h.run(j) {
			f.Heuristic = h.name
			if f.AttemptIDs == nil {
				f.AttemptIDs = []string{}
			}
			if f.Numbers == nil {
				f.Numbers = []Number{}
			}
			r.Findings = append(r.Findings, f)
			if f.Severity > r.Worst {
				r.Worst = f.Severity
			}
			for _, id := range f.AttemptIDs {
				if at, ok := j.attempt(id); ok {
					r.hosts[id] = at.Host
				}
			}
		}
	}
	if j.err != nil {
		return nil, nil, nil, fmt.Errorf("analysis of job %s: %w", jobID, j.err)
	}
	sortFindings(r.Findings)
	r.Path = j.criticalPath()
	if j.reads.prevHistory != nil && j.reads.historyRead {
		a.reusedHistories.Add(1)
	}
	return r, j.kept(), j.keptHistory(), nil
}

// linkAttempts links the retries and speculative copies of a job's
// attempts (store.LinkAttempts) when the store did not.
func linkAttempts(atts []store.Attempt) {
	for _, a := range atts {
		if a.RetryOf != "" || a.Speculative {
			return
		}
	}
	store.LinkAttempts(atts)
}

// sortFindings puts findings worst first; those of equal severity in the
// order of heuristics, then by task type, first attempt and message, so
// that a report lists the same findings in the same order every time.
func sortFindings(fs []Finding) {
	first := func(f Finding) string {
		if len(f.AttemptIDs) > 0 {
			return f.AttemptIDs[0]
		}
		return ""
	}
	sort.SliceStable(fs, func(x, y int) bool {
		a, b := fs[x], fs[y]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if ra, rb := heuristicRank[a.Heuristic], heuristicRank[b.Heuristic]; ra != rb {
			return ra < rb
		}
		if a.TaskType != b.TaskType {
			return a.TaskType < b.TaskType
		}
		if first(a) != first(b) {
			return first(a) < first(b)
		}
		return a.Message < b.Message
	})
}

// byType groups the job's task attempts by type, leaving out
// ApplicationMasters (grouped once: the heuristics ask for it dozens of
// times, an outlier's slow-node check once each, and a job of 10,000
// attempts took 30 % of its analysis' CPU grouping them again). Its
// callers read the groups and do not change them.
func (j *Job) byType() map[string][]store.Attempt {
	if j.types != nil {
		return j.types
	}
	j.types = map[string][]store.Attempt{}
	for _, a := range j.AttemptList {
		if isTask(a) {
			j.types[a.Type] = append(j.types[a.Type], a)
		}
	}
	return j.types
}

// isTask reports whether a is a task attempt (not an ApplicationMaster).
func isTask(a store.Attempt) bool {
	switch a.Type {
	case "map", "reduce", "tez", "executor":
		return true
	}
	return false
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// elapsed is how long an attempt has run so far (to now for running ones).
func elapsed(a store.Attempt) float64 {
	return float64(a.DurationMs) / 1000
}
