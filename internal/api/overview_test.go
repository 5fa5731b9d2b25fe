package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/store"
)

// GET /api/v1/overview: a user's overview is of the jobs they see only
// (their queues, users and lost processes); an operator's of all; bad
// windows are refused.
func TestOverviewRoute(t *testing.T) {
	f := newFixture(t)
	srv := behindProxy(t, f, "operator @ops\n")
	get := func(user, groups, query string) (int, analysis.Overview, string) {
		code, body := getAs(t, srv, user, groups, "/api/v1/overview"+query)
		var o analysis.Overview
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &o); err != nil {
				t.Fatal(err)
			}
		}
		return code, o, body
	}
	keys := func(o analysis.Overview) (queues, users []string, running []string) {
		for _, g := range o.Queues {
			queues = append(queues, g.Key)
		}
		for _, g := range o.Users {
			users = append(users, g.Key)
		}
		for _, j := range o.Running {
			running = append(running, j.JobID)
		}
		return
	}
	code, o, body := get("root", "ops", "")
	q, u, r := keys(o)
	if code != 200 || !slices.Contains(q, "crafted") || !slices.Contains(q, "default") || !slices.Contains(u, "yann") || !slices.Contains(u, "zoe") ||
		strings.Join(r, ",") != jobETL || o.RunningTotal != 1 {
		t.Errorf("operator: %d queues %v users %v running %v: %.300s", code, q, u, r, body)
	}
	code, o, body = get("zoe", "", "")
	q, u, r = keys(o)
	if code != 200 || strings.Join(q, ",") != "default" || strings.Join(u, ",") != "zoe" || len(r) != 0 || o.RunningTotal != 0 ||
		strings.Contains(body, "yann") || strings.Contains(body, "crafted") {
		t.Errorf("zoe: %d queues %v users %v running %v: %.300s", code, q, u, r, body)
	}
	for _, c := range []struct {
		user, query string
		code        int
	}{{"", "", 401}, {"zoe", "?from=x", 400}, {"zoe", "?from=2000&to=1000", 400}} {
		if code, _, body := get(c.user, "", c.query); code != c.code {
			t.Errorf("%s %s: %d %.200s, want %d", c.user, c.query, code, body, c.code)
		}
	}
}

// behindProxy serves the fixture's API behind an SSO proxy (its user and
// groups headers, believed from loopback) with the access rules of
// policy; the test's cleanup stops it.
func behindProxy(t *testing.T, f *fixture, policy string) *httptest.Server {
	t.Helper()
	p, err := auth.ParsePolicy(strings.NewReader(policy))
	if err != nil {
		t.Fatal(err)
	}
	proxies, _ := auth.ParseProxies("127.0.0.1")
	authn := auth.New(auth.Options{UserHeader: "X-Forwarded-User", GroupsHeader: "X-Forwarded-Groups", Proxies: proxies, Policy: p})
	a := New(f.st, analysis.New(f.st), NewLive(10*time.Millisecond, LiveOptions{}), authn)
	a.now = func() time.Time { return now }
	mux := http.NewServeMux()
	a.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// getAs GETs path from srv as a user of groups (none: no login), as the
// SSO proxy says.
func getAs(t *testing.T, srv *httptest.Server, user, groups, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if user != "" {
		req.Header.Set("X-Forwarded-User", user)
	}
	if groups != "" {
		req.Header.Set("X-Forwarded-Groups", groups)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// GET /api/v1/overview: what is in trouble, from the stored analyses: the
// running jobs with their worst severity and heuristics, the runs of
// recurring jobs that regressed (the worst first, whatever their start), each queue's and
// user's jobs by severity; of the jobs the reader sees only.
func TestOverviewTrouble(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stored := func(job string, fs ...analysis.Finding) {
		t.Helper()
		d, err := f.st.Job(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		a := &store.Analysis{JobID: job, Name: d.Name, User: d.User, Queue: d.Queue, Start: d.Start,
			AnalysisStamp: store.AnalysisStamp{Evaluated: store.Time(now.UnixMilli()), Version: "test", LastSeen: d.LastSeen, Ended: d.State == store.StateFinished}}
		for _, x := range fs {
			b, err := json.Marshal(x)
			if err != nil {
				t.Fatal(err)
			}
			a.Findings = append(a.Findings, store.StoredFinding{Heuristic: x.Heuristic, Severity: x.Severity, Body: b})
			a.Worst = max(a.Worst, x.Severity)
		}
		if err := f.st.PutAnalysis(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	finding := func(h string, s store.Severity) analysis.Finding {
		return analysis.Finding{Heuristic: h, Severity: s, AttemptIDs: []string{}, Message: h + " " + s.String(),
			Numbers: []analysis.Number{{Name: "duration_ratio", Value: 1.6, Unit: "x"}}}
	}
	stored(jobETL, finding("skew", store.SeveritySevere), finding("recurring", store.SeverityNone))
	stored(jobWC, finding("recurring", store.SeverityCritical))
	stored(hostileJob, finding("recurring", store.SeverityModerate), finding("memory_headroom", store.SeverityLow))
	srv := behindProxy(t, f, "operator @ops\n")
	get := func(user, groups string) (analysis.Overview, string) {
		t.Helper()
		code, body := getAs(t, srv, user, groups, "/api/v1/overview")
		var o analysis.Overview
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", user, code, body)
		}
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			t.Fatal(err)
		}
		return o, body
	}
	regressed := func(o analysis.Overview) string {
		var out []string
		for _, x := range o.Regressed {
			out = append(out, x.JobID+":"+x.Severity.String())
		}
		return strings.Join(out, ",")
	}
	group := func(gs []analysis.OverviewGroup, key string) store.SeverityCounts {
		for _, g := range gs {
			if g.Key == key {
				return g.Severities
			}
		}
		return nil
	}
	o, body := get("root", "ops")
	if len(o.Running) != 1 || o.Running[0].WorstSeverity == nil || *o.Running[0].WorstSeverity != store.SeveritySevere ||
		strings.Join(o.Running[0].Heuristics, ",") != "skew" {
		t.Errorf("operator: running %+v", o.Running)
	}
	if got, want := regressed(o), jobWC+":critical,"+hostileJob+":moderate"; got != want || o.RegressedTotal != 2 {
		t.Errorf("operator: regressed %s (total %d), want %s", got, o.RegressedTotal, want)
	}
	if c := group(o.Queues, "default"); c["critical"] != 1 || c["moderate"] != 1 || c["severe"] != 0 {
		t.Errorf("operator: queue default by severity %v: %.300s", c, body)
	}
	if c := group(o.Users, "yann"); c["severe"] != 1 || c.AtLeast(nil) != 1 {
		t.Errorf("operator: user yann by severity %v", c)
	}
	if c := group(o.Users, "mallory"); c["moderate"] != 1 {
		t.Errorf("operator: user mallory by severity %v", c)
	}
	// zoe sees her job's regression, not mallory's, nor that it exists.
	o, body = get("zoe", "")
	if got := regressed(o); got != jobWC+":critical" || o.RegressedTotal != 1 || strings.Contains(body, "mallory") || strings.Contains(body, hostileJob) {
		t.Errorf("zoe: regressed %s (total %d): %.300s", got, o.RegressedTotal, body)
	}
	if c := group(o.Queues, "default"); c["critical"] != 1 || c["moderate"] != 0 {
		t.Errorf("zoe: queue default by severity %v", c)
	}
	// The heuristics the filters take.
	code, body := getAs(t, srv, "zoe", "", "/api/v1/heuristics")
	var hs struct{ Heuristics []string }
	if err := json.Unmarshal([]byte(body), &hs); code != 200 || err != nil || !slices.Contains(hs.Heuristics, "recurring") || !slices.Contains(hs.Heuristics, "skew") {
		t.Errorf("heuristics: %d %s", code, body)
	}
	if code, _ := getAs(t, srv, "", "", "/api/v1/heuristics"); code != http.StatusUnauthorized {
		t.Errorf("heuristics without a login: %d", code)
	}
}
