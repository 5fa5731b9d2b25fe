package minikdc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/minikdc"
	"github.com/taskscope/taskscope/internal/testsrv"
)

func TestKDC(t *testing.T) {
	ctx := context.Background()
	k := testsrv.StartKDC(t, minikdc.Options{Realm: "EXAMPLE.TEST"})
	if err := k.AddPrincipal(ctx, "", "alice", "HTTP/localhost"); err != nil {
		t.Fatal(err)
	}
	kt := filepath.Join(t.TempDir(), "alice.keytab")
	if err := k.Keytab(ctx, kt, "alice"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(kt); err != nil || st.Size() == 0 {
		t.Fatalf("keytab: %v %v", st, err)
	}
	out, err := k.Kadmin(ctx, "getprinc alice")
	if err != nil || !strings.Contains(out, "alice@EXAMPLE.TEST") || !strings.Contains(out, "REQUIRES_PRE_AUTH") {
		t.Fatalf("%s %v", out, err)
	}
	if err := k.Rekey(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if out, _ := k.Kadmin(ctx, "getprinc alice"); !strings.Contains(out, "vno 2") {
		t.Errorf("rekeyed: %s", out)
	}
	// A query that fails is an error, though kadmin.local exits 0.
	if _, err := k.Kadmin(ctx, "getprinc nobody"); err == nil {
		t.Error("getprinc of an unknown principal: no error")
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
}
