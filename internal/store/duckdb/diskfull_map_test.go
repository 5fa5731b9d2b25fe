package duckdb

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// A commit that fails because the disk is full fails with store.ErrDiskFull
// in its chain, whether DuckDB says so in its text or an errno says it; any
// other failure does not.
func TestDiskFullMapped(t *testing.T) {
	s, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &storetest.Gen{Agent: "a", Host: "h"}
	a := &storetest.AttemptSpec{ID: "attempt_1_0001_m_000000_0", JobID: "job_1_0001", Start: storetest.T0,
		Procs: []storetest.ProcSpec{{PID: 10, CPUPerS: 10, RSS: 1 << 20}}}
	b := g.Batch([]*storetest.AttemptSpec{a}, 0, 5, false)
	for _, c := range []struct {
		fault error
		full  bool
	}{
		{errors.New(`IO Error: Could not write file "taskscope.duckdb.wal": No space left on device`), true},
		{fmt.Errorf("write: %w", syscall.ENOSPC), true},
		{fmt.Errorf("write: %w", syscall.EDQUOT), true},
		{errors.New("Constraint Error: duplicate key"), false},
	} {
		s.SetFault(func() error { return c.fault })
		app, err := s.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(b); err != nil {
			t.Fatal(err)
		}
		err = app.Commit()
		if err == nil || errors.Is(err, store.ErrDiskFull) != c.full || err.Error() != c.fault.Error() {
			t.Errorf("fault %q: commit failed with %v; disk full: %v, want %v", c.fault, err, errors.Is(err, store.ErrDiskFull), c.full)
		}
	}
}
