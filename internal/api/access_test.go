package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
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
