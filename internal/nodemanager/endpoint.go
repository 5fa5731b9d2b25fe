package nodemanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// Defaults of yarn-default.xml.
const (
	// DefaultWebAddress is yarn.nodemanager.webapp.address's default.
	DefaultWebAddress = "0.0.0.0:8042"
	// DefaultHTTPSAddress is yarn.nodemanager.webapp.https.address's.
	DefaultHTTPSAddress = "0.0.0.0:8044"
)

// Endpoint is where one NodeManager's web services are and how the agent
// reaches them, as its configuration says.
type Endpoint struct {
	// URL is its base: "http://127.0.0.1:8042", "https://nm1.example.com:8044".
	URL string
	// Host is the name its TLS certificate must carry and its SPNEGO
	// principal's host (HTTP/<Host>), when it is not URL's host.
	Host string
	// Wildcard: the NodeManager listens on every address; the agent, on
	// the same node, dials loopback and knows it by the node's canonical
	// name (what Hadoop makes of _HOST), found by the Client when needed.
	Wildcard bool
	// SPN is the NodeManager's SPNEGO principal
	// (yarn.nodemanager.webapp.spnego-principal; _HOST is its host name).
	// Empty: HTTP/<its host name> in the realm krb5.conf maps it to.
	SPN string
	// TrustStore is ssl-client.xml's truststore (zero: none configured).
	TrustStore TrustStore
	// Kerberos: core-site.xml's hadoop.http.authentication.type is
	// kerberos (the NodeManager's web endpoints demand SPNEGO).
	Kerberos bool
	// FilterByUser: the NodeManager lists only the containers and
	// applications its caller may view (yarn.acl.enable and
	// yarn.webapp.filter-entity-list-by-user both true): the owners' and
	// yarn.admin.acl's (AdminACL; "*" when unset).
	FilterByUser bool
	AdminACL     string
	// ConfDir is the conf dir it was read from ("": configured by hand).
	ConfDir string
}

// Admin says whether user is in the endpoint's yarn.admin.acl ("users
// groups": comma-separated users, a space, comma-separated groups; "*"
// for everyone), its groups looked up on this node.
func (e Endpoint) Admin(name string) bool {
	acl := e.AdminACL
	if strings.TrimSpace(acl) == "*" {
		return true
	}
	users, groups, _ := strings.Cut(strings.TrimLeft(acl, " "), " ")
	if strings.HasPrefix(acl, " ") {
		users, groups = "", strings.TrimSpace(acl)
	}
	for _, u := range strings.Split(users, ",") {
		if strings.TrimSpace(u) == name && name != "" {
			return true
		}
	}
	if groups = strings.TrimSpace(groups); groups == "" {
		return false
	}
	u, err := user.Lookup(name)
	if err != nil {
		return false
	}
	ids, err := u.GroupIds()
	if err != nil {
		return false
	}
	mine := map[string]bool{}
	for _, id := range ids {
		if g, err := user.LookupGroupId(id); err == nil {
			mine[g.Name] = true
		}
	}
	for _, g := range strings.Split(groups, ",") {
		if mine[strings.TrimSpace(g)] {
			return true
		}
	}
	return false
}

// TLS says whether the endpoint speaks HTTPS.
func (e Endpoint) TLS() bool { return strings.HasPrefix(e.URL, "https://") }

// serverName is the name the NodeManager's certificate and principal
// carry: Host, the node's name (hostname) for a wildcard, else the URL's
// host.
func (e Endpoint) serverName(hostname func() string) string {
	switch {
	case e.Host != "":
		return e.Host
	case e.Wildcard:
		return hostname()
	}
	if u, err := url.Parse(e.URL); err == nil {
		return strings.ToLower(u.Hostname())
	}
	return ""
}

// EndpointOf is the endpoint of a NodeManager given by its URL (the
// agent's --nm-url).
func EndpointOf(rawURL string) (Endpoint, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Endpoint{}, fmt.Errorf("not a NodeManager URL (http://HOST:PORT or https://HOST:PORT): %q", rawURL)
	}
	return Endpoint{URL: u.Scheme + "://" + u.Host}, nil
}

// readSite reads one *-site.xml (or ssl-client.xml) of a conf dir; a file
// that does not exist is an empty configuration.
func readSite(dir, name string) (hadoop.Conf, error) {
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return hadoop.Conf{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conf, err := hadoop.ParseConf(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return conf, nil
}

// expand substitutes ${name} with name's value in conf, as Hadoop's
// Configuration does (at most 20 rounds; unknown names are left).
func expand(conf hadoop.Conf, v string) string {
	for range 20 {
		i := strings.Index(v, "${")
		if i < 0 {
			return v
		}
		j := strings.IndexByte(v[i:], '}')
		if j < 0 {
			return v
		}
		val, ok := conf[v[i+2:i+j]]
		if !ok || strings.Contains(val, "${"+v[i+2:i+j]+"}") {
			return v
		}
		v = v[:i] + val + v[i+j+1:]
	}
	return v
}

// ReadEndpoint reads where the NodeManager whose conf dir is confDir
// serves its web services and how: yarn-site.xml's yarn.http.policy
// (HTTPS_ONLY: yarn.nodemanager.webapp.https.address, else
// yarn.nodemanager.webapp.address), yarn.nodemanager.webapp.spnego-principal,
// core-site.xml's hadoop.http.authentication.type and ssl-client.xml's
// truststore. root prefixes every path read (the daemon's
// /proc/PID/root; "" for this filesystem's).
func ReadEndpoint(root, confDir string) (Endpoint, error) {
	dir := root + confDir
	if _, err := os.Stat(filepath.Join(dir, "yarn-site.xml")); err != nil {
		return Endpoint{}, err
	}
	yarn, err := readSite(dir, "yarn-site.xml")
	if err != nil {
		return Endpoint{}, err
	}
	ep := Endpoint{ConfDir: confDir}
	scheme, key, addr := "http", "yarn.nodemanager.webapp.address", DefaultWebAddress
	switch policy := strings.ToUpper(strings.TrimSpace(expand(yarn, yarn.First("yarn.http.policy")))); policy {
	case "", "HTTP_ONLY":
	case "HTTPS_ONLY":
		scheme, key, addr = "https", "yarn.nodemanager.webapp.https.address", DefaultHTTPSAddress
	default:
		return Endpoint{}, fmt.Errorf("%s: yarn.http.policy %q is neither HTTP_ONLY nor HTTPS_ONLY", filepath.Join(confDir, "yarn-site.xml"), policy)
	}
	if v := yarn.First(key); v != "" {
		addr = v
	}
	addr = expand(yarn, addr)
	if strings.Contains(addr, "${") { // a variable set elsewhere: its port on every address
		addr = "0.0.0.0:" + addr[strings.LastIndexByte(addr, ':')+1:]
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%s %q: %w", key, addr, err)
	}
	// A wildcard: it listens on every address; the agent, on the same
	// node, dials loopback, and knows it by the node's name.
	if host == "" || host == "0.0.0.0" || host == "::" {
		host, ep.Wildcard = "127.0.0.1", true
	}
	ep.URL = scheme + "://" + net.JoinHostPort(host, port)
	core, err := readSite(dir, "core-site.xml")
	if err != nil {
		return Endpoint{}, err
	}
	ep.Kerberos = strings.EqualFold(strings.TrimSpace(core.First("hadoop.http.authentication.type")), "kerberos")
	ep.SPN = expand(yarn, yarn.First("yarn.nodemanager.webapp.spnego-principal"))
	ep.FilterByUser = strings.EqualFold(yarn.First("yarn.acl.enable"), "true") && strings.EqualFold(yarn.First("yarn.webapp.filter-entity-list-by-user"), "true")
	ep.AdminACL = "*"
	if v, ok := yarn["yarn.admin.acl"]; ok {
		ep.AdminACL = v
	}
	if ep.TLS() {
		if ep.TrustStore, err = readTrustStoreConf(root, dir, expand(core, core.First("hadoop.ssl.client.conf"))); err != nil {
			return Endpoint{}, err
		}
	}
	return ep, nil
}

// WebAddress is ReadEndpoint's host:port, for a conf dir on this
// filesystem.
func WebAddress(confDir string) (string, error) {
	ep, err := ReadEndpoint("", confDir)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(ep.URL)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

// CanonicalHostname is this node's name as Hadoop resolves _HOST
// (SecurityUtil.getLocalHostName: InetAddress.getLocalHost().
// getCanonicalHostName(), lower-cased): the host name's first address,
// looked up backwards, if that name resolves to it again; else the host
// name.
func CanonicalHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return canonicalName(net.DefaultResolver, h)
}

// resolver is what canonicalName asks (net.Resolver).
type resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupAddr(ctx context.Context, addr string) ([]string, error)
}

func canonicalName(r resolver, host string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ips, err := r.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return host
	}
	ip := ips[0].IP
	names, err := r.LookupAddr(ctx, ip.String())
	if err != nil {
		return host
	}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		back, err := r.LookupIPAddr(ctx, n)
		if err != nil {
			continue
		}
		for _, b := range back {
			if b.IP.Equal(ip) {
				return n
			}
		}
	}
	return host
}

// ResolvePrincipal replaces _HOST in a principal's host component with
// host, as Hadoop's SecurityUtil.getServerPrincipal does
// ("taskscope/_HOST@REALM" -> "taskscope/nm1.example.com@REALM").
func ResolvePrincipal(principal, host string) string {
	name, realm, hasRealm := strings.Cut(principal, "@")
	parts := strings.Split(name, "/")
	if len(parts) == 2 && parts[1] == "_HOST" {
		parts[1] = strings.ToLower(host)
	}
	out := strings.Join(parts, "/")
	if hasRealm {
		out += "@" + realm
	}
	return out
}
