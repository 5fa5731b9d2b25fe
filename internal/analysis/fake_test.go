package analysis_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// fakeStore serves hand-built jobs, with no database: what a heuristic's
// thresholds are tested on. Only the reads the analysis makes are
// implemented (the embedded nil Store panics on the rest).
type fakeStore struct {
	store.Store
	jobs   map[string]*store.JobDetail
	events []store.Event
	// failOn makes the named read fail ("series", "host", "events",
	// "attempt", "jobs").
	failOn string
	mu     sync.Mutex // guards reads: a report's reads run at once
	reads  map[string]int
	// series are values of attempt metrics ("attempt/metric"): a series
	// query of the attempt answers one bucket of that value.
	series map[string]float64
}

var errBroken = fmt.Errorf("the store is broken")

func newFake(jobs ...*store.JobDetail) *fakeStore {
	f := &fakeStore{jobs: map[string]*store.JobDetail{}, reads: map[string]int{}}
	for _, j := range jobs {
		f.jobs[j.JobID] = j
	}
	return f
}

func (f *fakeStore) fail(what string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[what]++
	if f.failOn == what {
		return fmt.Errorf("%s: %w", what, errBroken)
	}
	return nil
}

func (f *fakeStore) Job(_ context.Context, id string) (*store.JobDetail, error) {
	if err := f.fail("job"); err != nil {
		return nil, err
	}
	j, ok := f.jobs[id]
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, store.ErrNotFound)
	}
	c := *j
	c.AttemptList = append([]store.Attempt(nil), j.AttemptList...)
	return &c, nil
}

func (f *fakeStore) Jobs(_ context.Context, flt store.JobFilter) (store.JobPage, error) {
	if err := f.fail("jobs"); err != nil {
		return store.JobPage{}, err
	}
	var out []store.Job
	for _, j := range f.jobs {
		if flt.User != "" && j.User != flt.User || flt.Queue != "" && j.Queue != flt.Queue ||
			flt.State != "" && j.State != flt.State ||
			flt.Name != "" && !strings.Contains(strings.ToLower(j.Name), strings.ToLower(flt.Name)) {
			continue
		}
		if flt.To > 0 && int64(j.Start) >= flt.To || flt.From > 0 && int64(max(j.End, j.LastSeen)) < flt.From {
			continue
		}
		if v := flt.Visible; v != nil && !slices.Contains(v.Users, j.User) && !slices.Contains(v.Queues, j.Queue) {
			continue
		}
		out = append(out, j.Job)
	}
	sort.Slice(out, func(x, y int) bool { return out[x].Start > out[y].Start })
	total := len(out)
	out = out[min(flt.Offset, len(out)):]
	if flt.Limit > 0 && len(out) > flt.Limit {
		out = out[:flt.Limit]
	}
	return store.JobPage{Jobs: out, Total: total}, nil
}

func (f *fakeStore) HostAttempts(_ context.Context, host string, from, to int64) ([]store.Attempt, error) {
	if err := f.fail("host"); err != nil {
		return nil, err
	}
	var out []store.Attempt
	for _, j := range f.jobs {
		for _, a := range j.AttemptList {
			if a.Host == host && int64(a.Start) < to && int64(a.End) >= from {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

func (f *fakeStore) Events(_ context.Context, flt store.EventFilter) ([]store.Event, error) {
	if err := f.fail("events"); err != nil {
		return nil, err
	}
	var out []store.Event
	for _, e := range f.events {
		if (flt.JobID == "" || e.JobID == flt.JobID) && (flt.Kind == "" || e.Kind == flt.Kind) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Findings: the fake keeps no analysis (the stores' own tests and
// internal/api's read stored ones).
func (f *fakeStore) Findings(_ context.Context, _ store.FindingFilter) (store.FindingPage, error) {
	if err := f.fail("findings"); err != nil {
		return store.FindingPage{}, err
	}
	return store.FindingPage{}, nil
}

func (f *fakeStore) Series(_ context.Context, q store.SeriesQuery) (*store.SeriesResult, error) {
	if err := f.fail("series"); err != nil {
		return nil, err
	}
	for _, m := range q.Metrics {
		if v, ok := f.series[q.AttemptID+"/"+m]; ok && q.AttemptID != "" {
			return &store.SeriesResult{Scope: q.Scope, Step: q.Step, From: q.From, To: q.To, Times: []int64{q.From},
				Series: []store.MetricSeries{{Metric: m, Values: []store.Float{store.Float(v)}}}}, nil
		}
	}
	return nil, fmt.Errorf("no series: %w", store.ErrNotFound)
}

func (f *fakeStore) Attempt(_ context.Context, id string) (*store.AttemptDetail, error) {
	if err := f.fail("attempt"); err != nil {
		return nil, err
	}
	for _, j := range f.jobs {
		for _, a := range j.AttemptList {
			if a.AttemptID == id {
				return &store.AttemptDetail{Attempt: a, ProcessList: []store.Process{}}, nil
			}
		}
	}
	return nil, fmt.Errorf("attempt %s: %w", id, store.ErrNotFound)
}

// t0 is when the hand-built jobs start.
var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// task is a hand-built attempt: it starts at s seconds after t0 and runs d
// seconds, using a CPU cpu of the time (1: one core), with GC, CPU wait,
// IO and memory as given.
type task struct {
	typ, host    string
	s, d         float64
	cpu          float64 // share of a core
	gcMs, waitMs int64
	ioMB         int64
	rssMB        int64
	memMB        int64
	outcome      string // "" succeeded
	spec         bool   // a speculative copy
	heapMB       int64  // peak heap used
}

// job builds a finished job of the tasks: attempt i of a type is
// attempt_1700000000000_<n>_<m|r>_00000i_0.
func job(n int, name string, tasks ...task) *store.JobDetail {
	id := fmt.Sprintf("job_1700000000000_%04d", n)
	d := &store.JobDetail{Job: store.Job{JobID: id, Name: name, User: "alice", Queue: "default", Framework: "mapreduce",
		State: store.StateFinished}}
	count := map[string]int{}
	for _, t := range tasks {
		c := map[string]string{"map": "m", "reduce": "r"}[t.typ]
		if c == "" {
			c = t.typ[:1]
		}
		aid := fmt.Sprintf("attempt_1700000000000_%04d_%s_%06d_0", n, c, count[t.typ])
		count[t.typ]++
		start := t0.Add(time.Duration(t.s * float64(time.Second)))
		end := start.Add(time.Duration(t.d * float64(time.Second)))
		rss := max(t.rssMB, 200)
		a := store.Attempt{AttemptID: aid, JobID: id, Host: t.host, Type: t.typ, Framework: "mapreduce", State: "finished",
			Start: store.Time(start.UnixMilli()), End: store.Time(end.UnixMilli()), LastSeen: store.Time(end.UnixMilli()),
			DurationMs: end.Sub(start).Milliseconds(), CPUMs: int64(t.cpu * t.d * 1000), PeakRSS: rss << 20,
			Processes: 2, ReadBytes: t.ioMB << 20, GCTimeMs: t.gcMs, SchedWaitMs: t.waitMs, MemoryMB: max(t.memMB, 1024),
			XmxBytes: 800 << 20, JobName: name, User: "alice", Queue: "default", Outcome: cmp.Or(t.outcome, store.OutcomeSucceeded),
			Speculative: t.spec, RSSByteMs: float64(rss<<20) * t.d * 1000, PeakHeap: t.heapMB << 20}
		d.AttemptList = append(d.AttemptList, a)
		if d.Start == 0 || a.Start < d.Start {
			d.Start = a.Start
		}
		d.End = max(d.End, a.End)
		d.LastSeen = d.End
		d.CPUMs += a.CPUMs
		d.PeakRSS = max(d.PeakRSS, a.PeakRSS)
		d.Attempts++
	}
	return d
}

// same returns n copies of t, on hosts h1, h2, ... in turn.
func same(n int, t task) []task {
	out := make([]task, n)
	for i := range out {
		out[i] = t
		if t.host == "" {
			out[i].host = fmt.Sprintf("h%d", i%3+1)
		}
	}
	return out
}

func cat(ts ...[]task) []task {
	var out []task
	for _, t := range ts {
		out = append(out, t...)
	}
	return out
}
