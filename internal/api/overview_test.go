package api

import (
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
