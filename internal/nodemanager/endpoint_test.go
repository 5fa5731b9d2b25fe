package nodemanager

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConf writes a conf dir: each file's properties.
func writeConf(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, props := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`<?xml version="1.0"?><configuration>`+props+`</configuration>`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadEndpoint(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  Endpoint
	}{
		{"defaults", map[string]string{"yarn-site.xml": ""},
			Endpoint{URL: "http://127.0.0.1:8042", Wildcard: true, AdminACL: "*"}},
		{"HTTPS_ONLY, default https address", map[string]string{"yarn-site.xml": prop("yarn.http.policy", "HTTPS_ONLY")},
			Endpoint{URL: "https://127.0.0.1:8044", Wildcard: true, AdminACL: "*"}},
		{"HTTPS_ONLY on a host", map[string]string{"yarn-site.xml": prop("yarn.http.policy", "HTTPS_ONLY") +
			prop("yarn.nodemanager.hostname", "nm7.example.com") + prop("yarn.nodemanager.webapp.https.address", "${yarn.nodemanager.hostname}:9044") +
			prop("yarn.nodemanager.webapp.address", "${yarn.nodemanager.hostname}:9042")},
			Endpoint{URL: "https://nm7.example.com:9044", AdminACL: "*"}},
		{"HTTP_ONLY keeps the http address", map[string]string{"yarn-site.xml": prop("yarn.http.policy", "HTTP_ONLY") +
			prop("yarn.nodemanager.webapp.address", "0.0.0.0:9042") + prop("yarn.nodemanager.webapp.https.address", "0.0.0.0:9044")},
			Endpoint{URL: "http://127.0.0.1:9042", Wildcard: true, AdminACL: "*"}},
		{"kerberos, SPNEGO principal, ACLs", map[string]string{
			"yarn-site.xml": prop("yarn.nodemanager.webapp.spnego-principal", "HTTP/_HOST@EXAMPLE.COM") + prop("yarn.acl.enable", "true") +
				prop("yarn.webapp.filter-entity-list-by-user", "true") + prop("yarn.admin.acl", "yarn,taskscope hadoop-admins"),
			"core-site.xml": prop("hadoop.http.authentication.type", "kerberos")},
			Endpoint{URL: "http://127.0.0.1:8042", Wildcard: true, Kerberos: true, SPN: "HTTP/_HOST@EXAMPLE.COM", FilterByUser: true, AdminACL: "yarn,taskscope hadoop-admins"}},
		{"a variable set elsewhere: every address", map[string]string{"yarn-site.xml": prop("yarn.nodemanager.webapp.address", "${some.other}:8043")},
			Endpoint{URL: "http://127.0.0.1:8043", Wildcard: true, AdminACL: "*"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeConf(t, tc.files)
			got, err := ReadEndpoint("", dir)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.ConfDir = dir
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// The truststore of ssl-client.xml, read under the daemon's root.
	root := t.TempDir()
	conf := "/etc/hadoop/conf"
	os.MkdirAll(root+conf, 0o755)
	for name, props := range map[string]string{
		"yarn-site.xml": prop("yarn.http.policy", "HTTPS_ONLY"),
		"ssl-client.xml": prop("ssl.client.truststore.location", "/etc/security/truststore.jks") +
			prop("ssl.client.truststore.password", "changeit")} {
		os.WriteFile(filepath.Join(root+conf, name), []byte(`<configuration>`+props+`</configuration>`), 0o644)
	}
	ep, err := ReadEndpoint(root, conf)
	if err != nil {
		t.Fatal(err)
	}
	want := TrustStore{Path: root + "/etc/security/truststore.jks", Type: "jks", Password: "changeit", Conf: filepath.Join(root+conf, "ssl-client.xml")}
	if ep.TrustStore != want || ep.ConfDir != conf {
		t.Errorf("truststore %+v, want %+v", ep.TrustStore, want)
	}
	for _, bad := range []map[string]string{
		{"yarn-site.xml": prop("yarn.http.policy", "HTTP_AND_HTTPS")},
		{"yarn-site.xml": prop("yarn.nodemanager.webapp.address", "nonsense")},
		{"core-site.xml": ""},
		{"yarn-site.xml": "", "core-site.xml": "<unclosed>"},
	} {
		if _, err := ReadEndpoint("", writeConf(t, bad)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestWebAddress(t *testing.T) {
	cases := []struct{ props, want string }{
		{"", "127.0.0.1:8042"},
		{prop("yarn.nodemanager.webapp.address", "127.0.0.1:41234"), "127.0.0.1:41234"},
		{prop("yarn.nodemanager.webapp.address", "0.0.0.0:9999"), "127.0.0.1:9999"},
		{prop("yarn.nodemanager.hostname", "node7") + prop("yarn.nodemanager.webapp.address", "${yarn.nodemanager.hostname}:8042"), "node7:8042"},
		{prop("yarn.nodemanager.webapp.address", "${some.other}:8043"), "127.0.0.1:8043"},
	}
	for _, tc := range cases {
		got, err := WebAddress(writeSite(t, tc.props))
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.props, got, err, tc.want)
		}
	}
	if _, err := WebAddress(t.TempDir()); err == nil {
		t.Error("no yarn-site.xml: no error")
	}
}

func TestEndpointOf(t *testing.T) {
	ep, err := EndpointOf("https://nm1.example.com:8044/ws/v1/node")
	if err != nil || ep.URL != "https://nm1.example.com:8044" || ep.serverName(nil) != "nm1.example.com" {
		t.Errorf("%+v %v", ep, err)
	}
	for _, bad := range []string{"nm1:8044", "ftp://nm1:21", "https://", "::"} {
		if _, err := EndpointOf(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// _HOST as Hadoop resolves it.
func TestResolvePrincipal(t *testing.T) {
	for in, want := range map[string]string{
		"taskscope/_HOST@EXAMPLE.COM":      "taskscope/node1.example.com@EXAMPLE.COM",
		"taskscope/_HOST":                  "taskscope/node1.example.com",
		"taskscope/fixed.host@EXAMPLE.COM": "taskscope/fixed.host@EXAMPLE.COM",
		"taskscope@EXAMPLE.COM":            "taskscope@EXAMPLE.COM",
	} {
		if got := ResolvePrincipal(in, "Node1.Example.COM"); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

type fakeResolver struct {
	forward map[string][]string
	reverse map[string][]string
}

func (r fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	var out []net.IPAddr
	for _, a := range r.forward[host] {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	if out == nil {
		return nil, errors.New("no such host")
	}
	return out, nil
}

func (r fakeResolver) LookupAddr(_ context.Context, addr string) ([]string, error) {
	if n, ok := r.reverse[addr]; ok {
		return n, nil
	}
	return nil, errors.New("no PTR")
}

// The node's canonical name: the host name's first address looked up
// backwards, lower-cased, when that name resolves back to it.
func TestCanonicalName(t *testing.T) {
	r := fakeResolver{
		forward: map[string][]string{"node1": {"10.0.0.7", "10.0.0.8"}, "node1.example.com": {"10.0.0.7"}, "liar.example.com": {"10.9.9.9"}, "node2": {"10.0.0.9"}},
		reverse: map[string][]string{"10.0.0.7": {"Node1.Example.com."}, "10.0.0.9": {"liar.example.com."}},
	}
	for host, want := range map[string]string{
		"node1":   "node1.example.com",
		"node2":   "node2", // its reverse name does not resolve back
		"NODE3.x": "node3.x",
	} {
		if got := canonicalName(r, host); got != want {
			t.Errorf("%s: %s, want %s", host, got, want)
		}
	}
	if CanonicalHostname() == "" {
		t.Error("no canonical name for this node")
	}
}

// yarn.admin.acl: users, a space, groups; "*" for all.
func TestAdminACL(t *testing.T) {
	for acl, want := range map[string]bool{
		"*":                          true,
		"yarn,taskscope":             true,
		"yarn,taskscope hadoopadmin": true,
		"yarn hadoopadmin":           false,
		" ":                          false,
		"":                           false,
		" root":                      true, // root's group on this node
	} {
		if got := (Endpoint{AdminACL: acl}).Admin(map[bool]string{true: "root", false: "taskscope"}[strings.HasSuffix(acl, "root")]); got != want {
			t.Errorf("%q: %v, want %v", acl, got, want)
		}
	}
}

// The truststores Hadoop's ssl-client.xml names: JKS and PKCS12 (both
// made by keytool), PEM.
func TestTrustStore(t *testing.T) {
	b, err := os.ReadFile("testdata/truststore-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []TrustStore{
		{Path: "testdata/truststore.jks", Type: "jks", Password: "changeit"},
		{Path: "testdata/truststore.p12", Type: "pkcs12", Password: "changeit"},
		{Path: "testdata/truststore-ca.pem", Type: "pem"},
	} {
		pool, err := ts.Pool()
		if err != nil {
			t.Errorf("%s: %v", ts.Path, err)
			continue
		}
		// The fixture's certificate is long expired: a pool does not
		// check validity, the handshake does.
		if !pool.Equal(func() *x509.CertPool { p := x509.NewCertPool(); p.AddCert(ca); return p }()) {
			t.Errorf("%s: not the fixture's CA", ts.Path)
		}
	}
	for _, bad := range []TrustStore{
		{Path: "testdata/truststore.jks", Type: "jks", Password: "wrong"},
		{Path: "testdata/truststore.jks", Type: "jks"},
		{Path: "testdata/truststore.p12", Type: "pkcs12", Password: "wrong"},
		{Path: "testdata/truststore.jks", Type: "bks", Password: "changeit"},
		{Path: "testdata/missing.jks", Type: "jks", Password: "changeit"},
		{Path: "testdata/truststore.jks", Type: "pem"},
	} {
		if _, err := bad.Pool(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
