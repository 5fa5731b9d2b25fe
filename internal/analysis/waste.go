package analysis

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// The cost of waste: CPU-hours and memory GB-hours allocated and used,
// and what went to failed, killed and speculative attempts (their work is
// thrown away) and to over-allocation (containers larger than what ran in
// them).

// Cost is what a set of attempts was given and used, and what of it was
// wasted. CPU in core-hours (a container's virtual cores over its life:
// store.Attempt's VCores, one where its agent did not say them, YARN's
// default mapreduce.*.cpu.vcores), memory in GB-hours (the container's
// memory.mb over its life; used: RSS over time).
type Cost struct {
	Attempts int `json:"attempts"`
	// Allocated and used.
	CPUHours       float64 `json:"cpu_hours"`
	UsedCPUHours   float64 `json:"used_cpu_hours"`
	MemGBHours     float64 `json:"memory_gb_hours"`
	UsedMemGBHours float64 `json:"used_memory_gb_hours"`
	// What the attempts that ended badly were given: failed (failed,
	// killed_memory, lost), killed (and run again), and the losing copies
	// of speculative execution (the speculative copy, or the original it
	// beat).
	Failed      Waste `json:"failed"`
	Killed      Waste `json:"killed"`
	Speculative Waste `json:"speculative"`
	// OverAllocated is what the other attempts were given and did not use.
	OverAllocated Waste `json:"over_allocated"`
	// WastedShare is the share of the allocated CPU-hours and GB-hours
	// (their sum in "units" weighed equally) that went to failed, killed
	// and speculative attempts (percent).
	WastedShare float64 `json:"wasted_percent"`
}

// Waste is CPU-hours and memory GB-hours that went to nothing.
type Waste struct {
	Attempts   int     `json:"attempts"`
	CPUHours   float64 `json:"cpu_hours"`
	MemGBHours float64 `json:"memory_gb_hours"`
}

func (w *Waste) add(n int, cpu, mem float64) {
	w.Attempts += n
	w.CPUHours += cpu
	w.MemGBHours += mem
}

// wasteKind is how an attempt's resources are counted: "" for work that
// counts (its over-allocation aside), or failed, killed, speculative. A
// killed attempt is waste when it lost to a speculative copy (or was one
// that lost: speculative) or when its task ran again (killed); one that
// nothing repeated was killed after its work, as a framework stops the
// containers of its finished tasks and executors (exit 143), and counts.
func wasteKind(a store.Attempt, l links) string {
	switch a.Outcome {
	case store.OutcomeFailed, store.OutcomeKilledMemory, store.OutcomeLost:
		return "failed"
	case store.OutcomeKilled:
		switch {
		case a.Speculative || l.speculated[a.AttemptID]:
			return "speculative"
		case l.retried[a.AttemptID]:
			return "killed"
		}
	}
	return ""
}

// links are the attempts that have a speculative copy, and those that
// were retried.
type links struct{ speculated, retried map[string]bool }

func linksOf(atts []store.Attempt) links {
	l := links{map[string]bool{}, map[string]bool{}}
	for _, a := range atts {
		switch {
		case a.RetryOf == "":
		case a.Speculative:
			l.speculated[a.RetryOf] = true
		default:
			l.retried[a.RetryOf] = true
		}
	}
	return l
}

// add counts an attempt in c.
func (c *Cost) add(a store.Attempt, kind string) {
	h := float64(a.DurationMs) / 3.6e6
	cpu, used := h*float64(cores(a)), float64(a.CPUMs)/3.6e6
	mem := float64(a.MemoryMB) / 1024 * h
	usedMem := a.RSSByteMs / (1 << 30) / 3.6e6
	c.Attempts++
	c.CPUHours += cpu
	c.UsedCPUHours += used
	c.MemGBHours += mem
	c.UsedMemGBHours += usedMem
	switch kind {
	case "failed":
		c.Failed.add(1, cpu, mem)
	case "killed":
		c.Killed.add(1, cpu, mem)
	case "speculative":
		c.Speculative.add(1, cpu, mem)
	default:
		c.OverAllocated.add(0, max(0, cpu-used), max(0, mem-usedMem))
		if cpu > used || mem > usedMem {
			c.OverAllocated.Attempts++
		}
	}
}

// cores is the virtual cores an attempt's container was allocated: its
// VCores, one when not known.
func cores(a store.Attempt) int64 { return max(a.VCores, 1) }

// finish computes the shares.
func (c *Cost) finish() {
	if all := c.CPUHours + c.MemGBHours; all > 0 {
		w := c.Failed.CPUHours + c.Failed.MemGBHours + c.Killed.CPUHours + c.Killed.MemGBHours +
			c.Speculative.CPUHours + c.Speculative.MemGBHours
		c.WastedShare = w / all * 100
	}
}

// JobCost is the cost of a job's task attempts (ApplicationMasters
// included: their containers are the job's too).
func JobCost(atts []store.Attempt) Cost {
	var c Cost
	l := linksOf(atts)
	for _, a := range atts {
		c.add(a, wasteKind(a, l))
	}
	c.finish()
	return c
}

// waste is the finding of a job whose failed, killed and speculative
// attempts took a share of what it was given.
func waste(j *Job) []Finding {
	c := JobCost(j.AttemptList)
	thrown := c.Failed.Attempts + c.Killed.Attempts + c.Speculative.Attempts
	if thrown == 0 {
		return nil
	}
	sev := grade(c.WastedShare/100, [4]float64{0.05, 0.15, 0.3, 0.5})
	if sev == None {
		sev = Low
	}
	var ids []string
	l := linksOf(j.AttemptList)
	for _, a := range j.AttemptList {
		if wasteKind(a, l) != "" {
			ids = append(ids, a.AttemptID)
		}
	}
	sort.Strings(ids)
	f := Finding{Severity: sev, AttemptIDs: ids,
		// (Three significant digits: a short job's seconds are not 0.00 core-h.)
		Message: fmt.Sprintf("%.0f%% of what the job was given went to attempts whose work was thrown away: %d failed (%.3g core-h, %.3g GB-h), %d killed (%.3g core-h, %.3g GB-h), %d lost to speculative execution (%.3g core-h, %.3g GB-h), of %.3g core-h and %.3g GB-h allocated.",
			c.WastedShare, c.Failed.Attempts, c.Failed.CPUHours, c.Failed.MemGBHours, c.Killed.Attempts, c.Killed.CPUHours, c.Killed.MemGBHours,
			c.Speculative.Attempts, c.Speculative.CPUHours, c.Speculative.MemGBHours, c.CPUHours, c.MemGBHours),
		Numbers: []Number{{"wasted_share", c.WastedShare, "percent"}, {"failed_attempts", float64(c.Failed.Attempts), "count"},
			{"failed_cpu_hours", c.Failed.CPUHours, "core-h"}, {"failed_gb_hours", c.Failed.MemGBHours, "GB-h"},
			{"killed_attempts", float64(c.Killed.Attempts), "count"}, {"killed_cpu_hours", c.Killed.CPUHours, "core-h"},
			{"killed_gb_hours", c.Killed.MemGBHours, "GB-h"}, {"speculative_attempts", float64(c.Speculative.Attempts), "count"},
			{"speculative_cpu_hours", c.Speculative.CPUHours, "core-h"}, {"speculative_gb_hours", c.Speculative.MemGBHours, "GB-h"},
			{"cpu_hours", c.CPUHours, "core-h"}, {"gb_hours", c.MemGBHours, "GB-h"}}}
	switch {
	case c.Failed.CPUHours+c.Failed.MemGBHours >= c.Speculative.CPUHours+c.Speculative.MemGBHours:
		f.Recommendation = "Find why the attempts failed (their exit codes and diagnostics on the attempt pages): each failure re-runs the task from the start. Out of memory: give them more."
	default:
		f.Recommendation = "Speculative copies that lose are work thrown away: where stragglers come from slow nodes, fix or exclude the nodes; otherwise make speculation less eager."
		f.Parameter, f.Value = "mapreduce.job.speculative.slowtaskthreshold", "2.0"
	}
	return []Finding{f}
}

// WasteGroup is the cost of the jobs (or attempts, by day) of one key.
type WasteGroup struct {
	Key  string `json:"key"`
	Jobs int    `json:"jobs"`
	Cost
	// Severities counts the group's jobs by their worst stored finding
	// (the overview shows them).
	Severities store.SeverityCounts `json:"-"`
}

// WasteReport is the cost of waste over a window, by a key.
type WasteReport struct {
	By        string       `json:"by"` // job, user, queue, day
	From      store.Time   `json:"from"`
	To        store.Time   `json:"to"`
	Jobs      int          `json:"jobs"`
	Truncated bool         `json:"truncated"` // more jobs than maxWasteJobs were active
	Total     Cost         `json:"total"`
	Groups    []WasteGroup `json:"groups"`
}

// maxWasteJobs bounds the jobs a waste report reads (each is read with its
// attempts).
const maxWasteJobs = 2000

// WasteBy is the cost of waste of the jobs f selects (f.From, f.To: the
// window; f.User, f.Queue, f.Visible as for Jobs), grouped by "job",
// "user", "queue" or "day" (UTC, of each attempt's start), the most wasted
// first (days in order).
func (a *Analyzer) WasteBy(ctx context.Context, f store.JobFilter, by string) (*WasteReport, error) {
	rs, err := a.wasteBy(ctx, f, by)
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// wasteKeys are the groupings of a waste report.
var wasteKeys = map[string]func(j *store.Job, at store.Attempt) string{
	"job":   func(j *store.Job, _ store.Attempt) string { return j.JobID },
	"user":  func(j *store.Job, _ store.Attempt) string { return j.User },
	"queue": func(j *store.Job, _ store.Attempt) string { return j.Queue },
	"day": func(_ *store.Job, at store.Attempt) string {
		return time.UnixMilli(int64(at.Start)).UTC().Format("2006-01-02")
	},
}

// wasteBy makes the waste reports of several groupings (bys) in one pass
// over the jobs and their attempts.
func (a *Analyzer) wasteBy(ctx context.Context, f store.JobFilter, bys ...string) ([]*WasteReport, error) {
	rs := make([]*WasteReport, len(bys))
	groups := make([]map[string]*WasteGroup, len(bys))
	for i, by := range bys {
		if wasteKeys[by] == nil {
			return nil, fmt.Errorf("waste by %q: by job, user, queue or day", by)
		}
		rs[i] = &WasteReport{By: by, From: store.Time(f.From), To: store.Time(f.To), Groups: []WasteGroup{}}
		groups[i] = map[string]*WasteGroup{}
	}
	f.Limit = 1000
	for f.Offset = 0; f.Offset < maxWasteJobs; f.Offset += f.Limit {
		page, err := a.st.Jobs(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("waste: jobs: %w", err)
		}
		for i := range page.Jobs {
			j := &page.Jobs[i]
			atts, err := a.jobAttempts(ctx, j)
			if err != nil {
				return nil, err
			}
			l := linksOf(atts)
			for b, r := range rs {
				r.Jobs++
				key := wasteKeys[r.By]
				counted := map[string]bool{}
				for _, at := range atts {
					k := key(j, at)
					g := groups[b][k]
					if g == nil {
						g = &WasteGroup{Key: k, Severities: store.NewSeverityCounts()}
						groups[b][k] = g
					}
					if !counted[k] {
						counted[k] = true
						g.Jobs++
						g.Severities.Add(j.WorstSeverity, 1)
					}
					kind := wasteKind(at, l)
					g.add(at, kind)
					r.Total.add(at, kind)
				}
			}
		}
		if f.Offset+len(page.Jobs) >= page.Total {
			break
		}
		if f.Offset+f.Limit >= maxWasteJobs {
			for _, r := range rs {
				r.Truncated = true
			}
		}
	}
	for b, r := range rs {
		r.Total.finish()
		for _, g := range groups[b] {
			g.finish()
			r.Groups = append(r.Groups, *g)
		}
		sort.Slice(r.Groups, func(x, y int) bool {
			gx, gy := r.Groups[x], r.Groups[y]
			if r.By == "day" {
				return gx.Key < gy.Key
			}
			if wx, wy := gx.wasted(), gy.wasted(); wx != wy {
				return wx > wy
			}
			return gx.Key < gy.Key
		})
	}
	return rs, nil
}

// wasted is what went to failed, killed and speculative attempts
// (core-hours and GB-hours added up, as WastedShare weighs them).
func (c *Cost) wasted() float64 {
	return c.Failed.CPUHours + c.Killed.CPUHours + c.Speculative.CPUHours + c.Failed.MemGBHours + c.Killed.MemGBHours + c.Speculative.MemGBHours
}

// jobAttempts reads a job's attempts (those of a finished job are kept
// while it is not seen again).
func (a *Analyzer) jobAttempts(ctx context.Context, j *store.Job) ([]store.Attempt, error) {
	if atts, ok := a.attempts.get(j.JobID, j.LastSeen); ok {
		return atts, nil
	}
	d, err := a.st.Job(ctx, j.JobID)
	if err != nil {
		return nil, fmt.Errorf("waste: job %s: %w", j.JobID, err)
	}
	linkAttempts(d.AttemptList)
	if d.State == store.StateFinished {
		a.attempts.put(j.JobID, j.LastSeen, d.AttemptList)
	}
	return d.AttemptList, nil
}

// attemptCache keeps finished jobs' attempts for waste reports, by job.
type attemptCache struct {
	mu   sync.Mutex
	jobs map[string]cachedAttempts
	n    int // attempts kept
}

type cachedAttempts struct {
	lastSeen store.Time
	atts     []store.Attempt
}

// maxCachedAttempts bounds the attempts attemptCache keeps.
const maxCachedAttempts = 200_000

func (c *attemptCache) get(id string, lastSeen store.Time) ([]store.Attempt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.jobs[id]
	return e.atts, ok && e.lastSeen == lastSeen
}

func (c *attemptCache) put(id string, lastSeen store.Time, atts []store.Attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil || c.n+len(atts) > maxCachedAttempts {
		c.jobs, c.n = map[string]cachedAttempts{}, 0
	}
	c.n += len(atts) - len(c.jobs[id].atts)
	c.jobs[id] = cachedAttempts{lastSeen, atts}
}

// JobWaste implements api.WasteAnalyzer.
func (a *Analyzer) JobWaste(ctx context.Context, f store.JobFilter, by string) (any, error) {
	return a.WasteBy(ctx, f, by)
}
