package analysis

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
)

// TestSimReadyAsEveryPairLooked: the simulator finds the attempts that
// took a freed slot (another of their type ended in the second before
// they started) by binary searches over the type's ends; each is the
// same as looking at every other attempt of its type, as it did before,
// on jobs whose attempts start and end within a few seconds of each
// other (some of them at once, some lasting 0 ms: an attempt's own end
// does not count).
func TestSimReadyAsEveryPairLooked(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tookSlot, not int
	for round := 0; round < 200; round++ {
		n := 1 + r.IntN(60)
		atts := make([]store.Attempt, n)
		for i := range atts {
			typ := []string{"map", "map", "reduce", "tez"}[r.IntN(4)]
			start := int64(1_000_000 + 250*r.IntN(40))
			d := int64(250 * r.IntN(12)) // 0: it ended as it started
			atts[i] = store.Attempt{AttemptID: fmt.Sprintf("a%02d", i), Type: typ, Start: store.Time(start), DurationMs: d}
			if r.IntN(3) == 0 {
				atts[i].End = store.Time(start + d)
			}
		}
		s := newSim(atts)
		for _, ids := range s.byType {
			for _, i := range ids {
				want := false
				for _, k := range ids {
					if e := endOf(atts[k]); k != i && e <= int64(atts[i].Start) && e >= int64(atts[i].Start)-1000 {
						want = true
						break
					}
				}
				if atts[i].Type == "reduce" {
					continue // (the reduces' wait for the maps overrides it)
				}
				if want {
					tookSlot++
					if s.ready[i] != int64(atts[ids[0]].Start) {
						t.Fatalf("round %d: %s started as another ended: ready at %d, not its type's start %d", round, atts[i].AttemptID,
							s.ready[i], atts[ids[0]].Start)
					}
				} else {
					not++
					if s.ready[i] != int64(atts[i].Start) {
						t.Fatalf("round %d: %s took no freed slot: ready at %d, not its start %d", round, atts[i].AttemptID,
							s.ready[i], atts[i].Start)
					}
				}
			}
		}
	}
	if tookSlot < 100 || not < 100 {
		t.Fatalf("the jobs did not try both enough: %d took a freed slot, %d did not", tookSlot, not)
	}
}

// TestTopAsSortedCopies: top picks the attempts a stable sort of their
// copies, largest key first, puts first (as it did), by sorting their
// indexes: ties keep their order.
func TestTopAsSortedCopies(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 100; round++ {
		atts := make([]store.Attempt, r.IntN(80))
		for i := range atts {
			atts[i] = store.Attempt{AttemptID: fmt.Sprintf("a%02d", i), PeakRSS: int64(r.IntN(10))}
		}
		key := func(a store.Attempt) float64 { return float64(a.PeakRSS) }
		want := append([]store.Attempt(nil), atts...)
		sort.SliceStable(want, func(i, j int) bool { return key(want[i]) > key(want[j]) })
		want = want[:min(len(want), maxSeriesAttempts)]
		got := top(atts, maxSeriesAttempts, key)
		if len(got) != len(want) {
			t.Fatalf("round %d: %d attempts, want %d", round, len(got), len(want))
		}
		for i := range got {
			if got[i].AttemptID != want[i].AttemptID {
				t.Fatalf("round %d: #%d is %s, want %s", round, i, got[i].AttemptID, want[i].AttemptID)
			}
		}
	}
}
