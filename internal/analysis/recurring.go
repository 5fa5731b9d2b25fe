package analysis

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/taskscope/taskscope/internal/store"
)

// Recurring jobs: the runs of the same job (its name with what changes
// from run to run normalized, its user, its queue), each compared with
// the median of the runs before it.

// The parts of a job name that change from run to run, in the order they
// are replaced.
var nameParts = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	{regexp.MustCompile(`(?:19|20)\d\d[-/_.]?(?:0[1-9]|1[0-2])[-/_.]?(?:0[1-9]|[12]\d|3[01])(?:[T _-]?\d\d(?:[:_-]?\d\d){0,2}(?:\.\d+)?Z?)?`), "<date>"},
	{regexp.MustCompile(`(?i)\b(?:[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*|[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*)\b`), "<hex>"},
	{regexp.MustCompile(`(?:^|[^A-Za-z0-9])\d+`), "<n>"},
}

// NormalizeName is a job name with its run-specific parts (dates and
// times, UUIDs, hex ids of 8 digits or more, numbers that are not part of
// a word: "Stage-12", not "s3" or "v2") replaced by placeholders: the
// runs of a recurring job share it.
func NormalizeName(name string) string {
	for _, p := range nameParts {
		name = p.re.ReplaceAllStringFunc(name, func(m string) string {
			switch {
			case p.with == "<hex>" && len(m) < 8:
				return m // short words with digits (s3, h2o) are names
			case p.with == "<n>":
				return strings.TrimRight(m, "0123456789") + p.with // the separator before the number stays
			}
			return p.with
		})
	}
	return name
}

// literal is the longest part of a normalized name without placeholders:
// what the store is asked for (a substring of the name) before the names
// are compared.
func literal(norm string) string {
	best := ""
	for _, part := range regexp.MustCompile(`<(?:uuid|date|hex|n)>`).Split(norm, -1) {
		if len(part) > len(best) {
			best = part
		}
	}
	return best
}

// Run is one run of a recurring job with its measures.
type Run struct {
	JobID    string     `json:"job_id"`
	Name     string     `json:"name"`
	State    string     `json:"state"`
	Start    store.Time `json:"start"`
	End      store.Time `json:"end"`
	Duration float64    `json:"duration_s"`
	CPU      float64    `json:"cpu_s"`
	PeakRSS  float64    `json:"peak_rss_bytes"`
	GCShare  float64    `json:"gc_percent"`
	IO       float64    `json:"io_bytes"` // read and written
	// Outside lists the measures of this run outside its band (against the
	// median of the runs before it).
	Outside  []string `json:"outside"`
	lastSeen store.Time
}

// Measure is how a measure of a recurring job is judged.
type Measure struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Ratio float64 `json:"ratio"` // outside when more than Ratio × the median ...
	Delta float64 `json:"delta"` // ... and Delta more (in Unit)
	value func(r Run) float64
	sev   [4]float64 // by the ratio to the median
}

// measures are the measures of a run compared with its band: a run is
// outside it when a measure exceeds the median of the runs before it by
// more than a quarter and by an amount that matters (Cloudera Workload
// XM's rule for durations: 25 % and 5 minutes).
var measures = []Measure{
	{Name: "duration", Unit: "s", Ratio: 1.25, Delta: 300, value: func(r Run) float64 { return r.Duration },
		sev: [4]float64{1.25, 1.25, 1.5, 2.5}},
	{Name: "cpu", Unit: "s", Ratio: 1.25, Delta: 600, value: func(r Run) float64 { return r.CPU },
		sev: [4]float64{1.25, 1.5, 2, 4}},
	{Name: "peak_memory", Unit: "bytes", Ratio: 1.25, Delta: 256 << 20, value: func(r Run) float64 { return r.PeakRSS },
		sev: [4]float64{1.25, 1.5, 2, 4}},
	{Name: "gc", Unit: "percent", Ratio: 1.25, Delta: 5, value: func(r Run) float64 { return r.GCShare },
		sev: [4]float64{1.25, 1.5, 2, 4}},
	{Name: "io", Unit: "bytes", Ratio: 1.25, Delta: 1 << 30, value: func(r Run) float64 { return r.IO },
		sev: [4]float64{1.25, 1.5, 2, 4}},
}

// History is a recurring job: its runs, oldest first, and the band of
// each measure at its last run (the median of the baseline runs before
// it).
type History struct {
	Name     string `json:"name"` // normalized
	User     string `json:"user"`
	Queue    string `json:"queue"`
	JobID    string `json:"job_id"` // the run asked about
	Runs     []Run  `json:"runs"`
	Median   []Band `json:"median"`
	Baseline int    `json:"baseline_runs"` // how many runs the median is of
}

// Band is the median of a measure over the baseline runs and the value
// above which a run is outside it.
type Band struct {
	Measure string  `json:"measure"`
	Unit    string  `json:"unit"`
	Median  float64 `json:"median"`
	Limit   float64 `json:"limit"`
}

// The runs a run is compared with, at most; at least minBaseline.
const (
	baselineRuns = 10
	minBaseline  = 3
	// maxRunPages bounds the store reads that look for earlier runs.
	maxRunPages = 5
)

// runCache keeps the measures of finished runs (a run's measures read
// its attempts), by job id, as long as the run has not been seen again.
type runCache struct {
	mu   sync.Mutex
	runs map[string]Run
}

func (c *runCache) get(id string, lastSeen store.Time) (Run, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.runs[id]
	return r, ok && r.lastSeen == lastSeen
}

func (c *runCache) put(r Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil || len(c.runs) >= 4096 {
		c.runs = map[string]Run{}
	}
	c.runs[r.JobID] = r
}

// runOf measures a job.
func runOf(d *store.JobDetail) Run {
	r := Run{JobID: d.JobID, Name: d.Name, State: d.State, Start: d.Start, End: d.End, lastSeen: d.LastSeen,
		CPU: float64(d.CPUMs) / 1000, PeakRSS: float64(d.PeakRSS), Outside: []string{}}
	end := d.End
	if end == 0 {
		end = d.LastSeen
	}
	r.Duration = float64(end-d.Start) / 1000
	var gc, run float64
	for _, a := range d.AttemptList {
		r.IO += float64(a.ReadBytes + a.WriteBytes)
		gc += float64(a.GCTimeMs)
		run += runnable(a)
	}
	if run > 0 {
		r.GCShare = gc / run * 100
	}
	return r
}

// earlierRuns reads up to n runs of the job's recurring job that ended
// before it started, newest first.
func earlierRuns(ctx context.Context, st store.Store, cache *runCache, d *store.JobDetail, n int) ([]Run, error) {
	norm := NormalizeName(d.Name)
	if d.Name == "" || d.Start <= 0 {
		return nil, nil
	}
	f := store.JobFilter{User: d.User, Queue: d.Queue, Name: literal(norm), State: store.StateFinished,
		To: int64(d.Start), Limit: 200, Bare: true}
	var out []Run
	for page := 0; page < maxRunPages && len(out) < n; page++ {
		f.Offset = page * f.Limit
		p, err := st.Jobs(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("earlier runs of %q: %w", norm, err)
		}
		// The page's runs, up to n in all: those not in the cache read
		// together (store.ReadJobs).
		type run struct {
			id     string
			r      Run
			cached bool
		}
		var runs []run
		var read []string
		for _, j := range p.Jobs {
			if len(out)+len(runs) >= n {
				break
			}
			if j.JobID == d.JobID || j.User != d.User || j.Queue != d.Queue || NormalizeName(j.Name) != norm || j.End <= 0 || j.End > d.Start {
				continue
			}
			r, ok := cache.get(j.JobID, j.LastSeen)
			runs = append(runs, run{id: j.JobID, r: r, cached: ok})
			if !ok {
				read = append(read, j.JobID)
			}
		}
		var details map[string]*store.JobDetail
		if len(read) > 0 {
			if details, err = store.ReadJobs(ctx, st, read); err != nil {
				return nil, fmt.Errorf("runs of %q: %w", norm, err)
			}
		}
		for _, x := range runs {
			if !x.cached {
				jd := details[x.id]
				if jd == nil {
					return nil, fmt.Errorf("run %s of %q: %w", x.id, norm, store.ErrNotFound)
				}
				x.r = runOf(jd)
				cache.put(x.r)
			}
			out = append(out, x.r)
		}
		if len(p.Jobs) < f.Limit {
			break
		}
	}
	return out, nil
}

// bands are the medians of the measures over runs, with their limits.
func bands(runs []Run) []Band {
	out := []Band{}
	for _, m := range measures {
		var v []float64
		for _, r := range runs {
			v = append(v, m.value(r))
		}
		med := median(v)
		out = append(out, Band{Measure: m.Name, Unit: m.Unit, Median: med, Limit: math.Max(med*m.Ratio, med+m.Delta)})
	}
	return out
}

// judge marks the measures of r outside the bands of base (at least
// minBaseline runs) and returns a finding for them (nil if none).
func judge(r *Run, base []Run, norm string) *Finding {
	if len(base) < minBaseline {
		return nil
	}
	var texts []string
	var nums []Number
	sev := None
	for i, b := range bands(base) {
		m := measures[i]
		v := m.value(*r)
		if b.Median <= 0 || v <= b.Limit {
			continue
		}
		r.Outside = append(r.Outside, m.Name)
		ratio := v / b.Median
		sev = max(sev, grade(ratio, m.sev))
		texts = append(texts, fmt.Sprintf("%s %s against a median of %s (%.2f×)", m.Name, show(v, m.Unit), show(b.Median, m.Unit), ratio))
		nums = append(nums, Number{m.Name, v, m.Unit}, Number{"median_" + m.Name, b.Median, m.Unit}, Number{m.Name + "_ratio", ratio, "x"})
	}
	if len(texts) == 0 {
		return nil
	}
	nums = append(nums, Number{"baseline_runs", float64(len(base)), "count"})
	verb := "is"
	if r.State == store.StateRunning {
		verb = "is already"
	}
	return &Finding{Severity: sev, AttemptIDs: []string{},
		Message: fmt.Sprintf("This run of the recurring job %q %s outside its band (more than 25 %% above the median of its last %d runs, and by an amount that matters): %s.",
			norm, verb, len(base), strings.Join(texts, "; ")),
		Recommendation: "Compare it with an earlier run (the job's history page): more input, a changed setting or query, a slower node or a busier cluster. " +
			"Its other findings say where the time went.",
		Numbers: nums}
}

// show formats a value of a unit.
func show(v float64, unit string) string {
	switch unit {
	case "s":
		if v >= 120 {
			return fmt.Sprintf("%.1f min", v/60)
		}
		return fmt.Sprintf("%.0f s", v)
	case "bytes":
		return fmt.Sprintf("%.0f MB", v/(1<<20))
	case "percent":
		return fmt.Sprintf("%.1f %%", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

// recurringHeuristic names the heuristic of recurring jobs: the
// overview lists its stored findings.
const recurringHeuristic = "recurring"

// recurringReads: the job's earlier runs.
func recurringReads(_ *Job, p *plan) { p.history = true }

// recurring compares the job with the median of its last runs.
func recurring(j *Job) []Finding {
	r := runOf(j.JobDetail)
	if j.State == store.StateFinished {
		// The later runs' histories find it here, rather than read its
		// attempts again.
		j.runs.put(r)
	}
	base, err := j.history()
	if err != nil || len(base) < minBaseline {
		return nil
	}
	if f := judge(&r, base, NormalizeName(j.Name)); f != nil {
		return []Finding{*f}
	}
	return nil
}

// history returns the job's earlier runs, read ahead or now.
func (j *Job) history() ([]Run, error) {
	if !j.reads.historyRead && j.reads.prevHistory != nil {
		j.reads.history, j.reads.historyRead = j.reads.prevHistory.runs, true
	}
	if !j.reads.historyRead {
		runs, err := earlierRuns(j.ctx, j.st, j.runs, j.JobDetail, baselineRuns)
		if err != nil {
			j.fail(err)
			return nil, err
		}
		j.reads.history, j.reads.historyRead = runs, true
	}
	return j.reads.history, nil
}

// keptHistory is the earlier runs the report used, for the job's next
// pass (nil if it read none).
func (j *Job) keptHistory() *keptHistory {
	if !j.reads.historyRead {
		return nil
	}
	if h := j.reads.prevHistory; h != nil {
		k := *h
		k.since = j.reads.historySeen // (they held up to that look)
		return &k
	}
	return &keptHistory{runs: j.reads.history, since: j.reads.historySeen, name: j.Name, user: j.User, queue: j.Queue,
		start: j.Start}
}

// History is the recurring job of jobID: up to n of its runs up to this
// one, oldest first, each judged against the runs before it.
func (a *Analyzer) History(ctx context.Context, jobID string, n int) (*History, error) {
	d, err := a.st.Job(ctx, jobID)
	if err != nil {
		return nil, err
	}
	prev, err := earlierRuns(ctx, a.st, &a.runs, d, n-1+baselineRuns)
	if err != nil {
		return nil, err
	}
	runs := append([]Run{runOf(d)}, prev...) // newest first
	h := &History{Name: NormalizeName(d.Name), User: d.User, Queue: d.Queue, JobID: jobID, Runs: []Run{}, Median: []Band{}}
	for i := range runs {
		if i >= n {
			break
		}
		base := runs[i+1 : min(len(runs), i+1+baselineRuns)]
		judge(&runs[i], base, h.Name)
		if i == 0 {
			h.Baseline = len(base)
			if len(base) > 0 {
				h.Median = bands(base)
			}
		}
		h.Runs = append(h.Runs, runs[i])
	}
	sort.SliceStable(h.Runs, func(x, y int) bool { return h.Runs[x].Start < h.Runs[y].Start })
	return h, nil
}

// JobHistory implements api.HistoryAnalyzer.
func (a *Analyzer) JobHistory(ctx context.Context, jobID string, runs int) (any, error) {
	return a.History(ctx, jobID, runs)
}
