package duckdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/store"

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

// TestAnalysesPutTogetherAsEach: analyses put together (one upsert of many
// rows) leave stored what putting them one by one leaves, row for row:
// more than one statement's rows, a job several times in one call (later,
// earlier and equally evaluated), and rows stored before, later or earlier.
func TestAnalysesPutTogetherAsEach(t *testing.T) {
	ctx := context.Background()
	together, err := Open(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer together.Close()
	each, err := Open(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer each.Close()
	rnd := rand.New(rand.NewPCG(1, 2))
	const jobs = 60
	for round := 0; round < 4; round++ {
		var as []*store.Analysis
		for i := 0; i < 150; i++ {
			a := benchAnalysis(rnd.IntN(jobs), int64(rnd.IntN(8)))
			a.Worst = store.Severity(rnd.IntN(5))
			a.Findings = a.Findings[:rnd.IntN(len(a.Findings)+1)]
			a.Report = json.RawMessage(fmt.Sprintf(`{"round":%d,"i":%d}`, round, i))
			as = append(as, a)
		}
		if err := together.PutAnalyses(ctx, as); err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if err := each.PutAnalysis(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	for j := 0; j < jobs; j++ {
		id := benchAnalysis(j, 0).JobID
		got, err := together.Analysis(ctx, id)
		want, werr := each.Analysis(ctx, id)
		if !errors.Is(err, werr) && (err == nil || werr == nil) {
			t.Fatalf("%s: %v, want %v", id, err, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s reads\n%+v\nwant\n%+v", id, got, want)
		}
	}
}
