package analysis_test

import (
	"fmt"
	"testing"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

// TestCriticalPath: a MapReduce job of 4 maps on 2 containers, one of
// them slow, and a reduce that starts early (slow start) and ends 5 s
// after the last map: the path runs through the slow map to the reduce;
// the what-ifs replay it without the slow map and with more containers.
func TestCriticalPath(t *testing.T) {
	d := job(1, "wordcount",
		task{typ: "map", host: "h1", d: 10, cpu: 0.9},
		task{typ: "map", host: "h2", d: 10, cpu: 0.9},
		task{typ: "map", host: "h1", s: 10, d: 10, cpu: 0.9},
		task{typ: "map", host: "h2", s: 10, d: 30, cpu: 0.3, ioMB: 500},
		task{typ: "reduce", host: "h3", s: 15, d: 30, cpu: 0.2})
	r := report(t, newFake(d), d.JobID)
	p := r.Path
	if p == nil {
		t.Fatal("no critical path")
	}
	var ids []string
	for _, s := range p.Steps {
		ids = append(ids, s.AttemptID)
		t.Logf("step %s %s wave %d gap %.0f s shuffle %.0f s: %s", s.AttemptID, s.Type, s.Wave, s.Gap, s.Shuffle, s.Note)
	}
	want := []string{"attempt_1700000000000_0001_m_000001_0", "attempt_1700000000000_0001_m_000003_0", "attempt_1700000000000_0001_r_000000_0"}
	if len(ids) != 3 || ids[1] != want[1] || ids[2] != want[2] || (ids[0] != want[0] && ids[0] != "attempt_1700000000000_0001_m_000000_0") {
		t.Errorf("critical path %v, want %v", ids, want)
	}
	if len(p.Steps) == 3 {
		if s := p.Steps[2]; s.Shuffle != 25 || s.Gap != -25 {
			t.Errorf("the reduce waited %.0f s for the last map (gap %.0f), want 25", s.Shuffle, s.Gap)
		}
		if s := p.Steps[1]; s.Wave != 2 || s.Cause == "" || s.CPUShare != 30 {
			t.Errorf("the slow map's step %+v", s)
		}
	}
	if p.Duration != 45 {
		t.Errorf("duration %.0f s, want 45", p.Duration)
	}
	for _, w := range p.Waves {
		t.Logf("waves %+v", w)
		if w.TaskType == "map" && (w.Slots != 2 || w.Waves != 2 || w.LastWave != 2 || w.Kind != "straggler") {
			t.Errorf("map waves %+v", w)
		}
	}
	saved := map[string]float64{}
	for _, w := range p.WhatIf {
		t.Logf("what-if %s", w.Text)
		saved[w.Kind+" "+w.AttemptID+w.TaskType] = w.Saved
		if w.Kind == "more_containers" {
			saved[w.Kind+" "+w.TaskType+string(rune('0'+w.Containers))] = w.Saved
		}
	}
	// Without the slow map the maps end at 20 s and the reduce 5 s later.
	if got := saved["without_attempt attempt_1700000000000_0001_m_000003_0map"]; got != 20 {
		t.Errorf("without the slow map: %.0f s saved, want 20 (%v)", got, saved)
	}
	// One more container: the slow map still starts at 10 s; two more: at 0.
	if got := saved["more_containers map1"]; got != 0 {
		t.Errorf("one more map container: %.0f s saved, want 0", got)
	}
	if got := saved["more_containers map2"]; got != 10 {
		t.Errorf("two more map containers: %.0f s saved, want 10", got)
	}
}

// TestWhatIfWaves: 9 maps of 10 minutes on 4 containers (a third wave of
// one map), then a reduce that failed after a minute and its retry: with 2
// more map containers the maps end after two waves, and the reduces
// follow 10 minutes earlier; more reduce containers change nothing (the
// retry waits for the failure).
func TestWhatIfWaves(t *testing.T) {
	var ts []task
	for i := 0; i < 9; i++ {
		ts = append(ts, task{typ: "map", host: fmt.Sprintf("h%d", i%4), s: float64(600 * (i / 4)), d: 600, cpu: 0.8})
	}
	ts = append(ts, task{typ: "reduce", host: "h1", s: 1800, d: 60, cpu: 0.8, outcome: store.OutcomeFailed},
		task{typ: "reduce", host: "h2", s: 1860, d: 60, cpu: 0.8})
	d := job(1, "nightly", ts...)
	d.AttemptList[10].RetryOf = d.AttemptList[9].AttemptID
	r := report(t, newFake(d), d.JobID)
	got := map[string]float64{}
	for _, w := range r.Path.WhatIf {
		t.Log(w.Text)
		got[fmt.Sprintf("%s %s+%d", w.Kind, w.TaskType, w.Containers)] = w.Saved
	}
	want := map[string]float64{"more_containers map+2": 600, "more_containers map+4": 600}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v s saved, want %v (%v)", k, got[k], v, got)
		}
	}
	if f := finding(r, "last_wave"); f == nil || f.Severity != analysis.Moderate || f.TaskType != "map" {
		t.Errorf("last wave finding %+v", f)
	}
	if n := len(r.Path.Steps); n != 5 || r.Path.Steps[4].AttemptID != d.AttemptList[10].AttemptID {
		t.Errorf("critical path of %d steps ending %s", n, r.Path.Steps[n-1].AttemptID)
	}
}

// TestTezVertexWaves: the waves of a Tez DAG are a vertex's: vertex 01's
// 6 tasks on 2 containers, vertex 02's 2 tasks after them.
func TestTezVertexWaves(t *testing.T) {
	var atts []store.Attempt
	add := func(vertex, task int, s, d int64) {
		start := t0.UnixMilli() + s*1000
		atts = append(atts, store.Attempt{AttemptID: fmt.Sprintf("attempt_1700000000000_0007_1_%02d_%06d_0", vertex, task),
			JobID: "application_1700000000000_0007", Host: "h1", Type: "tez", State: "finished", Start: store.Time(start),
			End: store.Time(start + d*1000), LastSeen: store.Time(start + d*1000), DurationMs: d * 1000, CPUMs: d * 800})
	}
	for i := 0; i < 6; i++ {
		add(1, i, int64(10*(i/2)), 10)
	}
	add(2, 0, 30, 10)
	add(2, 1, 30, 10)
	d := &store.JobDetail{Job: store.Job{JobID: "application_1700000000000_0007", State: store.StateFinished}, AttemptList: atts}
	r := report(t, newFake(d), d.JobID)
	if len(r.Path.Waves) != 2 {
		t.Fatalf("waves %+v, want one per vertex", r.Path.Waves)
	}
	v1, v2 := r.Path.Waves[0], r.Path.Waves[1]
	if v1.Vertex != "1/01" || v1.Slots != 2 || v1.Waves != 3 || v2.Vertex != "1/02" || v2.Waves != 1 {
		t.Errorf("vertex waves %+v, %+v", v1, v2)
	}
	if n := len(r.Path.Steps); n != 4 || r.Path.Steps[3].AttemptID != "attempt_1700000000000_0007_1_02_000001_0" {
		t.Errorf("critical path %+v", r.Path.Steps)
	}
}

// TestWavesCountCores: a type's waves count its containers' cores
// (store.Attempt.VCores, one where not known): the most held at once, and
// the idle share of its last wave in core time, where a large container
// left idle weighs its cores.
func TestWavesCountCores(t *testing.T) {
	var ts []task
	for i := 0; i < 9; i++ {
		ts = append(ts, task{typ: "map", host: fmt.Sprintf("h%d", i%4), s: float64(600 * (i / 4)), d: 600, cpu: 0.8})
	}
	d := job(1, "nightly", ts...)
	plain := report(t, newFake(d), d.JobID).Path.Waves[0]
	if plain.Slots != 4 || plain.Cores != 4 {
		t.Fatalf("waves without vcores: %d slots, %d cores; want 4 and 4", plain.Slots, plain.Cores)
	}
	// The waves' 4 containers of 2 cores, the last wave's one of 4: the
	// last wave's 4-core attempt ran on a fifth of the cores the type had
	// at most (8), where one container of four ran before.
	for i := range d.AttemptList {
		d.AttemptList[i].VCores = 2
	}
	d.AttemptList[8].VCores = 4
	w := report(t, newFake(d), d.JobID).Path.Waves[0]
	if w.Slots != 4 || w.Cores != 8 || w.Waves != 3 || w.LastWave != 1 {
		t.Fatalf("waves of 2-core containers: %+v", w)
	}
	// Idle: 8 cores over the last wave's 600 s, less its 4 cores' 600 s,
	// over the type's 8 cores for 1800 s.
	if want := (8.0*600 - 4*600) / (8 * 1800) * 100; !near(w.IdleShare, want, 1e-9) || near(w.IdleShare, plain.IdleShare, 1e-9) {
		t.Errorf("idle share %.2f %%, want %.2f (one core a container: %.2f)", w.IdleShare, want, plain.IdleShare)
	}
}
