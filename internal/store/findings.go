package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// Stored findings: every job's analysis (package analysis makes it) kept
// beside its data, so that the jobs list and GET /api/v1/findings say
// what is wrong with jobs no one has opened. The store keeps what it is
// given and selects by it; what a finding says is opaque to it (Body).

// FindingStore is the part of Store that keeps the jobs' analyses.
type FindingStore interface {
	// PutAnalysis stores a job's analysis in place of the one stored
	// before (the latest Evaluated wins where two are stored at once).
	PutAnalysis(ctx context.Context, a *Analysis) error
	// Analysis returns a job's stored analysis; ErrNotFound if none.
	Analysis(ctx context.Context, jobID string) (*Analysis, error)
	// AnalysisStates returns the jobs whose summaries the store wrote at
	// or after since (AnalysisState.Changed: unix ms of the store's clock,
	// the order their data arrived in, whatever time the data says), as
	// Jobs lists them, each with the stamp of its stored analysis if one
	// was evaluated at or after since (nil: none; a store may give older
	// ones too), at most limit of them, those written last first. The
	// analyser compares the two to find the jobs to analyse. A store
	// finds them without reading every job it holds.
	AnalysisStates(ctx context.Context, since int64, limit int) ([]AnalysisState, error)
	// Findings lists stored findings across jobs: those of the jobs that
	// started last first, each job's in its analysis' order.
	Findings(ctx context.Context, f FindingFilter) (FindingPage, error)
}

// AnalysesPutter is a FindingStore that stores many analyses together
// (the background analyser's passes over running jobs store tens at
// once): PutAnalyses is PutAnalysis of each, in one write; an error may
// leave some stored and others not. Without it, they are stored one by
// one.
type AnalysesPutter interface {
	PutAnalyses(ctx context.Context, as []*Analysis) error
}

// Severity grades a finding (Dr. Elephant's scale).
type Severity int8

// Severities.
const (
	SeverityNone Severity = iota
	SeverityLow
	SeverityModerate
	SeveritySevere
	SeverityCritical
)

var severityNames = [...]string{"none", "low", "moderate", "severe", "critical"}

// Severities are the severities, from none to critical.
var Severities = []Severity{SeverityNone, SeverityLow, SeverityModerate, SeveritySevere, SeverityCritical}

func (s Severity) String() string {
	if s >= SeverityNone && s <= SeverityCritical {
		return severityNames[s]
	}
	return "unknown"
}

// ParseSeverity reads a severity's name.
func ParseSeverity(v string) (Severity, error) {
	for i, n := range severityNames {
		if n == v {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("unknown severity %q: none, low, moderate, severe or critical", v)
}

// MarshalJSON implements json.Marshaler.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	x, err := ParseSeverity(v)
	if err != nil {
		return err
	}
	*s = x
	return nil
}

// Analysis is a job's analysis as it is stored: the job as it was
// analysed, the stamp that says when and how, and its findings.
type Analysis struct {
	JobID, Name, User, Queue string
	Start                    Time // the job's
	AnalysisStamp
	// Worst is the highest severity of Findings (SeverityNone if none).
	Worst    Severity
	Findings []StoredFinding
	// Report is the rest of what the analysis made of the job (its
	// critical path), as JSON: opaque to the store.
	Report json.RawMessage
}

// AnalysisStamp says when and how an analysis was made: what the
// analyser compares with a job's state to tell whether it must analyse it
// again.
type AnalysisStamp struct {
	Evaluated Time
	// Version is the analysis' version, Settings its settings (a digest,
	// or their text), Mark what it made of the job's summary (its digest):
	// the store keeps them as they are given.
	Version, Settings string
	Mark              uint64
	// LastSeen is the job's last sighting when it was analysed; Ended,
	// that it had finished.
	LastSeen Time
	Ended    bool
}

// StoredFinding is one finding: its heuristic and severity, by which the
// store selects, and the finding itself as JSON (opaque to the store).
// Restricted findings are not for every reader of their job (the
// analysis says which and for whom): the filters' WithoutRestricted leave
// them out, and the job's worst severity and heuristics are then those of
// the others.
type StoredFinding struct {
	Heuristic  string
	Severity   Severity
	Body       json.RawMessage
	Restricted bool
}

// Unrestricted are the findings of fs that are not Restricted, and their
// worst severity (SeverityNone if none): what a store keeps of an analysis
// for the filters' WithoutRestricted.
func Unrestricted(fs []StoredFinding) (out []StoredFinding, worst Severity) {
	for _, f := range fs {
		if !f.Restricted {
			out = append(out, f)
			worst = max(worst, f.Severity)
		}
	}
	return out, worst
}

// AnalysisState is a job, when the store last wrote its summary, and the
// stamp of its stored analysis (nil: none).
type AnalysisState struct {
	Job Job
	// Changed is when the store last wrote the job's summary (unix ms of
	// its clock; several servers writing one store: of the writer's).
	Changed Time
	Stored  *AnalysisStamp
}

// FindingFilter selects stored findings: each field as JobFilter's (From
// and To: of the jobs active within [From, To)). Empty fields match
// everything.
type FindingFilter struct {
	// MinSeverity: findings of this severity or worse (nil: any).
	MinSeverity *Severity
	Heuristic   string
	User, Queue string
	From, To    int64
	Limit       int // default 100, at most 1000
	Offset      int
	Visible     *Visible
	// WithoutRestricted leaves out the Restricted findings (and selects
	// jobs by the worst of the others).
	WithoutRestricted bool
}

// FindingPage is one page of stored findings, and how many match.
type FindingPage struct {
	Findings []FindingRow
	Total    int
}

// FindingRow is a stored finding with its job.
type FindingRow struct {
	JobID, Name, User, Queue string
	Start                    Time // the job's
	Ended                    bool // the job had finished when analysed
	Evaluated                Time
	Finding                  StoredFinding
}

// HeuristicsFound are the heuristics of findings of at least low
// severity, in the order they first come, each with the worst severity of
// its findings: what a store keeps of an analysis to select jobs by
// (JobFilter.Heuristic).
func HeuristicsFound(fs []StoredFinding) (names []string, worst []Severity) {
	at := map[string]int{}
	for _, f := range fs {
		if f.Severity < SeverityLow {
			continue
		}
		i, ok := at[f.Heuristic]
		if !ok {
			at[f.Heuristic] = len(names)
			names, worst = append(names, f.Heuristic), append(worst, f.Severity)
			continue
		}
		worst[i] = max(worst[i], f.Severity)
	}
	return names, worst
}

// SeverityCounts are jobs counted by the worst severity of their stored
// analysis (JobPage.Severities): by name, and NotAnalysed for the jobs
// with none.
type SeverityCounts map[string]int

// NotAnalysed is the key of SeverityCounts for jobs not analysed yet.
const NotAnalysed = "not_analysed"

// NewSeverityCounts returns counts of 0 for every severity and NotAnalysed.
func NewSeverityCounts() SeverityCounts {
	c := SeverityCounts{NotAnalysed: 0}
	for _, s := range Severities {
		c[s.String()] = 0
	}
	return c
}

// Add counts n jobs of severity s (nil: not analysed).
func (c SeverityCounts) Add(s *Severity, n int) {
	if s == nil {
		c[NotAnalysed] += n
		return
	}
	c[s.String()] += n
}

// AtLeast is how many of the counted jobs have an analysis of severity
// min or worse (nil: all of them, analysed or not).
func (c SeverityCounts) AtLeast(min *Severity) int {
	n := 0
	for k, v := range c {
		if min == nil {
			n += v
			continue
		}
		if s, err := ParseSeverity(k); err == nil && s >= *min {
			n += v
		}
	}
	return n
}

// Replicas is a store that several servers share (ClickHouse behind
// several taskscope replicas) and that keeps which of them live, so that
// they can split work between them (package analysis: each job is
// analysed by one). Times are the store's clock, in whole seconds, so that
// servers whose clocks differ agree on ages.
type Replicas interface {
	// Replicas returns the store's time now and the latest beat of every
	// replica that ever beat.
	Replicas(ctx context.Context) (now int64, rs []Replica, err error)
	// Beat records r's beat (r.Beat, of the store's clock: as Replicas
	// said it).
	Beat(ctx context.Context, r Replica) error
}

// Replica is one server among those sharing a store, as its last beat
// says: since when it lives and when it last said so (unix seconds of
// the store's clock), and whether it has left.
type Replica struct {
	ID          string
	Since, Beat int64
	Left        bool
}
