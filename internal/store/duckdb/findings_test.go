package duckdb

import (
	"testing"

	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestAnalysesBeforeRestrictions: an analysis stored before its findings
// could be restricted (no _open columns, no f_restricted) reads, once the
// store has added them, as one with none restricted.
func TestAnalysesBeforeRestrictions(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	job := storetest.PutOneAnalysis(t, s)
	for _, c := range restrictedColumns {
		if _, err := s.DB().Exec("ALTER TABLE analyses DROP COLUMN " + c[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(testOptions(dir)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckUnrestricted(t, s, job)
}
