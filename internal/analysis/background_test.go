package analysis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// told is what the listeners were told: each analysis in order, with the
// reads made for its job since the one before (running jobs analysed
// together read together: counting tells them apart).
type told struct {
	mu    sync.Mutex
	jobs  []string
	ended []bool
	reads []int64
	hosts []map[string]string
	c     *counting
	// endedTogether counts the ended jobs analysed with others.
	endedTogether int
}

func (t *told) listen(_ context.Context, a *analysis.Analysed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.c.jobReads(a.JobID)
	if a.Ended && t.c.readWith(a.JobID) > 1 {
		t.endedTogether++
	}
	t.jobs, t.ended, t.reads, t.hosts = append(t.jobs, a.JobID), append(t.ended, a.Ended), append(t.reads, n), append(t.hosts, a.Hosts)
}

// since is what was told from the i-th analysis on.
func (t *told) since(i int) (jobs []string, ended []bool, reads []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append(jobs, t.jobs[i:]...), append(ended, t.ended[i:]...), append(reads, t.reads[i:]...)
}

func (t *told) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.jobs)
}

// mark is len, and forgets the reads not told of yet (the test's own).
func (t *told) mark() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.c.mu.Lock()
	clear(t.c.byJob)
	t.c.mu.Unlock()
	return len(t.jobs)
}

// settle is the Settle of runBackground's analyser.
const settle = 5 * time.Second

// runBackground runs an analyser of st in the background until the test
// ends (a poll every 20 ms, Settle, one worker, now its clock), its
// metrics registered in reg: the listener returned is told of each
// analysis.
func runBackground(t *testing.T, st *duckdb.Store, now func() time.Time, reg *prometheus.Registry) (*analysis.Analyzer, *told) {
	c := &counting{Store: st, keep: true}
	tl := &told{c: c}
	a := analysis.NewWith(c, analysis.Options{Poll: 20 * time.Millisecond, Settle: settle, Workers: 1, Now: now,
		Listeners: []analysis.Listener{tl.listen}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return a, tl
}

// TestBackgroundAnalysesEveryJob: the analyser running in the background
// analyses every job of a loadgen cluster without any page asking: every
// finished job once, Settle after its end, its report stored and the same
// as one made from scratch; every running job that ran a minute, and again
// a minute later when more data came, reading again only what changed.
// Ended jobs and running ones are analysed together (the ended ones
// first, apart from the running). The listeners are told of each
// analysis, ended or not, with the hosts of the attempts the findings
// name; the metrics count them, and the backlog goes back to 0.
func TestBackgroundAnalysesEveryJob(t *testing.T) {
	start := time.Now().Add(-40 * time.Minute).Truncate(time.Second)
	st, g, clock := filledStore(t, start, 15*60) // clock: the data's last second, the store's and the analyser's
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a, tl := runBackground(t, st, now, reg)

	// settled: every job due is analysed, as the store says.
	settled := func() bool {
		page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			s, err := st.Analysis(ctx, j.JobID)
			if errors.Is(err, store.ErrNotFound) {
				if j.State == store.StateFinished && now().Sub(time.UnixMilli(int64(j.LastSeen))) >= settle ||
					j.State == store.StateRunning && now().Sub(time.UnixMilli(int64(j.Start))) >= time.Minute {
					return false
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if j.State == store.StateFinished && now().Sub(time.UnixMilli(int64(j.LastSeen))) >= settle &&
				(!s.Ended || s.Mark != analysis.Mark(&j)) {
				return false
			}
		}
		return true
	}
	backlog := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "taskscope_analysis_backlog" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no taskscope_analysis_backlog")
		return 0
	}
	testsrv.WaitUntil(t, "every job due analysed", 2*time.Minute, func() bool { return settled() && backlog() == 0 })
	jobs, ended, _ := tl.since(0)
	endedOnce := map[string]int{}
	running := map[string]bool{}
	for i, id := range jobs {
		if ended[i] {
			endedOnce[id]++
		} else {
			running[id] = true
		}
	}
	for id, n := range endedOnce {
		if n != 1 {
			t.Errorf("%s: analysed %d times as ended", id, n)
		}
	}
	if len(endedOnce) == 0 || len(running) == 0 {
		t.Fatalf("%d finished and %d running jobs analysed: the cluster does not cover both", len(endedOnce), len(running))
	}
	// The stored reports are those made from scratch now, and are what a
	// finished job's page reads.
	fresh := analysis.New(st)
	for _, id := range jobs {
		s, err := st.Analysis(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Report(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Findings(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if canonical(got.(*analysis.Report)) != canonical(want) {
			t.Errorf("%s (stored at %d): the page reads\n%s\nfrom scratch\n%s", id, s.Evaluated, canonical(got.(*analysis.Report)), canonical(want))
		}
	}
	for i, h := range tl.hosts {
		for att, host := range h {
			if host == "" || att == "" {
				t.Errorf("analysis %d: attempt %q on host %q", i, att, host)
			}
		}
	}
	t.Logf("%d analyses: %d jobs analysed as ended, %d as running", len(jobs), len(endedOnce), len(running))

	// Five minutes more: the running jobs have new data and are analysed
	// again, reading only what changed; those that ended, once.
	n := tl.mark()
	clock.Store(storetest.Fill(t, st, g, start, 20*60).UnixMilli())
	testsrv.WaitUntil(t, "every job due analysed again", 2*time.Minute, func() bool { return settled() && backlog() == 0 })
	jobs, ended, reads := tl.since(n)
	var again, scratch int64
	var agains int
	for i, id := range jobs {
		if ended[i] {
			if endedOnce[id]++; endedOnce[id] > 1 {
				t.Errorf("%s: analysed again as ended", id)
			}
			continue
		}
		if running[id] {
			// Analysed as running before: what it reads now against
			// what a report from scratch reads.
			cs := &counting{Store: st}
			if _, err := analysis.New(cs).Report(ctx, id); err != nil {
				t.Fatal(err)
			}
			again, scratch, agains = again+reads[i], scratch+cs.reads(), agains+1
		}
	}
	t.Logf("%d running jobs analysed again: %d series and process lists read, %d from scratch", agains, again, scratch)
	if agains == 0 || again*2 > scratch {
		t.Errorf("running jobs analysed again read %d series and process lists, %d from scratch", again, scratch)
	}
	if tl.c.together.Load() == 0 {
		t.Error("no running jobs were analysed together")
	}
	tl.mu.Lock()
	if tl.endedTogether == 0 {
		t.Error("no ended jobs were analysed together")
	}
	tl.mu.Unlock()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			counts[mf.GetName()+labels(m)] += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	endedTold := 0
	for _, e := range tl.ended {
		if e {
			endedTold++
		}
	}
	if got := counts[`taskscope_analysis_jobs_total{result="ok",state="ended"}`]; got != float64(endedTold) ||
		counts[`taskscope_analysis_jobs_total{result="ok",state="running"}`] != float64(tl.len()-endedTold) ||
		counts["taskscope_analysis_latency_seconds"] != float64(endedTold) {
		t.Errorf("metrics: %v; told %d analyses, %d ended", counts, tl.len(), endedTold)
	}
}

func labels(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	s := "{"
	for i, l := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + `="` + l.GetValue() + `"`
	}
	return s + "}"
}

// TestBackgroundAnalysesLateData: the analyser follows the order in which
// data is stored, not the time it says. Half an hour after every job was
// analysed (three times the poll's Window), an agent sends its spool: a job that
// ran 40 minutes ago, and a late attempt of a job analysed long since.
// Both are analysed without any page asking: the new job at once, the
// one analysed before once Settle has passed since its data came (more of
// a spool may follow).
func TestBackgroundAnalysesLateData(t *testing.T) {
	start := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	st, _, clock := filledStore(t, start, 10*60)
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	ctx := context.Background()
	_, tl := runBackground(t, st, now, prometheus.NewRegistry())
	// analysedAsIs: the job's stored analysis is of it as it is now, ended.
	analysedAsIs := func(id string) bool {
		page, err := st.Jobs(ctx, store.JobFilter{Name: id, Limit: 1})
		if err != nil || len(page.Jobs) != 1 {
			t.Fatalf("job %s: %v, %v", id, page.Jobs, err)
		}
		s, err := st.Analysis(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return s.Ended && s.Mark == analysis.Mark(&page.Jobs[0])
	}
	// Three minutes on, every job has ended (its attempts lost) and is
	// analysed; half an hour more passes.
	clock.Store(clock.Load() + (3 * time.Minute).Milliseconds())
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil || len(page.Jobs) == 0 {
		t.Fatalf("jobs: %v", err)
	}
	testsrv.WaitUntil(t, "every job analysed as ended", time.Minute, func() bool {
		for _, j := range page.Jobs {
			if !analysedAsIs(j.JobID) {
				return false
			}
		}
		return true
	})
	old := page.Jobs[len(page.Jobs)-1] // the first to start
	n := tl.len()
	clock.Store(clock.Load() + (30 * time.Minute).Milliseconds())

	// The spool: a job of 40 minutes ago, and another attempt of old.
	g := &storetest.Gen{Agent: "spool-1", Host: "spool"}
	spec := func(id, job string, at time.Time) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: id, JobID: job, Type: "reduce", JobName: "late", User: "alice", Queue: "etl",
			MemoryMB: 2048, Start: at,
			Procs: []storetest.ProcSpec{{PID: 4242, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 512 << 20}}}
	}
	lateJob := "job_1700000000000_9999"
	at := now().Add(-40 * time.Minute)
	storetest.Ingest(t, st, g.Batch([]*storetest.AttemptSpec{spec("attempt_1700000000000_9999_r_000000_0", lateJob, at)}, 0, 60, true),
		g.Batch([]*storetest.AttemptSpec{spec(strings.Replace(old.JobID, "job_", "attempt_", 1)+"_r_000099_0", old.JobID,
			time.UnixMilli(int64(old.LastSeen)).Add(-time.Minute))}, 0, 50, true))
	testsrv.WaitUntil(t, "the job that came late analysed", time.Minute, func() bool { return analysedAsIs(lateJob) })
	if analysedAsIs(old.JobID) {
		t.Errorf("job %s analysed again before Settle passed since its late data came", old.JobID)
	}
	clock.Store(clock.Load() + (settle + time.Second).Milliseconds())
	testsrv.WaitUntil(t, "the job with a late attempt analysed again", time.Minute, func() bool { return analysedAsIs(old.JobID) })
	// (Listeners are told after the analysis is stored.)
	testsrv.WaitUntil(t, "the listeners told", time.Minute, func() bool { return tl.len() >= n+2 })
	jobs, ended, _ := tl.since(n)
	if fmt.Sprint(jobs) != fmt.Sprint([]string{lateJob, old.JobID}) || fmt.Sprint(ended) != "[true true]" {
		t.Errorf("told of %v (ended %v), want %s then %s, ended", jobs, ended, lateJob, old.JobID)
	}
}
