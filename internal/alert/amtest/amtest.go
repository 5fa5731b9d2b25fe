// Package amtest starts Prometheus Alertmanager for tests, on loopback, in
// a temporary directory with a configuration and storage of its own. It
// runs the Alertmanager the project's scripts install
// (scripts/test-deps.sh: Debian's prometheus-alertmanager 0.25); a test
// fails, not skips, when it is missing.
package amtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// Binary is Debian's Alertmanager.
const Binary = "/usr/bin/prometheus-alertmanager"

// Alertmanager is one the test started.
type Alertmanager struct {
	Dir  string
	Port int
	cmd  *exec.Cmd
	log  *testsrv.SyncBuffer
	done chan struct{}
}

// URL is its base URL.
func (a *Alertmanager) URL() string { return "http://127.0.0.1:" + strconv.Itoa(a.Port) }

// Log is what it wrote.
func (a *Alertmanager) Log() string { return a.log.String() }

// config routes every alert to a receiver that sends nothing, grouped by
// job as docs/operations.md suggests.
const config = `route:
  receiver: taskscope
  group_by: [job_id]
receivers:
  - name: taskscope
`

// Start starts an Alertmanager; the test's cleanup stops it. A port taken
// between its choice and the start is chosen again.
func Start(tb testing.TB) *Alertmanager {
	tb.Helper()
	if _, err := os.Stat(Binary); err != nil {
		tb.Fatalf("Alertmanager is not installed (scripts/test-deps.sh installs it; make test runs that): %v", err)
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(config), 0o644); err != nil {
		tb.Fatal(err)
	}
	for try := 0; ; try++ {
		a := &Alertmanager{Dir: dir, Port: testsrv.FreePort(tb), log: &testsrv.SyncBuffer{}, done: make(chan struct{})}
		a.cmd = exec.Command(Binary, "--config.file="+filepath.Join(dir, "alertmanager.yml"), "--storage.path="+filepath.Join(dir, "data"),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(a.Port), "--cluster.listen-address=", "--log.level=info")
		a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
		if err := a.cmd.Start(); err != nil {
			tb.Fatalf("cannot start Alertmanager: %v", err)
		}
		go func() { a.cmd.Wait(); close(a.done) }()
		tb.Cleanup(a.Stop)
		if a.ready(30 * time.Second) {
			return a
		}
		a.Stop()
		if try == 2 {
			tb.Fatalf("Alertmanager did not start: %s", a.Log())
		}
	}
}

// ready waits until it answers /-/ready, or it exits.
func (a *Alertmanager) ready(d time.Duration) bool {
	c := &http.Client{Timeout: time.Second}
	return testsrv.Poll(d, func() bool {
		select {
		case <-a.done:
			return true
		default:
		}
		resp, err := c.Get(a.URL() + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) && a.running()
}

func (a *Alertmanager) running() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// Stop ends it (and waits for it).
func (a *Alertmanager) Stop() {
	if a.running() {
		a.cmd.Process.Kill()
	}
	<-a.done
}

// Alert is an alert as GET /api/v2/alerts lists it (gettableAlert).
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	UpdatedAt    time.Time         `json:"updatedAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
	Status       struct {
		State string `json:"state"`
	} `json:"status"`
}

// Alerts lists the alerts it holds that have not ended.
func (a *Alertmanager) Alerts(ctx context.Context) ([]Alert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/api/v2/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot list Alertmanager's alerts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cannot list Alertmanager's alerts: %s", resp.Status)
	}
	var out []Alert
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("cannot read Alertmanager's alerts: %w", err)
	}
	return out, nil
}

// Find is the alert whose labels include all of these, if listed.
func Find(alerts []Alert, labels map[string]string) (Alert, bool) {
next:
	for _, a := range alerts {
		for k, v := range labels {
			if a.Labels[k] != v {
				continue next
			}
		}
		return a, true
	}
	return Alert{}, false
}
