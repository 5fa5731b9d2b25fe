package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

var (
	t0  = storetest.T0
	now = t0.Add(time.Minute)
)

// The crafted dataset: known values, so that answers can be checked.
const (
	jobWC      = "job_1700000000000_0001" // alice's wordcount, finished: two maps of 10 s
	attWC0     = "attempt_1700000000000_0001_m_000000_0"
	attWC1     = "attempt_1700000000000_0001_m_000001_0"
	jobETL     = "job_1700000000000_0002" // bob's nightly-etl, running
	attETL     = "attempt_1700000000000_0002_r_000000_0"
	hostileJob = "job_1700000000000_0003"
	hostileAtt = "attempt_1700000000000_0003_m_000000_0"
)

// hostile is a command line as the agent sends it: invalid UTF-8 escaped by
// wire.SanitizeText, markup kept.
var hostile = wire.SanitizeText([]byte("python -c \"print('</script><script>alert(1)</script>')\" \xff\xfe\x00 \u2028 <!--"))

type fixture struct {
	st   *duckdb.Store
	srv  *httptest.Server
	keys map[string]string // "attempt/pid" -> process key
}

var loadJobs int // jobs of the loadgen part

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{keys: map[string]string{}}
	f.st = f.fill(t, true)
	a := New(f.st, analysis.New(f.st), NewLive(10*time.Millisecond, LiveOptions{}), nil)
	a.now = func() time.Time { return now }
	mux := http.NewServeMux()
	a.Register(mux)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// fill opens a store with the crafted dataset: zoe's wordcount, and, if
// all, loadgen's jobs, yann's ETL job and mallory's hostile one too.
func (f *fixture) fill(t testing.TB, all bool) *duckdb.Store {
	t.Helper()
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: -1,
		Clock: store.Clock{Now: func() time.Time { return now }, StaleAfter: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	if all {
		// Loadgen: 3 nodes, 2 slots, 10 simulated minutes ending 30 minutes before t0.
		gen := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 2, BatchTicks: 10, Seed: 7, Start: t0.Add(-40 * time.Minute)})
		for range 60 {
			storetest.Ingest(t, st, gen.Next()...)
		}
		page, err := st.Jobs(context.Background(), store.JobFilter{Limit: 1000})
		if err != nil || page.Total == 0 {
			t.Fatalf("loadgen jobs: %d, %v", page.Total, err)
		}
		loadJobs = page.Total
	}

	g := &storetest.Gen{Agent: "node1-crafted", Host: "node1"}
	wc0 := &storetest.AttemptSpec{ID: attWC0, JobID: jobWC, Type: "map", JobName: "CraftedWordCount", User: "zoe", Queue: "default",
		MemoryMB: 2048, Start: t0, Procs: []storetest.ProcSpec{
			{PID: 100, Role: wire.RoleWrapper, Cmdline: "/bin/bash -c java", CPUPerS: 0, RSS: 2 << 20},
			{PID: 101, Role: wire.RoleTaskJVM, Cmdline: "java org.apache.hadoop.mapred.YarnChild", CPUPerS: 500, RSS: 300 << 20},
			{PID: 102, Role: wire.RoleStreaming, Cmdline: "python mapper.py", CPUPerS: 250, RSS: 50 << 20}}}
	wc1 := &storetest.AttemptSpec{ID: attWC1, JobID: jobWC, Type: "map", JobName: "CraftedWordCount", User: "zoe", Queue: "default",
		MemoryMB: 2048, Start: t0, Procs: []storetest.ProcSpec{{PID: 200, Role: wire.RoleTaskJVM, CPUPerS: 1000, RSS: 400 << 20}}}
	// The two maps ended together, and their NodeManager's cutime was
	// split between them by a guess (an exit record lost).
	wc0.CPUDoubtMs, wc1.CPUDoubtMs = 180, 180
	etl := &storetest.AttemptSpec{ID: attETL, JobID: jobETL, Type: "reduce", JobName: "crafted-nightly", User: "yann", Queue: "crafted",
		MemoryMB: 4096, Start: t0.Add(20 * time.Second), Procs: []storetest.ProcSpec{{PID: 300, Role: wire.RoleTaskJVM, CPUPerS: 900, RSS: 1 << 30}}}
	tree := func(b *wire.Batch) *wire.Batch {
		// A process tree: the wrapper starts the JVM, the JVM the mapper.
		for i := range b.Processes {
			switch b.Processes[i].PID {
			case 101:
				b.Processes[i].PPID = 100
			case 102:
				b.Processes[i].PPID = 101
			}
		}
		return b
	}
	storetest.Ingest(t, st, tree(g.Batch([]*storetest.AttemptSpec{wc0, wc1}, 0, 5, false)),
		tree(g.Batch([]*storetest.AttemptSpec{wc0, wc1}, 5, 10, true)))
	evil := &storetest.AttemptSpec{ID: hostileAtt, JobID: hostileJob, Type: "map", JobName: "<b>bold</b>", User: "mallory",
		Queue: "default", Start: t0.Add(10 * time.Second), Procs: []storetest.ProcSpec{{PID: 400, Role: wire.RoleStreaming, Cmdline: hostile, CPUPerS: 10, RSS: 1 << 20}}}
	if all {
		storetest.Ingest(t, st, g.Batch([]*storetest.AttemptSpec{etl}, 0, 30, false))
		storetest.Ingest(t, st, g.Batch([]*storetest.AttemptSpec{evil}, 0, 5, true))
	}
	for _, a := range []*storetest.AttemptSpec{wc0, wc1, etl, evil} {
		for _, p := range a.Procs {
			f.keys[fmt.Sprintf("%s/%d", a.ID, p.PID)] = store.Key(g.Key(a, p)).String()
		}
	}
	return st
}

// get fetches path and decodes the JSON answer into v (if not nil); it
// checks the content type and that the body is valid JSON and UTF-8.
func (f *fixture) get(t *testing.T, path string, v any) (int, string) {
	t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	if !json.Valid(body) || !utf8.Valid(body) {
		t.Errorf("%s: not valid JSON: %q", path, body)
	}
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

func (f *fixture) must(t *testing.T, path string, v any) string {
	t.Helper()
	code, body := f.get(t, path, v)
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	return body
}

func TestAPI(t *testing.T) {
	f := newFixture(t)
	t.Run("jobs filters", func(t *testing.T) { testJobsFilters(t, f) })
	t.Run("jobs paging", func(t *testing.T) { testJobsPaging(t, f) })
	t.Run("job", func(t *testing.T) { testJob(t, f) })
	t.Run("attempt", func(t *testing.T) { testAttempt(t, f) })
	t.Run("series", func(t *testing.T) { testSeries(t, f) })
	t.Run("point budget", func(t *testing.T) { testPointBudget(t, f) })
	t.Run("hosts", func(t *testing.T) { testHosts(t, f) })
	t.Run("findings", func(t *testing.T) { testFindings(t, f) })
	t.Run("history and waste", func(t *testing.T) { testHistoryWaste(t, f) })
	t.Run("events and catalog", func(t *testing.T) { testEventsAndCatalog(t, f) })
	t.Run("errors", func(t *testing.T) { testErrors(t, f) })
	t.Run("hostile text", func(t *testing.T) { testHostileText(t, f) })
	t.Run("live", func(t *testing.T) { testLive(t, f) })
}

func jobIDs(p store.JobPage) []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.JobID)
	}
	return out
}

func testJobsFilters(t *testing.T, f *fixture) {
	ms := func(d time.Duration) string { return fmt.Sprint(t0.Add(d).UnixMilli()) }
	tests := []struct {
		query string
		want  []string // exactly these, in this order; nil: check total only
		total int
	}{
		{"user=zoe", []string{jobWC}, 1},
		{"user=yann", []string{jobETL}, 1},
		{"user=nobody", []string{}, 0},
		{"name=edwordc", []string{jobWC}, 1},             // substring
		{"name=CRAFTED-NIGHT", []string{jobETL}, 1},      // any case
		{"name=1700000000000_0002", []string{jobETL}, 1}, // the job id matches too
		{"name=" + url.QueryEscape("%"), nil, -1},        // LIKE wildcards are literal: checked below
		{"state=running&user=yann", []string{jobETL}, 1},
		{"state=finished&user=yann", []string{}, 0},
		{"state=finished&user=zoe", []string{jobWC}, 1},
		{"queue=crafted", []string{jobETL}, 1},
		// Active within [from, to): wordcount runs 0-10 s, the hostile job
		// 10-15 s, the ETL job from 20 s.
		{"from=" + ms(16*time.Second) + "&to=" + ms(time.Hour), []string{jobETL}, 1},
		{"from=" + url.QueryEscape(t0.Add(-time.Second).Format(time.RFC3339)) + "&to=" + ms(5*time.Second), []string{jobWC}, 1},
		{"from=" + ms(9*time.Second) + "&to=" + ms(12*time.Second), []string{hostileJob, jobWC}, 2},
		{"from=-30m&to=-1m", []string{}, 0},
		{"from=-30s", []string{jobETL}, 1}, // now is t0+1m: from t0+30s
		{"to=" + ms(-time.Hour), []string{}, 0},
	}
	for _, tc := range tests {
		var page store.JobPage
		f.must(t, "/api/v1/jobs?"+tc.query, &page)
		ids := jobIDs(page)
		if ids == nil {
			ids = []string{}
		}
		if tc.total == -1 && tc.want == nil {
			if page.Total != 0 {
				t.Errorf("%s: %d jobs, want none", tc.query, page.Total)
			}
			continue
		}
		if tc.total >= 0 && page.Total != tc.total {
			t.Errorf("%s: total %d, want %d", tc.query, page.Total, tc.total)
		}
		if tc.total >= 0 && strings.Join(ids, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v, want %v", tc.query, ids, tc.want)
		}
		if tc.total == -1 {
			for _, w := range tc.want {
				found := false
				for _, id := range ids {
					found = found || id == w
				}
				if !found {
					t.Errorf("%s: %v lacks %s", tc.query, ids, w)
				}
			}
		}
	}
}

func testJobsPaging(t *testing.T, f *fixture) {
	var all store.JobPage
	f.must(t, "/api/v1/jobs?limit=1000", &all)
	if all.Total != loadJobs+3 || len(all.Jobs) != all.Total {
		t.Fatalf("all jobs: %d of total %d, want %d", len(all.Jobs), all.Total, loadJobs+3)
	}
	for i := 1; i < len(all.Jobs); i++ {
		if all.Jobs[i].Start > all.Jobs[i-1].Start {
			t.Errorf("not newest first: %s (%v) after %s (%v)", all.Jobs[i].JobID, all.Jobs[i].Start, all.Jobs[i-1].JobID, all.Jobs[i-1].Start)
		}
	}
	var paged []string
	for off := 0; off < all.Total+3; off += 3 {
		var p store.JobPage
		f.must(t, fmt.Sprintf("/api/v1/jobs?limit=3&offset=%d", off), &p)
		if p.Total != all.Total {
			t.Errorf("offset %d: total %d, want %d", off, p.Total, all.Total)
		}
		if want := min(3, max(0, all.Total-off)); len(p.Jobs) != want {
			t.Errorf("offset %d: %d jobs, want %d", off, len(p.Jobs), want)
		}
		paged = append(paged, jobIDs(p)...)
	}
	if strings.Join(paged, ",") != strings.Join(jobIDs(all), ",") {
		t.Errorf("pages of 3 do not make the whole list:\n%v\n%v", paged, jobIDs(all))
	}
	// Past the end of a filtered list: no jobs, the filtered total.
	var p store.JobPage
	body := f.must(t, "/api/v1/jobs?user=zoe&offset=50", &p)
	if len(p.Jobs) != 0 || p.Total != 1 || !strings.Contains(body, `"jobs":[]`) {
		t.Errorf("past the end: %s", body)
	}
	f.must(t, "/api/v1/jobs?limit=1", &p)
	if len(p.Jobs) != 1 || p.Jobs[0].JobID != jobETL {
		t.Errorf("limit=1: %v", jobIDs(p))
	}
}

func testJob(t *testing.T, f *fixture) {
	var j store.JobDetail
	body := f.must(t, "/api/v1/jobs/"+jobWC, &j)
	if j.User != "zoe" || j.Name != "CraftedWordCount" || j.State != store.StateFinished || j.Attempts != 2 || len(j.AttemptList) != 2 {
		t.Fatalf("job: %s", body)
	}
	// CPU: wc0 500*10 + 250*10, wc1 1000*10.
	if j.CPUMs != 17500 || j.PeakRSS != 400<<20 {
		t.Errorf("job cpu_ms %d peak_rss %d, want 17500 and %d", j.CPUMs, j.PeakRSS, 400<<20)
	}
	by := map[string]store.Attempt{}
	for _, a := range j.AttemptList {
		by[a.AttemptID] = a
	}
	a0 := by[attWC0]
	if a0.CPUMs != 7500 || a0.PeakRSS != 352<<20 || a0.Processes != 3 || a0.Host != "node1" ||
		a0.Start != store.Time(t0.UnixMilli()) || a0.End != store.Time(t0.Add(10*time.Second).UnixMilli()) {
		t.Errorf("attempt %s: %+v", attWC0, a0)
	}
	// The contract's keys of each attempt.
	var raw struct {
		AttemptList []map[string]any `json:"attempt_list"`
	}
	json.Unmarshal([]byte(body), &raw)
	for _, a := range raw.AttemptList {
		for _, k := range []string{"attempt_id", "host", "start", "end", "cpu_ms", "peak_rss_bytes", "processes"} {
			if _, ok := a[k]; !ok {
				t.Errorf("attempt without %q: %v", k, a)
			}
		}
		if s, _ := a["start"].(string); !strings.HasPrefix(s, "2026-11-30T12:00:00") {
			t.Errorf("start %v is not RFC 3339", a["start"])
		}
		// Their CPU is an estimate: they say so, and by how much.
		if d, ok := a["cpu_doubt_ms"].(float64); !ok || d != 180 {
			t.Errorf("attempt %v: cpu_doubt_ms %v, want 180", a["attempt_id"], a["cpu_doubt_ms"])
		}
	}
	// One whose CPU is no such estimate says nothing of it.
	etl := f.must(t, "/api/v1/jobs/"+jobETL, nil)
	if strings.Contains(etl, "cpu_doubt_ms") {
		t.Errorf("an attempt without a guess tells a CPU doubt: %s", etl)
	}
	f.must(t, "/api/v1/jobs/"+jobETL, &j)
	if j.State != store.StateRunning || j.End != 0 || j.AttemptList[0].State != store.StateRunning {
		t.Errorf("running job: state %s end %v", j.State, j.End)
	}
}

func testAttempt(t *testing.T, f *fixture) {
	var d store.AttemptDetail
	f.must(t, "/api/v1/jobs/"+jobWC+"/attempts/"+attWC0, &d)
	if d.AttemptID != attWC0 || d.JobID != jobWC || d.Type != "map" || d.MemoryMB != 2048 || len(d.ProcessList) != 3 ||
		d.CPUDoubtMs != 180 {
		t.Fatalf("attempt: %+v", d)
	}
	byPID := map[int32]store.Process{}
	for _, p := range d.ProcessList {
		byPID[p.PID] = p
	}
	// The tree: wrapper 100 -> JVM 101 -> mapper 102.
	if byPID[101].PPID != 100 || byPID[102].PPID != 101 || byPID[100].PPID != 1 {
		t.Errorf("tree: %+v", byPID)
	}
	jvm := byPID[101]
	if jvm.Key.String() != f.keys[attWC0+"/101"] || jvm.CPUMs != 5000 || jvm.PeakRSS != 300<<20 || jvm.Samples != 10 ||
		jvm.Role != wire.RoleTaskJVM || jvm.Cmdline != "java org.apache.hadoop.mapred.YarnChild" || jvm.End == 0 {
		t.Errorf("jvm: %+v", jvm)
	}
	if d.Events == nil {
		t.Error("events: null, want a list")
	}
}

// series fetches a series and checks its shape.
func (f *fixture) series(t *testing.T, path string) store.SeriesResult {
	t.Helper()
	var r store.SeriesResult
	f.must(t, path, &r)
	for _, s := range r.Series {
		if len(s.Values) != len(r.Times) {
			t.Fatalf("%s: %s has %d values for %d times", path, s.Metric, len(s.Values), len(r.Times))
		}
	}
	for i := 1; i < len(r.Times); i++ {
		if r.Times[i]-r.Times[i-1] != r.Step {
			t.Fatalf("%s: times %v not %d apart", path, r.Times, r.Step)
		}
	}
	return r
}

// values checks that every non-null value of metric m is want (within 0.1%),
// and that there are at least n of them.
func values(t *testing.T, what string, r store.SeriesResult, m string, want float64, n int) {
	t.Helper()
	for _, s := range r.Series {
		if s.Metric != m {
			continue
		}
		got := 0
		for i, v := range s.Values {
			if math.IsNaN(float64(v)) {
				continue
			}
			got++
			if math.Abs(float64(v)-want) > want*0.001+1e-9 {
				t.Errorf("%s: %s[%d] (%d) = %g, want %g", what, m, i, r.Times[i], v, want)
			}
		}
		if got < n {
			t.Errorf("%s: %d values of %s, want at least %d: %v", what, got, m, n, s.Values)
		}
		return
	}
	t.Errorf("%s: no series %s in %+v", what, m, r.Series)
}

func testSeries(t *testing.T, f *fixture) {
	from, to := t0.UnixMilli(), t0.Add(10*time.Second).UnixMilli()
	win := fmt.Sprintf("from=%d&to=%d", from, to)
	// A process: the JVM uses 500 ms of CPU per second, 300 MiB.
	r := f.series(t, "/api/v1/processes/"+f.keys[attWC0+"/101"]+"/series?metrics=cpu_percent,rss_bytes,threads&"+win)
	if r.Scope != store.ScopeProcess || r.Step != 1000 || len(r.Times) != 10 || r.From != from {
		t.Errorf("process series: scope %s step %d %d points from %d", r.Scope, r.Step, len(r.Times), r.From)
	}
	if len(r.Series) != 3 || r.Series[0].Metric != "cpu_percent" || r.Series[1].Metric != "rss_bytes" || r.Series[2].Metric != "threads" ||
		r.Series[0].Unit != "percent" || r.Series[1].Unit != "bytes" {
		t.Errorf("metrics: %+v", r.Series)
	}
	values(t, "process", r, "cpu_percent", 50, 9)
	values(t, "process", r, "rss_bytes", 300<<20, 9) // samples at 1..9 s: the bucket [0, 1 s) is empty
	values(t, "process", r, "threads", 20, 9)
	// Its window from the attempt, and the default metrics.
	r = f.series(t, "/api/v1/processes/"+f.keys[attWC0+"/102"]+"/series?attempt="+attWC0)
	if len(r.Series) != 2 || r.Series[0].Metric != "cpu_percent" || r.Series[1].Metric != "rss_bytes" {
		t.Errorf("default metrics: %+v", r.Series)
	}
	values(t, "mapper", r, "cpu_percent", 25, 9)
	// A metric the agent sent with no column of its own (storetest's x_custom:
	// the process's age in seconds), as its increase per second.
	r = f.series(t, "/api/v1/processes/"+f.keys[attWC0+"/101"]+"/series?attempt="+attWC0+"&metrics=x_custom_per_s&"+win)
	if len(r.Series) != 1 || r.Series[0].Unit != "1/s" {
		t.Errorf("x_custom_per_s: %+v", r.Series)
	}
	values(t, "x_custom_per_s", r, "x_custom_per_s", 1, 9)
	// The attempt: 75% of a core, 3 processes, 352 MiB.
	r = f.series(t, "/api/v1/jobs/"+jobWC+"/attempts/"+attWC0+"/series?metrics=cpu_percent,processes,rss_bytes&"+win)
	values(t, "attempt", r, "cpu_percent", 75, 9)
	values(t, "attempt", r, "processes", 3, 9)
	values(t, "attempt", r, "rss_bytes", 352<<20, 9)
	// Buckets of 5 s: gauges keep their peak, rates their average.
	r = f.series(t, "/api/v1/jobs/"+jobWC+"/attempts/"+attWC0+"/series?metrics=cpu_percent,rss_bytes&points=2&"+win)
	if r.Step != 5000 || len(r.Times) != 2 {
		t.Errorf("2 points over 10 s: step %d, %d points", r.Step, len(r.Times))
	}
	values(t, "attempt 5 s", r, "cpu_percent", 75, 2)
	values(t, "attempt 5 s", r, "rss_bytes", 352<<20, 2)
	// The job: both attempts, 175% and 752 MiB; 2 attempts with data.
	r = f.series(t, "/api/v1/jobs/"+jobWC+"/series?metrics=cpu_percent,rss_bytes,attempts&"+win)
	if r.Scope != store.ScopeJob {
		t.Errorf("scope %s", r.Scope)
	}
	values(t, "job", r, "cpu_percent", 175, 9)
	values(t, "job", r, "rss_bytes", 752<<20, 9)
	values(t, "job", r, "attempts", 2, 9)
	// A live chart fetches its last buckets again at the step it has: they
	// are the full window's buckets, values and all (rates included: their
	// first bucket looks back before from).
	full := f.series(t, "/api/v1/jobs/"+jobWC+"/series?metrics=cpu_percent,rss_bytes,attempts&points=5&"+win)
	tail := f.series(t, fmt.Sprintf("/api/v1/jobs/%s/series?metrics=cpu_percent,rss_bytes,attempts&step=%d&from=%d&to=%d",
		jobWC, full.Step, from+2*full.Step+1, to))
	if full.Step != 2000 || tail.Step != full.Step || tail.From != from+2*full.Step || !reflect.DeepEqual(tail.Times, full.Times[2:]) {
		t.Fatalf("tail at step %d from %d: %v; full at step %d: %v", tail.Step, tail.From, tail.Times, full.Step, full.Times)
	}
	for i := range full.Series {
		if got, want := fmt.Sprint(tail.Series[i].Values), fmt.Sprint(full.Series[i].Values[2:]); got != want {
			t.Errorf("tail of %s: %s, the full window's last buckets: %s", full.Series[i].Metric, got, want)
		}
	}
	// Default window: the job's life.
	r = f.series(t, "/api/v1/jobs/"+jobWC+"/series")
	if r.From > from || r.To < to {
		t.Errorf("default window [%d, %d) does not hold the job's [%d, %d]", r.From, r.To, from, to)
	}
	// A window after the data: all null.
	r = f.series(t, fmt.Sprintf("/api/v1/jobs/%s/series?from=%d&to=%d", jobWC, to+60_000, to+120_000))
	for _, s := range r.Series {
		for _, v := range s.Values {
			if !math.IsNaN(float64(v)) {
				t.Errorf("after the job: %s %v", s.Metric, s.Values)
				break
			}
		}
	}
	// The running job's series, up to now.
	r = f.series(t, "/api/v1/jobs/"+jobETL+"/attempts/"+attETL+"/series")
	values(t, "running attempt", r, "cpu_percent", 90, 25)
}

func testPointBudget(t *testing.T, f *fixture) {
	start := t0.UnixMilli()
	for _, tc := range []struct {
		from, to int64
		points   int
	}{
		{start, start + 10_000, 1}, {start, start + 10_000, 3}, {start + 500, start + 10_500, 10},
		{start + 1, start + 300_001, 300}, {start + 999, start + 30_000, 7}, {start - 3_600_000, start + 3_600_000, 5000},
		{start - 86_400_000*30, start + 1000, 13}, {start + 123, start + 10_000, 9},
	} {
		for _, path := range []string{"/api/v1/jobs/" + jobWC + "/series", "/api/v1/jobs/" + jobWC + "/attempts/" + attWC0 + "/series",
			"/api/v1/processes/" + f.keys[attWC0+"/101"] + "/series"} {
			q := fmt.Sprintf("%s?from=%d&to=%d&points=%d&metrics=cpu_percent", path, tc.from, tc.to, tc.points)
			r := f.series(t, q)
			if len(r.Times) > tc.points || len(r.Times) == 0 {
				t.Errorf("%s: %d points, budget %d (step %d)", q, len(r.Times), tc.points, r.Step)
			}
			if r.From > tc.from || r.From+int64(len(r.Times))*r.Step < tc.to {
				t.Errorf("%s: buckets [%d, +%d×%d) do not cover [%d, %d)", q, r.From, len(r.Times), r.Step, tc.from, tc.to)
			}
			if r.From%r.Step != 0 {
				t.Errorf("%s: from %d not aligned on the step %d", q, r.From, r.Step)
			}
		}
	}
	for _, tc := range []struct {
		from, to int64
		points   int
	}{{0, 10_000, 10}, {500, 10_500, 10}, {999, 301_000, 300}, {1, 1, 1}, {-1500, 1500, 3}, {0, 1 << 50, 100}} {
		s := Step(tc.from, tc.to, tc.points)
		aligned := tc.from - mod(tc.from, s)
		if n := (tc.to - aligned + s - 1) / s; n > int64(tc.points) {
			t.Errorf("Step(%d, %d, %d) = %d: %d buckets", tc.from, tc.to, tc.points, s, n)
		}
	}
}

func testHosts(t *testing.T, f *fixture) {
	var hs struct {
		Hosts []store.Host `json:"hosts"`
	}
	f.must(t, "/api/v1/hosts", &hs)
	var names []string
	by := map[string]store.Host{}
	for _, h := range hs.Hosts {
		names = append(names, h.Host)
		by[h.Host] = h
	}
	sort.Strings(names)
	if len(names) != 4 || by["node1"].Attempts != 4 || by["node1"].Running != 1 || by["node1"].LastSeen == 0 {
		t.Errorf("hosts %v, node1 %+v", names, by["node1"])
	}
	var d HostDetail
	f.must(t, fmt.Sprintf("/api/v1/hosts/node1?from=%d&to=%d", t0.UnixMilli(), now.UnixMilli()), &d)
	if d.Host != "node1" || len(d.Attempts) != 4 || d.Events == nil {
		t.Errorf("node1: %d attempts, events %v", len(d.Attempts), d.Events)
	}
	f.must(t, "/api/v1/hosts/node1?from=-2h&to=-90m", &d)
	if len(d.Attempts) != 0 {
		t.Errorf("node1 before its attempts: %d", len(d.Attempts))
	}
	f.must(t, "/api/v1/hosts/no-such-host", &d)
	if len(d.Attempts) != 0 {
		t.Errorf("unknown host: %+v", d)
	}
}

func testFindings(t *testing.T, f *fixture) {
	severities := map[string]bool{"none": true, "low": true, "moderate": true, "severe": true, "critical": true}
	var all store.JobPage
	f.must(t, "/api/v1/jobs?limit=1000", &all)
	seen := 0
	for _, j := range all.Jobs {
		var rep struct {
			JobID    string `json:"job_id"`
			Worst    string `json:"worst"`
			Findings []struct {
				Heuristic      string   `json:"heuristic"`
				Severity       string   `json:"severity"`
				AttemptIDs     []string `json:"attempt_ids"`
				Message        string   `json:"message"`
				Recommendation *string  `json:"recommendation"`
				Numbers        []struct {
					Name  string  `json:"name"`
					Value float64 `json:"value"`
					Unit  string  `json:"unit"`
				} `json:"numbers"`
			} `json:"findings"`
		}
		body := f.must(t, "/api/v1/jobs/"+j.JobID+"/findings", &rep)
		if rep.JobID != j.JobID || !severities[rep.Worst] || rep.Findings == nil {
			t.Errorf("findings of %s: %s", j.JobID, body)
		}
		for _, x := range rep.Findings {
			seen++
			if x.Heuristic == "" || !severities[x.Severity] || x.AttemptIDs == nil || x.Message == "" || x.Recommendation == nil || x.Numbers == nil {
				t.Errorf("finding of %s: %+v", j.JobID, x)
			}
		}
	}
	if seen == 0 {
		t.Error("no job has a finding")
	}
}

func testHistoryWaste(t *testing.T, f *fixture) {
	var h struct {
		Name  string `json:"name"`
		User  string `json:"user"`
		JobID string `json:"job_id"`
		Runs  []struct {
			JobID    string   `json:"job_id"`
			Duration float64  `json:"duration_s"`
			Outside  []string `json:"outside"`
		} `json:"runs"`
	}
	f.must(t, "/api/v1/jobs/"+jobWC+"/history?runs=5", &h)
	if h.Name != "CraftedWordCount" || h.User != "zoe" || len(h.Runs) != 1 || h.Runs[0].JobID != jobWC || h.Runs[0].Outside == nil {
		t.Errorf("history of %s: %+v", jobWC, h)
	}
	var w struct {
		By     string `json:"by"`
		Jobs   int    `json:"jobs"`
		Groups []struct {
			Key      string  `json:"key"`
			Jobs     int     `json:"jobs"`
			CPUHours float64 `json:"cpu_hours"`
			Failed   struct {
				CPUHours float64 `json:"cpu_hours"`
			} `json:"failed"`
		} `json:"groups"`
		Total struct {
			CPUHours float64 `json:"cpu_hours"`
		} `json:"total"`
	}
	f.must(t, "/api/v1/waste?by=user&from=-24h", &w)
	sum := 0.0
	for _, g := range w.Groups {
		sum += g.CPUHours
	}
	if w.By != "user" || w.Jobs < 3 || len(w.Groups) < 3 || w.Total.CPUHours <= 0 || math.Abs(sum-w.Total.CPUHours) > 1e-9 {
		t.Errorf("waste by user: %+v", w)
	}
	f.must(t, "/api/v1/waste?by=queue&queue=crafted&from=-24h", &w)
	if len(w.Groups) != 1 || w.Groups[0].Key != "crafted" || w.Groups[0].Jobs != 1 {
		t.Errorf("waste of queue crafted: %+v", w)
	}
	for path, want := range map[string]string{
		"/api/v1/waste?by=color":                      "by must be",
		"/api/v1/waste?from=-1h&to=-2h":               "from must be before to",
		"/api/v1/jobs/" + jobWC + "/history?runs=0":   "runs must be",
		"/api/v1/jobs/job_1700000000000_9999/history": "not found",
	} {
		code, body := f.get(t, path, nil)
		if code/100 != 4 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s, want %q", path, code, body, want)
		}
	}
}

func testEventsAndCatalog(t *testing.T, f *fixture) {
	var evs struct {
		Events []store.Event `json:"events"`
	}
	f.must(t, "/api/v1/jobs/"+jobWC+"/events", &evs)
	for _, e := range evs.Events {
		if e.JobID != "" && e.JobID != jobWC {
			t.Errorf("event of another job: %+v", e)
		}
	}
	f.must(t, "/api/v1/events?host=node1&limit=5", &evs)
	if len(evs.Events) > 5 {
		t.Errorf("limit 5: %d events", len(evs.Events))
	}
	var cat map[string][]struct{ Name, Unit, Help string }
	f.must(t, "/api/v1/metrics", &cat)
	if len(cat["process"]) != len(store.ProcessSeriesMetrics) || len(cat["attempt"]) != len(store.AttemptSeriesMetrics) ||
		len(cat["job"]) != len(store.AttemptSeriesMetrics)+1 {
		t.Errorf("catalog: %d %d %d", len(cat["process"]), len(cat["attempt"]), len(cat["job"]))
	}
}

func testErrors(t *testing.T, f *fixture) {
	key := f.keys[attWC0+"/101"]
	win := fmt.Sprintf("from=%d&to=%d", t0.UnixMilli(), t0.Add(10*time.Second).UnixMilli())
	tests := []struct {
		path string
		code int
		msg  string
	}{
		{"/api/v1/jobs/job_0_0", 404, "job not found"},
		{"/api/v1/jobs/job_0_0/findings", 404, "job not found"},
		{"/api/v1/jobs/job_0_0/series", 404, "job not found"},
		{"/api/v1/jobs/job_0_0/attempts/" + attWC0, 404, "job not found"},
		{"/api/v1/jobs/" + jobWC + "/attempts/attempt_0_0_m_0_0", 404, "attempt not found in this job"},
		{"/api/v1/jobs/" + jobETL + "/attempts/" + attWC0, 404, "attempt not found in this job"},
		{"/api/v1/jobs/" + jobETL + "/attempts/" + attWC0 + "/series", 404, "attempt not found in this job"},
		{"/api/v1/processes/00000000000000ff/series?" + win, 404, "process not found"},
		{"/api/v1/processes/" + key + "/series?attempt=attempt_0_0_m_0_0", 404, "attempt not found"},
		{"/api/v1/processes/" + key + "/series?attempt=" + attETL, 404, "process not found"},
		{"/api/v1/processes/xyz/series?" + win, 400, "a process key is 16 hex digits"},
		{"/api/v1/processes/" + key + "/series", 400, "give from and to, or attempt"},
		{"/api/v1/processes/" + key + "/series?metrics=attempts&" + win, 400, `unknown process metric "attempts"`},
		{"/api/v1/jobs/" + jobWC + "/series?metrics=cpu_percent,bogus", 200, ""}, // an agent's metric: nulls without data
		{"/api/v1/jobs/" + jobWC + "/series?metrics=cpu_percent,Bogus!", 400, `unknown job metric "Bogus!"`},
		{"/api/v1/jobs/" + jobWC + "/series?metrics=majflt_per_s", 400, `unknown job metric "majflt_per_s"`},
		{"/api/v1/jobs/" + jobWC + "/series?metrics=", 200, ""},
		{"/api/v1/jobs/" + jobWC + "/series?points=0", 400, "points must be an integer from 1 to 5000"},
		{"/api/v1/jobs/" + jobWC + "/series?points=5001", 400, "points must be an integer from 1 to 5000"},
		{"/api/v1/jobs/" + jobWC + "/series?points=ten", 400, "points must be an integer"},
		{"/api/v1/jobs/" + jobWC + "/series?step=999", 400, "step must be an integer from 1000 to"},
		{fmt.Sprintf("/api/v1/jobs/%s/series?step=1000&from=%d&to=%d", jobWC, t0.UnixMilli(), t0.UnixMilli()+5_000_001), 400, "step 1000 ms makes more than 5000 buckets"},
		{"/api/v1/jobs/" + jobWC + "/series?from=20&to=10", 400, "from must be before to"},
		{"/api/v1/jobs/" + jobWC + "/series?from=yesterday", 400, `from: "yesterday" is not unix milliseconds, RFC 3339 or -<duration>`},
		{"/api/v1/jobs/" + jobWC + "/series?to=-9223372036854775808", 400, "is not unix milliseconds from 1970 to 2100"},
		{"/api/v1/jobs/" + jobWC + "/series?from=0&to=9223372036854775807", 400, "is not unix milliseconds from 1970 to 2100"},
		{"/api/v1/jobs?state=lost", 400, "state must be running or finished"},
		{"/api/v1/jobs?limit=0", 400, "limit must be an integer from 1 to 1000"},
		{"/api/v1/jobs?limit=1001", 400, "limit must be an integer from 1 to 1000"},
		{"/api/v1/jobs?offset=-1", 400, "offset must be an integer"},
		{"/api/v1/jobs?to=soon", 400, "to: "},
		{"/api/v1/events?limit=x", 400, "limit must be an integer"},
		{"/api/v1/hosts/node1?from=x", 400, "from: "},
	}
	for _, tc := range tests {
		code, body := f.get(t, tc.path, nil)
		var e Error
		json.Unmarshal([]byte(body), &e)
		if code != tc.code || (tc.msg != "" && !strings.Contains(e.Error, tc.msg)) || code == 404 && e.Error != tc.msg {
			t.Errorf("%s: %d %s, want %d with %q", tc.path, code, body, tc.code, tc.msg)
		}
	}
}

func testHostileText(t *testing.T, f *fixture) {
	var d store.AttemptDetail
	body := f.must(t, "/api/v1/jobs/"+hostileJob+"/attempts/"+hostileAtt, &d)
	if len(d.ProcessList) != 1 || d.ProcessList[0].Cmdline != hostile || d.JobName != "<b>bold</b>" {
		t.Errorf("hostile text did not survive: %+v", d.ProcessList)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "</script>") || strings.Contains(body, "<b>") || strings.Contains(body, "<!--") {
		t.Errorf("markup is not escaped in the JSON: %s", body)
	}
	if !strings.Contains(body, `\\xff\\xfe\\x00`) {
		t.Errorf("escaped bytes not as sent: %s", body)
	}
	// A store that hands back invalid UTF-8 (a backend that does not check):
	// the answer is still valid JSON and UTF-8.
	raw := &rawStore{Store: f.st, cmdline: "cat \xff\xfe </script>"}
	mux := http.NewServeMux()
	New(raw, nil, nil, nil).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	g := &fixture{srv: srv}
	body = g.must(t, "/api/v1/jobs/"+hostileJob+"/attempts/"+hostileAtt, &d)
	if strings.Contains(body, "</script>") || !strings.Contains(d.ProcessList[0].Cmdline, "\ufffd") {
		t.Errorf("invalid UTF-8 from the store: %s", body)
	}
	// And no analyzer: an empty list of findings.
	body = g.must(t, "/api/v1/jobs/"+hostileJob+"/findings", nil)
	if strings.TrimSpace(body) != `{"findings":[]}` {
		t.Errorf("findings without an analyzer: %s", body)
	}
}

type rawStore struct {
	store.Store
	cmdline string
}

func (r *rawStore) Attempt(ctx context.Context, id string) (*store.AttemptDetail, error) {
	d, err := r.Store.Attempt(ctx, id)
	if err == nil {
		for i := range d.ProcessList {
			d.ProcessList[i].Cmdline = r.cmdline
		}
	}
	return d, err
}

func testLive(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/api/v1/live", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("live: Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() && len(lines) < 3 {
		lines = append(lines, sc.Text())
	}
	if strings.Join(lines, "|") != "retry: 3000|event: update|data: 0" {
		t.Errorf("live: %q", lines)
	}
}
