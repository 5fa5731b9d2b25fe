package duckdb

import (
	"context"
	"runtime"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

func TestConformance(t *testing.T) { storetest.Run(t, factory) }

// TestConformancePlain runs the suite with every optional capability of
// the store hidden: what callers do without them (package store's
// helpers) passes it too.
func TestConformancePlain(t *testing.T) { storetest.RunPlain(t, factory) }

var factory = storetest.Factory{
	Open: func(t *testing.T, c store.Clock) store.Store {
		s, err := Open(Options{Dir: t.TempDir(), Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
	Reopen: func(t *testing.T, old store.Store, c store.Clock) store.Store {
		dir := old.(*Store).opt.Dir
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		s, err := Open(Options{Dir: dir, Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
}

// testOptions are the options of a store in dir that tells time as the
// conformance suite's stores do.
func testOptions(dir string) Options { return Options{Dir: dir, Clock: storetest.Clock} }

// TestThreads: the store runs DuckDB on one thread unless told otherwise
// (Options.Threads; negative: DuckDB's default, one a core).
func TestThreads(t *testing.T) {
	for _, c := range []struct{ threads, want int }{{0, 1}, {3, 3}, {-1, runtime.NumCPU()}} {
		s, err := Open(Options{Threads: c.threads})
		if err != nil {
			t.Fatal(err)
		}
		var got int
		if err := s.handle().QueryRowContext(context.Background(), `SELECT current_setting('threads')`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if got != c.want {
			t.Errorf("Threads %d: DuckDB's threads %d, want %d", c.threads, got, c.want)
		}
	}
}
