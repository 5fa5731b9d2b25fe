package cli

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/store"
)

// alertFlags are the flags of alerts (docs/operations.md, "Alerts").
type alertFlags struct {
	managers, minSeverity, webhook, externalURL string
}

func (f *alertFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.managers, "alertmanager-url", "", "Alertmanagers to push alerts to (POST /api/v2/alerts), comma-separated: http://HOST:9093[,...]")
	fl.StringVar(&f.minSeverity, "alert-min-severity", "severe", "findings at this severity or above alert: low, moderate, severe or critical (lost and orphaned task processes alert whatever it is)")
	fl.StringVar(&f.webhook, "alert-webhook", "", "URL that gets Alertmanager's webhook payload (version 4) at each change of a job's alerts")
	fl.StringVar(&f.externalURL, "external-url", "", "taskscope's URL as its users reach it: alerts link to their job's page there (default: http://HOSTNAME:PORT of --listen)")
}

// options are the alerts' options; nil when no receiver is given.
func (f *alertFlags) options(listen string, tls bool) (*alert.Options, error) {
	var managers []string
	for _, u := range strings.Split(f.managers, ",") {
		if u = strings.TrimSpace(u); u != "" {
			managers = append(managers, u)
		}
	}
	if len(managers) == 0 && f.webhook == "" {
		if f.minSeverity != "severe" {
			return nil, fmt.Errorf("--alert-min-severity goes with --alertmanager-url or --alert-webhook")
		}
		return nil, nil
	}
	min, err := store.ParseSeverity(f.minSeverity)
	if err != nil || min == store.SeverityNone {
		return nil, fmt.Errorf("--alert-min-severity must be low, moderate, severe or critical, not %q", f.minSeverity)
	}
	ext := f.externalURL
	if ext == "" {
		ext = defaultExternalURL(listen, tls)
	}
	o := &alert.Options{Alertmanagers: managers, Webhook: f.webhook, MinSeverity: min, ExternalURL: ext}
	if _, err := alert.New(*o); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return o, nil
}

// defaultExternalURL is the server's URL on this host's name.
func defaultExternalURL(listen string, tls bool) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
