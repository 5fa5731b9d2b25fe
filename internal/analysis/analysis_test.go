package analysis_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/wire"
)

// att is a crafted attempt: it runs secs seconds from start, using cpuPerS
// ms of CPU per second and waiting for a CPU waitShare of the time.
type att struct {
	id, job, typ, host string
	start              time.Time
	secs               int
	cpuPerS            int64
	waitShare          float64
	rss                int64
	memMB, xmx         int64 // the container's size and -Xmx; 0: 1024 MB and 800 MB
}

var seq uint64

// batch is what an agent would send for the attempt, whole.
func batch(a att) *wire.Batch {
	seq++
	b := &wire.Batch{Version: wire.Version, AgentID: "agent-" + a.host, Seq: seq, Host: a.host,
		Metrics: []string{wire.AttemptCPUMs, wire.AttemptRSSBytes, wire.AttemptProcesses, wire.AttemptSchedWaitNs}}
	end := a.start.Add(time.Duration(a.secs) * time.Second)
	b.Attempts = []wire.Attempt{{AttemptID: a.id, JobID: a.job, Type: a.typ, Framework: "mapreduce", FirstMs: a.start.UnixMilli(),
		LastMs: end.UnixMilli(), Ended: true, MemoryMB: cmp.Or(a.memMB, 1024), XmxBytes: cmp.Or(a.xmx, 800<<20)}}
	s := wire.Series{AttemptID: a.id}
	var cols [4][]int64
	for i := 1; i <= a.secs; i++ {
		s.Times = append(s.Times, a.start.Add(time.Duration(i)*time.Second).UnixMilli())
		cols[0] = append(cols[0], a.cpuPerS*int64(i))
		cols[1] = append(cols[1], a.rss)
		cols[2] = append(cols[2], 1)
		cols[3] = append(cols[3], int64(a.waitShare*float64(i)*1e9))
	}
	for i := range cols {
		s.Columns = append(s.Columns, wire.Column{Metric: uint32(i), Values: cols[i]})
	}
	b.AttemptSeries = []wire.Series{s}
	if err := wire.Validate(b); err != nil {
		panic(err)
	}
	return b
}

func ingest(t *testing.T, st store.Store, atts ...att) {
	t.Helper()
	app, err := st.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		if _, err := app.Append(batch(a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func severityOf(r *analysis.Report, heuristic string) analysis.Severity {
	s := analysis.None
	for _, f := range r.Findings {
		if f.Heuristic == heuristic {
			s = max(s, f.Severity)
		}
	}
	return s
}

// TestNoisyNeighbours: a map that takes three times as long as its peers
// without more work, on a host where another job's attempts kept two cores
// busy and it waited for a CPU 40% of the time.
func TestNoisyNeighbours(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{SummaryEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	job, other := "job_1700000000000_0001", "job_1700000000000_0002"
	ingest(t, st,
		att{"attempt_1700000000000_0001_m_000000_0", job, "map", "h1", t0, 30, 300, 0.4, 200 << 20, 0, 0},
		att{"attempt_1700000000000_0001_m_000001_0", job, "map", "h2", t0, 10, 900, 0.01, 200 << 20, 0, 0},
		att{"attempt_1700000000000_0001_m_000002_0", job, "map", "h2", t0, 10, 900, 0.01, 200 << 20, 0, 0},
		att{"attempt_1700000000000_0001_m_000003_0", job, "map", "h3", t0, 10, 900, 0.01, 200 << 20, 0, 0},
		att{"attempt_1700000000000_0002_m_000000_0", other, "map", "h1", t0.Add(time.Second), 28, 1000, 0.3, 300 << 20, 0, 0},
		att{"attempt_1700000000000_0002_m_000001_0", other, "map", "h1", t0.Add(time.Second), 28, 1000, 0.3, 300 << 20, 0, 0},
	)
	r, err := analysis.New(st).Report(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		t.Logf("[%s] %s: %s -> %s (%s=%s) %v", f.Severity, f.Heuristic, f.Message, f.Recommendation, f.Parameter, f.Value, f.Numbers)
	}
	if got := severityOf(r, "noisy_neighbours"); got < analysis.Severe {
		t.Errorf("noisy_neighbours %s, want at least severe", got)
	}
	var nn *analysis.Finding
	for i := range r.Findings {
		if r.Findings[i].Heuristic == "noisy_neighbours" {
			nn = &r.Findings[i]
		}
	}
	if nn == nil || len(nn.AttemptIDs) != 3 || nn.AttemptIDs[0] != "attempt_1700000000000_0001_m_000000_0" || nn.Parameter != "mapreduce.map.speculative" {
		t.Errorf("finding %+v", nn)
	}
	if got := severityOf(r, "straggler"); got < analysis.Moderate {
		t.Errorf("straggler %s", got)
	}
	// Without neighbours (the access file's "neighbours operators"): the
	// straggler's own wait for a CPU, and nothing of the other job (not
	// its attempts' ids, nor how many, nor the cores they kept busy).
	anyR, err := analysis.New(st).FindingsWithoutNeighbours(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	pr := anyR.(*analysis.Report)
	found := false
	for _, f := range pr.Findings {
		t.Logf("without neighbours: [%s] %s: %s %v", f.Severity, f.Heuristic, f.Message, f.Numbers)
		text := fmt.Sprint(f.AttemptIDs, f.Message, f.Numbers)
		if strings.Contains(text, "_0002_") || strings.Contains(text, "neighbour") || strings.Contains(text, "cores busy") ||
			strings.Contains(text, "other attempts") {
			t.Errorf("without neighbours, %s says something of the other job: %s", f.Heuristic, text)
		}
		if f.Heuristic == "noisy_neighbours" {
			found = true
			if len(f.AttemptIDs) != 1 || !strings.Contains(f.Message, "waited for a CPU 40%") {
				t.Errorf("without neighbours: %+v", f)
			}
		}
	}
	if !found {
		t.Error("without neighbours, the straggler's wait for a CPU is not told")
	}
	// The other job's attempts are alike: nothing to say about them.
	r2, err := analysis.New(st).Report(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r2.Findings {
		if f.Severity > analysis.Low {
			t.Errorf("job of two alike attempts: [%s] %s: %s", f.Severity, f.Heuristic, f.Message)
		}
	}
}

// TestMemoryHeadroom: containers far too large get a smaller size computed
// from their peak (the heap follows it down), never their own size again;
// containers about to be killed get a larger one.
func TestMemoryHeadroom(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	cases := []struct {
		job        string
		memMB, xmx int64
		rss        int64
		atLeast    analysis.Severity
		wantBelow  int64 // the recommended size is below this (MB); 0: above wantAbove
		wantAbove  int64
	}{
		// -Xmx at 80% of the container: the size from -Xmx is the container's.
		{job: "job_1700000000000_0101", memMB: 2048, xmx: 1638 << 20, rss: 200 << 20, atLeast: analysis.Severe, wantBelow: 2048},
		{job: "job_1700000000000_0102", memMB: 4096, xmx: 3276 << 20, rss: 4000 << 20, atLeast: analysis.Moderate, wantAbove: 4096},
	}
	for i, c := range cases {
		var atts []att
		for k := range 3 {
			atts = append(atts, att{id: fmt.Sprintf("attempt_1700000000000_%04d_m_%06d_0", 101+i, k), job: c.job, typ: "map", host: "n1",
				start: t0, secs: 30, cpuPerS: 900, rss: c.rss, memMB: c.memMB, xmx: c.xmx})
		}
		ingest(t, st, atts...)
		r, err := analysis.New(st).Report(context.Background(), c.job)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, f := range r.Findings {
			if f.Heuristic != "memory_headroom" {
				continue
			}
			found = true
			var rec int64
			fmt.Sscan(f.Value, &rec)
			if f.Severity < c.atLeast || f.Parameter != "mapreduce.map.memory.mb" {
				t.Errorf("%s: [%s] %s=%s, want at least %s", c.job, f.Severity, f.Parameter, f.Value, c.atLeast)
			}
			if c.wantBelow > 0 && (rec <= 0 || rec >= c.wantBelow) || c.wantAbove > 0 && rec <= c.wantAbove {
				t.Errorf("%s: %d MB containers peaking at %d MB: recommended %s MB", c.job, c.memMB, c.rss>>20, f.Value)
			}
		}
		if !found {
			t.Errorf("%s: no memory_headroom finding", c.job)
		}
	}
}

// TestFindingsCached: the API's findings of a job are made at most every
// few seconds; concurrent requests share one report; a later one sees new
// data.
func TestFindingsCached(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	job := "job_1700000000000_0201"
	ingest(t, st, att{"attempt_1700000000000_0201_m_000000_0", job, "map", "n1", t0, 20, 900, 0, 100 << 20, 0, 0})
	a := analysis.New(st)
	now := t0.Add(time.Hour)
	var mu sync.Mutex
	a.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	get := func() *analysis.Report {
		r, err := a.Findings(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*analysis.Report)
	}
	var wg sync.WaitGroup
	got := make([]*analysis.Report, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = get() }()
	}
	wg.Wait()
	for _, r := range got[1:] {
		if r != got[0] {
			t.Fatal("concurrent requests made reports of their own")
		}
	}
	// A straggler arrives: within the TTL the report stands, after it the
	// straggler shows.
	ingest(t, st,
		att{"attempt_1700000000000_0201_m_000001_0", job, "map", "n1", t0, 20, 900, 0, 100 << 20, 0, 0},
		att{"attempt_1700000000000_0201_m_000002_0", job, "map", "n1", t0, 20, 900, 0, 100 << 20, 0, 0},
		att{"attempt_1700000000000_0201_m_000003_0", job, "map", "n2", t0, 90, 900, 0, 100 << 20, 0, 0})
	advance(time.Second)
	if r := get(); r != got[0] {
		t.Error("a report a second old was made again")
	}
	advance(5 * time.Second)
	r := get()
	if r == got[0] || time.UnixMilli(int64(r.Evaluated)).Before(time.UnixMilli(int64(got[0].Evaluated)).Add(5*time.Second)) {
		t.Fatalf("after the TTL: the same report (evaluated %d, first %d)", r.Evaluated, got[0].Evaluated)
	}
	if severityOf(r, "straggler") < analysis.Moderate {
		t.Errorf("the new report lacks the straggler: %+v", r.Findings)
	}
	if _, err := a.Findings(context.Background(), "job_1700000000000_9999"); err == nil {
		t.Error("findings of an unknown job")
	}
}

// TestPrivateErrorKeepsReport: a report made without the neighbours that
// fails leaves the job's cached report as it was (it is dropped from the
// cache, not the other).
func TestPrivateErrorKeepsReport(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	job := "job_1700000000000_0202"
	ingest(t, st, att{"attempt_1700000000000_0202_m_000000_0", job, "map", "n1", t0, 20, 900, 0, 100 << 20, 0, 0})
	a := analysis.New(st)
	a.SetClock(func() time.Time { return t0.Add(time.Hour) })
	first, err := a.Findings(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.FindingsWithoutNeighbours(gone, job); !errors.Is(err, context.Canceled) {
		t.Fatalf("a report without the neighbours, its request gone: %v", err)
	}
	if again, err := a.Findings(context.Background(), job); err != nil || again != first {
		t.Errorf("the job's report after a failed one without the neighbours: made again (%v)", err)
	}
}
