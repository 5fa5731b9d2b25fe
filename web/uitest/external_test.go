package uitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// TestExternalServer screenshots the pages of a running server, for people
// looking at the UI with their own data (taskscope demo, loadgen):
//
//	TASKSCOPE_UI_URL=http://127.0.0.1:8080 go test -run TestExternalServer ./web/uitest
//
// It visits the newest job of each framework, one attempt of each, and the
// hosts. Skipped without TASKSCOPE_UI_URL.
func TestExternalServer(t *testing.T) {
	base := os.Getenv("TASKSCOPE_UI_URL")
	if base == "" {
		t.Skip("TASKSCOPE_UI_URL is not set")
	}
	var page store.JobPage
	getJSON(t, base+"/api/v1/jobs?limit=200", &page)
	tb := newTab(t, base)
	tb.open("/jobs", `[data-table=jobs] .vt-row a`)
	tb.shot("ext-jobs")
	seen := map[string]bool{}
	for _, j := range page.Jobs {
		kind := j.Framework + fmt.Sprint(j.ByType["reduce"] > 0)
		if seen[kind] || j.State != store.StateFinished {
			continue
		}
		seen[kind] = true
		tb.open("/jobs/"+j.JobID, `[data-table=attempts] .vt-row a`)
		tb.waitJS("charts", chartsSettled(8), 30*time.Second)
		tb.chartsPainted(10 * time.Second)
		tb.shot("ext-job-" + kind + "-" + j.JobID)
		var d store.JobDetail
		getJSON(t, base+"/api/v1/jobs/"+j.JobID, &d)
		best := ""
		for _, a := range d.AttemptList {
			if a.Type != "am" && (best == "" || a.Processes > 2) {
				best = a.AttemptID
			}
		}
		if best != "" {
			tb.open("/jobs/"+j.JobID+"/attempts/"+best, `[data-section=processes] td.cmd`)
			tb.waitJS("charts", chartsSettled(7), 30*time.Second)
			tb.chartsPainted(10 * time.Second)
			tb.shot("ext-attempt-" + kind + "-" + best)
		}
	}
	tb.open("/hosts", `[data-table=hosts] .vt-row a`)
	tb.shot("ext-hosts")
	tb.click(`[data-table=hosts] .vt-row a`, `[data-table=host-attempts]`)
	tb.waitJS("host timeline", `document.querySelector('[data-chart$="-timeline"] [data-drawn], [data-chart$="-timeline"][data-empty]')`, 30*time.Second)
	tb.chartsPainted(10 * time.Second)
	tb.shot("ext-host")
	tb.checkClean("external server")
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
