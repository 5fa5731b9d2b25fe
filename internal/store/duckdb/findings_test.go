package duckdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
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

// TestAnalysesPutAtOnce: a job's page storing its analysis (PutAnalysis)
// while the background analyser stores a batch with the same jobs
// (PutAnalyses, two workers) loses none to DuckDB's conflicts between
// transactions ("Conflict on tuple deletion", or a duplicate key for a job
// new to both: the page answered 500), and each job keeps its latest.
func TestAnalysesPutAtOnce(t *testing.T) {
	ctx := context.Background()
	s, err := Open(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const jobs, rounds = 8, 60
	errs := make(chan error, 3*rounds)
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n <= rounds; n++ {
				if w == 0 {
					errs <- s.PutAnalysis(ctx, benchAnalysis(n%jobs, int64(n)))
					continue
				}
				var as []*store.Analysis
				for j := 0; j < jobs; j++ {
					as = append(as, benchAnalysis(j, int64(n)))
				}
				errs <- s.PutAnalyses(ctx, as)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for j := 0; j < jobs; j++ {
		a, err := s.Analysis(ctx, benchAnalysis(j, 0).JobID)
		if err != nil {
			t.Fatal(err)
		}
		if a.Evaluated != store.Time(rounds) {
			t.Errorf("job %d keeps the analysis evaluated at %d, want %d", j, a.Evaluated, rounds)
		}
	}
}
