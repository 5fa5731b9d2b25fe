package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
)

// Options configure read authentication. With neither a user header nor
// API tokens, reads need no login (Enabled is false).
type Options struct {
	// UserHeader names the header in which the SSO proxy names the user
	// (X-Forwarded-User, X-Remote-User, ...); GroupsHeader, optional, the
	// one with the user's groups, separated by commas. They are believed
	// only from Proxies; a request from anywhere else that carries
	// UserHeader is refused.
	UserHeader   string
	GroupsHeader string
	Proxies      []netip.Prefix
	// Tokens are API tokens for scripts: a token's first word is its
	// user, the others its groups.
	Tokens *Tokens
	Policy *Policy
}

// Authenticator identifies requests.
type Authenticator struct {
	o       Options
	refused atomic.Int64
}

// New returns an Authenticator.
func New(o Options) *Authenticator {
	o.UserHeader = http.CanonicalHeaderKey(o.UserHeader)
	o.GroupsHeader = http.CanonicalHeaderKey(o.GroupsHeader)
	return &Authenticator{o: o}
}

// Enabled reports whether reads need a login.
func (a *Authenticator) Enabled() bool {
	return a != nil && (a.o.UserHeader != "" || a.o.Tokens.Len() > 0)
}

// Refused is the number of requests refused so far.
func (a *Authenticator) Refused() int64 { return a.refused.Load() }

var (
	// ErrNoLogin: the request names no one (401).
	ErrNoLogin = errors.New("login required")
	// ErrUntrusted: a user header from an address that is not a trusted
	// proxy, or a wrong token (403).
	ErrUntrusted = errors.New("not trusted")
)

// Identify returns who makes r: the user of its bearer token, or the user
// the trusted proxy names; Open when reads need no login.
func (a *Authenticator) Identify(r *http.Request) (*Identity, error) {
	if !a.Enabled() {
		return Open, nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		secret := Bearer(h)
		tok, ok := a.o.Tokens.Lookup(secret)
		if !ok {
			return nil, fmt.Errorf("%w: unknown API token", ErrUntrusted)
		}
		return a.o.Policy.Identify(tok.Fields[0], tok.Fields[1:], "token"), nil
	}
	if a.o.UserHeader == "" {
		return nil, fmt.Errorf("%w: give an API token (Authorization: Bearer ...)", ErrNoLogin)
	}
	user, has := r.Header[a.o.UserHeader]
	if !a.trusted(r) {
		if has {
			return nil, fmt.Errorf("%w: %s is accepted only from the SSO proxy, not from %s", ErrUntrusted, a.o.UserHeader, PeerHost(r.RemoteAddr))
		}
		return nil, fmt.Errorf("%w: log in through the SSO proxy, or give an API token", ErrNoLogin)
	}
	if len(user) != 1 || strings.TrimSpace(user[0]) == "" {
		return nil, fmt.Errorf("%w: the proxy named no user (%s)", ErrNoLogin, a.o.UserHeader)
	}
	var groups []string
	if a.o.GroupsHeader != "" {
		for _, v := range r.Header.Values(a.o.GroupsHeader) {
			groups = append(groups, strings.Split(v, ",")...)
		}
	}
	return a.o.Policy.Identify(strings.TrimSpace(user[0]), groups, "sso"), nil
}

// PeerHost is the host of a peer's address (a request's RemoteAddr, a
// connection's), without its port.
func PeerHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// trusted reports whether r comes straight from a trusted proxy.
func (a *Authenticator) trusted(r *http.Request) bool {
	ip, err := netip.ParseAddr(PeerHost(r.RemoteAddr))
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.o.Proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

type ctxKey struct{}

// FromContext is the identity Require put in ctx; nil if none.
func FromContext(ctx context.Context) *Identity {
	id, _ := ctx.Value(ctxKey{}).(*Identity)
	return id
}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// Require serves next with the request's identity in its context, or
// refuses it: 401 without a login, 403 with one not to be trusted; when
// operators is set, 403 for anyone else too.
func (a *Authenticator) Require(operators bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Identify(r)
		if err == nil && operators && !id.Operator {
			err = fmt.Errorf("%w: %s is not an operator", ErrUntrusted, id.User)
		}
		if err != nil {
			a.refused.Add(1)
			code := http.StatusForbidden
			if errors.Is(err, ErrNoLogin) {
				code = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", `Bearer realm="taskscope"`)
			}
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// ParseProxies parses a comma-separated list of addresses and networks
// (10.0.0.5, 10.1.0.0/16, ::1).
func ParseProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or a network", f)
		}
		out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return out, nil
}
