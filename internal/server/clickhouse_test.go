package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestAPISameOnClickHouse sends the same batches over HTTP to a server on
// the embedded store and to one on ClickHouse, and asks both every route
// of the API (apiRoutes: each route of docs/api.md's table has a case, or
// the test fails): the answers are the same (floats to 1e-9 relative: sums
// over attempts are taken in another order; the findings' evaluation time
// is the wall clock's).
func TestAPISameOnClickHouse(t *testing.T) {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	const minutes = 8
	// Both stores' clock: a minute after the data ends. Some attempts run
	// (seen within 2 minutes), others ended.
	now := func() time.Time { return start.Add((minutes + 1) * time.Minute) }
	checkRoutesCovered(t)
	ch := chtest.Start(t)
	cst, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: ch.URL() + "?database=api", InsertEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cst.SetClock(store.Clock{Now: now, StaleAfter: 2 * time.Minute})
	defer cst.Close()
	dst, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: now, StaleAfter: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var base []string
	for _, st := range []store.Store{dst, cst} {
		srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown(context.Background())
		base = append(base, srv.URL())
	}
	cfg := loadgen.Config{Nodes: 3, Slots: 3, BatchTicks: 5, Seed: 7, Start: start, Duration: minutes * time.Minute}
	bodies := loadgen.Prepare(cfg)
	// ClickHouse gets the nodes' batches interleaved, as the nodes send
	// them; the embedded store one node's after the other's (each node's in
	// its order): answers must not depend on the order nodes' batches
	// arrive in (the embedded store takes them as they come).
	byNode := slices.Clone(bodies)
	slices.SortStableFunc(byNode, func(a, b loadgen.Body) int { return strings.Compare(b.Agent, a.Agent) })
	var sent []loadgen.Result
	for i, u := range base {
		c := cfg
		c.URL = u
		order := bodies
		if i == 0 {
			order, c.Concurrency = byNode, 1
		}
		res, err := loadgen.SendAll(context.Background(), c, order)
		if err != nil || res.Rejected > 0 {
			t.Fatalf("%s: %+v, %v", u, res, err)
		}
		t.Logf("%s: %d batches, %d samples in %s", u, res.Batches, res.Samples, res.Elapsed.Round(time.Millisecond))
		sent = append(sent, res)
	}
	for _, st := range []store.Store{dst, cst} {
		if err := st.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f := &apiFixture{t: t, base: base, sent: sent, window: fmt.Sprintf("from=%d&to=%d", start.UnixMilli(), now().UnixMilli()),
		stored: bodies[0]}
	f.jobs = f.get(base[0], "/api/v1/jobs?limit=1000").(map[string]any)["jobs"].([]any)
	if len(f.jobs) < 3 {
		t.Fatalf("%d jobs: too few to compare", len(f.jobs))
	}
	for _, j := range f.jobs {
		id := j.(map[string]any)["job_id"].(string)
		detail := f.get(base[0], "/api/v1/jobs/"+url.PathEscape(id)).(map[string]any)
		for _, a := range detail["attempt_list"].([]any) {
			if len(f.attempts) >= 40 {
				break
			}
			aid := a.(map[string]any)["attempt_id"].(string)
			f.attempts = append(f.attempts, [2]string{id, aid})
			ap := "/api/v1/jobs/" + url.PathEscape(id) + "/attempts/" + url.PathEscape(aid)
			for _, p := range f.get(base[0], ap).(map[string]any)["process_list"].([]any) {
				f.procs = append(f.procs, [2]string{aid, p.(map[string]any)["key"].(string)})
			}
		}
	}
	compared, differ := 0, 0
	for _, rc := range apiRoutes {
		if rc.check != nil {
			rc.check(f)
			compared++
			continue
		}
		paths := rc.paths(f)
		if len(paths) == 0 {
			t.Errorf("%s: no path to ask", rc.route)
		}
		for _, p := range paths {
			compared++
			a, b := f.get(base[0], p), f.get(base[1], p)
			if d := diff("", a, b); d != "" {
				differ++
				if differ <= 10 {
					t.Errorf("%s: %s: %s", rc.route, p, d)
				}
			}
		}
	}
	t.Logf("%d routes of the API, %d requests compared (%d jobs, %d attempts, %d processes), %d differ",
		len(apiRoutes), compared, len(f.jobs), len(f.attempts), len(f.procs), differ)
}

// apiFixture is what the cases of apiRoutes ask about: the two servers
// (the embedded store's first) and what was sent to both.
type apiFixture struct {
	t        *testing.T
	base     []string
	sent     []loadgen.Result
	stored   loadgen.Body // a body sent to both
	window   string       // from=…&to=… over the data
	jobs     []any        // the jobs list's entries
	attempts [][2]string  // job, attempt (40 at most)
	procs    [][2]string  // attempt, process key (of those attempts)
}

// get GETs a path and decodes its JSON answer (or returns the status and
// body as a string).
func (f *apiFixture) get(u, path string) any {
	f.t.Helper()
	resp, err := http.Get(u + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return v
}

// raw GETs a path from both servers: status, Content-Type and body each.
func (f *apiFixture) raw(path string) (out [2]string) {
	f.t.Helper()
	for i, u := range f.base {
		resp, err := http.Get(u + path)
		if err != nil {
			f.t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out[i] = fmt.Sprintf("%d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return out
}

func (f *apiFixture) jobPaths(suffixes ...string) []string {
	var out []string
	for _, j := range f.jobs {
		jp := "/api/v1/jobs/" + url.PathEscape(j.(map[string]any)["job_id"].(string))
		for _, s := range suffixes {
			out = append(out, jp+s)
		}
	}
	return out
}

func (f *apiFixture) attemptPaths(suffixes ...string) []string {
	var out []string
	for _, a := range f.attempts {
		ap := "/api/v1/jobs/" + url.PathEscape(a[0]) + "/attempts/" + url.PathEscape(a[1])
		for _, s := range suffixes {
			out = append(out, ap+s)
		}
	}
	return out
}

// apiCase is how TestAPISameOnClickHouse compares one route: the paths
// whose JSON answers must be the same on both stores, or a check of its
// own for a route whose answer is not JSON or not the store's.
type apiCase struct {
	route string // as docs/api.md's table of routes names it
	paths func(f *apiFixture) []string
	check func(f *apiFixture)
}

// apiRoutes has a case for every route of docs/api.md (checkRoutesCovered):
// a route added there needs one here.
var apiRoutes = []apiCase{
	{route: "POST /api/v1/ingest", check: func(f *apiFixture) {
		// The same bodies went to both: the same answers (stored, not
		// duplicates, none refused).
		a, b := f.sent[0], f.sent[1]
		if a.Batches != b.Batches || a.Samples != b.Samples || a.Duplicates != b.Duplicates || a.Rejected+b.Rejected != 0 {
			f.t.Errorf("POST /api/v1/ingest: %+v on the embedded store, %+v on ClickHouse", a, b)
		}
		// A stored (agent, seq) sent again with its body cut short is a
		// duplicate on both (store.ReadAgentSeq), not a bad request.
		data := wire.Marshal(nil, &wire.Batch{Version: wire.Version, AgentID: f.stored.Agent, Seq: f.stored.Seq, Host: "node",
			SentMs: f.stored.SentMs, Attempts: []wire.Attempt{{AttemptID: "attempt_1_1_m_000001_0", JobID: "job_1_1"}}})
		for _, u := range f.base {
			resp, err := http.Post(u+"/api/v1/ingest", wire.ContentType, bytes.NewReader(data[:len(data)-3]))
			if err != nil {
				f.t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Taskscope-Duplicate") != "true" {
				f.t.Errorf("POST /api/v1/ingest to %s: a stored (agent, seq) with a broken body: %d %s", u, resp.StatusCode, body)
			}
		}
	}},
	{route: "GET /api/v1/jobs", paths: func(f *apiFixture) []string {
		return []string{"/api/v1/jobs?limit=1000", "/api/v1/jobs?state=running", "/api/v1/jobs?state=finished&limit=3&offset=1",
			"/api/v1/jobs?user=nobody", "/api/v1/jobs?limit=0"}
	}},
	{route: "GET /api/v1/jobs/{job_id}", paths: func(f *apiFixture) []string {
		return append(f.jobPaths(""), "/api/v1/jobs/job_0_0")
	}},
	{route: "GET /api/v1/jobs/{job_id}/attempts/{attempt_id}", paths: func(f *apiFixture) []string {
		return append(f.attemptPaths(""), "/api/v1/jobs/job_1_0001/attempts/attempt_1_0001_m_000000_0")
	}},
	{route: "GET /api/v1/jobs/{job_id}/findings", paths: func(f *apiFixture) []string { return f.jobPaths("/findings") }},
	{route: "GET /api/v1/findings", paths: func(f *apiFixture) []string {
		// (After the jobs' findings above: the finished jobs' are stored.)
		return []string{"/api/v1/findings?limit=1000", "/api/v1/findings?min_severity=moderate&limit=3&offset=1",
			"/api/v1/findings?heuristic=memory_headroom&" + f.window, "/api/v1/findings?limit=0",
			"/api/v1/jobs?limit=1000&sort=severity", "/api/v1/jobs?min_severity=low", "/api/v1/jobs?heuristic=memory_headroom"}
	}},
	{route: "GET /api/v1/jobs/{job_id}/history", paths: func(f *apiFixture) []string {
		return append(f.jobPaths("/history", "/history?runs=1"), "/api/v1/jobs/job_0_0/history")
	}},
	{route: "GET /api/v1/overview", paths: func(f *apiFixture) []string { return []string{"/api/v1/overview?" + f.window} }},
	{route: "GET /api/v1/heuristics", paths: func(f *apiFixture) []string { return []string{"/api/v1/heuristics"} }},
	{route: "GET /api/v1/jobs/{job_id}/attempts/{attempt_id}/profiles", paths: func(f *apiFixture) []string {
		return f.attemptPaths("/profiles")
	}},
	{route: "GET /api/v1/jobs/{job_id}/attempts/{attempt_id}/profiles/{id}", paths: func(f *apiFixture) []string {
		return f.attemptPaths("/profiles/1")[:1] // none taken: not found on both
	}},
	{route: "POST /api/v1/jobs/{job_id}/attempts/{attempt_id}/profiles", check: func(f *apiFixture) {
		// The attempts ended, or their servers take no profiles: the
		// same refusal from both.
		var got [2]string
		for i, u := range f.base {
			resp, err := http.Post(u+f.attemptPaths("/profiles")[0], "application/json", strings.NewReader(`{"window_s": 30}`))
			if err != nil {
				f.t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got[i] = fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		if got[0] != got[1] || !strings.HasPrefix(got[0], "409 ") {
			f.t.Errorf("POST .../profiles: %q on the embedded store, %q on ClickHouse; want the same 409", got[0], got[1])
		}
	}},
	{route: "GET /api/v1/waste", paths: func(f *apiFixture) []string {
		var out []string
		for _, by := range []string{"user", "queue", "job", "day"} {
			out = append(out, "/api/v1/waste?by="+by+"&"+f.window)
		}
		return append(out, "/api/v1/waste?by=nothing")
	}},
	{route: "GET /api/v1/jobs/{job_id}/series", paths: func(f *apiFixture) []string {
		return f.jobPaths("/series?metrics=cpu_percent,rss_bytes,attempts,read_bytes_per_s&"+f.window, "/series?points=50&"+f.window)
	}},
	{route: "GET /api/v1/jobs/{job_id}/attempts/{attempt_id}/series", paths: func(f *apiFixture) []string {
		return f.attemptPaths("/series?metrics=cpu_percent,rss_bytes,short_lived,gc_percent&" + f.window)
	}},
	{route: "GET /api/v1/processes/{key}/series", paths: func(f *apiFixture) []string {
		var out []string
		for _, p := range f.procs {
			out = append(out, "/api/v1/processes/"+p[1]+"/series?metrics=cpu_percent,rss_bytes,read_bytes_per_s,threads&"+f.window,
				"/api/v1/processes/"+p[1]+"/series?attempt="+url.QueryEscape(p[0])+"&"+f.window)
		}
		return out
	}},
	{route: "GET /api/v1/jobs/{job_id}/events", paths: func(f *apiFixture) []string { return f.jobPaths("/events") }},
	{route: "GET /api/v1/events", paths: func(f *apiFixture) []string {
		return []string{"/api/v1/events?" + f.window, "/api/v1/events?kind=attempt_end&limit=5&" + f.window}
	}},
	{route: "GET /api/v1/hosts", paths: func(f *apiFixture) []string { return []string{"/api/v1/hosts"} }},
	{route: "GET /api/v1/hosts/{host}", paths: func(f *apiFixture) []string {
		out := []string{"/api/v1/hosts/nosuchhost?" + f.window}
		for _, h := range f.get(f.base[0], "/api/v1/hosts").(map[string]any)["hosts"].([]any) {
			out = append(out, "/api/v1/hosts/"+url.PathEscape(h.(map[string]any)["host"].(string))+"?"+f.window)
		}
		return out
	}},
	{route: "GET /api/v1/metrics", paths: func(f *apiFixture) []string { return []string{"/api/v1/metrics"} }},
	{route: "GET /api/v1/live", check: func(f *apiFixture) {
		// The first event of each: an update carrying a counter (its
		// value is each store's own, and moves when data arrives).
		for i, u := range f.base {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/api/v1/live", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				cancel()
				f.t.Fatal(err)
			}
			var lines []string
			sc := bufio.NewScanner(resp.Body)
			for len(lines) < 3 && sc.Scan() {
				lines = append(lines, sc.Text())
			}
			resp.Body.Close()
			cancel()
			n := uint64(0)
			if len(lines) == 3 {
				n, err = strconv.ParseUint(strings.TrimPrefix(lines[2], "data: "), 10, 64)
			}
			if resp.Header.Get("Content-Type") != "text/event-stream" || len(lines) < 3 || lines[1] != "event: update" ||
				err != nil || n == 0 {
				f.t.Errorf("GET /api/v1/live on server %d: %s, %q", i, resp.Header.Get("Content-Type"), lines)
			}
		}
	}},
	{route: "GET /metrics", check: func(f *apiFixture) {
		// The ingest's counters: the same data went to both.
		var got [2]map[string]float64
		for i, u := range f.base {
			resp, err := http.Get(u + "/metrics")
			if err != nil {
				f.t.Fatal(err)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(resp.Body)
			resp.Body.Close()
			if err != nil {
				f.t.Fatalf("GET /metrics: %v", err)
			}
			got[i] = map[string]float64{}
			for _, name := range []string{"taskscope_ingest_batches_total", "taskscope_ingest_samples_total",
				"taskscope_ingest_received_bytes_total", "taskscope_ingest_rejected_total"} {
				for _, m := range fams[name].GetMetric() {
					key := name
					for _, l := range m.GetLabel() {
						key += "," + l.GetName() + "=" + l.GetValue()
					}
					got[i][key] = m.GetCounter().GetValue()
				}
			}
		}
		if len(got[0]) == 0 || fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
			f.t.Errorf("GET /metrics: the ingest's counters: %v on the embedded store, %v on ClickHouse", got[0], got[1])
		}
	}},
	{route: "GET /healthz", check: func(f *apiFixture) {
		if r := f.raw("/healthz"); r[0] != r[1] || !strings.HasPrefix(r[0], "200 ") {
			f.t.Errorf("GET /healthz: %q on the embedded store, %q on ClickHouse", r[0], r[1])
		}
	}},
	{route: "GET /", check: func(f *apiFixture) {
		if r := f.raw("/"); r[0] != r[1] || !strings.HasPrefix(r[0], "200 ") {
			f.t.Errorf("GET /: the UI differs: %.200q against %.200q", r[0], r[1])
		}
	}},
}

// checkRoutesCovered fails unless apiRoutes has a case for every route in
// docs/api.md's table of routes, and names none that the table does not.
func checkRoutesCovered(t *testing.T) {
	t.Helper()
	documented := map[string]bool{}
	for _, r := range DocumentedRoutes(t) {
		documented[r] = true
	}
	cased := map[string]bool{}
	for _, rc := range apiRoutes {
		cased[rc.route] = true
		if !documented[rc.route] {
			t.Errorf("apiRoutes names %q, which docs/api.md's table of routes does not", rc.route)
		}
	}
	for r := range documented {
		if !cased[r] {
			t.Errorf("docs/api.md's route %q has no case in apiRoutes (TestAPISameOnClickHouse): add one", r)
		}
	}
}

// DocumentedRoutes are the routes of docs/api.md's table of routes
// ("GET /api/v1/jobs/{job_id}", ...), for the tests that check that the
// table and the routes served agree.
func DocumentedRoutes(tb testing.TB) []string {
	tb.Helper()
	data, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		tb.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "\n## Routes\n")
	if !ok {
		tb.Fatal("docs/api.md: no section \"## Routes\"")
	}
	table, _, _ = strings.Cut(table, "\n#")
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z]+ /[^`]*)` \\|").FindAllStringSubmatch(table, -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		tb.Fatalf("docs/api.md: %d routes found in its table: the table's form changed?", len(out))
	}
	return out
}

// diff describes the first difference between two decoded JSON values
// (floats equal to 1e-9 relative; a report's evaluation time ignored).
func diff(path string, a, b any) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: %T against %T", path, a, b)
		}
		var keys []string
		for k := range x {
			keys = append(keys, k)
		}
		for k := range y {
			if _, ok := x[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "evaluated" {
				continue
			}
			if d := diff(path+"."+k, x[k], y[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Sprintf("%s: %d items against %v", path, len(x), b)
		}
		for i := range x {
			if d := diff(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); d != "" {
				return d
			}
		}
		return ""
	case float64:
		y, ok := b.(float64)
		if !ok || x != y && math.Abs(x-y) > 1e-9*math.Max(math.Abs(x), math.Abs(y)) {
			return fmt.Sprintf("%s: %v against %v", path, a, b)
		}
		return ""
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		return fmt.Sprintf("%s: %v against %v", path, a, b)
	}
	return ""
}
