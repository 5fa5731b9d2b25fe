package nodemanager

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jcmturner/goidentity/v6"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/taskscope/taskscope/internal/minica"
	"github.com/taskscope/taskscope/internal/minikdc"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// The node of these tests: its canonical name, what _HOST becomes, and
// the name of its NodeManager's certificate and SPNEGO principal.
const (
	nodeName     = "node1.example.test"
	agentPrinc   = "taskscope/" + nodeName
	nmPrinc      = "HTTP/" + nodeName
	intruder     = "intruder/" + nodeName
	oneContainer = `{"containers":{"container":[{"id":"container_e01_1700000000000_0001_01_000002","state":"RUNNING","exitCode":-1000,"user":"alice"}]}}`
)

// secureCluster is a KDC started by the test, with the principals of a
// node's agent and NodeManager, and a CA.
type secureCluster struct {
	kdc *minikdc.KDC
	ca  *minica.CA
	dir string
}

func newSecureCluster(t *testing.T, opt minikdc.Options) *secureCluster {
	t.Helper()
	c := &secureCluster{kdc: testsrv.StartKDC(t, opt), dir: t.TempDir()}
	ctx := context.Background()
	if err := c.kdc.AddPrincipal(ctx, "", agentPrinc, nmPrinc, intruder); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.ca, err = minica.New("test cluster CA"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path("ca.pem"), c.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *secureCluster) path(name string) string { return filepath.Join(c.dir, name) }

// keytab writes the principals' keys into a new keytab file.
func (c *secureCluster) keytab(t *testing.T, name string, principals ...string) string {
	t.Helper()
	p := c.path(name)
	if err := c.kdc.Keytab(context.Background(), p, principals...); err != nil {
		t.Fatal(err)
	}
	return p
}

// secureNM is a NodeManager stand-in that demands SPNEGO (the server side
// of the agent's Kerberos library) over TLS with the cluster CA's
// certificate for nodeName, and lets the principals in allowed read its
// containers (403 for others, as an ACL does).
type secureNM struct {
	srv     *httptest.Server
	allowed sync.Map
	served  atomic.Int64
}

func (c *secureCluster) startNM(t *testing.T, keytabPrincipal string, skew time.Duration, useTLS bool) *secureNM {
	t.Helper()
	kt, err := keytab.Load(c.keytab(t, "nm-"+strings.ReplaceAll(keytabPrincipal, "/", "_")+".keytab", keytabPrincipal))
	if err != nil {
		t.Fatal(err)
	}
	nm := &secureNM{}
	nm.allowed.Store("taskscope", true)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := goidentity.FromHTTPRequestContext(r)
		if id == nil {
			http.Error(w, "no identity", http.StatusInternalServerError)
			return
		}
		short, _, _ := strings.Cut(id.UserName(), "/")
		if _, ok := nm.allowed.Load(short); !ok {
			// Hadoop's error page names the user and what it may not do.
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte("<html><body><h2>HTTP ERROR 403</h2><p>User " + short + " is not authorized to view the node's containers</p></body></html>"))
			return
		}
		nm.served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/ws/v1/node/containers":
			w.Write([]byte(oneContainer))
		case "/ws/v1/node/apps":
			w.Write([]byte(`{"apps":{"app":[{"id":"application_1700000000000_0001","state":"RUNNING"}]}}`))
		default:
			http.NotFound(w, r)
		}
	})
	h := spnego.SPNEGOKRB5Authenticate(inner, kt, service.MaxClockSkew(skew), service.DecodePAC(false))
	nm.srv = httptest.NewUnstartedServer(h)
	nm.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused
	if useTLS {
		is, err := c.ca.Issue(nodeName)
		if err != nil {
			t.Fatal(err)
		}
		nm.srv.TLS = &tls.Config{Certificates: []tls.Certificate{is.TLS}}
		nm.srv.StartTLS()
	} else {
		nm.srv.Start()
	}
	t.Cleanup(nm.srv.Close)
	return nm
}

// endpoint is the stand-in as the agent finds a NodeManager that listens
// on every address.
func (nm *secureNM) endpoint() Endpoint {
	return Endpoint{URL: nm.srv.URL, Wildcard: true, Kerberos: true}
}

// logBuffer collects a client's log.
type logBuffer struct{ testsrv.SyncBuffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&b.SyncBuffer, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (b *logBuffer) count(s string) int { return strings.Count(b.String(), s) }

func (c *secureCluster) clientConfig(keytabPath, principal string) ClientConfig {
	return ClientConfig{Keytab: keytabPath, Principal: principal, Krb5Conf: c.kdc.Krb5Conf, CAFile: c.path("ca.pem"),
		Hostname: func() string { return nodeName }}
}

// The agent's poller reads a NodeManager that demands SPNEGO over TLS,
// with a keytab of its own principal (_HOST resolved to the node's name)
// and a ticket from a KDC started by the test.
func TestSecureNodeManager(t *testing.T) {
	c := newSecureCluster(t, minikdc.Options{})
	nm := c.startNM(t, nmPrinc, 5*time.Minute, true)
	var log logBuffer
	cfg := c.clientConfig(c.keytab(t, "agent.keytab", agentPrinc), "taskscope/_HOST")
	cfg.Log = log.logger()
	client, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	w := NewWatcher(time.Hour, client)
	w.SetEndpoint(nm.endpoint())
	w.PollOnce(context.Background())
	last, _ := w.Latest()
	if last == nil || last.Containers["container_e01_1700000000000_0001_01_000002"] != "RUNNING" || last.Apps["application_1700000000000_0001"] != "RUNNING" {
		t.Fatalf("listing %+v (errors %d, status %+v, log %s)", last, w.Errors(), client.Status(), log.String())
	}
	st := client.Status()
	if len(st) != 1 || !st[0].OK || !st[0].TLS || !st[0].Kerberos || st[0].Host != nodeName || st[0].Containers != 1 {
		t.Errorf("status %+v", st)
	}
	k := client.Kerberos()
	if k == nil || k.Principal != agentPrinc+"@TASKSCOPE.TEST" || k.Logins != 1 || !k.ValidUntil.After(time.Now()) {
		t.Errorf("kerberos %+v", k)
	}
	// The next polls use the tickets got (no new login).
	w.PollOnce(context.Background())
	if k := client.Kerberos(); k.Logins != 1 || w.Errors() != 0 || nm.served.Load() != 4 {
		t.Errorf("second poll: logins %d, errors %d, served %d", k.Logins, w.Errors(), nm.served.Load())
	}
	if log.count("level=WARN") != 0 {
		t.Errorf("warnings: %s", log.String())
	}
	// A keytab every user of the node may read is said once.
	os.Chmod(cfg.Keytab, 0o644)
	var log2 logBuffer
	cfg.Log = log2.logger()
	client3, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client3.Close()
	for range 2 {
		if _, err := client3.Containers(context.Background(), nm.endpoint()); err != nil {
			t.Fatal(err)
		}
	}
	if log2.count("is readable by every user of this node (mode 0644)") != 1 {
		t.Errorf("no single warning of a world-readable keytab:\n%s", log2.String())
	}
	cfg.Log = log.logger()

	// Without --nm-ca-file, the CA is trusted from ssl-client.xml's
	// truststore (PKCS12 here); a NodeManager that lists only what its
	// caller may view lists everything to a yarn.admin.acl member.
	p12, err := pkcs12.Modern.EncodeTrustStore([]*x509.Certificate{c.ca.Cert}, "changeit")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(c.path("truststore.p12"), p12, 0o644)
	cfg.CAFile = ""
	client2, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	ep := nm.endpoint()
	ep.TrustStore = TrustStore{Path: c.path("truststore.p12"), Type: "pkcs12", Password: "changeit", Conf: "ssl-client.xml"}
	ep.FilterByUser, ep.AdminACL = true, "yarn,taskscope hadoop"
	if cs, err := client2.Containers(context.Background(), ep); err != nil || len(cs) != 1 {
		t.Errorf("through the truststore: %v %v", cs, err)
	}
}

// Each way the agent can fail to read a secure NodeManager is refused with
// its one message, naming the cause and the setting to change: said once
// however many polls fail, counted by cause, and the watcher keeps no
// listing (the agent goes on with what /proc shows).
func TestSecureNodeManagerFailures(t *testing.T) {
	c := newSecureCluster(t, minikdc.Options{})
	ctx := context.Background()
	nm := c.startNM(t, nmPrinc, 5*time.Minute, true)
	agentKT := c.keytab(t, "agent.keytab", agentPrinc)
	intruderKT := c.keytab(t, "intruder.keytab", intruder)
	// A principal whose keys were changed after its keytab was written.
	if err := c.kdc.AddPrincipal(ctx, "", "rotated/"+nodeName, "expired/"+nodeName, "ghost/"+nodeName, "HTTP/other.example.test"); err != nil {
		t.Fatal(err)
	}
	staleKT := c.keytab(t, "stale.keytab", "rotated/"+nodeName)
	if err := c.kdc.Rekey(ctx, "rotated/"+nodeName); err != nil {
		t.Fatal(err)
	}
	// A principal past its expiry date, and one deleted since.
	expiredKT := c.keytab(t, "expired.keytab", "expired/"+nodeName)
	if _, err := c.kdc.Kadmin(ctx, `modprinc -expire "2001-01-01 00:00:00 UTC" expired/`+nodeName); err != nil {
		t.Fatal(err)
	}
	ghostKT := c.keytab(t, "ghost.keytab", "ghost/"+nodeName)
	if _, err := c.kdc.Kadmin(ctx, "delprinc -force ghost/"+nodeName); err != nil {
		t.Fatal(err)
	}
	otherCA, err := minica.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(c.path("other-ca.pem"), otherCA.PEM, 0o644)
	// A NodeManager whose SPNEGO keytab is not for its name.
	wrongNM := c.startNM(t, "HTTP/other.example.test", 5*time.Minute, true)
	// A NodeManager on plain HTTP, for a name the KDC does not know.
	plainNM := c.startNM(t, nmPrinc, 5*time.Minute, false)

	filtered := nm.endpoint()
	filtered.FilterByUser, filtered.AdminACL = true, "yarn hadoop"

	cases := []struct {
		name   string
		cfg    func(ClientConfig) ClientConfig
		ep     Endpoint
		kind   error
		cause  Cause
		saying []string
	}{
		{"untrusted certificate", func(cc ClientConfig) ClientConfig { cc.CAFile = c.path("other-ca.pem"); return cc }, nm.endpoint(),
			ErrUntrusted, CauseTLS, []string{"not signed by a CA the agent trusts", "--nm-ca-file " + c.path("other-ca.pem")}},
		{"untrusted by the system's roots", func(cc ClientConfig) ClientConfig { cc.CAFile = ""; return cc }, nm.endpoint(),
			ErrUntrusted, CauseTLS, []string{"not signed by a CA the agent trusts (the system's roots)", "--nm-ca-file"}},
		{"certificate for another name", func(cc ClientConfig) ClientConfig {
			cc.Hostname = func() string { return "node2.example.test" }
			return cc
		}, nm.endpoint(), ErrCertificateName, CauseTLS, []string{"is not for node2.example.test", "--nm-url"}},
		{"no keytab", func(cc ClientConfig) ClientConfig { cc.Keytab, cc.Principal = "", ""; return cc }, nm.endpoint(),
			ErrNeedsKerberos, CauseUnauthorized, []string{"demands Kerberos (SPNEGO)", "--nm-principal, --nm-keytab"}},
		{"unreadable keytab", func(cc ClientConfig) ClientConfig { cc.Keytab = c.path("missing.keytab"); return cc }, nm.endpoint(),
			ErrKeytab, CauseKerberos, []string{"cannot read the keytab " + c.path("missing.keytab"), "--nm-keytab"}},
		{"keytab of another principal", func(cc ClientConfig) ClientConfig { cc.Keytab = intruderKT; return cc }, nm.endpoint(),
			ErrKeytab, CauseKerberos, []string{"holds no key of " + agentPrinc + "@TASKSCOPE.TEST (--nm-principal)", "it holds keys of: " + intruder + "@TASKSCOPE.TEST"}},
		{"stale keytab", func(cc ClientConfig) ClientConfig { cc.Keytab, cc.Principal = staleKT, "rotated/_HOST"; return cc }, nm.endpoint(),
			ErrStaleKeytab, CauseKerberos, []string{"the KDC refused the key of rotated/" + nodeName + "@TASKSCOPE.TEST in keytab " + staleKT, "ktadd"}},
		{"expired principal", func(cc ClientConfig) ClientConfig { cc.Keytab, cc.Principal = expiredKT, "expired/_HOST"; return cc }, nm.endpoint(),
			ErrPrincipalExpired, CauseKerberos, []string{"principal expired/" + nodeName + "@TASKSCOPE.TEST has expired in the KDC"}},
		{"principal unknown to the KDC", func(cc ClientConfig) ClientConfig { cc.Keytab, cc.Principal = ghostKT, "ghost/_HOST"; return cc }, nm.endpoint(),
			ErrPrincipal, CauseKerberos, []string{"does not know principal ghost/" + nodeName + "@TASKSCOPE.TEST (--nm-principal)"}},
		{"principal the NodeManager refuses", func(cc ClientConfig) ClientConfig { cc.Keytab, cc.Principal = intruderKT, intruder; return cc }, nm.endpoint(),
			ErrForbidden, CauseForbidden, []string{"refuses the agent (" + intruder + "@TASKSCOPE.TEST)", "User intruder is not authorized", "Secure clusters"}},
		{"listing filtered by user", func(cc ClientConfig) ClientConfig { return cc }, filtered,
			ErrPartialListing, CauseForbidden, []string{"yarn.webapp.filter-entity-list-by-user=true", `the agent's user "taskscope" is not in yarn.admin.acl ("yarn hadoop")`}},
		{"NodeManager with the wrong SPNEGO keytab", func(cc ClientConfig) ClientConfig { return cc }, wrongNM.endpoint(),
			ErrRefused, CauseUnauthorized, []string{"refused the agent's Kerberos ticket for " + nmPrinc, "yarn.nodemanager.webapp.spnego-keytab-file"}},
		{"NodeManager principal unknown to the KDC", func(cc ClientConfig) ClientConfig {
			cc.Hostname, cc.Principal = func() string { return "node9.example.test" }, agentPrinc
			return cc
		}, plainNM.endpoint(), ErrServicePrincipal, CauseKerberos, []string{"does not know the NodeManager's principal HTTP/node9.example.test", "yarn.nodemanager.webapp.spnego-principal"}},
		{"HTTPS client, plain NodeManager", func(cc ClientConfig) ClientConfig { return cc },
			Endpoint{URL: strings.Replace(plainNM.srv.URL, "http://", "https://", 1), Wildcard: true},
			ErrTLS, CauseTLS, []string{"speaks plain HTTP", "yarn.http.policy"}},
		{"NodeManager gone", func(cc ClientConfig) ClientConfig { return cc }, Endpoint{URL: "https://127.0.0.1:1", Wildcard: true},
			ErrUnreachable, CauseUnreachable, []string{"the NodeManager at https://127.0.0.1:1 does not answer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var log logBuffer
			cfg := tc.cfg(c.clientConfig(agentKT, "taskscope/_HOST"))
			cfg.Log = log.logger()
			client, err := NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			_, err = client.Containers(ctx, tc.ep)
			var e *Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &e) || e.Cause != tc.cause {
				t.Fatalf("error %v (%T), want kind %v, cause %s", err, err, tc.kind, tc.cause)
			}
			t.Log(err)
			for _, s := range tc.saying {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the message does not say %q: %s", s, err)
				}
			}
			w := NewWatcher(time.Hour, client)
			w.SetEndpoint(tc.ep)
			for range 3 {
				w.PollOnce(ctx)
			}
			if last, _ := w.Latest(); last != nil || w.Errors() != 3 {
				t.Errorf("after 3 failed polls: listing %v, errors %d", last, w.Errors())
			}
			if n := log.count("level=WARN"); n != 1 {
				t.Errorf("%d warnings for 3 failed polls, want 1:\n%s", n, log.String())
			}
			if f := client.Failing(); f[tc.cause] != 1 || len(f) != 1 {
				t.Errorf("failing %v", f)
			}
			if st := client.Status(); len(st) != 1 || st[0].OK || st[0].Cause != tc.cause || st[0].Failures != 3 {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// pollFast polls, every 50 ms, a NodeManager stand-in that refuses
// tickets a second past their end, with the agent's keytab; it returns
// after the first poll.
func (c *secureCluster) pollFast(t *testing.T) (*Client, *Watcher, *logBuffer) {
	t.Helper()
	nm := c.startNM(t, nmPrinc, time.Second, true)
	log := &logBuffer{}
	cfg := c.clientConfig(c.keytab(t, "agent.keytab", agentPrinc), "taskscope/_HOST")
	cfg.Log = log.logger()
	client, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	w := NewWatcher(50*time.Millisecond, client)
	w.SetEndpoint(nm.endpoint())
	ctx, cancel := context.WithCancel(context.Background())
	w.StartContext(ctx)
	t.Cleanup(func() { cancel(); w.Stop() })
	testsrv.WaitUntil(t, "a first poll", 10*time.Second, func() bool { l, _ := w.Latest(); return l != nil })
	return client, w, log
}

// The agent's ticket is got again before it expires: polls go on
// succeeding across several lifetimes of the tickets the KDC gives (a few
// seconds here), at a NodeManager that refuses an expired ticket.
func TestSecureNodeManagerRenewsTicket(t *testing.T) {
	c := newSecureCluster(t, minikdc.Options{MaxLife: 4 * time.Second})
	client, w, log := c.pollFast(t)
	first := client.Kerberos().ValidUntil
	if d := time.Until(first); d <= 0 || d > 5*time.Second {
		t.Fatalf("the KDC's ticket is valid for %v, want at most 4s", d)
	}
	// Two lifetimes of the first ticket later, polls still succeed, with
	// tickets got again before the old ones ended.
	testsrv.WaitUntil(t, "polls past two ticket lifetimes", 30*time.Second, func() bool {
		st := client.Status()
		return len(st) == 1 && st[0].LastOK.After(first.Add(4*time.Second))
	})
	if k := client.Kerberos(); k.Logins < 3 || !k.ValidUntil.After(first) {
		t.Errorf("kerberos %+v after two lifetimes", k)
	}
	if n := w.Errors(); n != 0 {
		t.Errorf("%d failed polls while renewing:\n%s", n, log.String())
	}
}

// An expired ticket that cannot be renewed (no KDC answers) is refused
// with its message, once; when the KDC is back, the agent logs in again
// and says the NodeManager answers again.
func TestSecureNodeManagerTicketExpires(t *testing.T) {
	c := newSecureCluster(t, minikdc.Options{MaxLife: 3 * time.Second})
	client, w, log := c.pollFast(t)
	if err := c.kdc.Stop(); err != nil {
		t.Fatal(err)
	}
	end := client.Kerberos().ValidUntil
	var st []EndpointStatus
	testsrv.WaitUntil(t, "the expired ticket refused", 20*time.Second, func() bool {
		st = client.Status()
		return len(st) == 1 && !st[0].OK
	})
	want := "the Kerberos ticket of " + agentPrinc + "@TASKSCOPE.TEST expired at " + end.UTC().Format(time.RFC3339) + " and could not be renewed: cannot reach a KDC of realm TASKSCOPE.TEST"
	if st[0].Cause != CauseKerberos || !strings.Contains(st[0].Error, want) {
		t.Fatalf("status %+v, want %q", st[0], want)
	}
	failed := w.Errors()
	testsrv.WaitUntil(t, "more failed polls", 10*time.Second, func() bool { return w.Errors() >= failed+3 })
	if n := log.count("cannot read the NodeManager"); n != 1 {
		t.Errorf("%d warnings of the expired ticket, want 1:\n%s", n, log.String())
	}
	if n := log.count("cannot renew the agent's Kerberos ticket"); n != 1 {
		t.Errorf("%d warnings of the renewal failing while the ticket was valid, want 1:\n%s", n, log.String())
	}
	if err := c.kdc.Restart(); err != nil {
		t.Fatal(err)
	}
	testsrv.WaitUntil(t, "polls succeed again", 20*time.Second, func() bool { st := client.Status(); return len(st) == 1 && st[0].OK })
	if !bytes.Contains([]byte(log.String()), []byte("the NodeManager answers the agent again")) {
		t.Errorf("no note of the recovery:\n%s", log.String())
	}
}
