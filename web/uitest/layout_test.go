package uitest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// tablesFit is a JS expression: what does not fit of the page's tables
// (virtual and plain): a table that scrolls sideways or reaches past its
// card or the window (columns out of sight), a header cut, the page
// scrolling sideways.
const tablesFit = `(() => {
	const bad = [];
	const vw = document.documentElement.clientWidth;
	const shown = (e) => e.offsetParent !== null;
	const cut = (e) => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1;
	for (const sc of document.querySelectorAll('.vt-scroll')) {
		if (!shown(sc)) continue;
		const name = sc.closest('[data-table]')?.dataset.table ?? sc.getAttribute('aria-label');
		if (sc.scrollWidth > sc.clientWidth + 1) bad.push(name + ': scrolls sideways, ' + sc.scrollWidth + ' px in ' + sc.clientWidth);
		for (const th of sc.querySelectorAll('.vt-th')) if (cut(th)) bad.push(name + ': header "' + th.textContent + '" cut (' + th.scrollWidth + ' px in ' + th.clientWidth + ')');
	}
	for (const t of document.querySelectorAll('table')) {
		if (!shown(t)) continue;
		const name = t.dataset.table ?? t.closest('[data-section]')?.dataset.section ?? t.className;
		const box = (t.closest('.card') ?? document.body).getBoundingClientRect();
		const r = t.getBoundingClientRect();
		if (r.right > Math.min(box.right, vw) + 1) bad.push(name + ': ' + Math.round(r.right - Math.min(box.right, vw)) + ' px past its card');
		for (const th of t.querySelectorAll('th')) if (cut(th)) bad.push(name + ': header "' + th.textContent + '" cut');
	}
	if (document.documentElement.scrollWidth > vw + 1) bad.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' px in ' + vw);
	return bad;
})()`

// TestTablesFit: every table of the UI fits a 1366×768 and a 1920×1080
// window: no header cut, no column out of sight (the jobs table at 1400
// px cut "Duration", "Mem alloc", "Peak RSS" and hid its last column).
// Every page is shown with the data of each of its tables: the overview's
// running jobs with their findings and the regressed recurring job, the
// jobs by severity, a job's findings, an attempt's stack profiles.
func TestTablesFit(t *testing.T) {
	e, job := startAnalysed(t, 6, func(e *env) { e.profileData(e.profiles) })
	tb := newTab(t, e.url)
	// The process page's link, from the attempt page.
	tb.open("/jobs/"+hostileJob+"/attempts/"+hostileAtt, `[data-section=processes] td.pid a`)
	proc := eval[string](tb, `document.querySelector('[data-section=processes] td.pid a').getAttribute('href')`)
	pages := []struct{ name, path, ready string }{
		{"overview", "/", `[data-table=regressed] tbody tr`},
		{"jobs", "/jobs", `[data-table=jobs] .vt-row a`},
		{"jobs-by-severity", "/jobs?min_severity=low&sort=severity&from=-24h", `[data-section=severity-counts] button.on`},
		{"job", "/jobs/" + job, `[data-section=findings] li.finding`},
		{"job-path", "/jobs/" + job, `[data-table=critical-path] tbody tr`},
		{"hostile-job", "/jobs/" + hostileJob, `[data-table=attempts] .vt-row a`},
		{"history", "/jobs/" + job + "/history", `[data-table=runs] tbody tr`},
		{"attempt", "/jobs/" + hostileJob + "/attempts/" + hostileAtt, `[data-section=processes] td.cmd`},
		{"attempt-profiles", "/jobs/" + profJob + "/attempts/" + profAtt(0), `[data-flame=profile] .hottest-frames tbody tr`},
		{"process", proc, `code.cmd`},
		{"hosts", "/hosts", `[data-table=hosts] .vt-row a`},
		{"host", "/hosts/node-hostile.sim", `[data-table=host-attempts] .vt-row`},
		{"waste", "/waste", `[data-table=waste] tbody tr`},
	}
	for _, size := range [][2]int64{{1366, 768}, {1920, 1080}} {
		tb.do("viewport", chromedp.EmulateViewport(size[0], size[1]))
		for _, p := range pages {
			tb.open(p.path, p.ready)
			// Tables are laid out once their rows are in; charts may still come.
			tb.waitJS(p.name+" laid out", `document.fonts.status === 'loaded'`, 10*time.Second)
			if w := eval[int64](tb, `window.innerWidth`); w != size[0] {
				t.Fatalf("%s: the window is %d px wide, not %d", p.name, w, size[0])
			}
			if p.name == "jobs" || p.name == "hostile-job" || p.name == "overview" {
				tb.viewShot(fmt.Sprintf("fit-%s-%dx%d", p.name, size[0], size[1]))
			}
			if bad := eval[[]string](tb, tablesFit); len(bad) > 0 {
				tb.shot(fmt.Sprintf("failed-fit-%s-%dx%d", p.name, size[0], size[1]))
				t.Errorf("%s at %d×%d:\n  %s", p.name, size[0], size[1], strings.Join(bad, "\n  "))
			}
		}
	}
	tb.checkClean("tables")
}
