package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/cli"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

// TestHiddenAsUnknown walks every route the server registers (its mux's,
// so that a route added later is walked too), as a user behind the SSO
// proxy and as a script with an API token, with the ids of another user's
// job, attempt and process, and with unknown ids of the same form: each
// pair of answers is the same, status, headers and body, byte for byte, on
// GET and HEAD (and POST where a route takes it), on the embedded store
// and on ClickHouse; and so is what `taskscope report` prints (the id the
// user typed aside). docs/api.md's table of routes names every route.
func TestHiddenAsUnknown(t *testing.T) {
	for _, backend := range []string{"duckdb", "clickhouse"} {
		t.Run(backend, func(t *testing.T) {
			w := newAccessWorld(t, backend)
			routes := w.srv.Routes()
			checkRoutesDocumented(t, routes)
			pairs, notFound := 0, 0
			for _, pattern := range routes {
				for _, c := range w.cases(pattern) {
					for _, login := range w.logins {
						a, b := w.ask(t, c.method, c.paths[0], login), w.ask(t, c.method, c.paths[1], login)
						if a.String() != b.String() {
							// (A time in the answer may have moved between the two: ask again.)
							a, b = w.ask(t, c.method, c.paths[0], login), w.ask(t, c.method, c.paths[1], login)
						}
						pairs++
						if a.code == http.StatusNotFound {
							notFound++
						}
						if a.String() != b.String() {
							t.Errorf("%s (%s, %s):\n  %s %s\n%s\n  %s %s\n%s", pattern, c.what, login.name, c.method, c.paths[0], a, c.method, c.paths[1], b)
						}
					}
				}
			}
			t.Logf("%d routes, %d pairs of answers compared, %d of them 404", len(routes), pairs, notFound)
			if notFound < 20 {
				t.Errorf("only %d pairs answered 404: the walk does not reach the routes of jobs", notFound)
			}
			// The reader sees their own: the walk is not of a reader who sees nothing.
			for _, p := range []string{"/api/v1/jobs/" + w.own.job, "/api/v1/jobs/" + w.own.job + "/attempts/" + w.own.attempt,
				"/api/v1/processes/" + w.own.key + "/series?attempt=" + w.own.attempt} {
				if a := w.ask(t, http.MethodGet, p, w.logins[0]); a.code != http.StatusOK {
					t.Errorf("GET %s of the reader's own: %d %s", p, a.code, a.body)
				}
			}
			w.checkReport(t)
			w.checkStoredFindings(t)
		})
	}
}

// checkStoredFindings: the reader's GET /api/v1/findings shows the
// findings of their own jobs and none of the others' (every job has one).
func (w *accessWorld) checkStoredFindings(t *testing.T) {
	for _, login := range w.logins {
		a := w.ask(t, http.MethodGet, "/api/v1/findings?limit=1000", login)
		var page struct {
			Findings []struct {
				JobID string `json:"job_id"`
				User  string `json:"user"`
			} `json:"findings"`
		}
		if err := json.Unmarshal([]byte(a.body), &page); a.code != http.StatusOK || err != nil {
			t.Fatalf("GET /api/v1/findings as %s: %d %s", login.name, a.code, a.body)
		}
		own := 0
		for _, f := range page.Findings {
			if f.User != w.reader {
				t.Errorf("GET /api/v1/findings as %s (%s) shows a finding of %s's job %s", login.name, w.reader, f.User, f.JobID)
			}
			if f.JobID == w.own.job {
				own++
			}
		}
		if own != 1 {
			t.Errorf("GET /api/v1/findings as %s (%s): %d findings of their job %s, want 1", login.name, w.reader, own, w.own.job)
		}
	}
}

// accessWorld is a server with loadgen's data of five users, where a
// reader (one of them) asks about another's job and about unknown ones.
type accessWorld struct {
	srv       *server.Server
	st        store.Store
	base      string
	logins    []login
	tokenFile string
	reader    string
	own       ids // the reader's
	hidden    ids // another user's
	unknown   ids // of nothing: the form of hidden's
	client    *http.Client
}

type ids struct{ job, attempt, key, user, queue string }

type login struct {
	name   string
	header http.Header
}

func newAccessWorld(t testing.TB, backend string) *accessWorld {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	const minutes = 6
	now := func() time.Time { return start.Add((minutes + 1) * time.Minute) }
	clock := store.Clock{Now: now, StaleAfter: 2 * time.Minute}
	var st store.Store
	switch backend {
	case "duckdb":
		d, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		st = d
	case "clickhouse":
		ch := chtest.Start(t)
		c, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: ch.URL() + "?database=access", InsertEvery: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c.SetClock(clock)
		st = c
	}
	t.Cleanup(func() { st.Close() })
	dir := t.TempDir()
	w := &accessWorld{st: st, tokenFile: filepath.Join(dir, "token"), client: &http.Client{Timeout: time.Minute}}
	const token = "reader-token-of-the-test"
	tokFile := filepath.Join(dir, "api.tokens")
	os.WriteFile(w.tokenFile, []byte(token+"\n"), 0o600)

	// The data first, with reads open; then the reader is chosen and
	// the server started again with logins.
	open, err := server.Start(server.Config{Listen: "127.0.0.1:0", Store: st, MaintainEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadgen.Config{URL: open.URL(), Nodes: 3, Slots: 3, BatchTicks: 5, Seed: 11, Start: start, Duration: minutes * time.Minute}
	if res, err := loadgen.SendAll(context.Background(), cfg, loadgen.Prepare(cfg)); err != nil || res.Rejected > 0 {
		t.Fatalf("loadgen: %+v, %v", res, err)
	}
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var page store.JobPage
	getJSON(t, w.client, open.URL()+"/api/v1/jobs?limit=1000", &page)
	// Every job's analysis stored, with a finding, as the background
	// analyser would (GET /api/v1/findings lists them).
	for _, j := range page.Jobs {
		b, _ := json.Marshal(analysis.Finding{Heuristic: "memory_headroom", Severity: analysis.Moderate, Message: "of " + j.JobID})
		err := st.PutAnalysis(context.Background(), &store.Analysis{JobID: j.JobID, Name: j.Name, User: j.User, Queue: j.Queue, Start: j.Start,
			Worst: store.SeverityModerate, Findings: []store.StoredFinding{{Heuristic: "memory_headroom", Severity: store.SeverityModerate, Body: b}},
			AnalysisStamp: store.AnalysisStamp{Evaluated: store.Time(now().UnixMilli()), Version: "test", LastSeen: j.LastSeen, Ended: true}})
		if err != nil {
			t.Fatal(err)
		}
	}
	open.Shutdown(context.Background())
	byUser := map[string][]store.Job{}
	for _, j := range page.Jobs {
		byUser[j.User] = append(byUser[j.User], j)
	}
	if len(byUser) < 2 {
		t.Fatalf("jobs of %d users: too few", len(byUser))
	}
	for u, js := range byUser {
		for _, j := range js {
			if j.Attempts > 0 && (w.reader == "" || u < w.reader) {
				w.reader = u
			}
		}
	}
	for _, j := range page.Jobs {
		if j.User != w.reader && w.hidden.job == "" {
			w.hidden = ids{job: j.JobID, user: j.User, queue: j.Queue}
		}
		if j.User == w.reader && w.own.job == "" {
			w.own = ids{job: j.JobID, user: j.User, queue: j.Queue}
		}
	}
	os.WriteFile(tokFile, []byte(auth.Hash(token)+" "+w.reader+"\n"), 0o600)
	toks, err := auth.LoadTokens(tokFile, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	proxies, _ := auth.ParseProxies("127.0.0.1, ::1")
	authn := auth.New(auth.Options{UserHeader: "X-Forwarded-User", GroupsHeader: "X-Forwarded-Groups", Proxies: proxies, Tokens: toks})
	w.srv, err = server.Start(server.Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Hour, Auth: authn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.srv.Shutdown(context.Background()) })
	w.base = w.srv.URL()
	w.logins = []login{{"sso", http.Header{"X-Forwarded-User": {w.reader}}}, {"token", http.Header{"Authorization": {"Bearer " + token}}}}

	// An attempt and a process of each job, as an operator would see them.
	for _, x := range []*ids{&w.own, &w.hidden} {
		d, err := st.Job(context.Background(), x.job)
		if err != nil || len(d.AttemptList) == 0 {
			t.Fatalf("job %s: %v", x.job, err)
		}
		x.attempt = d.AttemptList[0].AttemptID
		ad, err := st.Attempt(context.Background(), x.attempt)
		if err != nil || len(ad.ProcessList) == 0 {
			t.Fatalf("attempt %s: %v", x.attempt, err)
		}
		x.key = ad.ProcessList[0].Key.String()
	}
	// Unknown ids of the same form and length.
	w.unknown = ids{job: renumber(w.hidden.job), attempt: renumber(w.hidden.attempt), user: "nobody" + strings.Repeat("x", max(0, len(w.hidden.user)-6)),
		queue: "noqueue", key: fmt.Sprintf("%016x", ^mustKey(t, w.hidden.key))}
	for _, id := range []string{w.unknown.job} {
		if _, err := st.Job(context.Background(), id); err == nil {
			t.Fatalf("the unknown job %s exists", id)
		}
	}
	t.Logf("reader %s; own job %s; hidden job %s of %s, attempt %s, process %s; unknown %s, %s, %s",
		w.reader, w.own.job, w.hidden.job, w.hidden.user, w.hidden.attempt, w.hidden.key, w.unknown.job, w.unknown.attempt, w.unknown.key)
	return w
}

// renumber is an id of the same form as id, of a job's number no job has
// (job_1796…_0004 -> job_1796…_9904).
func renumber(id string) string {
	parts := strings.Split(id, "_")
	if len(parts) < 3 {
		return id + "x"
	}
	n := parts[2]
	parts[2] = strings.Repeat("9", min(2, len(n))) + n[min(2, len(n)):]
	return strings.Join(parts, "_")
}

func mustKey(t testing.TB, s string) uint64 {
	k, err := store.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(k)
}

// accessCase is one request of a route, as its hidden and as its unknown
// form.
type accessCase struct {
	what   string
	method string
	paths  [2]string
}

// cases are the pairs of requests to make of a route: its wildcards given
// the hidden ids and the unknown ones (the job's, or an attempt and a
// process of another job under the reader's own), with the query
// parameters that name jobs, attempts, users and queues.
func (w *accessWorld) cases(pattern string) []accessCase {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = http.MethodGet, pattern
	}
	methods := []string{method}
	if method == http.MethodGet {
		methods = append(methods, http.MethodHead)
	}
	fill := func(x ids, jobOf ids) string {
		return wildcard.ReplaceAllStringFunc(path, func(m string) string {
			switch strings.Trim(m, "{}.") {
			case "job":
				return url.PathEscape(jobOf.job)
			case "attempt":
				return url.PathEscape(x.attempt)
			case "key":
				return x.key
			case "host":
				return "node001.sim"
			}
			return "x"
		})
	}
	type variant struct {
		what         string
		hidden, none string
	}
	variants := []variant{
		{"their ids", fill(w.hidden, w.hidden), fill(w.unknown, w.unknown)},
	}
	if strings.Contains(path, "{attempt}") || strings.Contains(path, "{key}") {
		variants = append(variants, variant{"their attempt or process under the reader's job", fill(w.hidden, w.own), fill(w.unknown, w.own)})
	}
	if path == "/" {
		variants = append(variants, variant{"a page of the UI", "/jobs/" + w.hidden.job, "/jobs/" + w.unknown.job})
	}
	queries := [][2]string{{"", ""},
		{"job=" + w.hidden.job, "job=" + w.unknown.job},
		{"attempt=" + w.hidden.attempt, "attempt=" + w.unknown.attempt},
		{"job=" + w.own.job + "&attempt=" + w.hidden.attempt, "job=" + w.own.job + "&attempt=" + w.unknown.attempt},
		{"user=" + w.hidden.user, "user=" + w.unknown.user},
		{"queue=" + w.hidden.queue + "&user=" + w.hidden.user, "queue=" + w.unknown.queue + "&user=" + w.unknown.user},
		{"name=" + w.hidden.job, "name=" + w.unknown.job},
	}
	if strings.Contains(path, "{key}") {
		// A process of theirs (or none) through the reader's own attempt.
		queries = append(queries, [2]string{"attempt=" + w.own.attempt, "attempt=" + w.own.attempt})
	}
	var out []accessCase
	for _, m := range methods {
		for _, v := range variants {
			for _, q := range queries {
				a, b := v.hidden, v.none
				if q[0] != "" {
					a, b = a+"?"+q[0], b+"?"+q[1]
				}
				if a == b {
					continue
				}
				out = append(out, accessCase{what: v.what + " " + q[0], method: m, paths: [2]string{a, b}})
			}
		}
	}
	return out
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// answer is what a request got: its status, the headers that a client
// sees (all but Date), and its body.
type answer struct {
	code   int
	header http.Header
	body   string
}

func (a answer) String() string {
	h := a.header.Clone()
	h.Del("Date")
	var b bytes.Buffer
	h.Write(&b)
	return fmt.Sprintf("%d\n%s%.2000s", a.code, b.String(), nowTimes(a.body))
}

// nowTimes replaces in s the times within a minute of the wall clock's,
// or of whole hours before it (a window that ends now by default, and
// starts 6 hours or 7 days before), with NOW: two requests are not made
// in the same millisecond.
func nowTimes(s string) string {
	return rfc3339.ReplaceAllStringFunc(s, func(m string) string {
		t, err := time.Parse(time.RFC3339Nano, m)
		if d := time.Since(t); err == nil && d > -time.Minute && d < 8*24*time.Hour {
			if off := (d + time.Minute) % time.Hour; off < 2*time.Minute {
				return "NOW"
			}
		}
		return m
	})
}

var rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// ask makes a request as login. A stream (the live updates) is read for
// its first event only.
func (w *accessWorld) ask(t testing.TB, method, path string, l login) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range l.header {
		req.Header[k] = v
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var body []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		buf := make([]byte, 4096)
		for !bytes.Contains(body, []byte("\n\n")) && len(body) < 1<<20 {
			n, err := resp.Body.Read(buf)
			body = append(body, buf[:n]...)
			if err != nil {
				break
			}
		}
	} else if body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return answer{resp.StatusCode, resp.Header, string(body)}
}

// checkReport: `taskscope report` prints the same for another user's job
// (or attempt, or recurring job) as for an unknown one, and exits the same,
// but for the ids the user typed.
func (w *accessWorld) checkReport(t *testing.T) {
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"report", "--server", w.base, "--token-file", w.tokenFile}, args...), &out, &errOut)
		s := fmt.Sprintf("exit %d\n%s\n%s", code, out.String(), errOut.String())
		for _, id := range []string{w.hidden.job, w.hidden.attempt, w.unknown.job, w.unknown.attempt} {
			s = strings.ReplaceAll(s, id, "ID")
		}
		return s
	}
	for _, c := range [][2][]string{
		{{w.hidden.job}, {w.unknown.job}},
		{{w.hidden.job, w.hidden.attempt}, {w.unknown.job, w.unknown.attempt}},
		{{w.own.job, w.hidden.attempt}, {w.own.job, w.unknown.attempt}},
		{{"--history", w.hidden.job}, {"--history", w.unknown.job}},
	} {
		a, b := run(c[0]...), run(c[1]...)
		if a != b || !strings.Contains(a, "exit 1") {
			t.Errorf("taskscope report %v:\n%s\nand %v:\n%s", c[0], a, c[1], b)
		}
	}
	if own := run(w.own.job); !strings.Contains(own, "exit 0") {
		t.Errorf("taskscope report of the reader's own job: %s", own)
	}
}

// checkRoutesDocumented fails unless docs/api.md's table of routes names
// every route the server registers, and no other.
func checkRoutesDocumented(t *testing.T, routes []string) {
	t.Helper()
	var documented []string
	for _, r := range server.DocumentedRoutes(t) {
		documented = append(documented, wildcard.ReplaceAllString(r, "{}"))
	}
	var registered []string
	for _, r := range routes {
		if !strings.Contains(r, " ") {
			r = "GET " + r
		}
		registered = append(registered, wildcard.ReplaceAllString(r, "{}"))
	}
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in docs/api.md's table of routes", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("docs/api.md's route %s is not served", d)
		}
	}
}

func getJSON(t testing.TB, c *http.Client, u string, v any) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkHiddenVsUnknown times each route of a job, of an attempt and of
// a process, asked by a user with another user's ids and with unknown ones
// of the same form, alternately, over HTTP (store, API, JSON, loopback),
// on the embedded store and on ClickHouse: the medians of the two
// (hidden-ms, unknown-ms) and their ratio (hidden/unknown, the target
// within 0.8 to 1.2), and the reader's own (own-ms) beside them.
//
//	go test -run '^$' -bench HiddenVsUnknown -benchtime 200x ./internal/server/
func BenchmarkHiddenVsUnknown(b *testing.B) {
	for _, backend := range []string{"duckdb", "clickhouse"} {
		w := newAccessWorld(b, backend)
		paths := func(x, job ids) []string {
			return []string{
				"/api/v1/jobs/" + job.job,
				"/api/v1/jobs/" + job.job + "/series",
				"/api/v1/jobs/" + job.job + "/findings",
				"/api/v1/jobs/" + job.job + "/events",
				"/api/v1/jobs/" + job.job + "/attempts/" + x.attempt,
				"/api/v1/jobs/" + job.job + "/attempts/" + x.attempt + "/series",
				"/api/v1/processes/" + x.key + "/series?attempt=" + x.attempt,
			}
		}
		names := []string{"job", "job-series", "findings", "events", "attempt", "attempt-series", "process-series"}
		hidden, unknown, own := paths(w.hidden, w.hidden), paths(w.unknown, w.unknown), paths(w.own, w.own)
		// An attempt of another job, or none, under the reader's own job.
		names = append(names, "their-attempt-under-own-job")
		hidden = append(hidden, "/api/v1/jobs/"+w.own.job+"/attempts/"+w.hidden.attempt)
		unknown = append(unknown, "/api/v1/jobs/"+w.own.job+"/attempts/"+w.unknown.attempt)
		own = append(own, "/api/v1/jobs/"+w.own.job+"/attempts/"+w.own.attempt)
		for i, name := range names {
			b.Run(backend+"/"+name, func(b *testing.B) {
				var th, tu, to []time.Duration
				timed := func(p string, want int) time.Duration {
					t0 := time.Now()
					a := w.ask(b, http.MethodGet, p, w.logins[0])
					d := time.Since(t0)
					if a.code != want {
						b.Fatalf("GET %s: %d %s", p, a.code, a.body)
					}
					return d
				}
				for range 5 { // warm the caches of both
					timed(hidden[i], http.StatusNotFound)
					timed(unknown[i], http.StatusNotFound)
				}
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					if n%2 == 0 {
						th = append(th, timed(hidden[i], http.StatusNotFound))
						tu = append(tu, timed(unknown[i], http.StatusNotFound))
					} else {
						tu = append(tu, timed(unknown[i], http.StatusNotFound))
						th = append(th, timed(hidden[i], http.StatusNotFound))
					}
					if n%10 == 0 {
						to = append(to, timed(own[i], http.StatusOK))
					}
				}
				b.StopTimer()
				mh, mu, mo := medianOf(th), medianOf(tu), medianOf(to)
				b.ReportMetric(float64(mh)/1e6, "hidden-ms")
				b.ReportMetric(float64(mu)/1e6, "unknown-ms")
				b.ReportMetric(float64(mo)/1e6, "own-ms")
				b.ReportMetric(float64(mh)/float64(mu), "hidden/unknown")
			})
		}
	}
}

func medianOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
