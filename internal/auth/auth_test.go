package auth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	file := "# agents\n\n  tok1  node1\n" + Hash("tok2") + "\r\n\tTOK3 node3 # not a comment: a second word\n"
	_, err := ParseTokens(strings.NewReader(file), 0, 1)
	if err == nil || !strings.Contains(err.Error(), "line 5: 8 words after the token, want 0 to 1") {
		t.Errorf("a line of too many words: %v", err)
	}
	toks, err := ParseTokens(strings.NewReader(strings.ReplaceAll(file, " # not a comment: a second word", "")), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret string
		ok     bool
		fields []string
	}{
		{"tok1", true, []string{"node1"}},
		{"tok2", true, []string{}},
		{"TOK3", true, []string{"node3"}},
		{"tok3", false, nil},
		{"tok", false, nil},
		{"tok1 ", false, nil},
		{"", false, nil},
		{Hash("tok2"), false, nil}, // the hash is not the token
	} {
		tok, ok := toks.Lookup(c.secret)
		if ok != c.ok || ok && !slices.Equal(tok.Fields, c.fields) {
			t.Errorf("Lookup(%q) = %v %v, want %v %v", c.secret, tok, ok, c.ok, c.fields)
		}
	}
	var none *Tokens
	if _, ok := none.Lookup("tok1"); ok || none.Len() != 0 {
		t.Error("no tokens accept a token")
	}
	for _, bad := range []string{"# none\n\n", "sha256:abc\n", "sha256:" + strings.Repeat("z", 64) + "\n"} {
		if _, err := ParseTokens(strings.NewReader(bad), 0, 1); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing"), 0, 1); err == nil {
		t.Error("a missing file accepted")
	}
	if a, b := NewToken(), NewToken(); len(a) != 64 || a == b {
		t.Errorf("tokens %s, %s", a, b)
	}
	if got := Bearer("bearer  abc"); got != "abc" {
		t.Errorf("Bearer = %q", got)
	}
	if got := Bearer("Basic abc"); got != "" {
		t.Errorf("Basic is a bearer token: %q", got)
	}
}

func TestPolicy(t *testing.T) {
	p, err := ParsePolicy(strings.NewReader(`
# who sees what
operator root @ops
admin    bob
queue    etl  @etl-team carol   # a comment
queue    adhoc @analysts
user     svc-etl @etl-team
group    etl-team dave erin
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user   string
		groups []string
		sees   [][2]string // user, queue
		not    [][2]string
		op     bool
	}{
		{"root", nil, [][2]string{{"anyone", "any"}}, nil, true},
		{"mallory", []string{"ops"}, [][2]string{{"anyone", "any"}}, nil, true},
		{"bob", nil, nil, nil, true},
		{"alice", nil, [][2]string{{"alice", "default"}}, [][2]string{{"bob", "default"}, {"svc-etl", "x"}, {"x", "etl"}}, false},
		{"carol", nil, [][2]string{{"carol", "q"}, {"x", "etl"}}, [][2]string{{"svc-etl", "x"}, {"x", "adhoc"}}, false},
		{"dave", nil, [][2]string{{"x", "etl"}, {"svc-etl", "y"}}, [][2]string{{"x", "adhoc"}}, false},
		{"frank", []string{" @analysts", "etl-team"}, [][2]string{{"x", "adhoc"}, {"x", "etl"}, {"svc-etl", "z"}}, [][2]string{{"y", "default"}}, false},
	} {
		id := p.Identify(c.user, c.groups, "token")
		if id.Operator != c.op {
			t.Errorf("%s: operator %v", c.user, id.Operator)
		}
		for _, s := range c.sees {
			if !id.Sees(s[0], s[1]) {
				t.Errorf("%s (%+v) does not see a job of %s in %s", c.user, id, s[0], s[1])
			}
		}
		for _, s := range c.not {
			if id.Sees(s[0], s[1]) {
				t.Errorf("%s (%+v) sees a job of %s in %s", c.user, id, s[0], s[1])
			}
		}
	}
	var none *Policy
	if id := none.Identify("alice", []string{"ops"}, "sso"); id.Operator || !id.Sees("alice", "q") || id.Sees("bob", "q") {
		t.Errorf("without a policy: %+v", id)
	}
	// What else ran beside a job: everyone's to see by default, or
	// operators' alone.
	if p.Identify("alice", nil, "sso").HideNeighbours {
		t.Error("neighbours hidden without the rule")
	}
	hide, err := ParsePolicy(strings.NewReader("operator root\nneighbours operators\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !hide.Identify("alice", nil, "sso").HideNeighbours || hide.Identify("root", nil, "sso").HideNeighbours {
		t.Error("neighbours operators: hidden from alice, shown to root?")
	}
	if show, _ := ParsePolicy(strings.NewReader("neighbours operators\nneighbours everyone\n")); show == nil || show.Identify("alice", nil, "sso").HideNeighbours {
		t.Error("neighbours everyone (the later line) hides them")
	}
	for _, bad := range []string{"operator\n", "queue etl\n", "grant x y\n", "group g @h\n", "neighbours\n", "neighbours nobody\n", "neighbours operators x\n"} {
		if _, err := ParsePolicy(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestIdentify(t *testing.T) {
	proxies, err := ParseProxies("10.0.0.5, 192.168.0.0/16,::1")
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := ParseTokens(strings.NewReader("script-token svc-report analysts\n"), 1, 8)
	policy, _ := ParsePolicy(strings.NewReader("operator @ops\nqueue adhoc @analysts\n"))
	a := New(Options{UserHeader: "x-forwarded-user", GroupsHeader: "X-Forwarded-Groups", Proxies: proxies, Tokens: toks, Policy: policy})
	h := a.Require(false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(FromContext(r.Context()))
	}))
	ops := a.Require(true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []struct {
		name   string
		peer   string
		hdr    []string // "Name: value", in order (a name may repeat)
		code   int
		opCode int
		user   string
		msg    string
	}{
		{"anonymous", "10.9.9.9:1", nil, 401, 401, "", "log in through the SSO proxy"},
		{"from the proxy", "10.0.0.5:4444", []string{"X-Forwarded-User: alice"}, 200, 403, "alice", ""},
		{"from a proxy's network", "192.168.7.1:4444", []string{"X-Forwarded-User: alice", "X-Forwarded-Groups: ops, etl"}, 200, 200, "alice", ""},
		{"IPv6 loopback proxy", "[::1]:4444", []string{"X-Forwarded-User: alice"}, 200, 403, "alice", ""},
		{"not from the proxy", "10.0.0.6:4444", []string{"X-Forwarded-User: root"}, 403, 403, "", "X-Forwarded-User is accepted only from the SSO proxy, not from 10.0.0.6"},
		{"an empty user", "10.0.0.5:4444", []string{"X-Forwarded-User:  "}, 401, 401, "", "the proxy named no user"},
		{"a token", "10.9.9.9:1", []string{"Authorization: Bearer script-token"}, 200, 403, "svc-report", ""},
		{"a token beats the header", "10.0.0.5:1", []string{"Authorization: Bearer script-token", "X-Forwarded-User: root"}, 200, 403, "svc-report", ""},
		{"a wrong token", "10.0.0.5:1", []string{"Authorization: Bearer nope", "X-Forwarded-User: root"}, 403, 403, "", "unknown API token"},
		// Issue 27: the rules the doc states, each case of its own.
		{"a token with the header from elsewhere", "10.0.0.6:1", []string{"Authorization: Bearer script-token", "X-Forwarded-User: root"}, 403, 403, "", "X-Forwarded-User is accepted only from the SSO proxy, not from 10.0.0.6"},
		{"a token with an empty header from elsewhere", "10.0.0.6:1", []string{"Authorization: Bearer script-token", "X-Forwarded-User: "}, 403, 403, "", "accepted only from the SSO proxy"},
		{"a proxy's Basic beside its user", "10.0.0.5:1", []string{"Authorization: Basic YWxpY2U6cHc=", "X-Forwarded-User: alice"}, 200, 403, "alice", ""},
		{"a Negotiate beside the user", "10.0.0.5:1", []string{"Authorization: Negotiate YII=", "X-Forwarded-User: alice"}, 200, 403, "alice", ""},
		{"Basic alone, from the proxy", "10.0.0.5:1", []string{"Authorization: Basic YWxpY2U6cHc="}, 401, 401, "", "the proxy named no user"},
		{"Basic alone, from elsewhere", "10.9.9.9:1", []string{"Authorization: Basic YWxpY2U6cHc="}, 401, 401, "", "log in through the SSO proxy"},
		{"Basic and a token", "10.9.9.9:1", []string{"Authorization: Basic YWxpY2U6cHc=", "Authorization: Bearer script-token"}, 200, 403, "svc-report", ""},
		{"two tokens", "10.9.9.9:1", []string{"Authorization: Bearer script-token", "Authorization: Bearer script-token"}, 403, 403, "", "more than one bearer token"},
		{"an empty bearer", "10.9.9.9:1", []string{"Authorization: Bearer "}, 403, 403, "", "unknown API token"},
		{"the header twice, one user", "10.0.0.5:1", []string{"X-Forwarded-User: alice", "X-Forwarded-User: alice"}, 200, 403, "alice", ""},
		{"the header twice, two users", "10.0.0.5:1", []string{"X-Forwarded-User: root", "X-Forwarded-User: alice"}, 403, 403, "", "X-Forwarded-User names more than one user"},
		{"the header joined, two users", "10.0.0.5:1", []string{"X-Forwarded-User: root, alice"}, 403, 403, "", "names more than one user"},
		{"the header twice, one blank", "10.0.0.5:1", []string{"X-Forwarded-User: alice", "X-Forwarded-User: "}, 200, 403, "alice", ""},
		{"the header twice from elsewhere", "10.0.0.6:1", []string{"X-Forwarded-User: alice", "X-Forwarded-User: alice"}, 403, 403, "", "accepted only from the SSO proxy"},
	} {
		for _, op := range []bool{false, true} {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/jobs", nil)
			req.RemoteAddr = c.peer
			for _, h := range c.hdr {
				k, v, _ := strings.Cut(h, ": ")
				req.Header.Add(k, v)
			}
			rec := httptest.NewRecorder()
			want := c.code
			if op {
				ops.ServeHTTP(rec, req)
				want = c.opCode
			} else {
				h.ServeHTTP(rec, req)
			}
			if rec.Code != want || !strings.Contains(rec.Body.String(), c.msg) {
				t.Errorf("%s (operators only %v): %d %s, want %d with %q", c.name, op, rec.Code, rec.Body, want, c.msg)
			}
			if rec.Code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s: 401 without WWW-Authenticate", c.name)
			}
			if !op && rec.Code == 200 {
				var id Identity
				json.Unmarshal(rec.Body.Bytes(), &id)
				if id.User != c.user {
					t.Errorf("%s: user %q, want %q", c.name, id.User, c.user)
				}
			}
		}
	}
	// No login configured: everyone is the open identity.
	open := New(Options{})
	if open.Enabled() {
		t.Error("no header, no tokens: enabled")
	}
	if id, err := open.Identify(httptest.NewRequest(http.MethodGet, "/", nil)); err != nil || !id.Operator || id.Via != "open" {
		t.Errorf("open: %+v %v", id, err)
	}
	if _, err := ParseProxies("10.0.0.1,not-an-ip"); err == nil {
		t.Error("a bad proxy accepted")
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	tf, pf := filepath.Join(dir, "tokens"), filepath.Join(dir, "access")
	os.WriteFile(tf, []byte(Hash("s3cret")+" alice\n"), 0o600)
	os.WriteFile(pf, []byte("queue etl alice\n"), 0o600)
	toks, err := LoadTokens(tf, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadPolicy(pf)
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := toks.Lookup("s3cret")
	if !ok || !p.Identify(tok.Fields[0], nil, "token").Sees("bob", "etl") {
		t.Errorf("token %v %v", tok, ok)
	}
	if _, err := LoadTokens(pf, 0, 1); err == nil || !strings.Contains(err.Error(), pf) {
		t.Errorf("a bad token file: %v", err)
	}
}

// FuzzParseTokens: any file is parsed or refused, never panics, and every
// token it parses is found by itself.
func FuzzParseTokens(f *testing.F) {
	f.Add("tok1 node1\n# c\nsha256:" + strings.Repeat("ab", 32) + " x\n")
	f.Add("\x00\xff sha256:\n")
	f.Fuzz(func(t *testing.T, s string) {
		toks, err := ParseTokens(strings.NewReader(s), 0, 3)
		if err != nil {
			return
		}
		for _, line := range strings.Split(s, "\n") {
			w := strings.Fields(line)
			if len(w) == 0 || strings.HasPrefix(w[0], "#") || strings.HasPrefix(w[0], HashPrefix) {
				continue
			}
			if _, ok := toks.Lookup(w[0]); !ok {
				t.Fatalf("token %q of %q not found", w[0], s)
			}
		}
	})
}

// FuzzParsePolicy: any access file is parsed or refused, never panics; a
// parsed one never makes a user an operator unless it names them or a
// group of theirs.
func FuzzParsePolicy(f *testing.F) {
	f.Add("operator alice @ops\nqueue etl @t bob\nuser x y\ngroup t carol\n")
	f.Add("admin\n#\n\x00")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(strings.NewReader(s))
		if err != nil {
			return
		}
		id := p.Identify("zz-nobody-zz", nil, "token")
		if id.Operator && !strings.Contains(s, "zz-nobody-zz") {
			t.Fatalf("%q makes an unnamed user an operator", s)
		}
		if !id.Sees("zz-nobody-zz", "q") {
			t.Fatal("a user does not see their own jobs")
		}
	})
}
