package analysis_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// oneByOne is a store that reads each series and each attempt on its own
// (it hides store.SeriesBatcher and store.ProcessLister).
type oneByOne struct{ store.Store }

// A report reads ahead and together what its heuristics read, and finds
// what reading one by one finds: the same findings, to the numbers, for
// every job of a loadgen cluster (running jobs and finished ones,
// Streaming ones, leaks, stragglers). (Loadgen's tasks fork no short-lived
// processes: their counts are read, and are 0; storetest's BatchReads
// compares those reads.)
func TestReadAheadSameFindings(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	start := time.Now().Add(-25 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 8, Slots: 8, BatchTicks: 5, Seed: 5, Start: start})
	storetest.Fill(t, st, g, start, 25*60)
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	together, alone := analysis.New(st), analysis.New(oneByOne{st})
	found := map[string]int{}
	for _, j := range page.Jobs {
		a, err := together.Report(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := alone.Report(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		a.Evaluated, b.Evaluated = 0, 0
		// Heuristics that go through the task types in map order list
		// their findings of one severity in any order.
		for _, r := range []*analysis.Report{a, b} {
			sort.SliceStable(r.Findings, func(x, y int) bool {
				fx, fy := r.Findings[x], r.Findings[y]
				return fx.Heuristic+fx.TaskType+fx.Message < fy.Heuristic+fy.TaskType+fy.Message
			})
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s:\n read together %s\n one by one    %s", j.JobID, ja, jb)
		}
		for _, f := range a.Findings {
			found[f.Heuristic]++
		}
	}
	t.Logf("%d jobs; findings %v", len(page.Jobs), found)
	for _, h := range []string{"memory_growth", "streaming_bottleneck"} {
		if found[h] == 0 {
			t.Errorf("no %s finding: the comparison does not cover what it reads", h)
		}
	}
}
