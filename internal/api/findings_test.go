package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/store"
)

// analyseAll stores an analysis of every job of the fixture (as the
// background analyser does): it returns the stored worst severity by job.
func analyseAll(t *testing.T, f *fixture) map[string]store.Severity {
	t.Helper()
	ctx := context.Background()
	an := analysis.New(f.st)
	page, err := f.st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	worst := map[string]store.Severity{}
	for _, j := range page.Jobs {
		r, err := an.Report(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		var fs []store.StoredFinding
		for _, x := range r.Findings {
			b, _ := json.Marshal(x)
			fs = append(fs, store.StoredFinding{Heuristic: x.Heuristic, Severity: x.Severity, Body: b})
		}
		err = f.st.PutAnalysis(ctx, &store.Analysis{JobID: j.JobID, Name: j.Name, User: j.User, Queue: j.Queue, Start: j.Start,
			Worst: r.Worst, Findings: fs,
			AnalysisStamp: store.AnalysisStamp{Evaluated: store.Time(now.UnixMilli()), Version: "test", Mark: analysis.Mark(&j),
				LastSeen: j.LastSeen, Ended: j.State == store.StateFinished}})
		if err != nil {
			t.Fatal(err)
		}
		worst[j.JobID] = r.Worst
	}
	return worst
}

// TestJobsBySeverity: the jobs list carries each job's worst severity and
// heuristics found, selects by min_severity and heuristic, sorts by
// severity and counts by severity; bad parameters are 400s naming them.
func TestJobsBySeverity(t *testing.T) {
	f := newFixture(t)
	var page struct {
		Jobs []struct {
			JobID      string   `json:"job_id"`
			Worst      *string  `json:"worst_severity"`
			Heuristics []string `json:"heuristics"`
		} `json:"jobs"`
		Total  int            `json:"total"`
		Counts map[string]int `json:"severity_counts"`
	}
	if code, body := f.get(t, "/api/v1/jobs?limit=1000", &page); code != 200 || !strings.Contains(body, `"worst_severity":null`) {
		t.Fatalf("before any analysis: %d %s", code, body)
	}
	if page.Counts[store.NotAnalysed] != page.Total || page.Total == 0 {
		t.Fatalf("before any analysis: counts %v of %d jobs", page.Counts, page.Total)
	}
	worst := analyseAll(t, f)
	all := page.Total
	for _, min := range store.Severities {
		f.get(t, "/api/v1/jobs?limit=1000&min_severity="+min.String(), &page)
		var got, want []string
		for _, j := range page.Jobs {
			got = append(got, j.JobID)
			if j.Worst == nil {
				t.Errorf("min_severity=%s: %s has no worst_severity", min, j.JobID)
			}
		}
		for id, w := range worst {
			if w >= min {
				want = append(want, id)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if fmt.Sprint(got) != fmt.Sprint(want) || page.Total != len(want) {
			t.Errorf("min_severity=%s: %v (total %d), stored say %v", min, got, page.Total, want)
		}
		n := 0
		for _, s := range store.Severities {
			if s >= min {
				n += page.Counts[s.String()]
			}
		}
		if n != page.Total || page.Counts[store.NotAnalysed] != 0 {
			t.Errorf("min_severity=%s: counts %v, total %d", min, page.Counts, page.Total)
		}
	}
	f.get(t, "/api/v1/jobs?limit=1000&sort=severity", &page)
	rank := func(s *string) int {
		if s == nil {
			return -1
		}
		v, err := store.ParseSeverity(*s)
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	if page.Total != all || len(page.Jobs) != all {
		t.Errorf("sort=severity: %d of %d jobs", len(page.Jobs), all)
	}
	for i := 1; i < len(page.Jobs); i++ {
		if rank(page.Jobs[i].Worst) > rank(page.Jobs[i-1].Worst) {
			t.Errorf("sort=severity: %s (%v) after %s (%v)", page.Jobs[i].JobID, *page.Jobs[i].Worst, page.Jobs[i-1].JobID, page.Jobs[i-1].Worst)
		}
	}
	// A heuristic found: the jobs that name it.
	var h string
	for _, j := range page.Jobs {
		if len(j.Heuristics) > 0 {
			h = j.Heuristics[0]
			break
		}
	}
	if h == "" {
		t.Fatal("no job has a heuristic found: the data does not cover heuristic=")
	}
	f.get(t, "/api/v1/jobs?limit=1000&heuristic="+h, &page)
	if page.Total == 0 {
		t.Errorf("heuristic=%s: no job", h)
	}
	for _, j := range page.Jobs {
		if !strings.Contains(" "+strings.Join(j.Heuristics, " ")+" ", " "+h+" ") {
			t.Errorf("heuristic=%s: %s has %v", h, j.JobID, j.Heuristics)
		}
	}
	var job struct {
		Worst *string `json:"worst_severity"`
	}
	if f.get(t, "/api/v1/jobs/"+jobWC, &job); job.Worst == nil || *job.Worst != worst[jobWC].String() {
		t.Errorf("job %s: worst_severity %v, stored %s", jobWC, job.Worst, worst[jobWC])
	}
	for path, want := range map[string]string{
		"/api/v1/jobs?min_severity=bad":    "min_severity",
		"/api/v1/jobs?heuristic=no_such":   "no heuristic is named",
		"/api/v1/jobs?sort=name":           "sort must be",
		"/api/v1/findings?min_severity=":   "",
		"/api/v1/findings?min_severity=hi": "min_severity",
		"/api/v1/findings?limit=0":         "limit must be an integer from 1 to 1000",
		"/api/v1/findings?limit=1001":      "limit must be an integer from 1 to 1000",
		"/api/v1/findings?heuristic=x":     "no heuristic is named",
		"/api/v1/findings?from=yesterday":  "from:",
	} {
		code, body := f.get(t, path, nil)
		if want == "" {
			if code != 200 {
				t.Errorf("%s: %d %s", path, code, body)
			}
			continue
		}
		if code != 400 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s, want 400 with %q", path, code, body, want)
		}
	}
}

// TestFindingsAcrossJobs: GET /api/v1/findings lists the stored findings
// of every job, with their jobs, paged, selected as asked; a reader sees
// those of the jobs they see only.
func TestFindingsAcrossJobs(t *testing.T) {
	f := newFixture(t)
	worst := analyseAll(t, f)
	type row struct {
		JobID      string   `json:"job_id"`
		User       string   `json:"user"`
		Queue      string   `json:"queue"`
		Heuristic  string   `json:"heuristic"`
		Severity   string   `json:"severity"`
		AttemptIDs []string `json:"attempt_ids"`
		Message    string   `json:"message"`
		Rec        string   `json:"recommendation"`
	}
	var page struct {
		Findings []row `json:"findings"`
		Total    int   `json:"total"`
	}
	if code, body := f.get(t, "/api/v1/findings?limit=1000", &page); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	all := page.Findings
	if len(all) == 0 || page.Total != len(all) {
		t.Fatalf("%d findings, total %d", len(all), page.Total)
	}
	seen := map[string]store.Severity{}
	for _, r := range all {
		s, err := store.ParseSeverity(r.Severity)
		if err != nil || r.JobID == "" || r.Heuristic == "" || r.Message == "" || r.Rec == "" || r.AttemptIDs == nil {
			t.Errorf("finding %+v: %v", r, err)
		}
		seen[r.JobID] = max(seen[r.JobID], s)
	}
	for id, s := range seen {
		if worst[id] != s {
			t.Errorf("%s: worst finding listed %s, stored %s", id, s, worst[id])
		}
	}
	page.Findings = nil // (all keeps the slice decoded above)
	f.get(t, "/api/v1/findings?min_severity=moderate&limit=2&offset=1", &page)
	var want []row
	for _, r := range all {
		if s, _ := store.ParseSeverity(r.Severity); s >= store.SeverityModerate {
			want = append(want, r)
		}
	}
	if len(want) < 3 || page.Total != len(want) || fmt.Sprint(page.Findings) != fmt.Sprint(want[1:3]) {
		t.Errorf("moderate or worse, the second page of 2:\n%v (total %d)\nwant\n%v (of %d)", page.Findings, page.Total, want[1:min(3, len(want))], len(want))
	}
	page.Findings = nil
	f.get(t, "/api/v1/findings?user=zoe&limit=1000", &page)
	for _, r := range page.Findings {
		if r.User != "zoe" {
			t.Errorf("user=zoe: %+v", r)
		}
	}

	// Behind an SSO proxy: zoe sees her own job's findings.
	proxies, _ := auth.ParseProxies("127.0.0.1")
	authn := auth.New(auth.Options{UserHeader: "X-Forwarded-User", Proxies: proxies})
	a := New(f.st, analysis.New(f.st), NewLive(10*time.Millisecond, LiveOptions{}), authn)
	a.now = func() time.Time { return now }
	mux := http.NewServeMux()
	a.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, user := range []string{"zoe", "nobody"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/findings?limit=1000", nil)
		req.Header.Set("X-Forwarded-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page.Findings, page.Total = nil, -1
		if err := json.Unmarshal(b, &page); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", user, resp.StatusCode, b)
		}
		for _, r := range page.Findings {
			if r.User != user {
				t.Errorf("%s sees a finding of %s's job %s", user, r.User, r.JobID)
			}
		}
		if (user == "zoe") != (page.Total > 0) || page.Total != len(page.Findings) {
			t.Errorf("%s sees %d findings (total %d)", user, len(page.Findings), page.Total)
		}
	}
	if _, err := f.st.Analysis(context.Background(), "job_unknown"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("analysis of an unknown job: %v", err)
	}
}
