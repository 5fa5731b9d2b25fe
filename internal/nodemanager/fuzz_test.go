package nodemanager

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// The parsers of what a NodeManager's conf dir, a KDC and a NodeManager's
// refusals say: never a panic, bounded output.
func FuzzExpand(f *testing.F) {
	f.Add("${yarn.nodemanager.hostname}:8044", "yarn.nodemanager.hostname", "nm1")
	f.Add("${a}${a}", "a", "${a}")
	f.Add("${", "x", "}")
	f.Fuzz(func(t *testing.T, v, name, value string) {
		out := expand(hadoop.Conf{name: value}, v)
		if len(out) > len(v)+20*len(value) {
			t.Fatalf("%q grew to %d bytes", v, len(out))
		}
	})
}

func FuzzAdminACL(f *testing.F) {
	f.Add("yarn,taskscope hadoop", "taskscope")
	f.Add(" ", "")
	f.Add("*", "x")
	f.Fuzz(func(t *testing.T, acl, user string) {
		if strings.ContainsRune(user, 0) {
			return
		}
		Endpoint{AdminACL: acl}.Admin(user)
	})
}

func FuzzKDCCode(f *testing.F) {
	f.Add("KDC_Error: AS Exchange Error: KRB Error: (24) KDC_ERR_PREAUTH_FAILED")
	f.Add("KRB Error: (")
	f.Add("KRB Error: (99999999999)")
	f.Fuzz(func(t *testing.T, s string) { kdcCode(errors.New(s)) })
}

func FuzzServerSays(f *testing.F) {
	f.Add("<html><body><h2>HTTP ERROR 403</h2><p>User x is not authorized</p></body></html>")
	f.Add("<<<>>>\xff")
	f.Fuzz(func(t *testing.T, body string) {
		s := serverSays(&http.Response{Status: "403 Forbidden", Body: nopCloser{strings.NewReader(body)}})
		if !utf8.ValidString(s) || len(s) > 300 || strings.Contains(s, "\n") {
			t.Fatalf("%q", s)
		}
	})
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

func FuzzTrustStore(f *testing.F) {
	for _, p := range []string{"testdata/truststore.jks", "testdata/truststore.p12", "testdata/truststore-ca.pem"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "ts")
		os.WriteFile(p, b, 0o644)
		for _, typ := range []string{"jks", "pkcs12", "pem"} {
			TrustStore{Path: p, Type: typ, Password: "changeit"}.Pool()
		}
	})
}
