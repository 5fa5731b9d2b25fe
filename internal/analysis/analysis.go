// Package analysis turns a job's stored data into findings: what is wrong,
// how badly (Dr. Elephant's severities), the numbers behind it, and the
// change to make. Heuristics run on running jobs as well as finished ones.
package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
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
}

// New returns an Analyzer over st.
func New(st store.Store) *Analyzer { return &Analyzer{st: st, now: time.Now} }

// Job is what a heuristic looks at.
type Job struct {
	*store.JobDetail
	st  store.Store
	ctx context.Context
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

// Findings implements api.Analyzer.
func (a *Analyzer) Findings(ctx context.Context, jobID string) (any, error) {
	return a.Report(ctx, jobID)
}

// Report analyses one job.
func (a *Analyzer) Report(ctx context.Context, jobID string) (*Report, error) {
	d, err := a.st.Job(ctx, jobID)
	if err != nil {
		return nil, err
	}
	j := &Job{JobDetail: d, st: a.st, ctx: ctx}
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
	return r, nil
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
