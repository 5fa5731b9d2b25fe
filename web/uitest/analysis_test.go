package uitest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// crafted is an attempt of analysisData: it runs from s to s+d seconds
// after its run's start, on host, and ends with an exit status (nil: 0).
type crafted struct {
	id, typ, host string
	s, d          int
	exit          int32
}

// runBatches are the batches of one run of a job: each attempt whole,
// with its CPU (80 % of a core), RSS and GC series.
func runBatches(seq *uint64, job, name string, start time.Time, atts []crafted) []*wire.Batch {
	byHost := map[string]*wire.Batch{}
	var out []*wire.Batch
	for _, a := range atts {
		b := byHost[a.host]
		if b == nil {
			*seq++
			b = &wire.Batch{Version: wire.Version, AgentID: "agent-" + a.host, Seq: *seq, Host: a.host,
				Metrics: []string{wire.AttemptCPUMs, wire.AttemptRSSBytes, wire.AttemptProcesses, wire.AttemptGCTimeMs}}
			byHost[a.host] = b
			out = append(out, b)
		}
		first := start.Add(time.Duration(a.s) * time.Second)
		last := first.Add(time.Duration(a.d) * time.Second)
		b.Attempts = append(b.Attempts, wire.Attempt{AttemptID: a.id, JobID: job, Type: a.typ, Framework: "mapreduce",
			FirstMs: first.UnixMilli(), LastMs: last.UnixMilli(), Ended: true, JobName: name, User: "rita", Queue: "reports",
			MemoryMB: 2048, XmxBytes: 1600 << 20, NMExit: wire.ExitStatus{Status: a.exit, Ms: last.UnixMilli()}})
		s := wire.Series{AttemptID: a.id}
		var cols [4][]int64
		for _, f := range []float64{0, 0.5, 1} {
			s.Times = append(s.Times, first.Add(time.Duration(f*float64(a.d)*float64(time.Second))).UnixMilli())
			cols[0] = append(cols[0], int64(f*float64(a.d)*800))
			cols[1] = append(cols[1], 700<<20)
			cols[2] = append(cols[2], 2)
			cols[3] = append(cols[3], int64(f*float64(a.d)*10))
		}
		for i := range cols {
			s.Columns = append(s.Columns, wire.Column{Metric: uint32(i), Values: cols[i]})
		}
		b.AttemptSeries = append(b.AttemptSeries, s)
	}
	return out
}

// analysisData is a recurring job, "nightly-report DATE" of rita in queue
// reports: four earlier runs, a day apart, of 8 maps on 4 containers (two
// waves of 10 minutes) and a reduce; and tonight's run, the slowest: 9
// maps (a third wave of one map), a reduce that failed, its retry, and a
// speculative copy of the retry, killed. It returns tonight's job.
func (e *env) analysisData() string {
	e.t.Helper()
	var seq uint64
	day := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	var cur string
	for k := 4; k >= 0; k-- {
		start := day.AddDate(0, 0, -k)
		ts := fmt.Sprint(1_790_000_000_000 + int64(k))
		job := "job_" + ts + "_0042"
		att := func(t string, task, n int) string { return fmt.Sprintf("attempt_%s_0042_%s_%06d_%d", ts, t, task, n) }
		maps := 8
		if k == 0 {
			maps, cur = 9, job
		}
		var atts []crafted
		for i := 0; i < maps; i++ {
			atts = append(atts, crafted{id: att("m", i, 0), typ: "map", host: fmt.Sprintf("rnode%d", i%4), s: 600 * (i / 4), d: 600})
		}
		mapsEnd := 600 * ((maps + 3) / 4)
		if k == 0 {
			atts = append(atts,
				crafted{id: att("r", 0, 0), typ: "reduce", host: "rnode1", s: mapsEnd, d: 60, exit: 1},
				crafted{id: att("r", 0, 1), typ: "reduce", host: "rnode2", s: mapsEnd + 60, d: 60},
				crafted{id: att("r", 0, 2), typ: "reduce", host: "rnode3", s: mapsEnd + 80, d: 40, exit: 143})
		} else {
			atts = append(atts, crafted{id: att("r", 0, 0), typ: "reduce", host: "rnode1", s: mapsEnd, d: 60})
		}
		e.ingest(runBatches(&seq, job, "nightly-report "+start.Format("2006-01-02"), start, atts)...)
	}
	return cur
}

// TestAnalysisPages: the job page draws the critical path and the waves on
// the timeline and lists them with the what-ifs; the recurring job's page
// shows its runs against their band; the waste page shows what the failed
// and speculative attempts cost, by user and by queue.
func TestAnalysisPages(t *testing.T) {
	e := startServer(t)
	job := e.analysisData()
	d := e.job(job)
	var outcomes []string
	for _, a := range d.AttemptList {
		if a.Type == "reduce" {
			outcomes = append(outcomes, a.Outcome)
		}
	}
	// Outcomes are kept by the stores from the outcome issue's store change
	// on (exit statuses of attempts); before it, the waste of failed and
	// speculative attempts is not shown here (package analysis tests it).
	withOutcomes := strings.Join(outcomes, ",") == strings.Join([]string{store.OutcomeFailed, store.OutcomeSucceeded, store.OutcomeKilled}, ",")
	if !withOutcomes {
		t.Logf("the store keeps no attempt outcomes (%q): the waste of failed and speculative attempts is not checked", outcomes)
	}
	tb := newTab(t, e.url)

	// The job: findings, critical path, waves, what-ifs.
	tb.open("/jobs/"+job, `[data-table=critical-path] tbody tr`)
	tb.waitJS("job charts", chartsSettled(8)+` && document.querySelector('[data-chart$="-timeline"] [data-drawn]')`, 15*time.Second)
	want := []string{"last_wave", "recurring"}
	if withOutcomes {
		want = append(want, "waste")
	}
	for _, h := range want {
		if eval[int](tb, `document.querySelectorAll('[data-section=findings] li[data-heuristic=`+h+`]').length`) != 1 {
			t.Errorf("no %s finding on the job page", h)
		}
	}
	steps := eval[[]string](tb, `[...document.querySelectorAll('[data-table=critical-path] tbody tr')].map(r => r.dataset.attempt)`)
	// A map of each wave, the failed reduce and its retry (not the
	// speculative copy, killed when the retry ended).
	lastOK := len(steps) == 5 && (strings.HasSuffix(steps[4], "_r_000000_1") || !withOutcomes && strings.HasSuffix(steps[4], "_r_000000_2"))
	if !lastOK || !strings.HasSuffix(steps[2], "_m_000008_0") || !strings.HasSuffix(steps[3], "_r_000000_0") {
		t.Errorf("critical path %v: want a map of each wave, then the failed reduce and its retry", steps)
	}
	if got := eval[string](tb, `document.querySelector('[data-table=waves] tr[data-kind=partial]')?.textContent ?? ''`); !strings.Contains(got, "badly filled") {
		t.Errorf("the maps' last wave is not shown as badly filled: %q", got)
	}
	if n := eval[int](tb, `document.querySelectorAll('[data-list=what-if] li[data-kind=more_containers]').length`); n < 2 {
		t.Errorf("%d what-ifs with more containers", n)
	}
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("job page: chart %s is empty (%d pixels)", name, px)
		}
	}
	// The timeline draws the path and marks the last wave (in its SVG too).
	svg := tb.download(`[data-chart$="-timeline"] button[data-dl=svg]`)
	if !bytes.Contains(svg, []byte("map wave 3")) || !bytes.Contains(svg, []byte("critical path")) {
		t.Errorf("the timeline's SVG has no last-wave mark or critical path: %.300s", svg)
	}
	tb.shot("10-job-critical-path")
	tb.checkClean("job page with its critical path")

	// The recurring job's page, by its link.
	tb.click(`a[data-link=history]`, `[data-table=runs] tbody tr`)
	tb.waitJS("history charts", `document.querySelectorAll('[data-chart] [data-drawn]').length >= 5`, 15*time.Second)
	if n := eval[int](tb, `document.querySelectorAll('[data-table=runs] tbody tr').length`); n != 5 {
		t.Errorf("%d runs listed, want 5", n)
	}
	if got := eval[string](tb, `document.querySelector('[data-table=runs] tr[data-job="`+job+`"] td[data-outside]').dataset.outside`); !strings.Contains(got, "duration") {
		t.Errorf("tonight's run outside its band in %q, want duration", got)
	}
	if got := eval[string](tb, `document.querySelector('.page-head h1').textContent`); !strings.Contains(got, "nightly-report <date>") {
		t.Errorf("recurring job named %q", got)
	}
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("history page: chart %s is empty (%d pixels)", name, px)
		}
	}
	tb.shot("11-recurring-job")
	tb.checkClean("recurring job page")

	// Waste, from the navigation bar: by user, then by queue.
	tb.click(`nav a[data-nav=waste]`, `[data-table=waste] tbody tr`)
	tb.waitJS("waste charts", `document.querySelectorAll('[data-chart] [data-drawn]').length >= 2`, 15*time.Second)
	row := eval[[]string](tb, `[...document.querySelectorAll('[data-table=waste] tr[data-key=rita] td')].map(c => c.textContent)`)
	if len(row) != 13 || row[1] != "5" || row[2] != "48" || withOutcomes && (row[7] == "–" || row[9] == "–" || row[8] != "–") {
		t.Errorf("rita's waste row %q: want 5 jobs of 48 attempts, a failed and a speculative attempt, none killed", row)
	}
	for name, px := range tb.chartsPainted(10 * time.Second) {
		if px < minPainted {
			t.Errorf("waste page: chart %s is empty (%d pixels)", name, px)
		}
	}
	tb.shot("12-waste")
	tb.do("by queue", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('select[data-f=by]'); s.value = 'queue'; s.dispatchEvent(new Event('change')); })()`))
	tb.waitJS("by queue", `location.search.includes('by=queue') && document.querySelector('[data-table=waste] tr[data-key=reports]')`, 10*time.Second)
	tb.checkClean("waste page")
}
