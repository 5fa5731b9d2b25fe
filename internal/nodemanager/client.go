package nodemanager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os/user"
	"strings"
	"sync"
	"time"
)

// Cause is what kind of failure kept the agent from reading a NodeManager.
type Cause string

// The causes, each a value of the agent's
// taskscope_agent_nodemanager_failing{cause} metric.
const (
	CauseUnreachable  Cause = "unreachable"  // no connection, or no answer in time
	CauseTLS          Cause = "tls"          // the TLS handshake failed: a certificate that does not verify, ...
	CauseKerberos     Cause = "kerberos"     // the agent could not get a ticket: keytab, principal, KDC, expiry
	CauseUnauthorized Cause = "unauthorized" // the NodeManager answered 401
	CauseForbidden    Cause = "forbidden"    // the NodeManager answered 403, or lists only some containers to the agent
	CauseAnswer       Cause = "answer"       // another status, or an answer that is not a listing
)

// Causes are every Cause, in the order metrics list them.
var Causes = []Cause{CauseUnreachable, CauseTLS, CauseKerberos, CauseUnauthorized, CauseForbidden, CauseAnswer}

// What went wrong, finer than the cause (errors.Is on an *Error).
var (
	ErrKrb5Conf           = errors.New("krb5.conf cannot be read")
	ErrKeytab             = errors.New("the keytab cannot be used")
	ErrPrincipal          = errors.New("the principal is unknown")
	ErrServicePrincipal   = errors.New("the NodeManager's principal is unknown")
	ErrStaleKeytab        = errors.New("the keytab's key is refused")
	ErrPrincipalExpired   = errors.New("the principal has expired")
	ErrTicketExpired      = errors.New("the ticket has expired")
	ErrKDCUnreachable     = errors.New("no KDC answers")
	ErrClockSkew          = errors.New("the clocks differ too much")
	ErrKerberos           = errors.New("Kerberos failed")
	ErrUntrusted          = errors.New("the certificate is not trusted")
	ErrCertificateName    = errors.New("the certificate is not for the NodeManager's name")
	ErrTLS                = errors.New("the TLS handshake failed")
	ErrNeedsKerberos      = errors.New("the NodeManager demands Kerberos")
	ErrRefused            = errors.New("the NodeManager refused the credentials")
	ErrForbidden          = errors.New("the NodeManager refuses the agent")
	ErrUnreachable        = errors.New("the NodeManager does not answer")
	ErrAnswer             = errors.New("the NodeManager's answer is not a listing")
	ErrPartialListing     = errors.New("the NodeManager lists only some containers to the agent")
	ErrTrustStoreNotFound = errors.New("the truststore cannot be read")
)

// Error is a failed request to a NodeManager, or a failure to get what
// the request needs: Msg says what went wrong and which setting to
// change; Kind is one of the Err* values above (errors.Is).
type Error struct {
	Cause Cause
	Kind  error
	Msg   string
	Err   error // underlying, if any
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

// Unwrap is the kind and the underlying error.
func (e *Error) Unwrap() []error {
	out := []error{e.Kind}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// ClientConfig is how the agent reaches NodeManagers (its flags).
type ClientConfig struct {
	// Keytab and Principal: SPNEGO with the agent's own principal
	// ("taskscope/_HOST@REALM": _HOST is the node's canonical name; no
	// realm: krb5.conf's default_realm). Empty Keytab: no Kerberos.
	Keytab, Principal string
	// Krb5Conf is krb5.conf ("": $KRB5_CONFIG, else /etc/krb5.conf).
	Krb5Conf string
	// CAFile is a PEM file of the certificates that sign NodeManagers'
	// HTTPS certificates; it replaces ssl-client.xml's truststore and the
	// system's roots. Empty: the truststore, else the system's roots.
	CAFile string
	// Timeout bounds one request (default 5 s).
	Timeout time.Duration
	// Log receives one warning per failure (when it changes), and a note
	// when a NodeManager answers again (default: discarded).
	Log *slog.Logger
	// Hostname is the node's canonical name, for _HOST (default
	// CanonicalHostname); Now is the clock (tests).
	Hostname func() string
	Now      func() time.Time
}

// Client reads NodeManagers' REST APIs: plain HTTP, or HTTPS verified
// against the configured roots, with SPNEGO when the NodeManager demands
// it and a keytab is configured. It remembers how each NodeManager
// answered last (Status) and logs a failure once, not at every poll. Its
// methods are safe for concurrent use.
type Client struct {
	cfg  ClientConfig
	krb  *kerberos // nil without a keytab
	user string    // the agent's user as NodeManagers know it: its principal's first component

	mu     sync.Mutex
	trans  map[transportKey]*http.Client
	status map[string]*EndpointStatus // by URL
}

type transportKey struct {
	tls        bool
	serverName string
	trust      TrustStore
}

// NewClient makes a client. A keytab without a principal, or the reverse,
// is an error; a keytab or krb5.conf that cannot be read is found at the
// first request that needs them (and said then).
func NewClient(cfg ClientConfig) (*Client, error) {
	if (cfg.Keytab == "") != (cfg.Principal == "") {
		return nil, errors.New("--nm-keytab and --nm-principal go together")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Hostname == nil {
		cfg.Hostname = sync.OnceValue(CanonicalHostname)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{cfg: cfg, trans: map[transportKey]*http.Client{}, status: map[string]*EndpointStatus{}}
	if cfg.Keytab != "" {
		c.krb = newKerberos(cfg.Keytab, cfg.Principal, cfg.Krb5Conf, cfg.Hostname, cfg.Now)
		c.user, _, _ = strings.Cut(cfg.Principal, "@")
		c.user, _, _ = strings.Cut(c.user, "/")
	} else if u, err := user.Current(); err == nil {
		c.user = u.Username
	}
	return c, nil
}

// Close forgets the tickets and closes idle connections.
func (c *Client) Close() {
	if c.krb != nil {
		c.krb.close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.trans {
		h.CloseIdleConnections()
	}
}

// name is the name ep's certificate and principal carry.
func (c *Client) name(ep Endpoint) string { return ep.serverName(c.cfg.Hostname) }

// httpClient is the HTTP client for ep: one per TLS configuration, each
// with its cookie jar (Hadoop's AuthenticationFilter answers a good
// SPNEGO exchange with a hadoop.auth cookie that spares the next ones).
func (c *Client) httpClient(ep Endpoint) (*http.Client, error) {
	key := transportKey{tls: ep.TLS()}
	if key.tls {
		key.serverName, key.trust = c.name(ep), ep.TrustStore
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.trans[key]; h != nil {
		return h, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the NodeManager is on this node
	tr.MaxIdleConnsPerHost = 2
	if key.tls {
		conf := &tls.Config{ServerName: key.serverName, MinVersion: tls.VersionTLS12}
		switch {
		case c.cfg.CAFile != "":
			pool, err := CAFilePool(c.cfg.CAFile)
			if err != nil {
				return nil, &Error{Cause: CauseTLS, Kind: ErrTrustStoreNotFound, Err: err, Msg: fmt.Sprintf("cannot read the CA file %s (--nm-ca-file)", c.cfg.CAFile)}
			}
			conf.RootCAs = pool
		case key.trust.Path != "":
			pool, err := key.trust.Pool()
			if err != nil {
				return nil, &Error{Cause: CauseTLS, Kind: ErrTrustStoreNotFound, Err: err,
					Msg: fmt.Sprintf("cannot read the truststore that %s names (ssl.client.truststore.*); or give the CA's certificates with --nm-ca-file", key.trust.Conf)}
			}
			conf.RootCAs = pool
		}
		tr.TLSClientConfig = conf
	}
	jar, _ := cookiejar.New(nil)
	h := &http.Client{Transport: tr, Timeout: c.cfg.Timeout, Jar: jar,
		// A NodeManager answers where it is asked; a redirect would send
		// the agent's ticket elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c.trans[key] = h
	return h, nil
}

// maxBody bounds an answer (a NodeManager with thousands of containers
// answers a few MB).
const maxBody = 32 << 20

// get GETs path of ep into v, authenticating with SPNEGO when asked to.
func (c *Client) get(ctx context.Context, ep Endpoint, path string, v any) error {
	if c.krb != nil && ep.FilterByUser && !ep.Admin(c.user) {
		return &Error{Cause: CauseForbidden, Kind: ErrPartialListing,
			Msg: fmt.Sprintf("the NodeManager at %s lists only the containers of applications its caller may view (yarn.webapp.filter-entity-list-by-user=true) "+
				"and the agent's user %q is not in yarn.admin.acl (%q): its listings would leave containers out; add %s to yarn.admin.acl", ep.URL, c.user, ep.AdminACL, c.user)}
	}
	h, err := c.httpClient(ep)
	if err != nil {
		return err
	}
	url := strings.TrimRight(ep.URL, "/") + path
	resp, err := c.do(ctx, h, url, "")
	if err != nil {
		return c.transportError(ep, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		challenge := resp.Header.Get("WWW-Authenticate")
		discard(resp)
		if !strings.HasPrefix(strings.TrimSpace(challenge), "Negotiate") {
			return &Error{Cause: CauseUnauthorized, Kind: ErrRefused,
				Msg: fmt.Sprintf("the NodeManager at %s demands authentication the agent does not speak (%.60q; only SPNEGO)", ep.URL, challenge)}
		}
		if c.krb == nil {
			return &Error{Cause: CauseUnauthorized, Kind: ErrNeedsKerberos,
				Msg: fmt.Sprintf("the NodeManager at %s demands Kerberos (SPNEGO): give the agent a principal and keytab (--nm-principal, --nm-keytab)", ep.URL)}
		}
		spn := strings.ReplaceAll(ep.SPN, "_HOST", c.name(ep))
		if spn == "" {
			spn = "HTTP/" + c.name(ep)
		}
		c.markKerberos(ep.URL)
		auth, err := c.krb.header(spn)
		if msg := c.krb.takeRenewWarning(); msg != "" {
			c.cfg.Log.Warn("cannot renew the agent's Kerberos ticket; will try again", "err", msg)
		}
		if msg := c.krb.takeExposed(); msg != "" {
			c.cfg.Log.Warn(msg)
		}
		if err != nil {
			return err
		}
		if resp, err = c.do(ctx, h, url, auth); err != nil {
			return c.transportError(ep, err)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return &Error{Cause: CauseUnauthorized, Kind: ErrRefused,
				Msg: fmt.Sprintf("the NodeManager at %s refused the agent's Kerberos ticket for %s as %s (%s): check that its SPNEGO keytab (yarn.nodemanager.webapp.spnego-keytab-file) "+
					"holds the current key of %s, and that the clocks agree", ep.URL, spn, c.krb.principal, serverSays(resp), spn)}
		}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusForbidden:
		who := c.user
		if c.krb != nil {
			who = c.krb.principal
		}
		return &Error{Cause: CauseForbidden, Kind: ErrForbidden,
			Msg: fmt.Sprintf("the NodeManager at %s refuses the agent (%s) (%s): allow it to read /ws/v1/node (docs/operations.md, Secure clusters)", ep.URL, who, serverSays(resp))}
	case resp.StatusCode != http.StatusOK:
		return &Error{Cause: CauseAnswer, Kind: ErrAnswer, Msg: fmt.Sprintf("%s: %s (%s)", url, resp.Status, serverSays(resp))}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(v); err != nil {
		return &Error{Cause: CauseAnswer, Kind: ErrAnswer, Err: err, Msg: fmt.Sprintf("%s: cannot parse the answer", url)}
	}
	return nil
}

func (c *Client) do(ctx context.Context, h *http.Client, url, auth string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return h.Do(req)
}

// discard reads what is left of a body (bounded) and closes it.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// serverSays is the status and the start of what a refusal's body says
// (Hadoop's error pages name the GSS or ACL failure), on one line.
func serverSays(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	discard(resp)
	s := strings.Join(strings.Fields(stripTags(string(b))), " ")
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	if s == "" {
		return resp.Status
	}
	return resp.Status + ": " + s
}

// stripTags drops what is between < and > (an HTML error page's markup).
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
			b.WriteByte(' ')
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// transportError names a failure to exchange a request with ep.
func (c *Client) transportError(ep Endpoint, err error) error {
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recErr tls.RecordHeaderError
	roots := "the system's roots"
	switch {
	case c.cfg.CAFile != "":
		roots = "--nm-ca-file " + c.cfg.CAFile
	case ep.TrustStore.Path != "":
		roots = "the truststore of " + ep.TrustStore.Conf
	}
	switch {
	case errors.As(err, &unknown):
		return &Error{Cause: CauseTLS, Kind: ErrUntrusted, Err: err,
			Msg: fmt.Sprintf("the certificate of the NodeManager at %s is not signed by a CA the agent trusts (%s): give the CA's certificate with --nm-ca-file, or in ssl-client.xml's truststore", ep.URL, roots)}
	case errors.As(err, &hostErr):
		return &Error{Cause: CauseTLS, Kind: ErrCertificateName, Err: err,
			Msg: fmt.Sprintf("the certificate of the NodeManager at %s is not for %s, the name the agent knows it by: give --nm-url with the name its certificate carries", ep.URL, c.name(ep))}
	case errors.As(err, &invalid):
		return &Error{Cause: CauseTLS, Kind: ErrUntrusted, Err: err,
			Msg: fmt.Sprintf("the certificate of the NodeManager at %s is not valid (expired, or not for a server)", ep.URL)}
	case errors.As(err, &recErr):
		return &Error{Cause: CauseTLS, Kind: ErrTLS, Err: err,
			Msg: fmt.Sprintf("the NodeManager at %s does not speak TLS: check yarn.http.policy and yarn.nodemanager.webapp.https.address in its yarn-site.xml", ep.URL)}
	}
	if ep.TLS() && isTLSError(err) {
		return &Error{Cause: CauseTLS, Kind: ErrTLS, Err: err, Msg: fmt.Sprintf("the TLS handshake with the NodeManager at %s failed", ep.URL)}
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return &Error{Cause: CauseTLS, Kind: ErrTLS, Err: err,
			Msg: fmt.Sprintf("the NodeManager at %s speaks plain HTTP: check yarn.http.policy in its yarn-site.xml", ep.URL)}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Cause: CauseUnreachable, Kind: ErrUnreachable, Err: err, Msg: fmt.Sprintf("the NodeManager at %s does not answer", ep.URL)}
	}
	return &Error{Cause: CauseUnreachable, Kind: ErrUnreachable, Err: err, Msg: fmt.Sprintf("cannot ask the NodeManager at %s", ep.URL)}
}

func isTLSError(err error) bool {
	var alert tls.AlertError
	var verr *tls.CertificateVerificationError
	return errors.As(err, &alert) || errors.As(err, &verr) || strings.Contains(err.Error(), "tls:")
}

// EndpointStatus is how a NodeManager answered the agent last.
type EndpointStatus struct {
	URL      string    `json:"url"`
	Host     string    `json:"host,omitempty"` // the name its certificate and principal carry
	TLS      bool      `json:"tls"`
	Kerberos bool      `json:"kerberos"` // SPNEGO was asked for
	OK       bool      `json:"ok"`
	Cause    Cause     `json:"cause,omitempty"`
	Error    string    `json:"error,omitempty"`
	Since    time.Time `json:"since,omitzero"` // when it began to answer so (or fail so)
	LastOK   time.Time `json:"last_ok,omitzero"`
	Failures uint64    `json:"failures"` // failed polls, cumulative
	// Containers is how many containers the last good poll listed.
	Containers int `json:"containers"`
}

// note records how a poll of ep went, and logs a failure when it is
// not the one said last, and a recovery.
func (c *Client) note(ep Endpoint, err error, containers int) {
	now := c.cfg.Now()
	c.mu.Lock()
	st := c.entry(ep.URL)
	st.TLS = ep.TLS()
	if st.TLS || st.Kerberos {
		st.Host = c.name(ep)
	}
	if err == nil {
		recovered := !st.OK && st.Error != ""
		if !st.OK {
			st.Since = now
		}
		st.OK, st.Cause, st.Error, st.LastOK, st.Containers = true, "", "", now, containers
		c.mu.Unlock()
		if recovered {
			c.cfg.Log.Info("the NodeManager answers the agent again", "url", ep.URL)
		}
		return
	}
	cause := CauseUnreachable
	var e *Error
	if errors.As(err, &e) {
		cause = e.Cause
	}
	changed := st.OK || st.Error != err.Error() || st.Since.IsZero()
	if changed {
		st.Since = now
	}
	st.OK, st.Cause, st.Error = false, cause, err.Error()
	st.Failures++
	c.mu.Unlock()
	if changed {
		c.cfg.Log.Warn("cannot read the NodeManager's containers; going on with what /proc shows", "cause", cause, "err", err.Error())
	}
}

// entry is the status of url (made if new); c.mu is held.
func (c *Client) entry(url string) *EndpointStatus {
	st := c.status[url]
	if st == nil {
		st = &EndpointStatus{URL: url}
		c.status[url] = st
	}
	return st
}

// markKerberos records that the NodeManager at url asked for SPNEGO.
func (c *Client) markKerberos(url string) {
	c.mu.Lock()
	c.entry(url).Kerberos = true
	c.mu.Unlock()
}

// Status is how every NodeManager asked answered last, by URL.
func (c *Client) Status() []EndpointStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]EndpointStatus, 0, len(c.status))
	for _, st := range c.status {
		out = append(out, *st)
	}
	return out
}

// Forget drops what is remembered of the NodeManager at url (it is no
// longer polled).
func (c *Client) Forget(url string) {
	c.mu.Lock()
	delete(c.status, url)
	c.mu.Unlock()
}

// Failing counts the NodeManagers whose last request failed, by cause.
func (c *Client) Failing() map[Cause]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[Cause]int{}
	for _, st := range c.status {
		if !st.OK && st.Error != "" {
			out[st.Cause]++
		}
	}
	return out
}

// Kerberos is the state of the agent's Kerberos credentials (nil without
// a keytab).
func (c *Client) Kerberos() *KerberosStatus {
	if c.krb == nil {
		return nil
	}
	s := c.krb.status()
	return &s
}

// Containers lists the containers of the NodeManager at ep.
func (c *Client) Containers(ctx context.Context, ep Endpoint) ([]Container, error) {
	return list[Container](ctx, c, ep, "/ws/v1/node/containers", "containers", "container")
}

// Apps lists the applications of the NodeManager at ep.
func (c *Client) Apps(ctx context.Context, ep Endpoint) ([]App, error) {
	return list[App](ctx, c, ep, "/ws/v1/node/apps", "apps", "app")
}

// list reads one of NMWebServices' lists: {"<outer>":{"<inner>":[...]}},
// empty as {"<outer>":{}} or {"<outer>":null}.
func list[T any](ctx context.Context, c *Client, ep Endpoint, path, outer, inner string) ([]T, error) {
	var body map[string]map[string][]T
	if err := c.get(ctx, ep, path, &body); err != nil {
		return nil, err
	}
	return append([]T{}, body[outer][inner]...), nil
}
