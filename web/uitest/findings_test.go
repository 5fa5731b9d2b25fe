package uitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// apiJobs is what GET /api/v1/jobs answers, as far as these tests read it.
type apiJobs struct {
	Jobs []struct {
		JobID      string   `json:"job_id"`
		State      string   `json:"state"`
		Worst      *string  `json:"worst_severity"`
		Heuristics []string `json:"heuristics"`
	} `json:"jobs"`
	Total  int            `json:"total"`
	Counts map[string]int `json:"severity_counts"`
}

// getJSON decodes the answer of an API path into v.
func (e *env) getJSON(path string, v any) {
	e.t.Helper()
	resp, err := http.Get(e.url + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
}

// analysed waits until the background analyser has stored an analysis of
// every job the jobs list selects with query (no page asks for one), and
// returns them.
func (e *env) analysed(query string, timeout time.Duration) apiJobs {
	e.t.Helper()
	var p apiJobs
	if !testsrv.Poll(timeout, func() bool {
		p = apiJobs{}
		e.getJSON("/api/v1/jobs?limit=1000&"+query, &p)
		return p.Total > 0 && p.Counts["not_analysed"] == 0
	}) {
		e.t.Fatalf("jobs %s: not all analysed after %s: %d jobs, counts %v", query, timeout, p.Total, p.Counts)
	}
	return p
}

// startAnalysed starts a server on minutes of a cluster of nodes
// (loadgen's), the hostile job, the recurring job (it returns tonight's
// run, which regressed) and what more adds, and waits until the
// background analysis has stored an analysis of every job that finished
// in the last 3 hours.
func startAnalysed(t *testing.T, nodes int, more func(e *env)) (e *env, tonight string) {
	t.Helper()
	e = startServerAfter(t, func(e *env) {
		e.loadgenData(nodes, time.Duration(nodes)*time.Minute)
		e.hostileData()
		tonight = e.analysisData()
		if more != nil {
			more(e)
		}
	})
	e.analysed("state=finished&from=-3h", 90*time.Second)
	return e, tonight
}

// worstOf is the jobs' worst severities by id ("" while not analysed).
func worstOf(p apiJobs) map[string]string {
	m := map[string]string{}
	for _, j := range p.Jobs {
		m[j.JobID] = ""
		if j.Worst != nil {
			m[j.JobID] = *j.Worst
		}
	}
	return m
}

// shownSeverities is a JS expression: the jobs table's rows as job id ->
// the severity its cell shows ("" when not analysed).
const shownSeverities = `Object.fromEntries([...document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])')].map(r =>
	[r.querySelector('.vt-td').textContent, r.querySelector('.vt-td[data-severity]').dataset.severity]))`

// TestJobsBySeverity: the jobs list shows every finished job's stored
// worst severity with no job page opened; a severity chip and the
// heuristic filter select exactly the jobs the API says, in a URL that
// opens the same view; the counts by severity are the API's.
func TestJobsBySeverity(t *testing.T) {
	e, tonight := startAnalysed(t, 4, nil)
	// The background analysis, not a page, analysed them.
	window := "state=finished&from=-3h"
	p := e.analysed(window, 10*time.Second)
	want := worstOf(p)
	if want[tonight] == "" || want[tonight] == "none" {
		t.Fatalf("tonight's run of the recurring job: worst %q, want a finding", want[tonight])
	}
	tb := newTab(t, e.url)
	tb.open("/jobs?"+window, `[data-table=jobs] .vt-row a`)
	tb.waitJS("every finished job", fmt.Sprintf(`document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])').length === %d`, len(want)), 10*time.Second)
	got := eval[map[string]string](tb, shownSeverities)
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s shows severity %q, the store says %q", id, got[id], w)
		}
	}
	// The chips count the jobs by severity, as the API does.
	chips := eval[map[string]string](tb, `Object.fromEntries([...document.querySelectorAll('[data-section=severity-counts] [data-severity]')].map(c => [c.dataset.severity, c.textContent]))`)
	for sev, n := range p.Counts {
		if sev == "not_analysed" {
			if _, ok := chips[sev]; ok {
				t.Errorf("a chip says %q: every job is analysed", chips[sev])
			}
			continue
		}
		if chips[sev] != fmt.Sprintf("%s %d", sev, n) {
			t.Errorf("the %s chip says %q, the API counts %d", sev, chips[sev], n)
		}
	}
	tb.shot("30-jobs-by-severity")
	// A chip filters: the worst severity found, and worse.
	worst := want[tonight]
	for _, w := range want {
		if sevRank(w) > sevRank(worst) {
			worst = w
		}
	}
	tb.click(`[data-section=severity-counts] button[data-severity=`+worst+`]`, `[data-section=severity-counts] button.on[data-severity=`+worst+`]`)
	tb.waitJS("the URL has the filter", `new URLSearchParams(location.search).get('min_severity') === `+jsString(worst), 10*time.Second)
	var sel apiJobs
	e.getJSON("/api/v1/jobs?limit=1000&"+window+"&min_severity="+worst, &sel)
	if sel.Total == 0 {
		t.Fatalf("min_severity=%s: no job", worst)
	}
	ids := func(p apiJobs) []string {
		var out []string
		for _, j := range p.Jobs {
			out = append(out, j.JobID)
		}
		slices.Sort(out)
		return out
	}
	shownIDs := `[...document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden]) .vt-td:first-child')].map(c => c.textContent).sort().join(',')`
	tb.waitJS("the jobs of severity "+worst+" or worse", shownIDs+` === `+jsString(strings.Join(ids(sel), ",")), 10*time.Second)
	// Shareable: the URL opens the same view.
	u := eval[string](tb, `location.pathname + location.search`)
	tb.open(u, `[data-table=jobs] .vt-row a`)
	tb.waitJS("the shared view", shownIDs+` === `+jsString(strings.Join(ids(sel), ","))+` && document.querySelector('select[data-f=min_severity]').value === `+jsString(worst), 10*time.Second)
	// The heuristic filter: the recurring job's regressed run alone.
	tb.open("/jobs?"+window, `[data-table=jobs] .vt-row a`)
	tb.waitJS("the heuristics listed", `[...document.querySelectorAll('select[data-f=heuristic] option')].some(o => o.value === 'recurring')`, 10*time.Second)
	eval[bool](tb, `(() => { const s = document.querySelector('select[data-f=heuristic]'); s.value = 'recurring'; return s.dispatchEvent(new Event('change')); })()`)
	var rec apiJobs
	e.getJSON("/api/v1/jobs?limit=1000&"+window+"&heuristic=recurring", &rec)
	if !slices.Contains(ids(rec), tonight) {
		t.Errorf("heuristic=recurring: %v, want %s among them", ids(rec), tonight)
	}
	tb.waitJS("the recurring job's regressed runs", shownIDs+` === `+jsString(strings.Join(ids(rec), ","))+` && new URLSearchParams(location.search).get('heuristic') === 'recurring'`, 10*time.Second)
	// Worst first, across the whole list.
	tb.open("/jobs?"+window+"&sort=severity", `[data-table=jobs] .vt-row a`)
	order := eval[[]string](tb, `[...document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])')].sort((a, b) => parseFloat(a.style.transform.slice(11)) - parseFloat(b.style.transform.slice(11))).map(r => r.querySelector('.vt-td[data-severity]').dataset.severity)`)
	for i := 1; i < len(order); i++ {
		if sevRank(order[i]) > sevRank(order[i-1]) {
			t.Errorf("sort=severity: %q after %q (%v)", order[i], order[i-1], order)
			break
		}
	}
	if n := eval[int](tb, `document.querySelectorAll('#app i, #app script, #app img, [data-table=jobs] b').length`); n != 0 {
		t.Errorf("%d elements made of the data's markup", n)
	}
	if !eval[bool](tb, `[...document.querySelectorAll('[data-table=jobs] .vt-td')].some(c => c.textContent.startsWith('<b>bold</b> "name" <script>'))`) {
		t.Error("the hostile job's name is not shown as text")
	}
	tb.checkClean("jobs by severity")
}

// TestOverviewTrouble: the overview lists the running jobs worst finding
// first, with their heuristics as links; the recurring job's regressed
// run with its measures and its history; each queue's jobs by severity,
// linking to them.
func TestOverviewTrouble(t *testing.T) {
	e, tonight := startAnalysed(t, 4, nil)
	running := e.analysed("state=running&sort=severity", 90*time.Second)
	tb := newTab(t, e.url)
	tb.open("/", `[data-table=regressed] tbody tr`)
	tb.waitJS("running jobs", `document.querySelectorAll('[data-table=running] tbody tr').length > 0`, 15*time.Second)
	rows := eval[[][2]string](tb, `[...document.querySelectorAll('[data-table=running] tbody tr')].map(r => [r.dataset.job, r.dataset.severity])`)
	for i := 1; i < len(rows); i++ {
		if sevRank(rows[i][1]) > sevRank(rows[i-1][1]) {
			t.Errorf("the running jobs: %s (%q) after %s (%q)", rows[i][0], rows[i][1], rows[i-1][0], rows[i-1][1])
		}
	}
	// The same jobs, in the API's order (jobs that started or ended since are
	// the only difference a refresh can make).
	bySev := worstOf(running)
	for _, r := range rows {
		if w, ok := bySev[r[0]]; ok && w != r[1] {
			t.Errorf("running job %s shows %q, the store says %q", r[0], r[1], w)
		}
	}
	t.Logf("running jobs by severity: %v", rows)
	// Heuristics are links to the running jobs with such a finding.
	if h := eval[string](tb, `document.querySelector('[data-table=running] a.heur')?.getAttribute('href') ?? ''`); h != "" {
		q, _ := url.ParseQuery(strings.TrimPrefix(h, "/jobs?"))
		if q.Get("state") != "running" || q.Get("heuristic") == "" {
			t.Errorf("a heuristic's link: %s", h)
		}
	}
	// The recurring job's regressed run.
	reg := eval[string](tb, `document.querySelector('[data-table=regressed] tr[data-job=`+jsString(tonight)+`]')?.textContent ?? ''`)
	if !strings.Contains(reg, "nightly-report") || !strings.Contains(reg, "duration") || !strings.Contains(reg, "×") {
		t.Errorf("the regressed run of the recurring job: %q", reg)
	}
	// The queue of the analysis' job counts it by its severity.
	var d apiJobs
	e.getJSON("/api/v1/jobs?limit=1&name="+tonight, &d)
	if len(d.Jobs) != 1 || d.Jobs[0].Worst == nil {
		t.Fatalf("job %s: %+v", tonight, d)
	}
	if w := *d.Jobs[0].Worst; sevRank(w) >= 2 {
		link := eval[string](tb, `document.querySelector('[data-table=queues] tr[data-key=reports] a[data-severity=`+jsString(w)+`]')?.getAttribute('href') ?? ''`)
		q, _ := url.ParseQuery(strings.TrimPrefix(link, "/jobs?"))
		if q.Get("queue") != "reports" || q.Get("min_severity") != w {
			t.Errorf("queue reports: the %s jobs' link is %q", w, link)
		}
	}
	tb.shot("21-overview-trouble")
	tb.checkClean("overview")
	tb.click(`[data-table=regressed] tr[data-job=`+jsString(tonight)+`] a[href$="/history"]`, `[data-table=runs] tbody tr`)
	tb.checkClean("the regressed job's history")
}

// sevRank orders severities as the UI does: not analysed lowest.
func sevRank(s string) int {
	return slices.Index([]string{"none", "low", "moderate", "severe", "critical"}, s)
}
