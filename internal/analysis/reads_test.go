package analysis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// A report reads ahead and together what its heuristics read, and finds
// what reading one by one finds: the same findings, to the numbers, for
// every job of a loadgen cluster (running jobs and finished ones,
// Streaming ones, leaks, stragglers). (Loadgen's tasks fork no short-lived
// processes: their counts are read, and are 0; storetest's BatchReads
// compares those reads.)
func TestReadAheadSameFindings(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	start := time.Now().Add(-25 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 8, Slots: 8, BatchTicks: 5, Seed: 5, Start: start})
	storetest.Fill(t, st, g, start, 25*60)
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	together, alone := analysis.New(st), analysis.New(storetest.Plain(st)) // each series and attempt read on its own
	found := map[string]int{}
	for _, j := range page.Jobs {
		a, err := together.Report(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := alone.Report(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		a.Evaluated, b.Evaluated = 0, 0
		// Heuristics that go through the task types in map order list
		// their findings of one severity in any order.
		for _, r := range []*analysis.Report{a, b} {
			sort.SliceStable(r.Findings, func(x, y int) bool {
				fx, fy := r.Findings[x], r.Findings[y]
				return fx.Heuristic+fx.TaskType+fx.Message < fy.Heuristic+fy.TaskType+fy.Message
			})
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s:\n read together %s\n one by one    %s", j.JobID, ja, jb)
		}
		for _, f := range a.Findings {
			found[f.Heuristic]++
		}
	}
	t.Logf("%d jobs; findings %v", len(page.Jobs), found)
	for _, h := range []string{"memory_growth", "streaming_bottleneck"} {
		if found[h] == 0 {
			t.Errorf("no %s finding: the comparison does not cover what it reads", h)
		}
	}
}

// counting is a store that counts the series and process lists read,
// in all and by job (jobReads). Unless keep, it keeps no analyses: every
// report of a finished job is made again, as a running job's are.
type counting struct {
	*duckdb.Store
	series, procs atomic.Int64
	together      atomic.Int64 // reads of several jobs together
	keep          bool

	mu      sync.Mutex
	byJob   map[string]int64     // reads by job, since jobReads took them
	procJob map[store.Key]string // the job of each process listed
	with    map[string]int       // the jobs of each job's last JobsDetail
}

// attemptJob is the job of a Hadoop attempt id (attempt_C_N_m_T_A: job_C_N).
func attemptJob(id string) string {
	p := strings.SplitN(id, "_", 4)
	if len(p) < 4 {
		return ""
	}
	return "job_" + p[1] + "_" + p[2]
}

// count counts a read of each of qs, by job.
func (c *counting) count(qs ...store.SeriesQuery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	for _, q := range qs {
		job := q.JobID
		switch {
		case q.AttemptID != "":
			job = attemptJob(q.AttemptID)
		case q.Scope == store.ScopeProcess:
			job = c.procJob[q.Process]
		}
		c.byJob[job]++
	}
}

func (c *counting) init() {
	if c.byJob == nil {
		c.byJob, c.procJob, c.with = map[string]int64{}, map[store.Key]string{}, map[string]int{}
	}
}

// jobReads are the series and process lists read for a job since the
// last call.
func (c *counting) jobReads(job string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.byJob[job]
	delete(c.byJob, job)
	return n
}

func (c *counting) Analysis(ctx context.Context, id string) (*store.Analysis, error) {
	if c.keep {
		return c.Store.Analysis(ctx, id)
	}
	return nil, fmt.Errorf("analysis of %s: %w", id, store.ErrNotFound)
}

func (c *counting) PutAnalysis(ctx context.Context, a *store.Analysis) error {
	if c.keep {
		return c.Store.PutAnalysis(ctx, a)
	}
	return nil
}

func (c *counting) Series(ctx context.Context, q store.SeriesQuery) (*store.SeriesResult, error) {
	c.series.Add(1)
	c.count(q)
	return c.Store.Series(ctx, q)
}

func (c *counting) SeriesMany(ctx context.Context, qs []store.SeriesQuery) ([]*store.SeriesResult, error) {
	c.series.Add(int64(len(qs)))
	c.count(qs...)
	return c.Store.SeriesMany(ctx, qs)
}

func (c *counting) AttemptProcesses(ctx context.Context, ids []string) (map[string][]store.Process, error) {
	c.procs.Add(int64(len(ids)))
	m, err := c.Store.AttemptProcesses(ctx, ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	for _, id := range ids {
		c.byJob[attemptJob(id)]++
		for _, p := range m[id] {
			c.procJob[p.Key] = attemptJob(id)
		}
	}
	return m, err
}

func (c *counting) reads() int64 { return c.series.Load() + c.procs.Load() }

// JobsDetail counts the reads of several jobs together (together), and
// notes how many jobs each was read with (readWith).
func (c *counting) JobsDetail(ctx context.Context, ids []string) (map[string]*store.JobDetail, error) {
	if len(ids) > 1 {
		c.together.Add(1)
	}
	c.mu.Lock()
	c.init()
	for _, id := range ids {
		c.with[id] = len(ids)
	}
	c.mu.Unlock()
	return c.Store.JobsDetail(ctx, ids)
}

// readWith is how many jobs the last JobsDetail that read job read (0:
// none did; Job read it alone).
func (c *counting) readWith(job string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.with[job]
}

// canonical is a report's JSON, its findings in one order and its time left out.
func canonical(r *analysis.Report) string {
	c := *r
	c.Evaluated = 0
	c.Findings = append([]analysis.Finding(nil), r.Findings...)
	sort.SliceStable(c.Findings, func(x, y int) bool {
		fx, fy := c.Findings[x], c.Findings[y]
		return fx.Heuristic+fx.TaskType+fx.Message < fy.Heuristic+fy.TaskType+fy.Message
	})
	b, _ := json.Marshal(c)
	return string(b)
}

// A job's findings made again take what the last ones read of its ended
// attempts, as long as their summaries are unchanged, and are what a report
// made from scratch finds, before and after more data arrive.
func TestFindingsReuseReads(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	start := time.Now().Add(-25 * time.Minute)
	st, g, clock := filledStore(t, start, 20*60)
	ctx := context.Background()
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{Store: st}
	a := analysis.New(c)
	now := time.Now()
	a.SetClock(func() time.Time { return now })
	findings := func(id string) (*analysis.Report, int64) {
		t.Helper()
		n := c.reads()
		r, err := a.Findings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*analysis.Report), c.reads() - n
	}
	check := func(id string, r *analysis.Report) {
		t.Helper()
		want, err := analysis.New(st).Report(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := canonical(r), canonical(want); got != want {
			t.Errorf("%s: made again %s\n from scratch %s", id, got, want)
		}
	}
	first := map[string]int64{}
	for _, j := range page.Jobs {
		_, first[j.JobID] = findings(j.JobID)
	}
	now = now.Add(time.Minute) // past the findings' TTL
	var before, again, finished, running int64
	for _, j := range page.Jobs {
		r, n := findings(j.JobID)
		check(j.JobID, r)
		before, again = before+first[j.JobID], again+n
		if j.State == "running" {
			running++
		}
		if j.State != "running" && first[j.JobID] > 0 {
			finished++
			if n != 0 {
				t.Errorf("%s (%s): made again, its findings read %d series and process lists, first %d", j.JobID, j.State, n, first[j.JobID])
			}
		}
	}
	t.Logf("%d jobs (%d running, %d finished with reads): %d reads, %d made again", len(page.Jobs), running, finished,
		before, again)
	if running == 0 || finished == 0 || again >= before {
		t.Fatalf("findings made again read %d series and process lists, first %d", again, before)
	}
	// Late data for an ended attempt of a finished job: its summary
	// changes, and what was read of it is read again.
	var late string
	for _, j := range page.Jobs {
		if j.State != "running" && first[j.JobID] > 0 {
			late = j.JobID
			break
		}
	}
	d, err := st.Job(ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	x := d.AttemptList[0]
	ingest(t, st, att{x.AttemptID, late, x.Type, x.Host, time.UnixMilli(int64(x.End)), 3, 900, 0, 64 << 30, 0, 0})
	now = now.Add(time.Minute)
	if r, n := findings(late); n == 0 {
		t.Errorf("%s: late data for %s, and its findings read nothing again", late, x.AttemptID)
	} else {
		check(late, r)
	}
	// Within a minute of an attempt's end, what was read of it is read
	// again at each report (records may still come that leave its summary
	// as it was); after that minute, it is kept.
	d, err = st.Job(ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	last := d.AttemptList[0]
	for _, x := range d.AttemptList {
		if x.End > last.End {
			last = x
		}
	}
	b := analysis.New(c)
	at := time.UnixMilli(int64(last.End)).Add(10 * time.Second)
	b.SetClock(func() time.Time { return at })
	remake := func() int64 {
		t.Helper()
		at = at.Add(10 * time.Second) // past the findings' TTL
		n := c.reads()
		if _, err := b.Findings(ctx, late); err != nil {
			t.Fatal(err)
		}
		return c.reads() - n
	}
	n0, n1 := remake(), remake()
	at = at.Add(time.Minute)
	n2, n3 := remake(), remake()
	t.Logf("%s, ended last at %s: %d and %d reads within a minute, %d and %d after", late,
		time.UnixMilli(int64(last.End)).Format(time.TimeOnly), n0, n1, n2, n3)
	if n1 == 0 || n3 != 0 {
		t.Errorf("%s: reads of reports made again %d within a minute of its last attempt's end, %d after", late, n1, n3)
	}
	// More data: running attempts change and end; the findings made again
	// are still those made from scratch.
	clock.Store(storetest.Fill(t, st, g, start, 25*60).UnixMilli())
	now = now.Add(time.Minute)
	for _, j := range page.Jobs {
		r, _ := findings(j.JobID)
		check(j.JobID, r)
	}
}

// overlapping is a fake store whose reads of the job's hosts, events and
// earlier runs count how many run at once: the first waits until another
// has begun (at most a minute: reads made one after another never
// overlap).
type overlapping struct {
	*fakeStore
	in, most atomic.Int64
	met      chan struct{}
	once     sync.Once
}

func (o *overlapping) enter() func() {
	n := o.in.Add(1)
	for m := o.most.Load(); n > m && !o.most.CompareAndSwap(m, n); m = o.most.Load() {
	}
	if n >= 2 {
		o.once.Do(func() { close(o.met) })
	}
	select {
	case <-o.met:
	case <-time.After(time.Minute):
	}
	return func() { o.in.Add(-1) }
}

func (o *overlapping) Jobs(ctx context.Context, f store.JobFilter) (store.JobPage, error) {
	defer o.enter()()
	return o.fakeStore.Jobs(ctx, f)
}

func (o *overlapping) HostAttempts(ctx context.Context, host string, from, to int64) ([]store.Attempt, error) {
	defer o.enter()()
	return o.fakeStore.HostAttempts(ctx, host, from, to)
}

func (o *overlapping) Events(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	defer o.enter()()
	return o.fakeStore.Events(ctx, f)
}

// A report's reads that do not depend on each other (the job's hosts,
// its events, its earlier runs) run at once, at most four, and make the
// report that reads one after another make.
func TestReadsAtOnce(t *testing.T) {
	m := task{typ: "map", d: 10, cpu: 0.9, gcMs: 200}
	d := job(1, "wordcount", cat(same(9, m), []task{{typ: "map", host: "h9", d: 30, cpu: 0.3, waitMs: 9000}},
		[]task{{typ: "map", host: "h8", d: 31, cpu: 0.3}, {typ: "map", host: "h7", d: 32, cpu: 0.3}, {typ: "map", host: "h6", d: 33, cpu: 0.3},
			{typ: "map", host: "h5", d: 34, cpu: 0.3}})...)
	ctx := context.Background()
	o := &overlapping{fakeStore: newFake(d), met: make(chan struct{})}
	r, err := analysis.New(o).Report(ctx, d.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if n := o.most.Load(); n < 2 || n > 4 {
		t.Errorf("%d reads at once, want 2 to 4", n)
	}
	// (The events: one read a kind the heuristics look at, of a store
	// that reads no jobs' events together.)
	if o.reads["host"] < 5 || o.reads["events"] != 5 || o.reads["jobs"] != 1 {
		t.Errorf("reads %v: want 5 hosts', the events of 5 kinds and the earlier runs", o.reads)
	}
	want, err := analysis.New(newFake(d)).Report(ctx, d.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := canonical(r), canonical(want); got != want {
		t.Errorf("reads at once:\n%s\none after another:\n%s", got, want)
	}
}
