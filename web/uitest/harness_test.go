package uitest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/web"
)

func TestMain(m *testing.M) {
	simulator.RunDaemonIfRequested()
	// Screenshots of failures are of this run only.
	for _, pat := range []string{"failed-*.png", "timeout-*.png"} {
		old, _ := filepath.Glob(filepath.Join(artifactsDir(), pat))
		for _, f := range old {
			os.Remove(f)
		}
	}
	os.Exit(m.Run())
}

// env is a server with its store, and its profile requests (on demand
// and automatic).
type env struct {
	t        testing.TB
	st       store.Store
	srv      *server.Server
	url      string
	profiles *profiling.Control
}

func startServer(t testing.TB) *env {
	t.Helper()
	return startServerAfter(t, nil)
}

// startServerAfter fills the store (fill, if not nil, ingests straight
// into it) before it starts the server: the server's background analysis
// then finds the data at its first look back (6 hours), as a server
// started on a store with data does; data ingested later is analysed when
// it was seen in the last minutes (as agents send it).
func startServerAfter(t testing.TB, fill func(e *env)) *env {
	t.Helper()
	if !web.Built() {
		t.Fatal("the web UI is not built into web/dist: run make ui (npm ci && npm run build in web/) first")
	}
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	prof := profiling.New(st, profiling.Config{OnDemand: true, Auto: true})
	e := &env{t: t, st: st, profiles: prof}
	if fill != nil {
		fill(e)
	}
	srv, err := server.Start(server.Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), Profiles: prof})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		st.Close()
	})
	e.srv, e.url = srv, srv.URL()
	return e
}

func chromiumPath(t testing.TB) string {
	for _, p := range []string{os.Getenv("TASKSCOPE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium: scripts/test-deps.sh installs Debian's chromium")
	}
	t.Skip("no Chromium (scripts/test-deps.sh installs it); skipping the browser tests")
	return ""
}

// artifactsDir is $TASKSCOPE_ARTIFACTS/screenshots, by default
// testdata-out/screenshots at the top of the repository (gitignored).
func artifactsDir() string {
	dir := os.Getenv("TASKSCOPE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "testdata-out")
	}
	return filepath.Join(dir, "screenshots")
}

// artifacts is the directory screenshots and downloads are kept in.
func artifacts(t testing.TB) string {
	dir := artifactsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// page is a browser tab with what it logged.
type tab struct {
	t        testing.TB
	ctx      context.Context
	base     string
	mu       sync.Mutex
	problems []string // console errors, exceptions, CSP violations
	dialogs  []string
	dls      map[string]string // guid -> suggested file name
	done     chan string       // file names of completed downloads
	dlDir    string
	// live is the tab's context without the test's deadline: what a
	// failure prints (its screenshot, explain) is read through it, even
	// when the failure is that deadline.
	live context.Context
	// explain, when set, prints the state of the page a failing step left
	// (a test sets it before a step whose failure would not say why).
	explain func()
}

const cspProbe = `window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || e.sample || '')));`

func newTab(t testing.TB, base string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	cctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(cctx, 150*time.Second)
	t.Cleanup(func() {
		cancelT()
		cancelC()
		cancelA()
	})
	tb := &tab{t: t, ctx: ctx, live: cctx, base: base, dls: map[string]string{}, done: make(chan string, 16), dlDir: t.TempDir()}
	// The browser lives as long as the context of its first action: the
	// one without the test's deadline, so that a failure past that
	// deadline can still be explained (live).
	if err := chromedp.Do(cctx); err != nil {
		t.Fatalf("cannot start Chromium: %v", err)
	}
	listen := func(ev any) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					if len(a.Value) > 0 {
						parts = append(parts, string(a.Value))
					} else {
						parts = append(parts, a.Description)
					}
				}
				tb.problems = append(tb.problems, "console."+string(e.Type)+": "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.problems = append(tb.problems, "exception: "+msg)
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				tb.problems = append(tb.problems, fmt.Sprintf("log %s: %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		case *page.EventJavascriptDialogOpening:
			tb.dialogs = append(tb.dialogs, string(e.Type)+": "+e.Message)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		case *browser.EventDownloadWillBegin:
			tb.dls[e.GUID] = e.SuggestedFilename
		case *browser.EventDownloadProgress:
			if e.State == browser.DownloadProgressStateCompleted {
				select {
				case tb.done <- tb.dls[e.GUID]:
				default:
				}
			}
		}
	}
	if err := chromedp.Listen(ctx, listen); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.ListenBrowser(ctx, listen); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspProbe}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: tb.dlDir, EventsEnabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	return tb
}

func ptr[T any](v T) *T { return &v }

// do runs steps and fails the test on an error.
func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, steps...); err != nil {
		tb.shot("failed-" + what)
		if tb.explain != nil {
			tb.explain()
		}
		tb.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JS expression into T.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluate %.80s: %v", expr, err)
	}
	return v
}

// open navigates (a page load) to path and waits for sel.
func (tb *tab) open(path, sel string) {
	tb.t.Helper()
	tb.do("open "+path, chromedp.Navigate(tb.base+path), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// click clicks the first match of sel, then waits for wait.
func (tb *tab) click(sel, wait string) {
	tb.t.Helper()
	tb.do("click "+sel, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS(wait)))
}

// waitJS polls a JS condition.
func (tb *tab) waitJS(what, cond string, timeout time.Duration) {
	tb.t.Helper()
	var err error
	if testsrv.Poll(timeout, func() bool {
		var ok bool
		ok, err = chromedp.Run(tb.ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		return err == nil && ok
	}) {
		return
	}
	tb.shot("timeout-" + what)
	tb.mu.Lock()
	for _, p := range tb.problems {
		tb.t.Logf("browser: %s", p)
	}
	tb.mu.Unlock()
	res, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`performance.getEntriesByType('resource').map(r => r.name.replace(location.origin, '') + ' ' + Math.round(r.startTime) + '+' + Math.round(r.duration) + 'ms').join('\n')`))
	tb.t.Logf("requests of the page:\n%s", res)
	tb.t.Fatalf("%s: not true after %s: %s (%v)", what, timeout, cond, err)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// after is a context for reading the page after a failure: the tab's, or,
// when its deadline has passed, a few more seconds of it.
func (tb *tab) after() (context.Context, context.CancelFunc) {
	if tb.ctx.Err() == nil {
		return tb.ctx, func() {}
	}
	return context.WithTimeout(tb.live, 10*time.Second)
}

// postMortem evaluates a JS expression (into a string) to explain a
// failure, and says so if it cannot.
func (tb *tab) postMortem(expr string) string {
	ctx, cancel := tb.after()
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return fmt.Sprintf("(cannot evaluate %.60s: %v)", expr, err)
	}
	return v
}

// shot keeps a full-page screenshot as an artifact.
func (tb *tab) shot(name string) string {
	ctx, cancel := tb.after()
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(artifacts(tb.t), unsafeName.ReplaceAllString(name, "_")+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		tb.t.Logf("screenshot %s: %v", name, err)
	}
	return p
}

// chartsDrawn returns, for each chart on the page, how many pixels of its
// canvas are painted.
func (tb *tab) chartsDrawn() map[string]int {
	tb.t.Helper()
	raw := eval[[]byte](tb, `(() => {
		const out = {};
		for (const card of document.querySelectorAll('[data-chart]:not([data-empty])')) {
			const c = card.querySelector('canvas');
			let n = 0;
			if (c && c.width && c.height) {
				const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
				for (let i = 3; i < d.length; i += 16) if (d[i]) n++;
			}
			out[card.dataset.chart] = n;
		}
		return out;
	})()`)
	m := map[string]int{}
	if err := json.Unmarshal(raw, &m); err != nil {
		tb.t.Fatal(err)
	}
	return m
}

// minPainted is how many pixels (of every 4th) a chart that shows
// something has painted at least.
const minPainted = 50

// chartsPainted waits until every chart of the page that is not empty has
// painted (ECharts draws on the next animation frame after a chart is
// given its data), up to timeout, and returns what chartsDrawn says then:
// the caller reports the charts still blank.
func (tb *tab) chartsPainted(timeout time.Duration) map[string]int {
	tb.t.Helper()
	var m map[string]int
	testsrv.Poll(timeout, func() bool {
		m = tb.chartsDrawn()
		for _, px := range m {
			if px < minPainted {
				return false
			}
		}
		return true
	})
	return m
}

// checkClean fails on console errors, exceptions, CSP violations and dialogs.
func (tb *tab) checkClean(where string) {
	tb.t.Helper()
	csp := eval[[]string](tb, `window.__csp || []`)
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, p := range tb.problems {
		tb.t.Errorf("%s: %s", where, p)
	}
	for _, c := range csp {
		tb.t.Errorf("%s: CSP violation: %s", where, c)
	}
	for _, d := range tb.dialogs {
		tb.t.Errorf("%s: a dialog opened: %s", where, d)
	}
	tb.problems = nil
}

// download clicks sel and waits for the file it saves.
func (tb *tab) download(sel string) []byte {
	tb.t.Helper()
	tb.do("click "+sel, chromedp.Click(chromedp.CSS(sel)))
	select {
	case name := <-tb.done:
		b, err := os.ReadFile(filepath.Join(tb.dlDir, name))
		if err != nil {
			tb.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(artifacts(tb.t), "download-"+name), b, 0o644); err != nil {
			tb.t.Log(err)
		}
		return b
	case <-time.After(20 * time.Second):
		tb.t.Fatalf("no download after clicking %s", sel)
	}
	return nil
}

// chartsSettled is a JS condition: at least n charts drew or said they have no data.
func chartsSettled(n int) string {
	return fmt.Sprintf("document.querySelectorAll('[data-chart] [data-drawn], [data-chart][data-empty]').length >= %d", n)
}

// hover moves the mouse over sel, at the fractions fx, fy of its box.
func (tb *tab) hover(sel string, fx, fy float64) {
	tb.t.Helper()
	type box struct{ X, Y, W, H float64 }
	b := eval[box](tb, `(() => { const e = document.querySelector(`+jsString(sel)+`); e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect(); return {X: r.left, Y: r.top, W: r.width, H: r.height}; })()`)
	tb.do("hover "+sel, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, b.X+b.W*fx, b.Y+b.H*fy))
}

// viewShot keeps a screenshot of the viewport (with a tooltip, say).
func (tb *tab) viewShot(name string) {
	buf, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.t.Logf("screenshot %s: %v", name, err)
		return
	}
	os.WriteFile(filepath.Join(artifacts(tb.t), unsafeName.ReplaceAllString(name, "_")+".png"), buf, 0o644)
}

// wheel turns the mouse wheel over sel (ECharts zooms on it). DeltaX is
// not 0: the protocol omits zeros, and Chromium wants both deltas.
func (tb *tab) wheel(sel string, dy float64) {
	tb.t.Helper()
	type box struct{ X, Y, W, H float64 }
	b := eval[box](tb, `(() => { const e = document.querySelector(`+jsString(sel)+`); e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect(); return {X: r.left, Y: r.top, W: r.width, H: r.height}; })()`)
	x, y := b.X+b.W*0.5, b.Y+b.H*0.5
	tb.do("wheel "+sel, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, y),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseWheel, x, y, func(p *input.DispatchMouseEventParams) { p.DeltaX, p.DeltaY = 0.001, dy }))
}
