package uitest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// justAfterMidnight is a time zone whose clock reads between 00:00 and
// 00:59 now (an Etc/GMT zone: their signs are the reverse of offsets').
func justAfterMidnight() string {
	h := time.Now().UTC().Hour()
	if h <= 12 {
		return fmt.Sprintf("Etc/GMT+%d", h) // UTC-h
	}
	return fmt.Sprintf("Etc/GMT-%d", 24-h) // UTC+(24-h)
}

// TestOverview: the first page is the overview: the running jobs, the last 24 hours'
// queues and users with their cost and waste, the hosts with lost or
// orphaned processes; its links lead to the filtered jobs list and the
// host; untrusted names stay text. The browser's clock reads just after
// midnight: the analysis job, 2 hours old, started yesterday there, and
// still counts (the overview is the last 24 hours, not the calendar day:
// CI once ran this test at 00:20 and found no queue of "today").
func TestOverview(t *testing.T) {
	e := startServer(t)
	e.loadgenData(4, 4*time.Minute)
	e.hostileData()
	e.analysisData()
	tb := newTab(t, e.url)
	tz := justAfterMidnight()
	if _, err := chromedp.Call(tb.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: tz}); err != nil {
		t.Fatalf("cannot set the browser's time zone to %s: %v", tz, err)
	}
	if h := eval[int](tb, `new Date().getHours()`); h > 1 {
		t.Fatalf("the browser's clock reads %d h in %s, not just after midnight", h, tz)
	}
	tb.open("/", `[data-section=queues] tbody tr`)
	tb.waitJS("running jobs", `document.querySelectorAll('[data-table=running] tbody tr').length > 0`, 15*time.Second)
	if got := eval[string](tb, `document.querySelector('nav a.active').dataset.nav`); got != "overview" {
		t.Errorf("the active navigation link is %q", got)
	}
	queues := eval[[]string](tb, `[...document.querySelectorAll('[data-table=queues] tbody tr')].map(r => r.dataset.key)`)
	if !slices.Contains(queues, "reports") || !slices.Contains(queues, "default") {
		t.Errorf("the last 24 hours' queues %v: want reports (the analysis job's) and default (the hostile job's)", queues)
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
	// A queue's link: the jobs list of that queue in the last 24 hours.
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
