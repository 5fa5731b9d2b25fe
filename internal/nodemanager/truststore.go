package nodemanager

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"
)

// TrustStore is the truststore a Hadoop client trusts (ssl-client.xml:
// ssl.client.truststore.location, .type, .password): the certificates
// that sign the daemons' HTTPS certificates. Supported types: jks (Java's
// default; its password is needed, to check the file's integrity),
// pkcs12 (with or without a password) and pem (one or more PEM
// certificates).
type TrustStore struct {
	Path     string // as the agent opens it (under the daemon's root)
	Type     string // jks, pkcs12, pem
	Password string
	// Conf is the file that named it (for messages).
	Conf string
}

// maxTrustStore bounds a truststore's size (Java's cacerts is ~200 KB).
const maxTrustStore = 8 << 20

// readTrustStoreConf reads the truststore ssl-client.xml (or the file
// hadoop.ssl.client.conf names) in dir configures; zero if none.
func readTrustStoreConf(root, dir, name string) (TrustStore, error) {
	if name == "" {
		name = "ssl-client.xml"
	}
	conf, err := readSite(dir, name)
	if err != nil {
		return TrustStore{}, err
	}
	loc := expand(conf, conf.First("ssl.client.truststore.location"))
	if loc == "" {
		return TrustStore{}, nil
	}
	ts := TrustStore{Path: loc, Type: strings.ToLower(expand(conf, conf.First("ssl.client.truststore.type"))),
		Password: expand(conf, conf.First("ssl.client.truststore.password")), Conf: filepath.Join(dir, name)}
	if filepath.IsAbs(loc) {
		ts.Path = root + loc
	}
	if ts.Type == "" {
		ts.Type = "jks"
	}
	return ts, nil
}

// Pool reads the truststore's certificates.
func (ts TrustStore) Pool() (*x509.CertPool, error) {
	f, err := os.Open(ts.Path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the truststore: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTrustStore+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the truststore %s: %w", ts.Path, err)
	}
	if len(b) > maxTrustStore {
		return nil, fmt.Errorf("truststore %s: larger than %d bytes", ts.Path, maxTrustStore)
	}
	var certs []*x509.Certificate
	switch ts.Type {
	case "jks":
		certs, err = jksCerts(b, ts.Password)
	case "pkcs12", "p12", "pfx":
		certs, err = pkcs12.DecodeTrustStore(b, ts.Password)
	case "pem":
		certs, err = pemCerts(b)
	default:
		return nil, fmt.Errorf("truststore %s: type %q is not supported (jks, pkcs12 or pem)", ts.Path, ts.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the %s truststore %s: %w", ts.Type, ts.Path, err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("truststore %s holds no certificate", ts.Path)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// jksCerts reads the trusted certificates of a Java KeyStore.
func jksCerts(b []byte, password string) ([]*x509.Certificate, error) {
	if password == "" {
		return nil, errors.New("a JKS truststore is read with its password (ssl.client.truststore.password)")
	}
	ks := keystore.New()
	if err := ks.Load(bytes.NewReader(b), []byte(password)); err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for _, alias := range ks.Aliases() {
		if !ks.IsTrustedCertificateEntry(alias) {
			continue
		}
		e, err := ks.GetTrustedCertificateEntry(alias)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", alias, err)
		}
		c, err := x509.ParseCertificate(e.Certificate.Content)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", alias, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// pemCerts reads every certificate of a PEM file.
func pemCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return out, nil
}

// CAFilePool reads a PEM CA file (the agent's --nm-ca-file).
func CAFilePool(path string) (*x509.CertPool, error) {
	return TrustStore{Path: path, Type: "pem"}.Pool()
}
