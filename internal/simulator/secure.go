package simulator

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jcmturner/goidentity/v6"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/pavlo-v-chernykh/keystore-go/v4"

	"github.com/taskscope/taskscope/internal/minica"
	"github.com/taskscope/taskscope/internal/minikdc"
)

// A secured cluster is configured as production clusters are
// (docs/operations.md, "Secure clusters"): every NodeManager serves its
// web services over HTTPS only (yarn.http.policy=HTTPS_ONLY, at
// yarn.nodemanager.webapp.https.address, every address) and demands
// Kerberos (hadoop.http.authentication.type=kerberos: SPNEGO with the
// principal HTTP/_HOST@REALM and its keytab), with a certificate for the
// node's name signed by the cluster's CA, which ssl-client.xml's JKS
// truststore holds. Every simulated node is this machine, so _HOST is its
// canonical name for all of them. With yarn.acl.enable, the principals
// whose short names are in yarn.admin.acl may read the containers; others
// are answered 403.

// Security is what a secured cluster needs.
type Security struct {
	// KDC issues the tickets: the cluster makes the NodeManagers'
	// principal (HTTP/<Host>) there, and its keytab.
	KDC *minikdc.KDC
	// CA signs the NodeManagers' certificate for Host.
	CA *minica.CA
	// Host is the node's canonical name (what Hadoop makes of _HOST).
	Host string
	// Admins are the short names of the principals allowed to read every
	// container (yarn.admin.acl), e.g. "taskscope"; yarn is always one.
	Admins []string
}

// secureConf is what a secured NodeManager daemon is given
// (daemonConfig.Secure): its SPNEGO keytab, certificate and key, and who
// may read its containers.
type secureConf struct {
	Keytab string   `json:"keytab"`
	Cert   string   `json:"cert"`
	Key    string   `json:"key"`
	Admins []string `json:"admins"`
}

// clusterSecurity is the secured cluster's files and configuration.
type clusterSecurity struct {
	nm      secureConf
	yarn    []kv // yarn-site.xml's entries
	trust   string
	trustPw string
}

// prepareSecurity makes the NodeManagers' principal, keytab, certificate
// and the clients' truststore in dir.
func prepareSecurity(ctx context.Context, s *Security, dir string) (*clusterSecurity, error) {
	if s.KDC == nil || s.CA == nil || s.Host == "" {
		return nil, errors.New("a secured cluster needs a KDC, a CA and the node's name")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sc := &clusterSecurity{nm: secureConf{Keytab: filepath.Join(dir, "nm-http.keytab"), Cert: filepath.Join(dir, "nm.crt"), Key: filepath.Join(dir, "nm.key"),
		Admins: append([]string{"yarn"}, s.Admins...)}, trust: filepath.Join(dir, "truststore.jks")}
	princ := "HTTP/" + s.Host
	if _, err := s.KDC.Kadmin(ctx, "getprinc "+princ); err != nil {
		if err := s.KDC.AddPrincipal(ctx, "", princ); err != nil {
			return nil, err
		}
	}
	os.Remove(sc.nm.Keytab)
	if err := s.KDC.Keytab(ctx, sc.nm.Keytab, princ); err != nil {
		return nil, err
	}
	is, err := s.CA.Issue(s.Host, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(sc.nm.Cert, is.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(sc.nm.Key, is.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	// The clients' truststore: the CA in a JKS, as keytool makes them.
	pw := make([]byte, 8)
	rand.Read(pw)
	sc.trustPw = hex.EncodeToString(pw)
	ks := keystore.New()
	if err := ks.SetTrustedCertificateEntry("cluster-ca", keystore.TrustedCertificateEntry{CreationTime: time.Now(),
		Certificate: keystore.Certificate{Type: "X509", Content: s.CA.Cert.Raw}}); err != nil {
		return nil, err
	}
	f, err := os.Create(sc.trust)
	if err != nil {
		return nil, err
	}
	if err := ks.Store(f, []byte(sc.trustPw)); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot write the truststore: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	sc.yarn = []kv{
		{"yarn.http.policy", "HTTPS_ONLY"},
		{"yarn.nodemanager.webapp.spnego-principal", "HTTP/_HOST@" + s.KDC.Realm},
		{"yarn.nodemanager.webapp.spnego-keytab-file", sc.nm.Keytab},
		{"yarn.acl.enable", "true"},
		{"yarn.admin.acl", strings.Join(sc.nm.Admins, ",")},
		{"yarn.webapp.filter-entity-list-by-user", "true"},
	}
	return sc, nil
}

// coreConf and sslClientConf are the secured cluster's core-site.xml and
// ssl-client.xml entries.
func (sc *clusterSecurity) coreConf() confList {
	return confList{
		{"hadoop.security.authentication", "kerberos"},
		{"hadoop.security.authorization", "true"},
		{"hadoop.http.authentication.type", "kerberos"},
		{"hadoop.http.filter.initializers", "org.apache.hadoop.security.AuthenticationFilterInitializer"},
	}
}

func (sc *clusterSecurity) sslClientConf() confList {
	return confList{
		{"ssl.client.truststore.location", sc.trust},
		{"ssl.client.truststore.type", "jks"},
		{"ssl.client.truststore.password", sc.trustPw},
	}
}

// secureHandler wraps the NodeManager's web services in SPNEGO with its
// keytab, and lets yarn.admin.acl's principals through (403 for others,
// with the words of Hadoop's error page).
func secureHandler(sc *secureConf, inner http.Handler) (http.Handler, error) {
	kt, err := keytab.Load(sc.Keytab)
	if err != nil {
		return nil, fmt.Errorf("cannot read the NodeManager's keytab: %w", err)
	}
	admins := map[string]bool{}
	for _, a := range sc.Admins {
		admins[a] = true
	}
	acl := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := goidentity.FromHTTPRequestContext(r)
		short := ""
		if id != nil {
			short, _, _ = strings.Cut(id.UserName(), "/")
		}
		if !admins[short] {
			w.Header().Set("Content-Type", "text/html;charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<html><body><h2>HTTP ERROR 403</h2><p>User %s is not authorized to view the containers of this node</p></body></html>", short)
			return
		}
		inner.ServeHTTP(w, r)
	})
	return spnego.SPNEGOKRB5Authenticate(acl, kt, service.DecodePAC(false)), nil
}

// tlsConfig is the NodeManager's server TLS configuration.
func (sc *secureConf) tlsConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(sc.Cert, sc.Key)
	if err != nil {
		return nil, fmt.Errorf("cannot read the NodeManager's certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
