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

// Identify returns who makes r; Open when reads need no login. In order
// (docs/security.md, "How a request is identified"):
//
//  1. a user header from an address that is not a trusted proxy is refused
//     (403), whatever else the request carries: a client that reaches
//     the server directly cannot claim to be someone, with or without a
//     token beside it;
//  2. an Authorization header of the Bearer scheme is an API token: its
//     user, or 403 for a token the server does not know (it wins over a
//     user header from the proxy); any other scheme (Basic, Negotiate: a
//     proxy's own login passed on) is not for the server and is ignored;
//  3. the user the trusted proxy names in the user header. A header sent
//     more than once, or holding a list, names one user only if every
//     copy names the same; copies that differ are refused (403): a proxy
//     that adds its header to the client's instead of replacing it.
func (a *Authenticator) Identify(r *http.Request) (*Identity, error) {
	if !a.Enabled() {
		return Open, nil
	}
	var users []string
	if a.o.UserHeader != "" {
		users = r.Header.Values(a.o.UserHeader)
	}
	trusted := a.trusted(r)
	if len(users) > 0 && !trusted {
		return nil, fmt.Errorf("%w: %s is accepted only from the SSO proxy, not from %s", ErrUntrusted, a.o.UserHeader, PeerHost(r.RemoteAddr))
	}
	if secret, ok, err := bearerOf(r.Header.Values("Authorization")); err != nil {
		return nil, err
	} else if ok {
		tok, found := a.o.Tokens.Lookup(secret)
		if !found {
			return nil, fmt.Errorf("%w: unknown API token", ErrUntrusted)
		}
		return a.o.Policy.Identify(tok.Fields[0], tok.Fields[1:], "token"), nil
	}
	if a.o.UserHeader == "" {
		return nil, fmt.Errorf("%w: give an API token (Authorization: Bearer ...)", ErrNoLogin)
	}
	if !trusted {
		return nil, fmt.Errorf("%w: log in through the SSO proxy, or give an API token", ErrNoLogin)
	}
	user, err := oneUser(users)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %w", ErrUntrusted, a.o.UserHeader, err)
	}
	if user == "" {
		return nil, fmt.Errorf("%w: the proxy named no user (%s)", ErrNoLogin, a.o.UserHeader)
	}
	var groups []string
	if a.o.GroupsHeader != "" {
		for _, v := range r.Header.Values(a.o.GroupsHeader) {
			groups = append(groups, strings.Split(v, ",")...)
		}
	}
	return a.o.Policy.Identify(user, groups, "sso"), nil
}

// errUsers: the user header names several users.
var errUsers = errors.New("names more than one user: the SSO proxy must replace the header a client sends, not add to it")

// oneUser is the user that every copy of the user header names ("" if
// none names any), or errUsers if they name different users (each copy
// may be a list, as a proxy that joins copies writes them).
func oneUser(values []string) (string, error) {
	user := ""
	for _, v := range values {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			if user != "" && u != user {
				return "", errUsers
			}
			user = u
		}
	}
	return user, nil
}

// bearerOf is the API token of a request's Authorization headers: ok if
// one of them is of the Bearer scheme; an error if more than one is.
// Headers of other schemes are not the server's (a proxy's Basic login).
func bearerOf(values []string) (secret string, ok bool, err error) {
	for _, h := range values {
		scheme, tok, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			continue
		}
		if ok {
			return "", false, fmt.Errorf("%w: more than one bearer token", ErrUntrusted)
		}
		secret, ok = strings.TrimLeft(tok, " "), true
	}
	return secret, ok, nil
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
