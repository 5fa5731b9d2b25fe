package agent

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/wire"
)

// TestSecretsStayOnNode runs the agent over the fixture node, whose command
// lines, job.xml and environment hold secrets: no secret value is in a
// batch the server receives, in a spool file (a batch the server refused
// stays in the spool's rejected/), or in a snapshot; the names of the
// options are there, with their values masked.
func TestSecretsStayOnNode(t *testing.T) {
	root := writeNode(t)
	check := func(where string, b []byte) {
		t.Helper()
		for _, s := range fxSecrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %s", where, s)
			}
		}
	}
	masked := []string{"-Dfs.s3a.secret.key=*****", "mapper.py <b> --password *****", "-Djavax.net.ssl.trustStorePassword=*****",
		"jdbc:mysql://db:3306/x?user=etl&password=*****", "jdbc:sqlserver://db:1433;user=sa;password=*****;encrypt=true"}
	has := func(where string, b []byte) {
		t.Helper()
		for _, m := range masked {
			if !bytes.Contains(b, []byte(m)) {
				t.Errorf("%s lacks %q", where, m)
			}
		}
	}

	// Shipped.
	srv, hs := newFakeServer(t)
	if _, err := Run(context.Background(), Config{Servers: []string{hs.URL}, Interval: 10 * time.Millisecond, ProcFS: root,
		Host: "node1", MaxTicks: 3, Exits: "off"}); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, b := range srv.got() {
		all = append(all, wire.Marshal(nil, b)...)
	}
	check("the batches received", all)
	has("the batches received", all)

	// Spooled: a server that refuses every batch leaves them all in the spool.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "malformed batch", http.StatusBadRequest)
	}))
	defer refuse.Close()
	spool := t.TempDir()
	if _, err := Run(context.Background(), Config{Servers: []string{refuse.URL}, Interval: 10 * time.Millisecond, ProcFS: root,
		Host: "node1", MaxTicks: 3, Exits: "off", SpoolDir: spool}); err != nil {
		t.Fatal(err)
	}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	all = all[:0]
	files := 0
	filepath.Walk(spool, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		check(path, raw)
		if _, body, ok := bytes.Cut(raw, []byte("\n")); ok {
			if plain, err := dec.DecodeAll(body, nil); err == nil {
				files++
				check(path+" decompressed", plain)
				all = append(all, plain...)
			}
		}
		return nil
	})
	if files == 0 {
		t.Fatalf("no batch in the spool %s", spool)
	}
	has("the spool", all)

	// Printed.
	for _, args := range [][]string{{"--json"}, {}} {
		var out, errOut bytes.Buffer
		if code := Main(append([]string{"snapshot", "--procfs", root, "--interval", "0", "--host", "node1"}, args...), &out, &errOut); code != 0 {
			t.Fatalf("snapshot %v: exit code %d: %s", args, code, errOut.String())
		}
		check("snapshot "+strings.Join(args, " "), out.Bytes())
		if !bytes.Contains(out.Bytes(), []byte("-Dfs.s3a.secret.key=*****")) {
			t.Errorf("snapshot %v lacks the masked option:\n%s", args, out.String())
		}
	}
}

// TestRedactPatternFlag: --redact-pattern replaces the default, and a broken
// one is refused before anything runs.
func TestRedactPatternFlag(t *testing.T) {
	root := writeNode(t)
	var out, errOut bytes.Buffer
	if code := Main([]string{"snapshot", "--procfs", root, "--interval", "0", "--json", "--redact-pattern", `(?i)^password$`}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("FXSECRET1")) || bytes.Contains(out.Bytes(), []byte("FXSECRET2")) {
		t.Errorf("with a pattern of password alone, the s3a key shows and the --password value does not:\n%s", out.String())
	}
	errOut.Reset()
	if code := Main([]string{"snapshot", "--procfs", root, "--redact-pattern", "("}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--redact-pattern") {
		t.Errorf("a broken pattern: exit %d, %s", code, errOut.String())
	}
}
