package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestAccess: behind an SSO proxy, a user sees their own jobs and those
// their groups' queues grant, everything about them and nothing about the
// others (answered as unknown); hosts and events across jobs are
// operators'; a process's series are read through an attempt of a job the
// user sees.
func TestAccess(t *testing.T) {
	f := newFixture(t)
	srv := behindProxy(t, f, "operator @ops\nqueue crafted @night\n")
	get := func(user, groups, path string) (int, string) { return getAs(t, srv, user, groups, path) }
	wcProc := "/api/v1/processes/" + f.keys[attWC0+"/101"] + "/series"
	etlProc := "/api/v1/processes/" + f.keys[attETL+"/300"] + "/series"
	for _, c := range []struct {
		user, groups, path string
		code               int
		has                string
	}{
		{"", "", "/api/v1/jobs", 401, "login required"},
		{"zoe", "", "/api/v1/jobs", 200, `"total":1`},
		{"zoe", "", "/api/v1/jobs?user=yann", 200, `"total":0`},
		{"zoe", "", "/api/v1/jobs/" + jobWC, 200, attWC1},
		{"zoe", "", "/api/v1/jobs/" + jobWC + "/attempts/" + attWC0, 200, "YarnChild"},
		{"zoe", "", "/api/v1/jobs/" + jobWC + "/attempts/" + attWC0 + "/series", 200, "cpu_percent"},
		{"zoe", "", "/api/v1/jobs/" + jobWC + "/series", 200, "cpu_percent"},
		{"zoe", "", "/api/v1/jobs/" + jobWC + "/findings", 200, "findings"},
		{"zoe", "", "/api/v1/jobs/" + jobWC + "/events", 200, "events"},
		{"zoe", "", "/api/v1/events?job=" + jobWC, 200, "events"},
		{"zoe", "", wcProc + "?attempt=" + attWC0, 200, "cpu_percent"},
		{"zoe", "", "/api/v1/metrics", 200, "cpu_percent"},
		// Not hers: as if unknown.
		{"zoe", "", "/api/v1/jobs/" + jobETL, 404, "not found"},
		{"zoe", "", "/api/v1/jobs/" + jobETL + "/attempts/" + attETL, 404, "not found"},
		{"zoe", "", "/api/v1/jobs/" + jobETL + "/attempts/" + attETL + "/series", 404, "not found"},
		{"zoe", "", "/api/v1/jobs/" + jobETL + "/series", 404, "not found"},
		{"zoe", "", "/api/v1/jobs/" + jobETL + "/findings", 404, "not found"},
		{"zoe", "", "/api/v1/jobs/" + jobWC + "/history", 200, jobWC},
		{"zoe", "", "/api/v1/jobs/" + jobETL + "/history", 404, "not found"},
		{"zoe", "", "/api/v1/waste?by=user", 200, `"key":"zoe"`},
		{"zoe", "", "/api/v1/waste?by=queue", 200, `"jobs":1`},
		{"zoe", "", "/api/v1/jobs/" + jobETL + "/events", 404, "not found"},
		{"zoe", "", "/api/v1/events?job=" + jobETL, 404, "not found"},
		{"zoe", "", etlProc + "?attempt=" + attETL, 404, "not found"},
		{"zoe", "", etlProc + "?attempt=" + attWC0, 404, "not found"}, // not in her attempt
		// Operators'.
		{"zoe", "", etlProc + "?from=0&to=9999999999999", 403, "need attempt="},
		{"zoe", "", "/api/v1/events", 403, "only operators list events across jobs"},
		{"zoe", "", "/api/v1/hosts", 403, "zoe is not an operator"},
		{"zoe", "", "/api/v1/hosts/node1", 403, "not an operator"},
		// A queue granted to a group.
		{"xavier", "night", "/api/v1/jobs", 200, `"total":1`},
		{"xavier", "night", "/api/v1/jobs/" + jobETL + "/findings", 200, "findings"},
		{"xavier", "night", "/api/v1/jobs/" + jobWC, 404, "not found"},
		// Operators see all.
		{"root", "ops", "/api/v1/jobs/" + jobETL, 200, attETL},
		{"root", "ops", "/api/v1/hosts", 200, "node1"},
		{"root", "ops", "/api/v1/events", 200, "events"},
		{"root", "ops", etlProc + "?from=0&to=4102444800000", 200, "cpu_percent"},
	} {
		code, body := get(c.user, c.groups, c.path)
		if code != c.code || !strings.Contains(body, c.has) {
			t.Errorf("%s (%s) GET %s: %d %.300s, want %d with %q", c.user, c.groups, c.path, code, body, c.code, c.has)
		}
	}
	// The live stream is anyone's who is logged in.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/live", nil)
	req.Header.Set("X-Forwarded-User", "zoe")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("live: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestQueryCaps: a series query names at most 32 metrics, none twice
// (issue 16: one metric 10,000 times took 5.4 s and answered 149 MB).
func TestQueryCaps(t *testing.T) {
	f := newFixture(t)
	path := "/api/v1/jobs/" + jobWC + "/series?metrics="
	for _, c := range []struct {
		metrics string
		code    int
		msg     string
	}{
		{strings.TrimSuffix(strings.Repeat("rss_bytes,", 10000), ","), 400, "metrics: 10000 names, at most 32"},
		{"rss_bytes,cpu_percent,rss_bytes", 400, `metrics: \"rss_bytes\" is listed twice`},
		{"rss_bytes,cpu_percent", 200, "rss_bytes"},
	} {
		code, body := f.get(t, path+c.metrics, nil)
		if code != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("%.40s…: %d %.200s, want %d with %q", c.metrics, code, body, c.code, c.msg)
		}
	}
}

// TestLiveCaps: a client holds at most MaxPerClient live connections
// (429), the server at most MaxConns (503), and a closed one frees its
// place.
func TestLiveCaps(t *testing.T) {
	l := NewLive(time.Hour, LiveOptions{MaxConns: 5, MaxPerClient: 3,
		Client: func(r *http.Request) string { return r.Header.Get("X-Client") }})
	srv := httptest.NewServer(l)
	defer srv.Close()
	open := func(client string) (int, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Client", client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			if !strings.Contains(string(b), "too many live connections") || resp.Header.Get("Retry-After") == "" {
				t.Errorf("refused live connection: %d %s", resp.StatusCode, b)
			}
			return resp.StatusCode, func() {}
		}
		// Read the first event: the connection is counted by then.
		buf := make([]byte, 16)
		resp.Body.Read(buf)
		return resp.StatusCode, func() { cancel(); resp.Body.Close() }
	}
	var closers []func()
	for i := range 3 {
		code, c := open("a")
		closers = append(closers, c)
		if code != 200 {
			t.Fatalf("connection %d of client a: %d", i, code)
		}
	}
	if code, _ := open("a"); code != http.StatusTooManyRequests {
		t.Errorf("a fourth of client a: %d, want 429", code)
	}
	for range 2 {
		code, c := open("b")
		closers = append(closers, c)
		if code != 200 {
			t.Fatalf("client b: %d", code)
		}
	}
	if code, _ := open("c"); code != http.StatusServiceUnavailable {
		t.Errorf("a sixth in all: %d, want 503", code)
	}
	closers[0]()
	testsrv.WaitUntil(t, "the closed connection to leave the count", 5*time.Second, func() bool { return l.Conns() <= 4 })
	code, c := open("c")
	defer c()
	if code != 200 {
		t.Errorf("after one closed: %d", code)
	}
	for _, c := range closers[1:] {
		c()
	}
}

// TestLiveAttribution: a batch's data moves the counters of the readers who
// see its jobs, found from the batch's descriptions, else from the store
// (an attempt's series alone: its job, and whose that is); data of an
// attempt nothing knows moves operators' counters only.
func TestLiveAttribution(t *testing.T) {
	f := newFixture(t)
	l := NewLive(time.Millisecond, LiveOptions{Store: f.st})
	policy, _ := auth.ParsePolicy(strings.NewReader("queue crafted carl\n"))
	zoe, yann, carl, nobody := policy.Identify("zoe", nil, "sso"), policy.Identify("yann", nil, "sso"),
		policy.Identify("carl", nil, "sso"), policy.Identify("nobody", nil, "sso")
	want := func(what string, v map[*auth.Identity]uint64) {
		t.Helper()
		testsrv.WaitUntil(t, what, 10*time.Second, func() bool {
			for id, n := range v {
				if l.Version(id) != n {
					return false
				}
			}
			return !l.resolving.Load()
		})
		for id, n := range v {
			if got := l.Version(id); got != n {
				t.Errorf("%s: %s's counter %d, want %d", what, id.User, got, n)
			}
		}
	}
	commit := func(b *wire.Batch) { l.Stored(b); l.Committed() }
	commit(&wire.Batch{AttemptSeries: []wire.Series{{AttemptID: attWC0}}})
	want("zoe's attempt's series, its job from the store", map[*auth.Identity]uint64{zoe: 1, yann: 0, carl: 0, nobody: 0})
	commit(&wire.Batch{Events: []wire.Event{{AttemptID: attETL, Kind: "process_start"}}})
	want("an event of yann's attempt in queue crafted", map[*auth.Identity]uint64{zoe: 1, yann: 1, carl: 1, nobody: 0})
	commit(&wire.Batch{Attempts: []wire.Attempt{{AttemptID: "attempt_1800000000000_0001_m_000000_0", JobID: "job_1800000000000_0001",
		User: "zoe", Queue: "crafted"}}})
	want("a new job described in the batch", map[*auth.Identity]uint64{zoe: 2, yann: 1, carl: 2, nobody: 0})
	all := l.Version(auth.Open)
	commit(&wire.Batch{AttemptSeries: []wire.Series{{AttemptID: "attempt_1900000000000_0001_m_000000_0"}}})
	want("an attempt nothing knows", map[*auth.Identity]uint64{zoe: 2, yann: 1, carl: 2, nobody: 0})
	if l.Version(auth.Open) <= all {
		t.Errorf("an operator's counter did not move: %d", l.Version(auth.Open))
	}
}

// TestAgentMetricAnswer: a metric outside the catalog asked of one's own
// job is answered the same before and after an agent sends that name for
// another user's job (issue 27: 400 until anyone's agent sent it, then 200).
func TestAgentMetricAnswer(t *testing.T) {
	f := newFixture(t)
	path := "/api/v1/jobs/" + jobWC + "/series?metrics=cpu_percent,x_only_theirs"
	code, before := f.get(t, path, nil)
	if code != http.StatusOK {
		t.Fatalf("before: %d %s", code, before)
	}
	b := &wire.Batch{Version: wire.Version, AgentID: "node1-theirs", Seq: 1, Host: "node1", Metrics: []string{"x_only_theirs"},
		AttemptSeries: []wire.Series{{AttemptID: attETL, Times: []int64{t0.Add(25 * time.Second).UnixMilli()},
			Columns: []wire.Column{{Metric: 0, Values: []int64{7}}}}}}
	storetest.Ingest(t, f.st, b)
	if err := f.st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, after := f.get(t, path, nil); code != http.StatusOK || after != before {
		t.Errorf("after an agent sent it for another job: %d %s\nbefore: %s", code, after, before)
	}
	// Theirs has it (an operator asks).
	if _, body := f.get(t, "/api/v1/jobs/"+jobETL+"/attempts/"+attETL+"/series?metrics=x_only_theirs&from=0&to=4102444800000&points=1", nil); !strings.Contains(body, `"values":[7]`) {
		t.Errorf("the other job's series: %s", body)
	}
}

// stubAnalyzer says which findings it was asked for.
type stubAnalyzer struct{}

func (stubAnalyzer) Findings(context.Context, string) (any, error) {
	return map[string]string{"made": "with neighbours"}, nil
}
func (stubAnalyzer) FindingsWithoutNeighbours(context.Context, string) (any, error) {
	return map[string]string{"made": "without neighbours"}, nil
}

// TestNeighboursSwitch: with the access file's "neighbours operators", a
// reader who is not an operator is given the findings made without
// looking at what else ran on the job's hosts, and the job's worst
// severity (jobs list, job) of the stored findings that are not
// restricted; an operator, and everyone without the rule, those made
// with, and the worst of all.
func TestNeighboursSwitch(t *testing.T) {
	f := newFixture(t)
	proxies, _ := auth.ParseProxies("127.0.0.1")
	j, err := f.st.Job(context.Background(), jobWC)
	if err != nil {
		t.Fatal(err)
	}
	err = f.st.PutAnalysis(context.Background(), &store.Analysis{JobID: jobWC, User: j.User, Queue: j.Queue, Start: j.Start,
		Worst: store.SeverityCritical, AnalysisStamp: store.AnalysisStamp{Evaluated: j.LastSeen, LastSeen: j.LastSeen},
		Findings: []store.StoredFinding{
			{Heuristic: "noisy_neighbours", Severity: store.SeverityCritical, Body: []byte(`{}`), Restricted: true},
			{Heuristic: "skew", Severity: store.SeverityModerate, Body: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rules, user, want, worst string
	}{
		{"operator root\nneighbours operators\n", "zoe", "without neighbours", `"worst_severity":"moderate","heuristics":["skew"]`},
		{"operator root\nneighbours operators\n", "root", "with neighbours", `"worst_severity":"critical","heuristics":["noisy_neighbours","skew"]`},
		{"operator root\n", "zoe", "with neighbours", `"worst_severity":"critical","heuristics":["noisy_neighbours","skew"]`},
	} {
		policy, err := auth.ParsePolicy(strings.NewReader(c.rules))
		if err != nil {
			t.Fatal(err)
		}
		a := New(f.st, stubAnalyzer{}, nil, auth.New(auth.Options{UserHeader: "X-Forwarded-User", Proxies: proxies, Policy: policy}))
		mux := http.NewServeMux()
		a.Register(mux)
		srv := httptest.NewServer(mux)
		get := func(path string) string {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			req.Header.Set("X-Forwarded-User", c.user)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		if body := get("/api/v1/jobs/" + jobWC + "/findings"); !strings.Contains(body, `"`+c.want+`"`) {
			t.Errorf("%q, %s: %s, want findings made %s", c.rules, c.user, body, c.want)
		}
		for _, path := range []string{"/api/v1/jobs?user=zoe&min_severity=low", "/api/v1/jobs/" + jobWC} {
			if body := get(path); !strings.Contains(body, c.worst) {
				t.Errorf("%q, %s, %s: %s, want %s", c.rules, c.user, path, body, c.worst)
			}
		}
		srv.Close()
	}
}
