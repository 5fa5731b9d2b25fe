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
	addr := testsrv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testsrv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- demoCmd(ctx, []string{"--listen", addr, "--nodes", "1", "--concurrency", "1",
			"--clickhouse-url", ch.URL() + "?database=demo"}, &stdout, &stderr)
	}()
	base := "http://" + addr
	getJSON := func(path string, v any) bool {
		resp, err := http.Get(base + path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && json.Unmarshal(body, v) == nil
	}
	// An attempt of a simulated job, with its CPU and processes.
	var attempt map[string]any
	testsrv.WaitUntil(t, "an attempt with CPU and processes in the demo", 3*time.Minute, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the demo stopped: %v\n%s\n%s", err, stdout.String(), stderr.String())
		default:
		}
		var jobs struct {
			Jobs []struct {
				JobID string `json:"job_id"`
			} `json:"jobs"`
		}
		if !getJSON("/api/v1/jobs", &jobs) {
			return false
		}
		for _, j := range jobs.Jobs {
			var d struct {
				Attempts []map[string]any `json:"attempt_list"`
			}
			if !getJSON("/api/v1/jobs/"+url.PathEscape(j.JobID), &d) {
				continue
			}
			for _, a := range d.Attempts {
				if cpu, _ := a["cpu_ms"].(float64); cpu > 0 && a["processes"].(float64) > 0 {
					attempt = a
					return true
				}
			}
		}
		return false
	})
	t.Logf("attempt %v of job %v: cpu_ms %v, %v processes", attempt["attempt_id"], attempt["job_id"], attempt["cpu_ms"], attempt["processes"])
	if !strings.Contains(stdout.String(), "UI on http://"+addr) {
		t.Errorf("the demo did not say where its UI is:\n%s", stdout.String())
	}
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
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the demo stopped with %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not stop within a minute of Ctrl-C")
	}
}
