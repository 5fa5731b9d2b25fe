package duckdb

import (
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
