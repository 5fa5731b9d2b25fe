package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/flame"
	"github.com/taskscope/taskscope/internal/report"
	"github.com/taskscope/taskscope/internal/store"
)

// TestReportWasteHistory: `taskscope report --waste` and `--history` ask
// the API what they print.
func TestReportWasteHistory(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		switch r.URL.Path {
		case "/api/v1/waste":
			json.NewEncoder(w).Encode(analysis.WasteReport{By: r.URL.Query().Get("by"), Jobs: 1,
				Groups: []analysis.WasteGroup{{Key: "etl", Jobs: 1, Cost: analysis.Cost{Attempts: 2, CPUHours: 1.5,
					Failed: analysis.Waste{Attempts: 1, CPUHours: 0.5, MemGBHours: 1}}}}})
		case "/api/v1/jobs/job_1_0001/history":
			json.NewEncoder(w).Encode(analysis.History{Name: "etl <date>", JobID: "job_1_0001", Runs: []analysis.Run{{JobID: "job_1_0001", Duration: 60}}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := reportCmd(context.Background(), []string{"--server", srv.URL, "--waste", "--by", "queue", "--from", "-2d", "--queue", "etl"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Waste by queue") || !strings.Contains(out.String(), "1: 0.50 core-h 1.00 GB-h") {
		t.Errorf("waste report:\n%s", out.String())
	}
	out.Reset()
	if err := reportCmd(context.Background(), []string{"--server", srv.URL, "--history", "--runs", "5", "job_1_0001"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `Recurring job "etl <date>"`) || !strings.Contains(out.String(), "no earlier runs") {
		t.Errorf("history report:\n%s", out.String())
	}
	want := []string{"/api/v1/waste?by=queue&from=-48h&queue=etl", "/api/v1/jobs/job_1_0001/history?runs=5"}
	if strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Errorf("asked %v, want %v", asked, want)
	}
	if err := reportCmd(context.Background(), []string{"--server", srv.URL, "--waste", "job_1_0001"}, io.Discard, io.Discard); err == nil {
		t.Error("--waste with a job id accepted")
	}
}

// TestReportAttemptProfile: `taskscope report JOB ATTEMPT` names the
// hottest frames of the attempt's latest profile with stacks, and what a
// straggler did more than its sibling.
func TestReportAttemptProfile(t *testing.T) {
	const att = "/api/v1/jobs/job_1_0001/attempts/attempt_1_0001_m_000000_0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case att:
			json.NewEncoder(w).Encode(store.AttemptDetail{Attempt: store.Attempt{AttemptID: "attempt_1_0001_m_000000_0", JobID: "job_1_0001", State: "running"}})
		case att + "/profiles":
			json.NewEncoder(w).Encode(map[string]any{"profiles": []store.ProfileInfo{
				{ProfileRequest: store.ProfileRequest{ID: "p2"}, Status: store.ProfileRequested},
				{ProfileRequest: store.ProfileRequest{ID: "p1", Trigger: store.TriggerStraggler}, Status: "complete", Dumps: 100}}})
		case att + "/profiles/p1":
			json.NewEncoder(w).Encode(report.ProfileData{Profile: store.ProfileInfo{ProfileRequest: store.ProfileRequest{ID: "p1", Trigger: store.TriggerStraggler},
				Status: "complete", Dumps: 100, Start: 1000, End: 21000, PausedMs: 150},
				Hottest: map[string][]flame.Frame{"cpu": {{Name: "taskscope.sim.Work.burnUntil", Thread: "task", SelfNs: 12e9, Share: 0.8}},
					"wait": {{Name: "taskscope.sim.Work.awaitLock", Thread: "task", SelfNs: 6e9, Share: 0.6}}},
				Baseline: &store.ProfileInfo{ProfileRequest: store.ProfileRequest{AttemptID: "attempt_1_0001_m_000001_0"}, Status: "complete"},
				More:     map[string][]flame.Frame{"wait": {{Name: "taskscope.sim.Work.readInput", Thread: "task", SelfNs: 4e9, Share: 0.4}}}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := reportCmd(context.Background(), []string{"--server", srv.URL, "job_1_0001", "attempt_1_0001_m_000000_0"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Where the time went: profile p1 (complete), 100 thread dumps over 20.0s", "taken on its own (straggler)",
		"1 other profile(s)", "taskscope.sim.Work.burnUntil  task", "12.0s", "taskscope.sim.Work.awaitLock",
		"Against its sibling attempt_1_0001_m_000001_0", "More waiting than the sibling", "taskscope.sim.Work.readInput", "More on a CPU than the sibling: none"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, out.String())
		}
	}
}
