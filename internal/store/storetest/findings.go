package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// The jobs' analyses (store.FindingStore).
var findingTests = []struct {
	name string
	fn   func(t *testing.T, f Factory)
}{
	{"AnalysisStoredAndReplaced", testAnalysisStored},
	{"JobsBySeverity", testJobsBySeverity},
	{"FindingsAcrossJobs", testFindingsAcrossJobs},
	{"AnalysisStates", testAnalysisStates},
	{"AnalysisStatesByArrival", testAnalysisStatesByArrival},
	{"RestrictedFindings", testRestrictedFindings},
	{"AnalysesPutAtOnce", testAnalysesPutAtOnce},
	{"AnalysesPutTogether", testAnalysesPutTogether},
	{"JobsBare", testJobsBare},
}

func sev(s store.Severity) *store.Severity { return &s }

// finding is a stored finding whose body says its heuristic, severity and
// a number.
func finding(h string, s store.Severity, n int) store.StoredFinding {
	body, _ := json.Marshal(map[string]any{"heuristic": h, "severity": s, "n": n, "message": "<b>" + h + "</b> \"quoted\""})
	return store.StoredFinding{Heuristic: h, Severity: s, Body: body}
}

// restricted is f, Restricted.
func restricted(f store.StoredFinding) store.StoredFinding {
	f.Restricted = true
	return f
}

// analysisOf is an analysis of job j (as Jobs lists it) made at ms with fs.
func analysisOf(j store.Job, ms int64, fs ...store.StoredFinding) *store.Analysis {
	a := &store.Analysis{JobID: j.JobID, Name: j.Name, User: j.User, Queue: j.Queue, Start: j.Start,
		Findings: fs, Report: json.RawMessage(`{"critical_path":{"steps":[1,2]}}`),
		AnalysisStamp: store.AnalysisStamp{Evaluated: store.Time(ms), Version: "1+test", Settings: `{"skip":[]}`,
			Mark: uint64(ms) * 7, LastSeen: j.LastSeen, Ended: j.State == store.StateFinished}}
	for _, f := range fs {
		a.Worst = max(a.Worst, f.Severity)
	}
	return a
}

// TwelveJobs stores the jobs of testJobsList: 12 jobs of one map each,
// 5 s apart, users alice, bob, carol in turn, queues q0000 and q0001 in
// turn; the first 10 finished. It returns them newest first.
func TwelveJobs(t *testing.T, s store.Store) []store.Job {
	g := &Gen{Agent: "node1-f", Host: "node1"}
	users := []string{"alice", "bob", "carol"}
	var batches []*wire.Batch
	for i := 0; i < 12; i++ {
		job := "job_1700000000000_" + pad4(i+1)
		a := &AttemptSpec{ID: "attempt_1700000000000_" + pad4(i+1) + "_m_000000_0", JobID: job, Type: "map",
			JobName: "etl-" + users[i%3], User: users[i%3], Queue: "q" + pad4(i%2), MemoryMB: 1024,
			Start: T0.Add(time.Duration(5*i) * time.Second),
			Procs: []ProcSpec{{PID: int32(1000 + i), Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20}}}
		batches = append(batches, g.Batch([]*AttemptSpec{a}, 0, 5, i < 10))
	}
	Ingest(t, s, batches...)
	page, err := s.Jobs(context.Background(), store.JobFilter{Limit: 100})
	if err != nil || len(page.Jobs) != 12 {
		t.Fatalf("jobs: %d, %v", len(page.Jobs), err)
	}
	for _, j := range page.Jobs {
		if j.WorstSeverity != nil || j.Heuristics != nil {
			t.Fatalf("job %s not analysed has worst %v, heuristics %v", j.JobID, j.WorstSeverity, j.Heuristics)
		}
	}
	return page.Jobs
}

func testAnalysisStored(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s)
	j := jobs[3]
	if _, err := s.Analysis(ctx, j.JobID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("analysis of a job not analysed: %v, want ErrNotFound", err)
	}
	first := analysisOf(j, T0.UnixMilli()+1000, finding("skew", store.SeverityModerate, 1), finding("gc_pressure", store.SeverityLow, 2),
		finding("skew", store.SeveritySevere, 3), finding("waste", store.SeverityNone, 4), restricted(finding("outlier", store.SeverityLow, 5)))
	if err := s.PutAnalysis(ctx, first); err != nil {
		t.Fatal(err)
	}
	same := func(what string, want *store.Analysis) {
		t.Helper()
		got, err := s.Analysis(ctx, j.JobID)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !sameAnalysis(got, want) {
			t.Errorf("%s: stored\n%+v\nread back\n%+v", what, want, got)
		}
	}
	same("stored", first)
	// A later analysis replaces it, whatever it holds; an earlier one
	// stored after it does not.
	second := analysisOf(j, T0.UnixMilli()+5000)
	if err := s.PutAnalysis(ctx, second); err != nil {
		t.Fatal(err)
	}
	same("replaced by a later one", second)
	if err := s.PutAnalysis(ctx, analysisOf(j, T0.UnixMilli()+2000, finding("skew", store.SeverityCritical, 9))); err != nil {
		t.Fatal(err)
	}
	same("an earlier one stored after it", second)
	third := analysisOf(j, T0.UnixMilli()+9000, finding("lost_processes", store.SeverityCritical, 5))
	if err := s.PutAnalysis(ctx, third); err != nil {
		t.Fatal(err)
	}
	same("replaced again", third)
	if f.Reopen != nil {
		s = f.Reopen(t, s, Clock)
		t.Cleanup(func() { s.Close() })
		same("after a restart", third)
	}
}

// sameAnalysis compares analyses, their JSON by value.
func sameAnalysis(a, b *store.Analysis) bool {
	norm := func(x *store.Analysis) store.Analysis {
		c := *x
		c.Report = canonical(c.Report)
		c.Findings = nil
		for _, f := range x.Findings {
			f.Body = canonical(f.Body)
			c.Findings = append(c.Findings, f)
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func canonical(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return json.RawMessage("invalid: " + string(b))
	}
	out, _ := json.Marshal(v)
	return out
}

func ids(jobs []store.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.JobID)
	}
	return out
}

func testJobsBySeverity(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s) // newest first: jobs[0] is job 12
	// Jobs 12, 11 (running), 9, 6, 3 and 1 are analysed: 12 critical
	// (lost_processes), 11 none, 9 severe skew and low gc, 6 moderate
	// gc, 3 severe gc and moderate skew, 1 low skew.
	ms := T0.UnixMilli() + 60_000
	put := func(i int, fs ...store.StoredFinding) {
		if err := s.PutAnalysis(ctx, analysisOf(jobs[12-i], ms, fs...)); err != nil {
			t.Fatal(err)
		}
	}
	put(12, finding("lost_processes", store.SeverityCritical, 1))
	put(11)
	put(9, finding("skew", store.SeveritySevere, 1), finding("gc_pressure", store.SeverityLow, 2))
	put(6, finding("gc_pressure", store.SeverityModerate, 1))
	put(3, finding("gc_pressure", store.SeveritySevere, 1), finding("skew", store.SeverityModerate, 2))
	put(1, finding("skew", store.SeverityLow, 1), finding("waste", store.SeverityNone, 2))
	job := func(i int) string { return "job_1700000000000_" + pad4(i) }
	cases := []struct {
		name   string
		f      store.JobFilter
		want   []int
		total  int
		counts map[string]int // CountSeverities
	}{
		{"all, worst first", store.JobFilter{BySeverity: true}, []int{12, 9, 3, 6, 1, 11, 10, 8, 7, 5, 4, 2}, 12,
			map[string]int{"critical": 1, "severe": 2, "moderate": 1, "low": 1, "none": 1, store.NotAnalysed: 6}},
		{"severe or worse", store.JobFilter{MinSeverity: sev(store.SeveritySevere)}, []int{12, 9, 3}, 3,
			map[string]int{"critical": 1, "severe": 2, "moderate": 1, "low": 1, "none": 1, store.NotAnalysed: 6}},
		{"analysed", store.JobFilter{MinSeverity: sev(store.SeverityNone)}, []int{12, 11, 9, 6, 3, 1}, 6, nil},
		{"a heuristic", store.JobFilter{Heuristic: "skew"}, []int{9, 3, 1}, 3,
			map[string]int{"critical": 0, "severe": 1, "moderate": 1, "low": 1, "none": 0, store.NotAnalysed: 0}},
		{"a heuristic's severity", store.JobFilter{Heuristic: "gc_pressure", MinSeverity: sev(store.SeverityModerate), BySeverity: true},
			[]int{3, 6}, 2, map[string]int{"critical": 0, "severe": 1, "moderate": 1, "low": 1, "none": 0, store.NotAnalysed: 0}},
		{"a heuristic found at none only", store.JobFilter{Heuristic: "waste"}, []int{}, 0, nil},
		{"and a user", store.JobFilter{User: "carol", MinSeverity: sev(store.SeverityLow)}, []int{12, 9, 6, 3}, 4,
			map[string]int{"critical": 1, "severe": 2, "moderate": 1, "low": 0, "none": 0, store.NotAnalysed: 0}},
		{"and the state", store.JobFilter{State: store.StateRunning, BySeverity: true}, []int{12, 11}, 2, nil},
		{"paged", store.JobFilter{MinSeverity: sev(store.SeverityLow), BySeverity: true, Limit: 2, Offset: 2}, []int{3, 6}, 5, nil},
		{"past the end", store.JobFilter{MinSeverity: sev(store.SeverityLow), Offset: 10}, []int{}, 5, nil},
		{"visible", store.JobFilter{MinSeverity: sev(store.SeverityLow), Visible: &store.Visible{Users: []string{"alice"},
			Queues: []string{"q0000"}}}, []int{9, 3, 1}, 3, nil},
	}
	for _, c := range cases {
		c.f.CountSeverities = c.counts != nil
		page, err := s.Jobs(ctx, c.f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var want []string
		for _, i := range c.want {
			want = append(want, job(i))
		}
		if fmt.Sprint(ids(page.Jobs)) != fmt.Sprint(want) || page.Total != c.total {
			t.Errorf("%s: %v (total %d), want %v (total %d)", c.name, ids(page.Jobs), page.Total, want, c.total)
		}
		if c.counts != nil && !reflect.DeepEqual(map[string]int(page.Severities), c.counts) {
			t.Errorf("%s: counts %v, want %v", c.name, page.Severities, c.counts)
		}
		if c.counts == nil && page.Severities != nil {
			t.Errorf("%s: counts %v not asked for", c.name, page.Severities)
		}
	}
	page, err := s.Jobs(ctx, store.JobFilter{MinSeverity: sev(store.SeverityNone), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{job(12): "critical [lost_processes]", job(11): "none []", job(9): "severe [skew gc_pressure]",
		job(6): "moderate [gc_pressure]", job(3): "severe [gc_pressure skew]", job(1): "low [skew]"}
	for _, j := range page.Jobs {
		if got := fmt.Sprintf("%v %v", j.WorstSeverity, j.Heuristics); j.WorstSeverity == nil || got != want[j.JobID] {
			t.Errorf("%s: worst and heuristics %s, want %s", j.JobID, got, want[j.JobID])
		}
	}
}

func testFindingsAcrossJobs(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s)
	ms := T0.UnixMilli() + 60_000
	put := func(i int, fs ...store.StoredFinding) {
		if err := s.PutAnalysis(ctx, analysisOf(jobs[12-i], ms+int64(i), fs...)); err != nil {
			t.Fatal(err)
		}
	}
	put(12, finding("lost_processes", store.SeverityCritical, 1))
	put(9, finding("skew", store.SeveritySevere, 1), finding("gc_pressure", store.SeverityLow, 2))
	put(6, finding("gc_pressure", store.SeverityModerate, 1))
	put(3, finding("gc_pressure", store.SeveritySevere, 1), finding("skew", store.SeverityModerate, 2), finding("waste", store.SeverityNone, 3))
	// An earlier analysis of job 6, replaced: its findings are not listed.
	if err := s.PutAnalysis(ctx, analysisOf(jobs[12-6], ms-1, finding("skew", store.SeverityCritical, 7))); err != nil {
		t.Fatal(err)
	}
	key := func(r store.FindingRow) string {
		var b struct{ N int }
		json.Unmarshal(r.Finding.Body, &b)
		return fmt.Sprintf("%s/%s/%s/%d", r.JobID[len(r.JobID)-2:], r.Finding.Heuristic, r.Finding.Severity, b.N)
	}
	cases := []struct {
		name  string
		f     store.FindingFilter
		want  []string
		total int
	}{
		{"all", store.FindingFilter{}, []string{"12/lost_processes/critical/1", "09/skew/severe/1", "09/gc_pressure/low/2",
			"06/gc_pressure/moderate/1", "03/gc_pressure/severe/1", "03/skew/moderate/2", "03/waste/none/3"}, 7},
		{"severe or worse", store.FindingFilter{MinSeverity: sev(store.SeveritySevere)},
			[]string{"12/lost_processes/critical/1", "09/skew/severe/1", "03/gc_pressure/severe/1"}, 3},
		{"a heuristic", store.FindingFilter{Heuristic: "gc_pressure"},
			[]string{"09/gc_pressure/low/2", "06/gc_pressure/moderate/1", "03/gc_pressure/severe/1"}, 3},
		{"both", store.FindingFilter{Heuristic: "skew", MinSeverity: sev(store.SeverityModerate)},
			[]string{"09/skew/severe/1", "03/skew/moderate/2"}, 2},
		{"a user", store.FindingFilter{User: "carol", MinSeverity: sev(store.SeverityModerate)},
			[]string{"12/lost_processes/critical/1", "09/skew/severe/1", "06/gc_pressure/moderate/1", "03/gc_pressure/severe/1", "03/skew/moderate/2"}, 5},
		{"a queue", store.FindingFilter{Queue: "q0001"}, []string{"12/lost_processes/critical/1", "06/gc_pressure/moderate/1"}, 2},
		{"time", store.FindingFilter{From: T0.Add(20 * time.Second).UnixMilli(), To: T0.Add(50 * time.Second).UnixMilli()},
			[]string{"09/skew/severe/1", "09/gc_pressure/low/2", "06/gc_pressure/moderate/1"}, 3},
		{"paged", store.FindingFilter{Limit: 2, Offset: 2}, []string{"09/gc_pressure/low/2", "06/gc_pressure/moderate/1"}, 7},
		{"past the end", store.FindingFilter{Offset: 20}, []string{}, 7},
		{"visible", store.FindingFilter{Visible: &store.Visible{Users: []string{"alice"}, Queues: []string{"q0000"}}},
			[]string{"09/skew/severe/1", "09/gc_pressure/low/2", "03/gc_pressure/severe/1", "03/skew/moderate/2", "03/waste/none/3"}, 5},
		{"visible to none", store.FindingFilter{Visible: &store.Visible{}}, []string{}, 0},
	}
	for _, c := range cases {
		page, err := s.Findings(ctx, c.f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := []string{}
		for _, r := range page.Findings {
			got = append(got, key(r))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) || page.Total != c.total {
			t.Errorf("%s: %v (total %d), want %v (total %d)", c.name, got, page.Total, c.want, c.total)
		}
	}
	page, err := s.Findings(ctx, store.FindingFilter{Heuristic: "lost_processes"})
	if err != nil || len(page.Findings) != 1 {
		t.Fatalf("lost_processes: %v, %v", page.Findings, err)
	}
	r, j := page.Findings[0], jobs[0]
	if r.JobID != j.JobID || r.Name != j.Name || r.User != j.User || r.Queue != j.Queue || r.Start != j.Start || r.Ended ||
		r.Evaluated != store.Time(ms+12) || string(canonical(r.Finding.Body)) != string(canonical(finding("lost_processes", store.SeverityCritical, 1).Body)) {
		t.Errorf("finding of job 12 (running): %+v (body %s)", r, r.Finding.Body)
	}
}

func testAnalysisStates(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s)
	a := analysisOf(jobs[0], T0.UnixMilli()+50_000)
	a.Mark = 1<<63 + 5 // a digest: every bit of it is kept
	if err := s.PutAnalysis(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAnalysis(ctx, analysisOf(jobs[2], T0.UnixMilli()+40_000)); err != nil {
		t.Fatal(err)
	}
	// Every job was written at once, at the store's T0 + 1 minute
	// (testAnalysisStatesByArrival writes them at different times); the
	// analyses were made from T0 + 40 s on.
	since := T0.Add(40 * time.Second).UnixMilli()
	states, err := s.AnalysisStates(ctx, since, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range states {
		desc := st.Job.JobID[len(st.Job.JobID)-2:] + " " + st.Job.State
		if st.Stored != nil {
			desc += fmt.Sprintf(" analysed %d %s %s %d seen %d %v", int64(st.Stored.Evaluated)-T0.UnixMilli(), st.Stored.Version,
				st.Stored.Settings, st.Stored.Mark, int64(st.Stored.LastSeen)-T0.UnixMilli(), st.Stored.Ended)
		}
		got = append(got, desc)
		want, err := s.Jobs(ctx, store.JobFilter{Name: st.Job.JobID})
		if err != nil || len(want.Jobs) != 1 {
			t.Fatalf("job %s: %v", st.Job.JobID, err)
		}
		d, err := s.Job(ctx, st.Job.JobID)
		if err != nil {
			t.Fatal(err)
		}
		// What the analyser compares (analysis.Mark) is what Jobs and Job say.
		for _, w := range []store.Job{want.Jobs[0], d.Job} {
			if st.Job.LastSeen != w.LastSeen || st.Job.Attempts != w.Attempts || st.Job.Running != w.Running ||
				st.Job.CPUMs != w.CPUMs || st.Job.PeakRSS != w.PeakRSS || st.Job.Hosts != w.Hosts || st.Job.Name != w.Name ||
				st.Job.User != w.User || st.Job.Queue != w.Queue || st.Job.Start != w.Start || st.Job.End != w.End ||
				st.Job.State != w.State {
				t.Errorf("job %s: %+v, Jobs or Job say %+v", st.Job.JobID, st.Job, w)
			}
		}
	}
	var want []string
	for i := 1; i <= 12; i++ {
		w := pad4(i)[2:] + " finished"
		switch i {
		case 10:
			w += fmt.Sprintf(` analysed 40000 1+test {"skip":[]} %d seen 50000 true`, (T0.UnixMilli()+40_000)*7)
		case 11:
			w = "11 running"
		case 12:
			w = `12 running analysed 50000 1+test {"skip":[]} 9223372036854775813 seen 60000 false`
		}
		want = append(want, w)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("jobs written since T0 + 40 s:\n%q\nwant\n%q", got, want)
	}
	if states, err := s.AnalysisStates(ctx, since, 2); err != nil || len(states) != 2 ||
		states[0].Job.JobID != jobs[len(jobs)-1].JobID {
		t.Errorf("at most 2: %d, %v", len(states), err)
	}
	if states, err := s.AnalysisStates(ctx, Clock.Now().UnixMilli()+1, 100); err != nil || len(states) != 0 {
		t.Errorf("written since T0 + 1 min + 1 ms: %d, %v", len(states), err)
	}
}

// testAnalysisStatesByArrival: AnalysisStates lists the jobs by when
// their data was stored, whatever time the data says. A job whose data
// comes half an hour late with its old times (an agent's spool sent after
// an outage), and a job whose last batch does, are listed among those
// written since a minute ago, the last written first, each with when it
// was written and the stamp of an analysis made since; a job written
// before is not. So after a restart.
func testAnalysisStatesByArrival(t *testing.T, f Factory) {
	var now atomic.Int64
	now.Store(T0.Add(time.Minute).UnixMilli())
	c := store.Clock{Now: func() time.Time { return time.UnixMilli(now.Load()) }, StaleAfter: 2 * time.Minute}
	s := f.Open(t, c)
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	g := &Gen{Agent: "node1-late", Host: "node1"}
	spec := func(i int, start time.Time) *AttemptSpec {
		job := "job_1700000000000_" + pad4(i)
		return &AttemptSpec{ID: "attempt_1700000000000_" + pad4(i) + "_m_000000_0", JobID: job, Type: "map",
			JobName: "late-" + itoa(i), User: "alice", Queue: "etl", MemoryMB: 1024, Start: start,
			Procs: []ProcSpec{{PID: int32(2000 + i), Role: wire.RoleTaskJVM, CPUPerS: 100, RSS: 1 << 20}}}
	}
	a1, a2, a3 := spec(1, T0), spec(2, T0), spec(3, T0.Add(10*time.Second))
	Ingest(t, s, g.Batch([]*AttemptSpec{a1}, 0, 20, false), g.Batch([]*AttemptSpec{a2}, 0, 20, true))
	written := []time.Time{T0.Add(31 * time.Minute), T0.Add(32 * time.Minute)}
	now.Store(written[0].UnixMilli())
	Ingest(t, s, g.Batch([]*AttemptSpec{a3}, 0, 30, true))
	now.Store(written[1].UnixMilli())
	Ingest(t, s, g.Batch([]*AttemptSpec{a1}, 20, 40, true))
	page, err := s.Jobs(ctx, store.JobFilter{Limit: 10})
	if err != nil || len(page.Jobs) != 3 {
		t.Fatalf("jobs: %v, %v", page.Jobs, err)
	}
	byID := map[string]store.Job{}
	for _, j := range page.Jobs {
		byID[j.JobID] = j
	}
	third := analysisOf(byID[a3.JobID], written[1].UnixMilli()+500)
	for _, a := range []*store.Analysis{analysisOf(byID[a2.JobID], written[0].UnixMilli()), third} {
		if err := s.PutAnalysis(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		states, err := s.AnalysisStates(ctx, written[0].Add(-time.Minute).UnixMilli(), 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range states {
			got = append(got, fmt.Sprintf("%s %s written %v", st.Job.JobID[len(st.Job.JobID)-2:], st.Job.State,
				time.UnixMilli(int64(st.Changed)).Sub(T0)))
			if w := byID[st.Job.JobID]; st.Job.LastSeen != w.LastSeen || st.Job.Attempts != w.Attempts ||
				st.Job.Running != w.Running || st.Job.State != w.State || st.Job.Start != w.Start || st.Job.CPUMs != w.CPUMs {
				t.Errorf("%s: job %+v, Jobs says %+v", what, st.Job, w)
			}
			if st.Job.JobID == a3.JobID && (st.Stored == nil || st.Stored.Evaluated != third.Evaluated ||
				st.Stored.Mark != third.Mark || !st.Stored.Ended || st.Stored.LastSeen != third.LastSeen) {
				t.Errorf("%s: job 3's stamp %+v, stored %+v", what, st.Stored, third.AnalysisStamp)
			}
		}
		want := []string{"01 finished written 32m0s", "03 finished written 31m0s"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: jobs written since T0 + 30 min:\n%q\nwant\n%q", what, got, want)
		}
		all, err := s.AnalysisStates(ctx, 0, 100)
		if err != nil || len(all) != 3 || all[2].Job.JobID != a2.JobID || !time.UnixMilli(int64(all[2].Changed)).Equal(T0.Add(time.Minute)) {
			t.Errorf("%s: every job: %+v, %v", what, all, err)
		}
		if one, err := s.AnalysisStates(ctx, 0, 1); err != nil || len(one) != 1 || one[0].Job.JobID != a1.JobID {
			t.Errorf("%s: at most 1: %+v, %v", what, one, err)
		}
	}
	check("written")
	if f.Reopen != nil {
		s = f.Reopen(t, s, c)
		t.Cleanup(func() { s.Close() })
		check("after a restart")
	}
}

// Restricted findings: left out, with the worst severity and heuristics
// they make, of the lists that ask WithoutRestricted; kept in the others.
func testRestrictedFindings(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s) // newest first: jobs[0] is job 12
	ms := T0.UnixMilli() + 60_000
	put := func(i int, fs ...store.StoredFinding) {
		if err := s.PutAnalysis(ctx, analysisOf(jobs[12-i], ms, fs...)); err != nil {
			t.Fatal(err)
		}
	}
	put(12, restricted(finding("noisy_neighbours", store.SeverityCritical, 1)), finding("skew", store.SeverityLow, 2))
	put(9, finding("gc_pressure", store.SeveritySevere, 1))
	put(6, restricted(finding("outlier", store.SeverityModerate, 1)))
	put(3)
	job := func(i int) string { return "job_1700000000000_" + pad4(i) }
	jobCases := []struct {
		name   string
		f      store.JobFilter
		want   string // the jobs, each with its worst and heuristics
		counts map[string]int
	}{
		{"all", store.JobFilter{MinSeverity: sev(store.SeverityNone), BySeverity: true},
			"12 critical [noisy_neighbours skew], 09 severe [gc_pressure], 06 moderate [outlier], 03 none []",
			map[string]int{"critical": 1, "severe": 1, "moderate": 1, "low": 0, "none": 1, store.NotAnalysed: 8}},
		{"without restricted", store.JobFilter{MinSeverity: sev(store.SeverityNone), BySeverity: true, WithoutRestricted: true},
			"09 severe [gc_pressure], 12 low [skew], 06 none [], 03 none []",
			map[string]int{"critical": 0, "severe": 1, "moderate": 0, "low": 1, "none": 2, store.NotAnalysed: 8}},
		{"critical, without restricted", store.JobFilter{MinSeverity: sev(store.SeverityCritical), WithoutRestricted: true}, "", nil},
		{"moderate or worse, without restricted", store.JobFilter{MinSeverity: sev(store.SeverityModerate), WithoutRestricted: true},
			"09 severe [gc_pressure]", nil},
		{"a restricted heuristic", store.JobFilter{Heuristic: "noisy_neighbours"}, "12 critical [noisy_neighbours skew]", nil},
		{"a restricted heuristic, without restricted", store.JobFilter{Heuristic: "noisy_neighbours", WithoutRestricted: true}, "", nil},
		{"a heuristic, without restricted", store.JobFilter{Heuristic: "skew", WithoutRestricted: true}, "12 low [skew]", nil},
	}
	for _, c := range jobCases {
		c.f.CountSeverities = c.counts != nil
		page, err := s.Jobs(ctx, c.f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, j := range page.Jobs {
			got = append(got, fmt.Sprintf("%s %v %v", j.JobID[len(j.JobID)-2:], j.WorstSeverity, j.Heuristics))
		}
		if g := strings.Join(got, ", "); g != c.want || page.Total != len(got) {
			t.Errorf("%s: %s (total %d), want %s", c.name, g, page.Total, c.want)
		}
		if c.counts != nil && !reflect.DeepEqual(map[string]int(page.Severities), c.counts) {
			t.Errorf("%s: counts %v, want %v", c.name, page.Severities, c.counts)
		}
	}
	findingCases := []struct {
		name string
		f    store.FindingFilter
		want []string
	}{
		{"all", store.FindingFilter{}, []string{"12/noisy_neighbours/critical", "12/skew/low", "09/gc_pressure/severe", "06/outlier/moderate"}},
		{"without restricted", store.FindingFilter{WithoutRestricted: true}, []string{"12/skew/low", "09/gc_pressure/severe"}},
		{"critical, without restricted", store.FindingFilter{MinSeverity: sev(store.SeverityCritical), WithoutRestricted: true}, []string{}},
		{"a restricted heuristic, without restricted", store.FindingFilter{Heuristic: "outlier", WithoutRestricted: true}, []string{}},
		{"paged, without restricted", store.FindingFilter{WithoutRestricted: true, Offset: 1}, []string{"09/gc_pressure/severe"}},
	}
	for _, c := range findingCases {
		page, err := s.Findings(ctx, c.f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := []string{}
		for _, r := range page.Findings {
			got = append(got, fmt.Sprintf("%s/%s/%s", r.JobID[len(r.JobID)-2:], r.Finding.Heuristic, r.Finding.Severity))
		}
		total := len(c.want) + c.f.Offset
		if fmt.Sprint(got) != fmt.Sprint(c.want) || page.Total != total {
			t.Errorf("%s: %v (total %d), want %v (total %d)", c.name, got, page.Total, c.want, total)
		}
	}
	a, err := s.Analysis(ctx, job(12))
	if err != nil || len(a.Findings) != 2 || !a.Findings[0].Restricted || a.Findings[1].Restricted {
		t.Fatalf("job 12's analysis: %+v, %v", a, err)
	}
}

// PutOneAnalysis stores the jobs of TwelveJobs and an analysis of the
// newest with one severe finding, not restricted; it returns the job's id.
// A backend's test of analyses stored before restrictions drops their
// columns after it, opens the store again and checks it with
// CheckUnrestricted.
func PutOneAnalysis(t *testing.T, s store.Store) string {
	t.Helper()
	j := TwelveJobs(t, s)[0]
	a := analysisOf(j, int64(j.LastSeen), finding("skew", store.SeveritySevere, 1))
	if err := s.PutAnalysis(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return j.JobID
}

// CheckUnrestricted checks that the analysis PutOneAnalysis stored for
// jobID reads with its finding unrestricted: in the analysis, in the jobs
// list and in the findings that leave the restricted ones out.
func CheckUnrestricted(t *testing.T, s store.Store, jobID string) {
	t.Helper()
	ctx := context.Background()
	got, err := s.Analysis(ctx, jobID)
	if err != nil || len(got.Findings) != 1 || got.Findings[0].Restricted || got.Worst != store.SeveritySevere {
		t.Fatalf("the old analysis reads %+v, %v", got, err)
	}
	page, err := s.Jobs(ctx, store.JobFilter{MinSeverity: sev(store.SeveritySevere), WithoutRestricted: true})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].WorstSeverity == nil || *page.Jobs[0].WorstSeverity != store.SeveritySevere ||
		len(page.Jobs[0].Heuristics) != 1 {
		t.Fatalf("jobs without restricted: %+v, %v", page.Jobs, err)
	}
	fp, err := s.Findings(ctx, store.FindingFilter{WithoutRestricted: true})
	if err != nil || len(fp.Findings) != 1 || fp.Total != 1 {
		t.Fatalf("findings without restricted: %+v, %v", fp, err)
	}
}

// testAnalysesPutAtOnce: analyses put at once (the analyser's workers
// store theirs so; a store may insert them together) are each stored, as
// put, and each put returns once its analysis reads back.
func testAnalysesPutAtOnce(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s)
	ms := T0.UnixMilli() + 60_000
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := analysisOf(j, ms+int64(i), finding("skew", store.Severity(i%5), i))
			if errs[i] = s.PutAnalysis(ctx, a); errs[i] != nil {
				return
			}
			got, err := s.Analysis(ctx, j.JobID)
			if err != nil {
				errs[i] = fmt.Errorf("%s read after its put: %w", j.JobID, err)
				return
			}
			if got.Evaluated != a.Evaluated || len(got.Findings) != 1 || string(got.Findings[0].Body) != string(a.Findings[0].Body) ||
				got.Worst != a.Worst {
				errs[i] = fmt.Errorf("%s reads %+v, put %+v", j.JobID, got, a)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	page, err := s.Jobs(ctx, store.JobFilter{MinSeverity: sev(store.SeverityNone), CountSeverities: true})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != len(jobs) {
		t.Errorf("%d jobs analysed, want %d (%v)", page.Total, len(jobs), page.Severities)
	}
}

// testAnalysesPutTogether: analyses put together (store.PutAnalyses: by
// the store's AnalysesPutter where it has one; the analyser's passes over
// running jobs store theirs so) are each stored as put: new rows and
// rows replaced, an older analysis among them leaving the later one
// stored; and once the call returns they read back.
func testAnalysesPutTogether(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s)
	ms := T0.UnixMilli() + 60_000
	// Half stored before, one of them later than what is put next.
	for i, j := range jobs[:6] {
		at := ms - 1000
		if i == 0 {
			at = ms + 5000
		}
		if err := s.PutAnalysis(ctx, analysisOf(j, at, finding("waste", store.SeverityLow, 100+i))); err != nil {
			t.Fatal(err)
		}
	}
	var as []*store.Analysis
	for i, j := range jobs {
		as = append(as, analysisOf(j, ms+int64(i), finding("skew", store.Severity(i%5), i)))
	}
	for i, err := range store.PutAnalyses(ctx, s, as) {
		if err != nil {
			t.Errorf("%s: %v", jobs[i].JobID, err)
		}
	}
	for i, j := range jobs {
		got, err := s.Analysis(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		want := as[i]
		if i == 0 {
			want = analysisOf(j, ms+5000, finding("waste", store.SeverityLow, 100))
		}
		if got.Evaluated != want.Evaluated || len(got.Findings) != 1 || string(got.Findings[0].Body) != string(want.Findings[0].Body) ||
			got.Worst != want.Worst {
			t.Errorf("%s reads %+v, want %+v", j.JobID, got, want)
		}
	}
	if errs := store.PutAnalyses(ctx, s, nil); len(errs) != 0 {
		t.Errorf("nothing put: %v", errs)
	}
}

// testJobsBare: a Bare list is the list without Bare, job for job and
// figure for figure, but with no severity, heuristics nor total; filters
// by the analyses still select.
func testJobsBare(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	jobs := TwelveJobs(t, s)
	ms := T0.UnixMilli() + 60_000
	for i, j := range jobs[:6] {
		if err := s.PutAnalysis(ctx, analysisOf(j, ms, finding("skew", store.Severity(i%5), i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    store.JobFilter
		want int
	}{
		{"all", store.JobFilter{}, 12},
		{"user", store.JobFilter{User: "alice"}, 4},
		{"finished, by name, before", store.JobFilter{State: store.StateFinished, Name: "JOB_17", To: int64(jobs[3].Start)}, 8},
		{"a page", store.JobFilter{Limit: 5, Offset: 5}, 5},
		{"by severity", store.JobFilter{MinSeverity: sev(store.SeverityModerate), BySeverity: true}, 3},
		{"by heuristic", store.JobFilter{Heuristic: "skew"}, 4},
	} {
		full, err := s.Jobs(ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		b := c.f
		b.Bare = true
		bare, err := s.Jobs(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(full.Jobs) != c.want {
			t.Errorf("%s: %d jobs listed, want %d", c.name, len(full.Jobs), c.want)
		}
		if bare.Total != 0 || bare.Severities != nil {
			t.Errorf("%s: bare, total %d and counts %v", c.name, bare.Total, bare.Severities)
		}
		want := make([]store.Job, len(full.Jobs))
		for i, j := range full.Jobs {
			j.WorstSeverity, j.Heuristics = nil, nil
			want[i] = j
		}
		if !reflect.DeepEqual(bare.Jobs, want) {
			t.Errorf("%s: bare\n%+v\nwant\n%+v", c.name, bare.Jobs, want)
		}
	}
}
