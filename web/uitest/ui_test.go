package uitest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestBrowse walks jobs -> job -> attempt -> process -> host by clicking,
// over loadgen's cluster and a job with hostile command lines, and checks
// that every page renders its data and charts, that the hostile text stays
// text, that downloads work, and that nothing logs an error.
func TestBrowse(t *testing.T) {
	e := startServer(t)
	e.loadgenData(6, 12*time.Minute)
	e.hostileData()
	tb := newTab(t, e.url)

	// Jobs.
	tb.open("/jobs", `[data-table=jobs] .vt-row a`)
	n := eval[int](tb, `document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])').length`)
	if n < 5 {
		t.Errorf("jobs page shows %d rows", n)
	}
	tb.shot("01-jobs")
	tb.checkClean("jobs page")

	// Filter by state on the server: the filter goes into the URL.
	tb.do("state filter", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('select[data-f=state]'); s.value = 'finished'; s.dispatchEvent(new Event('change')); })()`))
	tb.waitJS("finished only", `location.search === '?state=finished' && [...document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden]) .badge[class*=state-]')].every(b => b.textContent === 'finished')`, 10*time.Second)
	tb.do("state filter off", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('select[data-f=state]'); s.value = ''; s.dispatchEvent(new Event('change')); })()`))
	tb.waitJS("all again", `location.search === '' && document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])').length > 5`, 10*time.Second)

	// Filter by name on the server, then open the hostile job by clicking.
	tb.do("filter", chromedp.SendKeys(chromedp.CSS(`input[data-f=name]`), "bold"))
	tb.waitJS("filtered", `document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])').length === 1`, 10*time.Second)
	tb.click(`[data-table=jobs] .vt-row a[href="/jobs/`+hostileJob+`"]`, `[data-table=attempts] .vt-row a`)
	tb.waitJS("job charts", chartsSettled(8), 15*time.Second)
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("job page: chart %s is empty (%d pixels)", name, px)
		}
	}
	if got := eval[string](tb, `document.querySelector('.page-head .sub').textContent`); !strings.Contains(got, "<script>alert(3)</script>") {
		t.Errorf("job name shown as %q", got)
	}
	// The UI makes <b> elements of its own (a finding's numbers): look for
	// the data's markup, <b>bold</b>, <i> of the user name, <script>, <img>.
	if got := eval[string](tb, `[...document.querySelectorAll('#app script, #app img, #app b, #app i')].filter(e => e.tagName !== 'B' || e.textContent === 'bold' || e.parentElement.closest('.page-head')).map(e => e.outerHTML).join(' ')`); got != "" {
		t.Errorf("markup from the data became elements on the job page: %s", got)
	}
	if eval[int](tb, `document.querySelectorAll('[data-section=findings] li.finding').length`) == 0 {
		t.Log("no findings for the hostile job")
	}
	tb.shot("02-job")
	// How each attempt ended: outcome badges, exit codes, the retry linked
	// to the attempt it repeats.
	outcomes := eval[string](tb, `[...document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden]) .badge[class*=outcome-]')].map(e => e.textContent).sort().join(',')`)
	if outcomes != "failed,killed: memory,succeeded,succeeded,succeeded,succeeded,succeeded" {
		t.Errorf("outcomes in the attempts table: %s", outcomes)
	}
	if got := eval[string](tb, `[...document.querySelectorAll('[data-outcomes] th')].map(e => e.textContent).join(',')`); got != "type,succeeded,failed,killed: memory,all" {
		t.Errorf("the summary's outcome table heads: %s", got)
	}
	if got := eval[string](tb, `[...document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden])')].filter(r => r.textContent.includes('`+hostileRetry+`')).map(r => [...r.querySelectorAll('a[href$="/attempts/`+hostileAtt+`"]')].map(a => a.closest('.vt-td').textContent).join('')).join('')`); got != "retry of _0" {
		t.Errorf("the retry's repeats cell: %q", got)
	}
	if got := eval[string](tb, `[...document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden])')].filter(r => r.textContent.includes('`+hostileAtt+`')).map(r => r.textContent).join('')`); !strings.Contains(got, "-104") {
		t.Errorf("the memory-killed attempt's row shows no exit code -104: %q", got)
	}
	// A tooltip over the timeline names the attempt (built as text, not
	// HTML), and how it ended.
	tb.hover(`[data-chart$="-timeline"] .chart-body`, 0.3, 0.5)
	tb.waitJS("timeline tooltip", `[...document.querySelectorAll('.tip-title')].some(e => e.offsetParent && e.textContent.startsWith('attempt_'))`, 5*time.Second)
	if !eval[bool](tb, `[...document.querySelectorAll('.tip')].some(e => e.offsetParent && e.textContent.includes('outcome'))`) {
		t.Error("the timeline's tooltip does not say how the attempt ended")
	}
	tb.viewShot("02b-job-tooltip")
	tb.checkClean("job page")

	// Downloads of a chart: PNG and SVG.
	png := tb.download(`[data-chart$="-cpu"] button[data-dl=png]`)
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 2000 {
		t.Errorf("PNG download: %d bytes, starts %q", len(png), png[:min(8, len(png))])
	}
	svg := tb.download(`[data-chart$="-timeline"] button[data-dl=svg]`)
	if !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("<rect")) || bytes.Contains(svg, []byte("<script")) {
		t.Errorf("SVG download: %d bytes: %.200s", len(svg), svg)
	}
	// The timeline is coloured by outcome, with its legend; or by type.
	for _, want := range []string{"succeeded", "failed", "killed_memory", "#3a9d5d", "#c8423b", "#8a5cc7"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("the timeline by outcome lacks %s", want)
		}
	}
	tb.do("colour by type", chromedp.SetValue(`[data-chart$="-timeline"] select[data-timeline-color]`, "type"))
	tb.do("change", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-chart$="-timeline"] select[data-timeline-color]').dispatchEvent(new Event('change'))`))
	if svg := tb.download(`[data-chart$="-timeline"] button[data-dl=svg]`); !bytes.Contains(svg, []byte(">map<")) || bytes.Contains(svg, []byte("succeeded")) {
		t.Errorf("the timeline by type: %.300s", svg)
	}
	tb.checkClean("downloads")

	// Attempt, by clicking its row.
	tb.click(`[data-table=attempts] a[href$="/attempts/`+hostileAtt+`"]`, `[data-section=processes] td.cmd`)
	tb.waitJS("attempt charts", chartsSettled(7), 15*time.Second)
	cmds := eval[[]string](tb, `[...document.querySelectorAll('[data-section=processes] td.cmd')].map(e => e.textContent)`)
	found := false
	for _, c := range cmds {
		if c == hostileCmd {
			found = true
		}
	}
	if !found {
		t.Errorf("the hostile command line is not shown as text; shown: %q", cmds)
	}
	if eval[int](tb, `document.querySelectorAll('#app script, #app img, #app .diag-text b').length`) != 0 {
		t.Error("markup from a command line or diagnostics became elements on the attempt page")
	}
	if got := eval[string](tb, `document.querySelector('[data-diagnostics] pre').textContent`); got != hostileDiag {
		t.Errorf("the NodeManager's diagnostics shown as %q", got)
	}
	if got := eval[string](tb, `document.querySelector('[data-outcome]').textContent`); got != "killed: memory exit -104" {
		t.Errorf("the attempt's outcome shown as %q", got)
	}
	if got := eval[string](tb, `[...document.querySelectorAll('[data-section=processes] .esc')].map(e => e.textContent).join('')`); got != `\xff\xfe` {
		t.Errorf("escaped bytes marked as %q", got)
	}
	roles := eval[string](tb, `[...document.querySelectorAll('[data-section=processes] .badge')].map(e => e.textContent).join(',')`)
	for _, r := range []string{"wrapper", "task-jvm", "streaming"} {
		if !strings.Contains(roles, r) {
			t.Errorf("role %s missing from the process tree: %s", r, roles)
		}
	}
	if eval[int](tb, `document.querySelectorAll('[data-section=processes] td.pid.child').length`) != 2 {
		t.Errorf("the process tree is not nested")
	}
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("attempt page: chart %s is empty (%d pixels)", name, px)
		}
	}
	// The memory limit is drawn: ECharts keeps it in the option.
	if !eval[bool](tb, `document.querySelector('[data-chart$="-rss"] .chart-note').textContent.includes('memory.mb')`) {
		t.Error("no memory limit note on the RSS chart")
	}
	if eval[int](tb, `document.querySelectorAll('[data-section=events] tr[data-kind=process_start]').length`) == 0 {
		t.Error("no start events on the attempt page")
	}
	tb.shot("03-attempt")
	tb.hover(`[data-chart$="-cpu"] .chart-body`, 0.5, 0.6)
	tb.waitJS("cpu tooltip", `[...document.querySelectorAll('.tip-row')].some(e => e.offsetParent && e.textContent.includes('streaming 4002'))`, 5*time.Second)
	tb.viewShot("03b-attempt-tooltip")
	tb.checkClean("attempt page")

	// Process, by clicking the streaming child's pid.
	tb.click(`[data-section=processes] tr:last-child td.pid a`, `code.cmd`)
	tb.waitJS("process charts", chartsSettled(4), 15*time.Second)
	if got := eval[string](tb, `document.querySelector('code.cmd').textContent`); got != hostileCmd {
		t.Errorf("process page command line %q", got)
	}
	tb.shot("04-process")
	tb.checkClean("process page")

	// Host: its timeline and its orphan.
	tb.do("back to attempt", chromedp.NavigateBack(), chromedp.WaitVisible(chromedp.CSS(`[data-section=processes] td.cmd`)))
	tb.click(`dl.kv a[href^="/hosts/"]`, `[data-table=host-attempts] .vt-row`)
	tb.waitJS("host timeline", `document.querySelector('[data-chart$="-timeline"] [data-drawn]')`, 15*time.Second)
	if eval[int](tb, `document.querySelectorAll('[data-section=orphans] tr[data-kind=orphan]').length`) != 1 {
		t.Error("the orphan is not listed on the host page")
	}
	if eval[int](tb, `document.querySelectorAll('#app script, #app img').length`) != 0 {
		t.Error("markup from an event became elements on the host page")
	}
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("host page: chart %s is empty (%d pixels)", name, px)
		}
	}
	tb.shot("05-host")
	tb.checkClean("host page")

	// An unknown job: the page says so (the 404 of the API is expected).
	tb.open("/jobs/job_1700000000000_9999", `.card.error`)
	if got := eval[string](tb, `document.querySelector('.card.error').textContent`); !strings.Contains(got, "not found") {
		t.Errorf("unknown job page says %q", got)
	}
	tb.mu.Lock()
	tb.problems = nil
	tb.mu.Unlock()

	// Hosts, and a loadgen job with its streaming children.
	tb.click(`nav a[data-nav=hosts]`, `[data-table=hosts] .vt-row a`)
	if n := eval[int](tb, `document.querySelectorAll('[data-table=hosts] .vt-row:not([hidden])').length`); n != 7 {
		t.Errorf("hosts page lists %d hosts, want 7", n)
	}
	tb.shot("06-hosts")
	tb.click(`nav a[data-nav=jobs]`, `[data-table=jobs] .vt-row a`)
	tb.click(`[data-table=jobs] .vt-row:not([hidden]) a`, `[data-table=attempts] .vt-row a`)
	tb.waitJS("loadgen job charts", chartsSettled(8), 15*time.Second)
	tb.chartsPainted(10 * time.Second)
	tb.shot("07-job-loadgen")
	// Sort by duration, longest first, and open that attempt.
	tb.do("sort", chromedp.Click(chromedp.CSS(`[data-table=attempts] .vt-th[data-col=dur]`)))
	tb.click(`[data-table=attempts] .vt-row:not([hidden]) a`, `[data-section=processes] td.cmd`)
	tb.waitJS("loadgen attempt charts", chartsSettled(7), 15*time.Second)
	tb.chartsPainted(10 * time.Second)
	tb.shot("08-attempt-loadgen")
	tb.checkClean("loadgen pages")

	// An attempt id typed into the jobs page's search opens it.
	tb.click(`nav a[data-nav=jobs]`, `[data-table=jobs] .vt-row a`)
	tb.do("type an id", chromedp.SendKeys(chromedp.CSS(`input[data-f=name]`), hostileAtt+"\r"))
	tb.waitJS("attempt by id", `location.pathname === '/jobs/`+hostileJob+`/attempts/`+hostileAtt+`' && document.querySelector('[data-section=processes] td.cmd')`, 10*time.Second)
	tb.checkClean("id search")
}

// TestLive: a running job's figures change on the open jobs and job pages
// as batches arrive, without a reload.
func TestLive(t *testing.T) {
	e := startServer(t)
	const job = "job_1700000000000_0888"
	r := newRunningJob(job)
	e.post(r.next(10))
	testsrv.WaitUntil(t, "job summary", 20*time.Second, func() bool { return e.jobCPU(job) > 0 })
	tb := newTab(t, e.url)
	tb.open("/jobs", `[data-table=jobs] .vt-row a`)
	eval[bool](tb, `window.__marker = 1, true`)
	// The CPU cell of the first row, found by its column's header.
	cpuCell := `(() => { const i = [...document.querySelectorAll('[data-table=jobs] .vt-th')].findIndex((th) => th.dataset.col === 'cpu');
		return document.querySelector('[data-table=jobs] .vt-row:not([hidden])').querySelectorAll('.vt-td')[i].textContent })()`
	before := eval[string](tb, cpuCell)
	e.post(r.next(20))
	tb.waitJS("jobs page CPU changes", cpuCell+` !== `+jsString(before), 15*time.Second)
	if !eval[bool](tb, `window.__marker === 1`) {
		t.Error("the jobs page reloaded")
	}
	tb.click(`[data-table=jobs] .vt-row a`, `[data-table=attempts] .vt-row a`)
	tb.waitJS("charts", chartsSettled(8), 15*time.Second)
	fig := `document.querySelectorAll('.figs .fig-v')[2].textContent + '|' + document.querySelectorAll('.figs .fig-v')[0].textContent`
	before = eval[string](tb, fig)
	// The duration cell of the first row, found by its column's header
	// (columns come and go: outcome, exit, repeats were added before it).
	dur := `(() => { const i = [...document.querySelectorAll('[data-table=attempts] .vt-th')].findIndex((th) => th.dataset.col === 'dur');
		return document.querySelector('[data-table=attempts] .vt-row:not([hidden])').querySelectorAll('.vt-td')[i].textContent })()`
	durBefore := eval[string](tb, dur)
	tb.shot("09-live-before")
	e.post(r.next(30))
	tb.waitJS("job page figures change", fig+` !== `+jsString(before), 15*time.Second)
	tb.waitJS("attempts table changes", dur+` !== `+jsString(durBefore), 15*time.Second)
	// The job's charts fetched their new buckets only (from their last one,
	// at their width), and drew them.
	tb.waitJS("a live update's series request", `performance.getEntriesByType('resource').some((e) => /\/jobs\/[^/]+\/series\?.*&step=\d+/.test(e.name))`, 15*time.Second)
	tb.waitJS("charts", chartsSettled(8), 15*time.Second)
	if !eval[bool](tb, `window.__marker === 1`) {
		t.Error("the job page reloaded")
	}
	tb.shot("10-live-after")
	tb.checkClean("live")
}

func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
