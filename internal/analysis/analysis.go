// Package analysis turns a job's stored data into findings: what is wrong,
// how badly (Dr. Elephant's severities), the numbers behind it, and the
// change to make. Heuristics run on running jobs as well as finished ones.
package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// Severity grades a finding.
type Severity int

// Severities, as Dr. Elephant names them.
const (
	None Severity = iota
	Low
	Moderate
	Severe
	Critical
)

var severityNames = [...]string{"none", "low", "moderate", "severe", "critical"}

func (s Severity) String() string {
	if s >= None && s <= Critical {
		return severityNames[s]
	}
	return "unknown"
}

// MarshalJSON implements json.Marshaler.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	for i, n := range severityNames {
		if n == v {
			*s = Severity(i)
			return nil
		}
	}
	return fmt.Errorf("unknown severity %q", v)
}

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
	Numbers        []Number `json:"numbers"`
}

// Report is the findings of one job.
type Report struct {
	JobID     string     `json:"job_id"`
	State     string     `json:"state"`
	Evaluated store.Time `json:"evaluated"`
	Worst     Severity   `json:"worst"`
	Findings  []Finding  `json:"findings"`
}

// Analyzer computes reports from a store.
type Analyzer struct {
	st  store.Store
	now func() time.Time

	mu      sync.Mutex
	reports map[string]*cachedReport // Findings' last reports, by job
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

// New returns an Analyzer over st.
func New(st store.Store) *Analyzer {
	return &Analyzer{st: st, now: time.Now, reports: map[string]*cachedReport{}}
}

// Job is what a heuristic looks at.
type Job struct {
	*store.JobDetail
	st    store.Store
	ctx   context.Context
	reads reads
	byID  map[string]int
}

// heuristic is one check. It returns findings, possibly none.
type heuristic struct {
	name string
	run  func(j *Job) []Finding
}

// heuristics, in the order reports list them.
var heuristics = []heuristic{
	{"straggler", stragglers},
	{"noisy_neighbours", noisyNeighbours},
	{"skew", skew},
	{"memory_headroom", memoryHeadroom},
	{"heap_headroom", heapHeadroom},
	{"memory_growth", memoryGrowth},
	{"cpu_efficiency", cpuEfficiency},
	{"gc_pressure", gcPressure},
	{"streaming_bottleneck", streamingBottleneck},
	{"short_lived_processes", shortLived},
	{"lost_processes", lostProcesses},
}

// Findings implements api.Analyzer: the job's report, made at most
// findingsTTL ago (its Evaluated says when); requests that arrive while it
// is being made wait for it rather than make it again.
func (a *Analyzer) Findings(ctx context.Context, jobID string) (any, error) {
	a.mu.Lock()
	c := a.reports[jobID]
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
		if old := a.reports[jobID]; old != nil {
			prev = old.kept // done: a report being made is waited for above
		}
		c = &cachedReport{done: make(chan struct{})}
		a.evictLocked()
		a.reports[jobID] = c
		a.mu.Unlock()
		c.r, c.kept, c.err = a.report(ctx, jobID, prev)
		c.at = a.now()
		close(c.done)
		if c.err != nil {
			a.mu.Lock()
			if a.reports[jobID] == c {
				delete(a.reports, jobID)
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
		return a.Report(ctx, jobID)
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
	r, _, err := a.report(ctx, jobID, nil)
	return r, err
}

// report analyses one job, taking again what prev (an earlier report's)
// read of the attempts that have not changed since (reusable); it returns
// what it used of the ended attempts, for the next.
func (a *Analyzer) report(ctx context.Context, jobID string, prev kept) (*Report, kept, error) {
	d, err := a.st.Job(ctx, jobID)
	if err != nil {
		return nil, nil, err
	}
	j := &Job{JobDetail: d, st: a.st, ctx: ctx, reads: reads{series: map[string]*store.SeriesResult{},
		owner: map[string]string{}, procs: map[string][]store.Process{}, heapMax: map[string]int64{},
		prev: reusable(prev, d.AttemptList, a.now())}}
	j.readAhead()
	r := &Report{JobID: jobID, State: d.State, Evaluated: store.Time(a.now().UnixMilli()), Findings: []Finding{}}
	for _, h := range heuristics {
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
		}
	}
	sort.SliceStable(r.Findings, func(x, y int) bool { return r.Findings[x].Severity > r.Findings[y].Severity })
	return r, j.kept(), nil
}

// byType groups the job's task attempts by type, leaving out ApplicationMasters.
func (j *Job) byType() map[string][]store.Attempt {
	out := map[string][]store.Attempt{}
	for _, a := range j.AttemptList {
		switch a.Type {
		case "map", "reduce", "tez", "executor":
			out[a.Type] = append(out[a.Type], a)
		}
	}
	return out
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
