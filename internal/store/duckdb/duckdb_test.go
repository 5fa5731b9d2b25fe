package duckdb

import (
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

func testOptions(dir string) Options {
	return Options{Dir: dir, Now: func() time.Time { return storetest.T0.Add(time.Minute) }, StaleAfter: 2 * time.Minute}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		Open: func(t *testing.T) store.Store {
			s, err := Open(testOptions(t.TempDir()))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Reopen: func(t *testing.T, old store.Store) store.Store {
			dir := old.(*Store).opt.Dir
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			s, err := Open(testOptions(dir))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
