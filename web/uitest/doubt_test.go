package uitest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

const doubtJob = "job_1700000000000_0555"

// doubtAtts are doubtJob's attempts and the CPU doubt their agent told
// (wire.Attempt.CPUDoubtMs): a split by a guess, none, a guess that stood.
var doubtAtts = []struct {
	id      string
	doubtMs int64
}{
	{"attempt_1700000000000_0555_m_000000_0", 1234},
	{"attempt_1700000000000_0555_m_000001_0", 0},
	{"attempt_1700000000000_0555_m_000002_0", 45},
}

// doubtData is doubtJob, finished: three maps of two processes, 30 s each.
func (e *env) doubtData() {
	e.t.Helper()
	g := &storetest.Gen{Agent: "agent-doubt", Host: "node-doubt.sim"}
	start := time.Now().Add(-5 * time.Minute)
	var atts []*storetest.AttemptSpec
	for i, d := range doubtAtts {
		atts = append(atts, &storetest.AttemptSpec{ID: d.id, JobID: doubtJob, Type: "map",
			Container: fmt.Sprintf("container_1700000000000_0555_01_%06d", i+2), JobName: "doubt", User: "alice", Queue: "default",
			MemoryMB: 1024, CPUDoubtMs: d.doubtMs, Start: start.Add(time.Duration(i) * time.Second),
			Procs: []storetest.ProcSpec{
				{PID: int32(5000 + 10*i), Role: wire.RoleWrapper, Cmdline: "/bin/bash -c java ...", CPUPerS: 5, RSS: 3 << 20},
				{PID: int32(5001 + 10*i), Role: wire.RoleTaskJVM, Cmdline: "java org.apache.hadoop.mapred.YarnChild", CPUPerS: 400 + 10*int64(i), RSS: 300 << 20},
			}})
	}
	e.ingest(g.Batch(atts, 0, 20, false), g.Batch(atts, 20, 30, true))
}

// uiDur is the UI's fmt.dur for durations under a minute.
func uiDur(ms int64) string {
	switch s := float64(ms) / 1000; {
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	default:
		return fmt.Sprintf("%.1f s", s)
	}
}

// An attempt whose CPU is an estimate (cpu_doubt_ms) shows "±" and how
// far off it may be beside its CPU, in its job's attempts list and on its
// page, as text (no element made of it), with why on hover; one whose CPU
// is no estimate shows its CPU alone.
func TestCPUDoubt(t *testing.T) {
	e := startServer(t)
	e.doubtData()
	j := e.job(doubtJob)
	cpu := map[string]int64{}
	for _, a := range j.AttemptList {
		cpu[a.AttemptID] = a.CPUMs
	}
	tb := newTab(t, e.url)

	tb.open("/jobs/"+doubtJob, `[data-table=attempts] .vt-row a`)
	tb.waitJS("the attempts listed", fmt.Sprintf(`document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden])').length === %d`, len(doubtAtts)), 10*time.Second)
	// The CPU cell of each row: its text, its element children, its title.
	cells := eval[map[string][]string](tb, `(() => {
		const col = [...document.querySelectorAll('[data-table=attempts] .vt-th')].findIndex((th) => th.dataset.col === 'cpu');
		const out = {};
		for (const r of document.querySelectorAll('[data-table=attempts] .vt-row:not([hidden])')) {
			const a = r.querySelector('a[href*="/attempts/"]');
			const td = r.querySelectorAll('.vt-td')[col];
			if (a && td) out[a.textContent] = [td.textContent, String(td.children.length), td.title];
		}
		return out;
	})()`)
	tb.shot("cpu-doubt-job")
	for _, d := range doubtAtts {
		want := uiDur(cpu[d.id])
		if d.doubtMs > 0 {
			want += " ±" + uiDur(d.doubtMs)
		}
		c, ok := cells[d.id]
		if !ok {
			t.Errorf("%s: no row in the attempts list (rows: %v)", d.id, cells)
			continue
		}
		if c[0] != want || c[1] != "0" {
			t.Errorf("%s: the attempts list's CPU %q (%s elements in it), want %q as text", d.id, c[0], c[1], want)
		}
		// Why, on hover (the table's own title, the cell's text, came
		// after it and hid it); else the text, as every cell's.
		if hasWhy := strings.Contains(c[2], "off by up to "+uiDur(d.doubtMs)+" either way"); hasWhy != (d.doubtMs > 0) || (d.doubtMs == 0 && c[2] != want) {
			t.Errorf("%s: the CPU cell's title %q (its doubt %d ms)", d.id, c[2], d.doubtMs)
		}
	}
	tb.checkClean("job page")

	for _, d := range doubtAtts {
		tb.open("/jobs/"+doubtJob+"/attempts/"+d.id, `.fig`)
		tb.waitJS("the attempt's CPU", `[...document.querySelectorAll('.fig')].some((f) => f.querySelector('.fig-l')?.textContent === 'CPU')`, 10*time.Second)
		fig := eval[[]string](tb, `(() => {
			const f = [...document.querySelectorAll('.fig')].find((f) => f.querySelector('.fig-l')?.textContent === 'CPU');
			const v = f.querySelector('.fig-v');
			return [v.textContent, String(v.children.length), f.title];
		})()`)
		want := uiDur(cpu[d.id])
		if d.doubtMs > 0 {
			want += " ±" + uiDur(d.doubtMs)
			tb.shot("cpu-doubt-attempt")
		}
		if fig[0] != want || fig[1] != "0" {
			t.Errorf("%s: the attempt page's CPU %q (%s elements in it), want %q as text", d.id, fig[0], fig[1], want)
		}
		if hasWhy := strings.Contains(fig[2], "off by up to "+uiDur(d.doubtMs)+" either way"); hasWhy != (d.doubtMs > 0) || (d.doubtMs == 0 && fig[2] != "") {
			t.Errorf("%s: the CPU figure's title %q (its doubt %d ms)", d.id, fig[2], d.doubtMs)
		}
		tb.checkClean("attempt page " + d.id)
	}
}
