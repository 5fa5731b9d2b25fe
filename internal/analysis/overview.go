package analysis

import (
	"context"
	"fmt"
	"sort"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// The overview (GET /api/v1/overview, the UI's first page): what is in
// trouble now and what the day cost, for the jobs a reader sees, read
// within bounds: the running jobs (the worst stored finding first), the
// runs of recurring jobs that regressed, the window's jobs by queue and by
// user (their cost, waste and findings by severity), the lost and
// orphaned task processes by host.

// OverviewFilter selects what an overview covers: the jobs active within
// [From, To) that Visible lets its reader see (nil: all, and the hosts'
// lost processes whatever their job).
type OverviewFilter struct {
	From, To int64
	Visible  *store.Visible
	// WithoutNeighbours: the severities are those of the findings that
	// name nothing else run on the jobs' hosts (stored Restricted).
	WithoutNeighbours bool
}

// Overview is the overview's answer.
type Overview struct {
	From store.Time `json:"from"`
	To   store.Time `json:"to"`
	// Running are the jobs running now, at most maxOverviewRunning, the
	// worst stored finding first (then the newest; those not analysed
	// yet last); RunningTotal counts them all.
	Running      []store.Job `json:"running"`
	RunningTotal int         `json:"running_total"`
	// Regressed are the stored findings of the recurring-job heuristic
	// in the window (runs outside the band of the runs before them), the
	// worst first, at most maxOverviewRegressed; RegressedTotal counts
	// them all.
	Regressed      []JobFinding `json:"regressed"`
	RegressedTotal int          `json:"regressed_total"`
	// Queues and Users are the window's jobs by queue and by user, the
	// most wasted first.
	Queues []OverviewGroup `json:"queues"`
	Users  []OverviewGroup `json:"users"`
	// Hosts are the hosts with lost or orphaned task processes in the
	// window, the most first.
	Hosts []LostOnHost `json:"hosts"`
	// Truncated: more jobs (or events) than the overview reads were in
	// the window; its figures are of those it read.
	Truncated bool `json:"truncated"`
}

// OverviewGroup is the window's jobs of one queue or user.
type OverviewGroup struct {
	Key  string `json:"key"`
	Jobs int    `json:"jobs"`
	// CPU and memory allocated, and what of them was wasted: given to
	// failed, killed and speculative attempts (WastedShare weighs them
	// together), and memory allocated but not used by the others.
	CPUHours             float64 `json:"cpu_hours"`
	MemGBHours           float64 `json:"memory_gb_hours"`
	WastedCPUHours       float64 `json:"wasted_cpu_hours"`
	WastedMemGBHours     float64 `json:"wasted_memory_gb_hours"`
	OverAllocatedGBHours float64 `json:"over_allocated_gb_hours"`
	WastedShare          float64 `json:"wasted_percent"`
	// Severities counts the group's jobs by the worst severity of their
	// stored findings (not_analysed: none stored yet).
	Severities store.SeverityCounts `json:"severity_counts"`
}

// LostOnHost counts a host's lost and orphaned task processes (distinct
// pids) and those the agent ended.
type LostOnHost struct {
	Host     string     `json:"host"`
	Lost     int        `json:"lost"`     // lost by their framework: lost_jvm, unknown_container, outlived_job
	Orphaned int        `json:"orphaned"` // their launcher died
	Reaped   int        `json:"reaped"`   // of those, ended by the agent
	Jobs     int        `json:"jobs"`
	Last     store.Time `json:"last"`
}

// Bounds of an overview.
const (
	maxOverviewRunning   = 50
	maxOverviewRegressed = 100
	maxOverviewEvents    = 2000 // of each kind
	maxOverviewJobs      = 2000 // a reader's jobs, to tell which events are theirs
)

// JobOverview implements api.OverviewAnalyzer.
func (a *Analyzer) JobOverview(ctx context.Context, from, to int64, visible *store.Visible, withoutNeighbours bool) (any, error) {
	return a.Overview(ctx, OverviewFilter{From: from, To: to, Visible: visible, WithoutNeighbours: withoutNeighbours})
}

// Overview answers GET /api/v1/overview.
func (a *Analyzer) Overview(ctx context.Context, f OverviewFilter) (*Overview, error) {
	o := &Overview{From: store.Time(f.From), To: store.Time(f.To), Running: []store.Job{}, Hosts: []LostOnHost{}}
	run, err := a.st.Jobs(ctx, store.JobFilter{State: store.StateRunning, Visible: f.Visible, Limit: maxOverviewRunning, BySeverity: true,
		WithoutRestricted: f.WithoutNeighbours})
	if err != nil {
		return nil, fmt.Errorf("overview: running jobs: %w", err)
	}
	o.Running, o.RunningTotal = run.Jobs, run.Total
	if o.Running == nil {
		o.Running = []store.Job{}
	}
	rs, err := a.wasteBy(ctx, store.JobFilter{From: f.From, To: f.To, Visible: f.Visible, WithoutRestricted: f.WithoutNeighbours},
		"queue", "user")
	if err != nil {
		return nil, fmt.Errorf("overview: %w", err)
	}
	o.Queues, o.Users = overviewGroups(rs[0]), overviewGroups(rs[1])
	o.Truncated = rs[0].Truncated
	if err := a.lostOnHosts(ctx, f, o); err != nil {
		return nil, err
	}
	if err := a.regressed(ctx, f, o); err != nil {
		return nil, err
	}
	return o, nil
}

// regressed lists the window's stored findings of the recurring-job
// heuristic, of the jobs the reader sees, the worst first.
func (a *Analyzer) regressed(ctx context.Context, f OverviewFilter, o *Overview) error {
	low := store.SeverityLow
	// A recurring job's finding names no neighbour: none is left out.
	v, err := a.StoredFindings(ctx, store.FindingFilter{MinSeverity: &low, Heuristic: recurringHeuristic, From: f.From, To: f.To,
		Visible: f.Visible, Limit: maxOverviewRegressed}, false)
	if err != nil {
		return fmt.Errorf("overview: regressed recurring jobs: %w", err)
	}
	page := v.(FindingPage) // StoredFindings answers the API with its page
	o.Regressed, o.RegressedTotal = page.Findings, page.Total
	sort.SliceStable(o.Regressed, func(x, y int) bool { return o.Regressed[x].Severity > o.Regressed[y].Severity })
	return nil
}

func overviewGroups(r *WasteReport) []OverviewGroup {
	out := make([]OverviewGroup, 0, len(r.Groups))
	for _, g := range r.Groups {
		out = append(out, OverviewGroup{Key: g.Key, Jobs: g.Jobs, CPUHours: g.CPUHours, MemGBHours: g.MemGBHours,
			WastedCPUHours:       g.Failed.CPUHours + g.Killed.CPUHours + g.Speculative.CPUHours,
			WastedMemGBHours:     g.Failed.MemGBHours + g.Killed.MemGBHours + g.Speculative.MemGBHours,
			OverAllocatedGBHours: g.OverAllocated.MemGBHours, WastedShare: g.WastedShare, Severities: g.Severities})
	}
	return out
}

// lostOnHosts counts the window's lost and orphaned task processes by
// host: all of them for a reader who sees every job, those of the jobs
// they see for the others.
func (a *Analyzer) lostOnHosts(ctx context.Context, f OverviewFilter, o *Overview) error {
	var mine map[string]bool
	if f.Visible != nil {
		mine = map[string]bool{}
		page, err := a.st.Jobs(ctx, store.JobFilter{From: f.From, To: f.To, Visible: f.Visible, Limit: maxOverviewJobs})
		if err != nil {
			return fmt.Errorf("overview: jobs: %w", err)
		}
		for _, j := range page.Jobs {
			mine[j.JobID] = true
		}
		o.Truncated = o.Truncated || page.Total > len(page.Jobs)
	}
	type proc struct {
		host string
		pid  int32
	}
	hosts := map[string]*LostOnHost{}
	jobs := map[string]map[string]bool{}
	seen := map[proc]bool{}
	var reaps []store.Event
	for _, kind := range []string{wire.EventOrphan, wire.EventLostJVM, wire.EventUnknownContainer, wire.EventOutlived, wire.EventReap} {
		evs, err := a.st.Events(ctx, store.EventFilter{Kind: kind, From: f.From, To: f.To, Limit: maxOverviewEvents})
		if err != nil {
			return fmt.Errorf("overview: %s events: %w", kind, err)
		}
		o.Truncated = o.Truncated || len(evs) >= maxOverviewEvents
		for _, e := range evs {
			if mine != nil && !mine[e.JobID] {
				continue
			}
			if kind == wire.EventReap {
				reaps = append(reaps, e)
				continue
			}
			h := hosts[e.Host]
			if h == nil {
				h = &LostOnHost{Host: e.Host}
				hosts[e.Host] = h
				jobs[e.Host] = map[string]bool{}
			}
			h.Last = max(h.Last, e.Time)
			if e.JobID != "" {
				jobs[e.Host][e.JobID] = true
			}
			p := proc{e.Host, e.PID}
			if seen[p] {
				continue
			}
			seen[p] = true
			if kind == wire.EventOrphan {
				h.Orphaned++
			} else {
				h.Lost++
			}
		}
	}
	reaped := map[proc]bool{}
	for _, e := range reaps {
		if p := (proc{e.Host, e.PID}); seen[p] && !reaped[p] {
			reaped[p] = true
			hosts[e.Host].Reaped++
		}
	}
	for host, h := range hosts {
		h.Jobs = len(jobs[host])
		o.Hosts = append(o.Hosts, *h)
	}
	sort.Slice(o.Hosts, func(x, y int) bool {
		hx, hy := o.Hosts[x], o.Hosts[y]
		if nx, ny := hx.Lost+hx.Orphaned-hx.Reaped, hy.Lost+hy.Orphaned-hy.Reaped; nx != ny {
			return nx > ny
		}
		return hx.Host < hy.Host
	})
	return nil
}
