package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/taskscope/taskscope/internal/store"
)

// Stored findings: every job's report is kept in the store
// (store.FindingStore) with the version of the analysis and the settings
// it was made with, and the mark of the job's data it was made of. The
// background analyser (background.go) makes and stores them; a finished
// job's page reads them (Findings) while they are current.

// Revision is the analysis' own version: raised when what the heuristics
// find of the same data changes. With taskscope's build version
// (Options.Build) it makes the version stored with every analysis; an
// analysis of another version is made again when it is read (Findings),
// or when its job's data changes.
const Revision = 2

// Settings are what the findings depend on beyond the data: an analysis
// made with other settings is made again when it is read. They are
// stored with the analysis as their JSON (SettingsText).
type Settings struct {
	// Skip names heuristics not to run (docs/analysis.md lists them).
	Skip []string `json:"skip,omitempty"`
}

// Check reports a setting that names no heuristic.
func (s Settings) Check() error {
	for _, h := range s.Skip {
		if _, ok := heuristicRank[h]; !ok {
			return fmt.Errorf("no heuristic is named %q: %s", h, HeuristicNames())
		}
	}
	return nil
}

// Text is the settings' canonical JSON: what is stored with an analysis.
func (s Settings) Text() string {
	c := Settings{Skip: slices.Clone(s.Skip)}
	slices.Sort(c.Skip)
	c.Skip = slices.Compact(c.Skip)
	b, _ := json.Marshal(c)
	return string(b)
}

// HeuristicNames are the names of the heuristics, in the order reports
// list findings of equal severity.
func HeuristicNames() []string {
	out := make([]string, len(heuristics))
	for i, h := range heuristics {
		out[i] = h.name
	}
	return out
}

// Mark is a digest of what a job's summary says of its data (its
// description, life, attempts and totals): an analysis stored with one
// mark is made again when the job's summary has another (new data came).
func Mark(j *store.Job) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%q|%q|%q|%d|%d|%d|%d|%d|%d|%d", j.Name, j.User, j.Queue, j.Start, j.LastSeen, j.Attempts, j.Running,
		j.CPUMs, j.PeakRSS, j.Hosts)
	return h.Sum64()
}

// toStored is r as the store keeps it: its job's summary as the report
// read it (its mark says which data it was made of).
func (a *Analyzer) toStored(r *Report) (*store.Analysis, error) {
	j := &r.job
	out := &store.Analysis{JobID: r.JobID, Name: j.Name, User: j.User, Queue: j.Queue, Start: j.Start, Worst: r.Worst,
		AnalysisStamp: store.AnalysisStamp{Evaluated: r.Evaluated, Version: a.version, Settings: a.settings, Mark: Mark(j),
			LastSeen: j.LastSeen, Ended: r.State == store.StateFinished}}
	for _, f := range r.Findings {
		b, err := json.Marshal(f)
		if err != nil {
			return nil, fmt.Errorf("cannot encode a finding of job %s: %w", r.JobID, err)
		}
		out.Findings = append(out.Findings, store.StoredFinding{Heuristic: f.Heuristic, Severity: f.Severity, Body: b,
			Restricted: namesNeighbours(&f)})
	}
	rest, err := json.Marshal(storedRest{Path: r.Path})
	if err != nil {
		return nil, fmt.Errorf("cannot encode the critical path of job %s: %w", r.JobID, err)
	}
	out.Report = rest
	return out, nil
}

// storedRest is what a stored analysis keeps of a report beyond its
// findings.
type storedRest struct {
	Path *Path `json:"critical_path,omitempty"`
}

// fromStored is the report a stored analysis keeps.
func fromStored(s *store.Analysis) (*Report, error) {
	r := &Report{JobID: s.JobID, State: store.StateRunning, Evaluated: s.Evaluated, Worst: s.Worst, Version: s.Version,
		Findings: make([]Finding, 0, len(s.Findings))}
	if s.Ended {
		r.State = store.StateFinished
	}
	for _, sf := range s.Findings {
		var f Finding
		if err := json.Unmarshal(sf.Body, &f); err != nil {
			return nil, fmt.Errorf("cannot read a stored finding of job %s: %w", s.JobID, err)
		}
		r.Findings = append(r.Findings, f)
	}
	if len(s.Report) > 0 {
		var rest storedRest
		if err := json.Unmarshal(s.Report, &rest); err != nil {
			return nil, fmt.Errorf("cannot read the stored critical path of job %s: %w", s.JobID, err)
		}
		r.Path = rest.Path
	}
	return r, nil
}

// current reports whether a stored analysis of job j (its summary now)
// holds: made of the finished job as it is (its mark), by this version
// with these settings.
func (a *Analyzer) current(s *store.Analysis, j *store.Job) bool {
	return s.Ended && j.State == store.StateFinished && s.Mark == Mark(j) && s.Version == a.version &&
		s.Settings == a.settings
}

// storedReport is the stored report of a finished job while it is
// current (nil otherwise).
func (a *Analyzer) storedReport(ctx context.Context, jobID string) (*Report, error) {
	j, err := store.ReadJobSummary(ctx, a.st, jobID)
	if err != nil || j.State != store.StateFinished {
		return nil, err
	}
	s, err := a.st.Analysis(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !a.current(s, j) {
		return nil, nil
	}
	return fromStored(s)
}

// JobFinding is a stored finding with its job (GET /api/v1/findings).
type JobFinding struct {
	JobID     string     `json:"job_id"`
	JobName   string     `json:"job_name"`
	User      string     `json:"user"`
	Queue     string     `json:"queue"`
	JobStart  store.Time `json:"job_start"`
	JobState  string     `json:"job_state"` // when it was analysed
	Evaluated store.Time `json:"evaluated"`
	Finding
}

// FindingPage is a page of stored findings across jobs.
type FindingPage struct {
	Findings []JobFinding `json:"findings"`
	Total    int          `json:"total"`
}

// StoredFindings implements api.FindingSearcher: the stored findings f
// selects, across jobs. Without neighbours, those that name what else
// ran on a job's hosts (other jobs' attempts, their number or CPU: the
// stored analyses look at them) are left out: they are stored Restricted
// (toStored), and the jobs are selected by the worst of the others. The
// job's own findings (FindingsWithoutNeighbours) say what its attempts
// measured alone.
func (a *Analyzer) StoredFindings(ctx context.Context, f store.FindingFilter, withoutNeighbours bool) (any, error) {
	f.WithoutRestricted = f.WithoutRestricted || withoutNeighbours
	p, err := a.st.Findings(ctx, f)
	if err != nil {
		return nil, err
	}
	out := FindingPage{Findings: make([]JobFinding, 0, len(p.Findings)), Total: p.Total}
	for _, r := range p.Findings {
		jf := JobFinding{JobID: r.JobID, JobName: r.Name, User: r.User, Queue: r.Queue, JobStart: r.Start,
			JobState: store.StateRunning, Evaluated: r.Evaluated}
		if r.Ended {
			jf.JobState = store.StateFinished
		}
		if err := json.Unmarshal(r.Finding.Body, &jf.Finding); err != nil {
			return nil, fmt.Errorf("cannot read a stored finding of job %s: %w", r.JobID, err)
		}
		if withoutNeighbours && namesNeighbours(&jf.Finding) {
			continue // stored by an analysis of Revision 1, before restrictions
		}
		out.Findings = append(out.Findings, jf)
	}
	return out, nil
}

// namesNeighbours reports whether f says what else ran on its attempts'
// hosts: the numbers of a finding made looking at the neighbours
// (neighbourLoad's) are among its own.
func namesNeighbours(f *Finding) bool {
	for _, n := range f.Numbers {
		if n.Name == "neighbours" || n.Name == "neighbour_cores" {
			return true
		}
	}
	return false
}

// Heuristics implements api.FindingSearcher: the heuristics' names.
func (a *Analyzer) Heuristics() []string { return HeuristicNames() }
