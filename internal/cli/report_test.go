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
