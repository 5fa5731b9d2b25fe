package uitest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

const (
	profJob = "job_1700000000000_0777"
	// hostileFrame is a frame name a job's own code can make (a class
	// named so through bytecode): shown as text.
	hostileFrame = `evil.<img src=x onerror=alert(7)>.run`
)

// profAtt is map i of the profiled job.
func profAtt(i int) string { return fmt.Sprintf("attempt_1700000000000_0777_m_%06d_0", i) }

// profileData makes a running job of three maps, on two nodes, and the
// automatic profiles of its straggler (map 0) and of a sibling (map 1),
// as their agents would send them: the straggler spins longer in
// Job.spin and waits on a lock.
func (e *env) profileData(ctl *profiling.Control) (straggler, sibling string) {
	e.t.Helper()
	start := time.Now().Add(-90 * time.Second)
	gens := []*storetest.Gen{{Agent: "n1", Host: "node1"}, {Agent: "n2", Host: "node2"}}
	var specs []*storetest.AttemptSpec
	for i := 0; i < 3; i++ {
		specs = append(specs, &storetest.AttemptSpec{ID: profAtt(i), JobID: profJob, Type: "map", JobName: "profiled-join", User: "zoe",
			Queue: "etl", MemoryMB: 1024, Start: start, Procs: []storetest.ProcSpec{{PID: int32(500 + i), Role: wire.RoleTaskJVM,
				Cmdline: "java org.apache.hadoop.mapred.YarnChild", CPUPerS: 700, RSS: 200 << 20}}})
	}
	e.ingest(gens[0].Batch(specs[:1], 0, 88, false), gens[1].Batch(specs[1:], 0, 88, false))
	made, err := ctl.Auto(context.Background(), profiling.Named{JobID: profJob, Attempts: []string{profAtt(0)}})
	if err != nil || len(made) != 2 {
		e.t.Fatalf("automatic profiles: %+v %v", made, err)
	}
	prof := func(r store.ProfileRequest, spin, lock int64) wire.Profile {
		now := time.Now()
		return wire.Profile{ID: r.ID, AttemptID: r.AttemptID, PID: r.PID, StartMs: now.Add(-20 * time.Second).UnixMilli(), EndMs: now.UnixMilli(),
			IntervalMs: 200, Dumps: 100, PausedUs: 150000, MaxPauseUs: 3000, Status: wire.ProfileComplete,
			Strings: []string{"main", "org.apache.hadoop.mapred.YarnChild.main", "my.Job.spin", "my.Job.lock", "GC Thread#N", "fetcher#N",
				"java.net.SocketInputStream.socketRead0", hostileFrame},
			Stacks: []wire.ProfileStack{
				{Thread: 0, State: wire.ThreadRunnable, Frames: []uint32{1, 2}, CPUNs: spin, QueuedNs: 1e9, Samples: 80},
				{Thread: 0, State: wire.ThreadBlocked, Frames: []uint32{1, 3}, WaitNs: lock, Samples: 20},
				{Thread: 4, State: wire.ThreadVM, CPUNs: 2e9, Samples: 100},
				{Thread: 5, State: wire.ThreadRunnable, Frames: []uint32{7, 6}, CPUNs: 1e8, WaitNs: 19e9, Samples: 100},
			}}
	}
	sib, str := made[0], made[1]
	b1 := gens[0].Batch(specs[:1], 88, 89, false)
	b1.Profiles = []wire.Profile{prof(str, 14e9, 5e9)}
	b2 := gens[1].Batch(specs[1:], 88, 89, false)
	b2.Profiles = []wire.Profile{prof(sib, 6e9, 0)}
	e.ingest(b1, b2)
	return str.ID, sib.ID
}

// TestProfileView: a straggler's page shows its automatic profile's flame
// graphs (on a CPU and waiting, under thread groups), the hottest frames,
// the differential against its sibling, downloads, frame names as text;
// the button asks for a profile, which is listed as asked for.
func TestProfileView(t *testing.T) {
	e := startServer(t)
	straggler, _ := e.profileData(e.profiles)
	tb := newTab(t, e.url)
	tb.open("/jobs/"+profJob+"/attempts/"+profAtt(0), `[data-section=profiles] [data-profile]`)
	tb.waitJS("the flame graphs", `document.querySelectorAll('[data-flame=profile] svg rect').length > 5 && document.querySelectorAll('[data-flame=diff] svg rect').length > 5`, 20*time.Second)
	if got := eval[string](tb, `document.querySelector('[data-section=profiles] tr[data-profile].selected').dataset.profile`); got != straggler {
		t.Errorf("the profile shown: %s, want the straggler's %s", got, straggler)
	}
	groups := eval[string](tb, `[...document.querySelectorAll('[data-flame=profile] .thread-groups .chip')].map(c => c.dataset.group).join(',')`)
	if groups != "[task],[gc],[shuffle]" {
		t.Errorf("thread groups on a CPU: %s", groups)
	}
	if got := eval[string](tb, `document.querySelector('[data-flame=profile] .hottest-frames tbody tr').dataset.frame`); got != "my.Job.spin" {
		t.Errorf("the hottest frame: %s", got)
	}
	// Frame names are text: the hostile one made no element.
	if got := eval[int](tb, `document.querySelectorAll('#app img, #app svg img').length`); got != 0 {
		t.Errorf("a frame name became %d elements", got)
	}
	tb.click(`[data-flame=profile] button[data-view=wait]`, `[data-flame=profile] button.active[data-view=wait]`)
	tb.waitJS("the waiting view", `[...document.querySelectorAll('[data-flame=profile] .hottest-frames tbody tr')].map(r => r.dataset.frame).includes('my.Job.lock')`, 10*time.Second)
	waits := eval[string](tb, `[...document.querySelectorAll('[data-flame=profile] svg')].map(s => s.textContent).join(' ')`)
	for _, want := range []string{"[blocked on a monitor]", "[waiting for a CPU]", hostileFrame} {
		if !strings.Contains(waits, want) {
			t.Errorf("the waiting flame graph has no %q", want)
		}
	}
	// The differential: red where the straggler spent more.
	diff := eval[string](tb, `[...document.querySelectorAll('[data-flame=diff] svg g')].filter(g => (g.textContent || '').includes('my.Job.spin')).map(g => g.querySelector('rect').getAttribute('fill')).join(',')`)
	if !strings.HasPrefix(diff, "rgb(220,") && !strings.HasPrefix(diff, "rgb(255,") {
		t.Errorf("my.Job.spin in the differential is %q, want a red", diff)
	}
	tb.shot("profile-straggler")
	pprof := tb.download(`[data-section=profiles] a[href$="format=pprof"]`)
	if len(pprof) < 100 || pprof[0] != 0x1f {
		t.Errorf("pprof download: %d bytes", len(pprof))
	}
	col := tb.download(`[data-section=profiles] a[href$="view=cpu"]`)
	if !strings.Contains(string(col), "[task];main;org.apache.hadoop.mapred.YarnChild.main;my.Job.spin 14000000") {
		t.Errorf("collapsed download: %.200s", col)
	}
	// Ask for one (no agent here: it stays asked for). If that fails, say
	// what the page and the server showed.
	tb.explain = func() { e.explainProfiles(tb, profAtt(0)) }
	tb.click(`[data-section=profiles] button[data-action=profile]`, `[data-section=profiles] tr[data-status=requested]`)
	tb.waitJS("the new one shown", `document.querySelector('[data-profile-status=requested]')`, 10*time.Second)
	if got := eval[bool](tb, `document.querySelector('[data-section=profiles] button[data-action=profile]').disabled`); !got {
		t.Error("the button asks again while one is asked for")
	}
	tb.explain = nil
	tb.checkClean("profile view")
}

// explainProfiles logs what a failed step on attempt's profiles saw: the
// attempt as the store has it, the profile list as the page's reader gets
// it from the API, the profiles section's HTML, the browser's problems.
func (e *env) explainProfiles(tb *tab, attempt string) {
	t := e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, err := e.st.Attempt(ctx, attempt); err != nil {
		t.Logf("the store's attempt %s: %v", attempt, err)
	} else {
		jvm := "none"
		for _, p := range d.ProcessList {
			if p.Role == wire.RoleTaskJVM {
				jvm = fmt.Sprintf("pid %d, end %d", p.PID, p.End)
			}
		}
		t.Logf("the store's attempt %s: state %s, host %s, last seen %s ago, task JVM %s", attempt, d.State, d.Host,
			time.Since(time.UnixMilli(int64(d.LastSeen))).Round(time.Millisecond), jvm)
	}
	t.Logf("GET its profiles, as the page: %s", tb.postMortem(`(() => { const x = new XMLHttpRequest();
		x.open('GET', '/api/v1/jobs/`+profJob+`/attempts/`+attempt+`/profiles', false); x.send(); return x.status + ' ' + x.responseText; })()`))
	t.Logf("the profiles section: %s", tb.postMortem(`(document.querySelector('[data-section=profiles]') || {outerHTML: '(none)'}).outerHTML`))
	t.Logf("the page: %s, attempt state badge %s", tb.postMortem(`location.pathname`),
		tb.postMortem(`[...document.querySelectorAll('.badge[class*=state-]')].map(b => b.textContent).join(',')`))
	tb.mu.Lock()
	for _, p := range tb.problems {
		t.Logf("browser: %s", p)
	}
	tb.mu.Unlock()
}
