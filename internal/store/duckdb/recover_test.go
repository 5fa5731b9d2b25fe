package duckdb

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// crashImage copies the store's files as they are on disk now, as a crash
// would leave them (every commit is in the WAL), into a new directory.
func crashImage(t *testing.T, s *Store) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"taskscope.duckdb", "taskscope.duckdb.wal"} {
		src, err := os.Open(filepath.Join(s.opt.Dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRecoverAfterCrash: summaries are written rarely; a crash image taken
// after commits the summaries have not taken in opens with the same jobs,
// attempts and processes as the store that made it.
func TestRecoverAfterCrash(t *testing.T) {
	opt := testOptions(t.TempDir())
	opt.SummaryEvery = time.Hour
	s, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	g := &storetest.Gen{Agent: "node1-r", Host: "node1"}
	var atts []*storetest.AttemptSpec
	for i := 0; i < 12; i++ {
		typ := []string{"map", "reduce"}[i%2]
		atts = append(atts, &storetest.AttemptSpec{ID: "attempt_1700000000000_0007_" + typ[:1] + "_00000" + string(rune('a'+i)) + "_0",
			JobID: "job_1700000000000_0007", Type: typ, JobName: "crash", User: "erin", Queue: "default", MemoryMB: 1024,
			Start: storetest.T0.Add(time.Duration(i) * time.Second),
			Procs: []storetest.ProcSpec{{PID: int32(4000 + i), Role: wire.RoleTaskJVM, Cmdline: "java -Xmx800m YarnChild 10.0.0.1 4242", CPUPerS: 100, RSS: 1 << 20},
				{PID: int32(5000 + i), Role: wire.RoleStreaming, Cmdline: "python mapper.py", CPUPerS: 50, RSS: 1 << 20, StartSec: 1}}})
	}
	commit := func(b *wire.Batch) {
		app, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(b); err != nil {
			t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Half the attempts, written with their summaries; then the rest and
	// more of the first half, committed only.
	for _, a := range atts[:6] {
		commit(g.Batch([]*storetest.AttemptSpec{a}, 0, 3, false))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range atts[6:] {
		commit(g.Batch([]*storetest.AttemptSpec{a}, 0, 3, false))
	}
	for _, a := range atts[:6] {
		commit(g.Batch([]*storetest.AttemptSpec{a}, 3, 6, true))
	}
	crashed := crashImage(t, s)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := Open(testOptions(crashed))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want, err := s.Job(ctx, "job_1700000000000_0007")
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Job(ctx, "job_1700000000000_0007")
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 12 || len(got.AttemptList) != 12 || got.CPUMs != want.CPUMs || got.Running != want.Running ||
		got.ByType["map"] != 6 || got.ByType["reduce"] != 6 {
		t.Errorf("recovered job: %d attempts (%d listed), cpu %d, running %d, by type %v; want 12, cpu %d, running %d, 6 and 6",
			got.Attempts, len(got.AttemptList), got.CPUMs, got.Running, got.ByType, want.CPUMs, want.Running)
	}
	page, err := r.Jobs(ctx, store.JobFilter{User: "erin"})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ByType["reduce"] != 6 {
		t.Errorf("recovered jobs list: %+v, %v", page.Jobs, err)
	}
	for _, a := range atts {
		w, err := s.Attempt(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		d, err := r.Attempt(ctx, a.ID)
		if err != nil {
			t.Fatalf("recovered %s: %v", a.ID, err)
		}
		if d.CPUMs != w.CPUMs || d.State != w.State || len(d.ProcessList) != 2 {
			t.Errorf("recovered %s: cpu %d, %s, %d processes; want cpu %d, %s, 2", a.ID, d.CPUMs, d.State, len(d.ProcessList),
				w.CPUMs, w.State)
			continue
		}
		for i, p := range d.ProcessList {
			if p.Cmdline != w.ProcessList[i].Cmdline || p.End != w.ProcessList[i].End || p.Samples != w.ProcessList[i].Samples {
				t.Errorf("recovered %s process %d: %+v, want %+v", a.ID, p.PID, p, w.ProcessList[i])
			}
		}
	}
}
