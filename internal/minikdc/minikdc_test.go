package minikdc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/keytab"

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

// TestKDCOutlivesItsStartingThread: a KDC started from a thread that
// then ends (as the agent's taskstats probe ends one, in the same process
// in the e2e tests and the demo) still answers: it used to be sent its
// parent-death signal then, and shut down.
func TestKDCOutlivesItsStartingThread(t *testing.T) {
	testsrv.NeedKDC(t)
	ctx := context.Background()
	var k *minikdc.KDC
	var err error
	dir := t.TempDir()
	testsrv.OnEndingThread(t, func() { k, err = minikdc.Start(ctx, minikdc.Options{Dir: dir}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Stop() })
	if err := k.AddPrincipal(ctx, "", "alice"); err != nil {
		t.Fatal(err)
	}
	kt := filepath.Join(t.TempDir(), "alice.keytab")
	if err := k.Keytab(ctx, kt, "alice"); err != nil {
		t.Fatal(err)
	}
	ktab, err := keytab.Load(kt)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := config.Load(k.Krb5Conf)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.NewWithKeytab("alice", k.Realm, ktab, conf, client.DisablePAFXFAST(true))
	defer cl.Destroy()
	if err := cl.Login(); err != nil {
		t.Fatalf("the KDC does not answer once the thread that started it ended: %v\n%s", err, k.Log())
	}
	if !k.Running() {
		t.Fatalf("the KDC exited once the thread that started it ended:\n%s", k.Log())
	}
	if err := k.Stop(); err != nil || k.Running() {
		t.Fatalf("stopped: %v, running %v", err, k.Running())
	}
}
