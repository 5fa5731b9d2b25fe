package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/store"
)

// accessWorlds are two servers behind the same login: one holds every
// job of the crafted dataset, the other zoe's alone. A reader who may not
// see the others' jobs must get the same answers from both: they learn
// nothing of jobs they may not see, not even that they exist.
type accessWorlds struct {
	full, own *httptest.Server
	authn     *auth.Authenticator
	routes    []string
	ids       []string      // every id of the full world's jobs, attempts and processes
	owners    []store.Owner // of the full world's jobs that the other has not
	keys      map[string]string
}

func newAccessWorlds(t testing.TB) *accessWorlds {
	policy, err := auth.ParsePolicy(strings.NewReader("operator @ops\nqueue crafted @night\n"))
	if err != nil {
		t.Fatal(err)
	}
	proxies, _ := auth.ParseProxies("127.0.0.1")
	toks, _ := auth.ParseTokens(strings.NewReader("zoe-token zoe\nyann-token yann\n"), 1, 8)
	w := &accessWorlds{authn: auth.New(auth.Options{UserHeader: "X-Forwarded-User", GroupsHeader: "X-Forwarded-Groups",
		Proxies: proxies, Tokens: toks, Policy: policy})}
	serve := func(all bool) (*httptest.Server, *fixture) {
		f := &fixture{keys: map[string]string{}}
		st := f.fill(t, all)
		f.st = st
		a := New(st, analysis.New(st), NewLive(10*time.Millisecond, LiveOptions{}), w.authn)
		a.now = func() time.Time { return now }
		mux := http.NewServeMux()
		a.Register(mux)
		w.routes = a.Routes()
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv, f
	}
	var ff *fixture
	w.full, ff = serve(true)
	w.own, _ = serve(false)
	w.keys = ff.keys
	ctx := context.Background()
	st := ff.st
	page, err := ff.st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range page.Jobs {
		w.ids = append(w.ids, j.JobID)
		if j.JobID != jobWC {
			w.owners = append(w.owners, store.Owner{User: j.User, Queue: j.Queue})
		}
		if d, err := st.Job(ctx, j.JobID); err == nil && len(d.AttemptList) > 0 {
			w.ids = append(w.ids, d.AttemptList[0].AttemptID)
		}
	}
	for _, k := range ff.keys {
		w.ids = append(w.ids, k)
	}
	return w
}

// confined reports whether the identity of r sees none of the jobs the
// full world has and the other has not (nor is an operator); an error
// (no login, an untrusted one) is confined too.
func (w *accessWorlds) confined(r *http.Request) bool {
	id, err := w.authn.Identify(r)
	if err != nil {
		return true
	}
	if id.Operator {
		return false
	}
	for _, o := range w.owners {
		if id.Sees(o.User, o.Queue) {
			return false
		}
	}
	return true
}

// evaluated is the time a report of findings was made (the wall clock's).
var evaluated = regexp.MustCompile(`"evaluated":"[^"]*"`)

func (w *accessWorlds) answer(t *testing.T, base string, method, path string, h http.Header) string {
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		return "bad request: " + err.Error()
	}
	req.Header = h.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Header.Del("Date")
	var b bytes.Buffer
	resp.Header.Write(&b)
	return fmt.Sprintf("%d\n%s\n%s", resp.StatusCode, b.String(), evaluated.ReplaceAll(body, []byte(`"evaluated":"…"`)))
}

// FuzzAccess: whatever route, ids, query and headers a reader sends
// (and whoever they say they are, short of someone who may see the others'
// jobs), the answer is the one a server without those jobs gives, byte
// for byte: status, headers, body.
func FuzzAccess(f *testing.F) {
	w := newAccessWorlds(f)
	for i := range w.routes {
		for _, id := range []uint8{1, 2, 3, 200} {
			f.Add(uint8(i), id, id, "", "", true, uint8(0), "", "", "")
		}
		f.Add(uint8(i), uint8(0), uint8(1), "x", "attempt="+attETL, false, uint8(1), "", "", "")
		f.Add(uint8(i), uint8(2), uint8(2), "", "job="+jobETL, false, uint8(2), "night,ops", "", "")
		f.Add(uint8(i), uint8(200), uint8(200), "job_1700000000000_000", "user=yann&queue=crafted", true, uint8(3), "", "Bearer yann-token", "")
		f.Add(uint8(i), uint8(3), uint8(0), "%2e%2e", "name=0002", false, uint8(0), "@night", "Basic eW9", "zoe, yann")
	}
	f.Fuzz(func(t *testing.T, route, idA, idB uint8, free, query string, head bool, who uint8, groups, authz, user2 string) {
		if len(w.routes) == 0 {
			t.Skip()
		}
		pattern := w.routes[int(route)%len(w.routes)]
		method, path, _ := strings.Cut(pattern, " ")
		if head {
			method = http.MethodHead
		} else if strings.HasSuffix(path, "/live") {
			return // a stream: asked with HEAD only
		}
		pick := func(i uint8) string {
			if int(i) < len(w.ids) {
				return w.ids[i]
			}
			return free
		}
		n := 0
		path = wildcardRe.ReplaceAllStringFunc(path, func(string) string {
			n++
			if n == 1 {
				return url.PathEscape(pick(idA))
			}
			return url.PathEscape(pick(idB))
		})
		if query != "" {
			path += "?" + query
		}
		h := http.Header{}
		switch who % 4 {
		case 0:
			h.Set("X-Forwarded-User", "zoe")
		case 1:
			h.Set("X-Forwarded-User", free)
		case 2:
			h.Add("X-Forwarded-User", "zoe")
			h.Add("X-Forwarded-User", user2)
		}
		if groups != "" {
			h.Set("X-Forwarded-Groups", groups)
		}
		if authz != "" {
			h.Set("Authorization", authz)
		}
		req, err := http.NewRequest(method, w.full.URL+path, nil)
		if err != nil {
			return
		}
		for _, vs := range h {
			for _, v := range vs {
				if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
					return // not a header a client can send
				}
			}
		}
		req.Header = h
		req.RemoteAddr = "127.0.0.1:1"
		if !w.confined(req) {
			return // they may see some of the other jobs: the worlds differ for them
		}
		a, b := w.answer(t, w.full.URL, method, path, h), w.answer(t, w.own.URL, method, path, h)
		if a != b {
			t.Fatalf("%s %s %v:\nwith the others' jobs:\n%s\nwithout:\n%s", method, path, h, a, b)
		}
	})
}

var wildcardRe = regexp.MustCompile(`\{[^}]*\}`)
