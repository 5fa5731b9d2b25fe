package uitest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestOverview: the first page is the overview: the running jobs, today's
// queues and users with their cost and waste, the hosts with lost or
// orphaned processes; its links lead to the filtered jobs list and the
// host; untrusted names stay text.
func TestOverview(t *testing.T) {
	e := startServer(t)
	e.loadgenData(4, 4*time.Minute)
	e.hostileData()
	e.analysisData()
	tb := newTab(t, e.url)
	tb.open("/", `[data-section=queues] tbody tr`)
	tb.waitJS("running jobs", `document.querySelectorAll('[data-table=running] tbody tr').length > 0`, 15*time.Second)
	if got := eval[string](tb, `document.querySelector('nav a.active').dataset.nav`); got != "overview" {
		t.Errorf("the active navigation link is %q", got)
	}
	queues := eval[[]string](tb, `[...document.querySelectorAll('[data-table=queues] tbody tr')].map(r => r.dataset.key)`)
	if !slices.Contains(queues, "reports") || !slices.Contains(queues, "default") {
		t.Errorf("today's queues %v: want reports (the analysis job's) and default (the hostile job's)", queues)
	}
	if got := eval[string](tb, `document.querySelector('[data-table=users] tr[data-key="mallory<i>"] td a')?.textContent ?? ''`); got != "mallory<i>" {
		t.Errorf("the hostile user shown as %q", got)
	}
	if n := eval[int](tb, `document.querySelectorAll('#app i, #app script, #app img').length`); n != 0 {
		t.Errorf("%d elements made of the data's markup", n)
	}
	lost := eval[string](tb, `document.querySelector('[data-table=lost-hosts] tr[data-host="node-hostile.sim"]')?.textContent ?? ''`)
	if lost == "" {
		t.Errorf("no lost processes on node-hostile.sim: %s", eval[string](tb, `document.querySelector('[data-section=lost]').textContent`))
	}
	tb.shot("20-overview")
	tb.checkClean("overview")
	// A queue's link: the jobs list of that queue today.
	tb.click(`[data-table=queues] tr[data-key=reports] a`, `[data-table=jobs] .vt-row a`)
	tb.waitJS("the queue's jobs", `new URLSearchParams(location.search).get('queue') === 'reports' && [...document.querySelectorAll('[data-table=jobs] .vt-row:not([hidden])')].every(r => r.textContent.includes('reports'))`, 10*time.Second)
	tb.do("back", chromedp.NavigateBack())
	tb.waitJS("overview again", `document.querySelector('[data-table=lost-hosts] a[href="/hosts/node-hostile.sim"]')`, 10*time.Second)
	tb.click(`[data-table=lost-hosts] a[href="/hosts/node-hostile.sim"]`, `[data-table=host-attempts] .vt-row`)
	if !strings.HasPrefix(eval[string](tb, `location.pathname`), "/hosts/") {
		t.Error("the host link did not open the host")
	}
	tb.checkClean("overview links")
}
