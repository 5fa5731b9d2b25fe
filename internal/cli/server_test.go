package cli

import (
	"bytes"
	"flag"
	"log/slog"
	"strings"
	"testing"
)

// TestWarnIfOpen: a server others can reach without a login says so
// loudly at start; one on loopback, or with logins, does not.
func TestWarnIfOpen(t *testing.T) {
	for _, c := range []struct {
		listen         string
		read, ingest   bool
		warn, readWarn bool
	}{
		{":8080", false, false, true, true},
		{"0.0.0.0:8080", false, true, true, true},
		{"10.0.0.7:8080", true, false, true, false},
		{"taskscope.example:8080", true, true, false, false},
		{"127.0.0.1:8080", false, false, false, false},
		{"[::1]:8080", false, false, false, false},
		{"localhost:8080", false, false, false, false},
	} {
		var out, log bytes.Buffer
		warnIfOpen(&out, slog.New(slog.NewTextHandler(&log, nil)), c.listen, c.read, c.ingest)
		if got := strings.Contains(out.String(), "*** WARNING"); got != c.warn {
			t.Errorf("%s (read auth %v, ingest auth %v): warned %v: %s", c.listen, c.read, c.ingest, got, out.String())
		}
		if got := strings.Contains(out.String(), "reads every job, command line and host"); got != c.readWarn {
			t.Errorf("%s: read warning %v: %s", c.listen, got, out.String())
		}
		if c.warn && !strings.Contains(log.String(), "level=WARN") {
			t.Errorf("%s: no warning in the log: %s", c.listen, log.String())
		}
	}
}

// TestEmbeddedStoreFlags: --residual-attempts and --duckdb-threads reach
// the embedded store's options (residuals on and one thread unless
// given).
func TestEmbeddedStoreFlags(t *testing.T) {
	for _, c := range []struct {
		args     []string
		residual bool
		threads  int
	}{{nil, true, 1}, {[]string{"--residual-attempts"}, true, 1}, {[]string{"--residual-attempts=false"}, false, 1},
		{[]string{"--duckdb-threads=4"}, true, 4}, {[]string{"--duckdb-threads=-1"}, true, -1}} {
		var f storeFlags
		fl := flag.NewFlagSet("server", flag.ContinueOnError)
		f.register(fl)
		if err := fl.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		o := f.duckdbOptions(nil)
		if o.PlainAttempts == c.residual || o.Threads != c.threads {
			t.Errorf("%q: PlainAttempts %v, Threads %d; want %v, %d", c.args, o.PlainAttempts, o.Threads, !c.residual, c.threads)
		}
	}
}
