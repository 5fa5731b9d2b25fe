package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

func TestMain(m *testing.M) {
	// The demo's simulator re-executes the test binary as its node daemons.
	simulator.RunDaemonIfRequested()
	os.Exit(m.Run())
}

// TestDemoOnClickHouse runs `taskscope demo --clickhouse-url` (what make
// demo-clickhouse runs) on a ClickHouse server of its own: the simulated
// jobs' attempts, with their CPU and processes, are served from rows in
// ClickHouse, and Ctrl-C stops everything.
func TestDemoOnClickHouse(t *testing.T) {
	ch := chtest.Start(t)
	d := startDemo(t, "--clickhouse-url", ch.URL()+"?database=demo")
	// An attempt of a simulated job, with its CPU and processes.
	attempt := d.waitAttempt(t, "an attempt with CPU and processes", func(a map[string]any) bool {
		cpu, _ := a["cpu_ms"].(float64)
		return cpu > 0 && a["processes"].(float64) > 0
	})
	t.Logf("attempt %v of job %v: cpu_ms %v, %v processes", attempt["attempt_id"], attempt["job_id"], attempt["cpu_ms"], attempt["processes"])
	// Served from ClickHouse: the attempt is a row there.
	q := url.Values{"query": {"SELECT count() FROM demo.attempts WHERE attempt_id = '" + attempt["attempt_id"].(string) + "'"}}
	resp, err := http.Get(ch.URL() + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if s := strings.TrimSpace(string(n)); s == "" || s == "0" {
		t.Errorf("ClickHouse has no row of attempt %v: %q", attempt["attempt_id"], n)
	}
	d.stop(t)
}

// TestDemoSecure runs `taskscope demo --secure`: a KDC of its own, the
// simulated NodeManager on HTTPS demanding SPNEGO, and the agent, in the
// same process, reading how containers ended from it (an attempt's exit
// status from the NodeManager).
func TestDemoSecure(t *testing.T) {
	testsrv.NeedKDC(t)
	d := startDemo(t, "--secure")
	attempt := d.waitAttempt(t, "an attempt whose exit status came from the NodeManager", func(a map[string]any) bool {
		return a["exit_source"] == store.ExitSourceNodeManager
	})
	t.Logf("attempt %v of job %v: %v, exit %v from %v", attempt["attempt_id"], attempt["job_id"], attempt["outcome"], attempt["exit_code"], attempt["exit_source"])
	if !strings.Contains(d.stdout.String(), "secured: NodeManagers on HTTPS with SPNEGO") {
		t.Errorf("the demo did not say it is secured:\n%s", d.stdout.String())
	}
	d.stop(t)
}

// demo is `taskscope demo` running in the test, on one node.
type demo struct {
	base           string
	stdout, stderr testsrv.SyncBuffer
	done           chan error
	cancel         context.CancelFunc
}

func startDemo(t *testing.T, args ...string) *demo {
	t.Helper()
	addr := testsrv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	d := &demo{base: "http://" + addr, done: make(chan error, 1), cancel: cancel}
	t.Cleanup(cancel)
	go func() {
		d.done <- demoCmd(ctx, append([]string{"--listen", addr, "--nodes", "1", "--concurrency", "1"}, args...), &d.stdout, &d.stderr)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the demo's output:\n%s\n%s", d.stdout.String(), d.stderr.String())
		}
	})
	return d
}

func (d *demo) getJSON(path string, v any) bool {
	resp, err := http.Get(d.base + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && json.Unmarshal(body, v) == nil
}

// waitAttempt waits until the API lists an attempt that ok accepts (its
// JSON), and returns it.
func (d *demo) waitAttempt(t *testing.T, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var attempt map[string]any
	testsrv.WaitUntil(t, what+" in the demo", 3*time.Minute, func() bool {
		select {
		case err := <-d.done:
			t.Fatalf("the demo stopped: %v", err)
		default:
		}
		var jobs struct {
			Jobs []struct {
				JobID string `json:"job_id"`
			} `json:"jobs"`
		}
		if !d.getJSON("/api/v1/jobs", &jobs) {
			return false
		}
		for _, j := range jobs.Jobs {
			var jd struct {
				Attempts []map[string]any `json:"attempt_list"`
			}
			if !d.getJSON("/api/v1/jobs/"+url.PathEscape(j.JobID), &jd) {
				continue
			}
			for _, a := range jd.Attempts {
				if ok(a) {
					attempt = a
					return true
				}
			}
		}
		return false
	})
	if !strings.Contains(d.stdout.String(), "UI on "+d.base) {
		t.Errorf("the demo did not say where its UI is:\n%s", d.stdout.String())
	}
	return attempt
}

// stop stops the demo as Ctrl-C does; it must end cleanly.
func (d *demo) stop(t *testing.T) {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("the demo stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not stop within a minute of Ctrl-C")
	}
}
