package uitest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const bigJobID = "job_1700000000000_0777"

// firstRender opens the job page afresh and returns the time from the start
// of navigation to the first render of the attempts table, as the page
// measured it (performance.mark), and as seen from here.
func firstRender(tb *tab) (inPage, outside time.Duration) {
	tb.t.Helper()
	start := time.Now()
	tb.open("/jobs/"+bigJobID, `[data-section=attempts][data-rendered-ms] .vt-row a`)
	outside = time.Since(start)
	ms := eval[float64](tb, `performance.getEntriesByName('attempts-table-rendered')[0].startTime`)
	return time.Duration(ms * float64(time.Millisecond)), outside
}

// TestBigJob: a job page of 10,000 attempts renders its attempts table
// quickly and stays usable: a handful of DOM rows, scrolling, sorting and
// filtering work. The time to first render is reported in the log and held
// to a generous bound (15 s); BenchmarkBigJobPage measures it.
func TestBigJob(t *testing.T) {
	e := startServer(t)
	t0 := time.Now()
	e.bigJob(bigJobID, 10000, 50)
	t.Logf("ingested 10,000 attempts in %s", time.Since(t0).Round(time.Millisecond))
	if n := len(e.job(bigJobID).AttemptList); n != 10000 {
		t.Fatalf("the job has %d attempts", n)
	}
	tb := newTab(t, e.url)
	inPage, outside := firstRender(tb)
	t.Logf("10,000-attempt job page: attempts table first rendered %s after navigation start (in-page mark; %s from the test's Navigate)", inPage.Round(time.Millisecond), outside.Round(time.Millisecond))
	t.Logf("marks: %s", eval[string](tb, `performance.getEntriesByType('mark').map(m => m.name + ' ' + Math.round(m.startTime)).join('; ')`))
	t.Logf("resources: %s", eval[string](tb, `performance.getEntriesByType('resource').filter(r => r.name.includes('/api/') || r.name.includes('/assets/')).map(r => r.name.replace(location.origin, '') + ' ' + Math.round(r.startTime) + '+' + Math.round(r.duration) + 'ms').join('; ')`))
	// A bound against a page that is not windowed or waits for the
	// series, not a speed target (BenchmarkBigJobPage measures it): with
	// -race on an idle 2-core host it took 3.5-5.0 s (2026-12-07).
	if inPage > 15*time.Second {
		t.Errorf("first render took %s, more than the 15 s bound", inPage)
	}
	if got := eval[string](tb, `document.querySelector('[data-table=attempts] .vt-count').textContent`); got != "10,000 attempts" {
		t.Errorf("counter says %q", got)
	}
	rows := eval[int](tb, `document.querySelectorAll('[data-table=attempts] .vt-row').length`)
	if rows > 120 {
		t.Errorf("%d DOM rows for 10,000 attempts: the table is not windowed", rows)
	}
	tb.waitJS("charts", chartsSettled(8), 30*time.Second)
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("chart %s is empty (%d pixels)", name, px)
		}
	}
	tb.shot("11-job-10k")

	// Zooming into a time chart asks the server for that window only, with
	// the same point budget: finer buckets.
	seriesReqs := `performance.getEntriesByType('resource').filter(r => r.name.includes('/series?')).length`
	before := eval[int](tb, seriesReqs)
	step := `(() => { const r = performance.getEntriesByType('resource').filter(r => r.name.includes('/series?')); const u = new URL(r[r.length - 1].name); return Number(u.searchParams.get('to')) - Number(u.searchParams.get('from')); })()`
	span := eval[float64](tb, step)
	for i := 0; i < 4; i++ {
		tb.wheel(`[data-chart$="-cpu"] .chart-body`, -400)
	}
	tb.waitJS("zoomed series fetched", seriesReqs+` > `+fmt.Sprint(before), 30*time.Second)
	tb.waitJS("narrower window", step+` < `+fmt.Sprint(span*0.8), 30*time.Second)
	tb.viewShot("11b-job-10k-zoomed")

	// taskscope report prints what the page shows: the same findings,
	// recommendations and settings.
	// The page asks for the findings beside its first series reads, and the
	// analysis of 10,000 attempts shares the server's two cores with them:
	// with -race the answer came 64 s after it was asked on an idle
	// 2-core host (2026-12-07, 23:08 UTC; 4 series reads of 5-16 s each
	// beside it), long after the zoom above. Since 2026-12-08 the analysis
	// and the series reads take a twelfth of their CPU
	// (BenchmarkBigJobFindings, docs/scaling.md): 4 to 7 s with -race.
	tb.waitJS("findings", `document.querySelector('[data-section=findings] li.finding')`, 150*time.Second)
	t.Logf("findings: %s", eval[string](tb, `performance.getEntriesByType('resource').filter(r => r.name.endsWith('/findings')).map(r => 'asked at ' + Math.round(r.startTime) + ' ms, answered in ' + Math.round(r.duration) + ' ms').join('; ')`))
	text := e.report(bigJobID)
	for _, sel := range []string{".f-msg", "code.param"} {
		for _, s := range eval[[]string](tb, `[...document.querySelectorAll('[data-section=findings] `+sel+`')].map(e => e.textContent)`) {
			if !strings.Contains(text, s) {
				t.Errorf("the report lacks %q, which the job page shows", s)
			}
		}
	}
	if !strings.Contains(text, "9000 map") || strings.Count(text, "attempt_1700000000000_0777_") < 10000 {
		t.Error("the report lacks the attempts")
	}

	// Scroll to the end: the last rows are there.
	tb.do("scroll", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('[data-table=attempts] .vt-scroll'); s.scrollTop = s.scrollHeight; })()`))
	tb.waitJS("last rows", `[...document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden])')].some(r => r.style.transform === 'translateY(' + (9999 * 26) + 'px)')`, 5*time.Second)
	// Sort by duration, longest first: the stragglers lead.
	start := time.Now()
	tb.do("scroll up", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-table=attempts] .vt-scroll').scrollTop = 0`))
	tb.do("sort", chromedp.Click(chromedp.CSS(`[data-table=attempts] .vt-th[data-col=dur]`)))
	tb.waitJS("sorted", `document.querySelector('[data-table=attempts] .vt-th[data-col=dur]').classList.contains('desc')`, 5*time.Second)
	t.Logf("sorting 10,000 attempts: %s", time.Since(start).Round(time.Millisecond))
	first := eval[string](tb, `(() => { const i = [...document.querySelectorAll('[data-table=attempts] .vt-th')].findIndex(th => th.dataset.col === 'dur'); return [...document.querySelectorAll('[data-table=attempts] .vt-row')].find(r => r.style.transform === 'translateY(0px)').children[i].textContent; })()`)
	if first != "30.0 s" {
		t.Errorf("longest attempt first: got %q", first)
	}
	// Filter by host and by duration.
	tb.do("filter", chromedp.SendKeys(chromedp.CSS(`[data-table=attempts] input[data-filter=host]`), "big007"))
	tb.waitJS("filtered", `document.querySelector('[data-table=attempts] .vt-count').textContent === '200 of 10,000 attempts'`, 5*time.Second)
	tb.do("filter duration", chromedp.SendKeys(chromedp.CSS(`[data-table=attempts] input[data-filter=dur]`), ">20s"))
	tb.waitJS("filtered by duration", `/^\d+ of 10,000 attempts$/.test(document.querySelector('[data-table=attempts] .vt-count').textContent) && parseInt(document.querySelector('[data-table=attempts] .vt-count').textContent) < 5`, 5*time.Second)
	tb.shot("12-job-10k-filtered")
	tb.checkClean("10k job page")
}

// BenchmarkBigJobPage measures the time from navigation start to the first
// render of the attempts table of a 10,000-attempt job (fetch, parse, sort
// and draw the visible rows), as the page marks it.
func BenchmarkBigJobPage(b *testing.B) {
	e := startServer(b)
	e.bigJob(bigJobID, 10000, 50)
	tb := newTab(b, e.url)
	firstRender(tb) // warm the caches
	var sum time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, _ := firstRender(tb)
		sum += d
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(b.N), "ms-to-table")

}
