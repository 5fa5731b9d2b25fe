package cli

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/store"
)

// The alert flags as docs/operations.md names them: several
// Alertmanagers, a webhook, the minimum severity, the URL alerts link to.
func TestAlertFlags(t *testing.T) {
	parse := func(args ...string) (*alert.Options, error) {
		fl := flag.NewFlagSet("server", flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		var f alertFlags
		f.register(fl)
		if err := fl.Parse(args); err != nil {
			return nil, err
		}
		return f.options("127.0.0.1:8080", false)
	}
	o, err := parse("--alertmanager-url", "http://am1:9093, http://am2:9093", "--alert-min-severity", "critical", "--alert-webhook", "https://hooks.example/t")
	if err != nil || len(o.Alertmanagers) != 2 || o.Alertmanagers[1] != "http://am2:9093" || o.MinSeverity != store.SeverityCritical ||
		o.Webhook != "https://hooks.example/t" || o.ExternalURL != "http://127.0.0.1:8080" {
		t.Errorf("%+v, %v", o, err)
	}
	if o, err := parse("--alertmanager-url", "http://am:9093", "--external-url", "https://taskscope.example"); err != nil ||
		o.ExternalURL != "https://taskscope.example" || o.MinSeverity != store.SeveritySevere {
		t.Errorf("%+v, %v", o, err)
	}
	if o, err := parse(); o != nil || err != nil {
		t.Errorf("no receiver: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--alertmanager-url", "am:9093"}, {"--alert-webhook", "http://h", "--alert-min-severity", "high"},
		{"--alert-webhook", "http://h", "--alert-min-severity", "none"}, {"--alert-min-severity", "low"}} {
		if _, err := parse(bad...); err == nil || !strings.Contains(err.Error(), "alert") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
