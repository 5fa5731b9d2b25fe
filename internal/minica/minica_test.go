package minica

import (
	"crypto/x509"
	"testing"
)

func TestIssue(t *testing.T) {
	ca, err := New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue("nm1.example.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(is.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nm1.example.test", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "nm2.example.test"}); err == nil {
		t.Error("verified for a host it was not issued for")
	}
	other, _ := New("other CA")
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: other.Pool()}); err == nil {
		t.Error("verified against another CA")
	}
	if _, err := ca.Issue(); err == nil {
		t.Error("a certificate for no host")
	}
}
