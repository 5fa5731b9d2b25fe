package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestMergeSlots: on one server, a store merging its slots reads every
// series' samples as a store of the same batches that merges nothing,
// before, during (a merge that wrote some of its chunks and died; two
// replicas merging at once) and after the merges, and with batches that
// arrive late into windows already merged.
func TestMergeSlots(t *testing.T) {
	srv := chtest.Start(t)
	testMerges(t, false, func(t *testing.T, db string, c store.Clock) *Store {
		s, err := Open(context.Background(), Options{URL: srv.URL() + "?database=" + db, Clock: c, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestMergeSlotsCluster: the same on 2 shards.
func TestMergeSlotsCluster(t *testing.T) {
	cl := chtest.StartCluster(t, "mc", 2, 1)
	testMerges(t, false, func(t *testing.T, db string, c store.Clock) *Store {
		s, err := Open(context.Background(), Options{URL: cl.Shards[0][0].URL() + "?database=" + db, Cluster: cl.Name,
			Clock: c, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestMergeSlotsFormats: the same on one server, its first slots merged
// as stores before 2026-12-07 merged them (format 2), the later ones in
// format 3: a series reads its chunks of both as one.
func TestMergeSlotsFormats(t *testing.T) {
	srv := chtest.Start(t)
	testMerges(t, true, func(t *testing.T, db string, c store.Clock) *Store {
		s, err := Open(context.Background(), Options{URL: srv.URL() + "?database=" + db, Clock: c, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// testMerges: with formats, the merges before minute 30 write format 2.
func testMerges(t *testing.T, formats bool, open func(t *testing.T, db string, c store.Clock) *Store) {
	ctx := context.Background()
	start := time.Date(2026, 3, 1, 23, 20, 0, 0, time.UTC) // (the slots cross a day)
	var now atomic.Int64
	now.Store(start.UnixMilli())
	clock := store.Clock{Now: func() time.Time { return time.UnixMilli(now.Load()) }, StaleAfter: 2 * time.Minute}
	s := open(t, "merged", clock)
	s2 := open(t, "merged", clock) // another replica of taskscope
	ref := open(t, "unmerged", clock)
	s.opt.legacyChunks, s2.opt.legacyChunks = formats, formats

	// 45 minutes of 3 nodes, a commit every 2 simulated minutes; node 3's batches
	// from minute 10 held back (its spool) until minute 40.
	next := loadgen.GeneratorRounds(3, 45.0/60, start)
	var late []*wire.Batch
	released := false
	var pending []*wire.Batch
	commit := func() {
		if len(pending) > 0 {
			storetest.Ingest(t, s, pending...)
			storetest.Ingest(t, ref, pending...)
		}
		pending = pending[:0]
	}
	minute := start
	halfDone, later := false, []int{30, 42} // (the minutes of the checks)
	for {
		batches, at := next()
		if batches == nil {
			break
		}
		if at.Sub(minute) >= 2*time.Minute {
			commit()
			minute = at
			now.Store(at.UnixMilli())
			m := int(at.Sub(start).Minutes())
			if m >= 40 && !released {
				pending, released = append(pending, late...), true
			}
			switch {
			case !halfDone && m >= 25:
				halfDone = true
				// A merge that dies after writing the merged chunks of
				// processes: the slot's chunks read beside them.
				// (Read in two parts of the keys, as a large slot is.)
				var mm merger
				for part := 0; part < 2; part++ {
					if err := mm.read(ctx, s, 1+uint32(start.UnixMilli()/slotMs), store.KindProcess,
						fmt.Sprintf("level = 0 AND slot = %d AND kind = %d AND bitShiftRight(key, 63) = %d", 1+start.UnixMilli()/slotMs,
							store.KindProcess, part)); err != nil {
						t.Fatal(err)
					}
				}
				if mm.b.Rows() == 0 {
					t.Fatal("nothing to merge in the first slot")
				}
				if err := s.insert(ctx, "series_chunks", seriesCols, &mm.b); err != nil {
					t.Fatal(err)
				}
				sameSeries(t, "a merge half done", s, ref)
				// Two replicas' Maintain at once.
				var wg sync.WaitGroup
				for _, r := range []*Store{s, s2} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := r.Maintain(ctx, at); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
				if n := count(t, s.c, fmt.Sprintf("SELECT count() FROM %s WHERE level = 1", s.read("series_chunks"))); n == 0 {
					t.Fatal("no merged chunks")
				}
				sameSeries(t, "after two merges at once", s, ref)
			case len(later) > 0 && m >= later[0]:
				later = later[1:]
				s.opt.legacyChunks = false
				if err := s.Maintain(ctx, at); err != nil {
					t.Fatal(err)
				}
				sameSeries(t, fmt.Sprintf("minute %d", m), s, ref)
			}
		}
		for _, b := range batches {
			if m := b.SentMs - start.UnixMilli(); b.Host == "node003.sim" && m >= 10*60_000 && !released {
				late = append(late, b)
				continue
			}
			pending = append(pending, b)
		}
	}
	commit()
	if len(late) == 0 {
		t.Fatal("no batch held back")
	}
	// Every slot merged: only merged chunks left.
	now.Add(2 * (slotMs + slotGrace))
	if err := s.Maintain(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s.c, fmt.Sprintf("SELECT count() FROM %s WHERE level = 0", s.read("series_chunks"))); n != 0 {
		t.Errorf("%d chunks not merged", n)
	}
	sameSeries(t, "at the end", s, ref)
	if formats {
		for _, v := range []string{`\x02`, `\x03`} {
			if n := count(t, s.c, fmt.Sprintf(`SELECT count() FROM %s WHERE level = 1 AND substring(data, 1, 1) = '%s'`,
				s.read("series_chunks"), v)); n == 0 {
				t.Errorf("no merged chunk of version %s", v)
			}
		}
	}
	u, err := s.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ur, err := ref.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.Samples != ur.Samples || u.AttemptSamples != ur.AttemptSamples || u.Samples == 0 {
		t.Errorf("usage: %d and %d samples merged, %d and %d not", u.Samples, u.AttemptSamples, ur.Samples, ur.AttemptSamples)
	}
	t.Logf("%d process samples; %d late batches; parts' bytes %d merged, %d not", u.Samples, len(late), u.Bytes, ur.Bytes)
}

// sameSeries checks that every series of ref reads the same samples from
// s, and that s has no other.
func sameSeries(t *testing.T, when string, s, ref *Store) {
	t.Helper()
	a, b := allSeries(t, s), allSeries(t, ref)
	if len(b) == 0 {
		t.Fatal("no series")
	}
	diff := 0
	for k, p := range b {
		if d := pointsDiff(a[k], p); d != "" {
			if diff++; diff <= 3 {
				t.Errorf("%s: series %v: %s", when, k, d)
			}
		}
	}
	if len(a) != len(b) {
		t.Errorf("%s: %d series, want %d", when, len(a), len(b))
	}
	if diff > 0 {
		t.Errorf("%s: %d series of %d differ", when, diff, len(b))
	}
}

// allSeries reads every series of a store as its reads do (readChunks,
// pointsOf), a kind at a time.
func allSeries(t *testing.T, s *Store) map[[2]uint64]*store.Points {
	t.Helper()
	out := map[[2]uint64]*store.Points{}
	for kind := uint8(0); kind <= store.KindAttemptExt; kind++ {
		cs := map[uint64][]chunkRec{}
		if err := s.readChunks(context.Background(), fmt.Sprintf("kind = %d", kind), cs); err != nil {
			t.Fatal(err)
		}
		for key, c := range cs {
			p, err := pointsOf(c, schemaOf(kind))
			if err != nil {
				t.Fatal(err)
			}
			out[[2]uint64{uint64(kind), key}] = p
		}
	}
	return out
}

// pointsDiff tells the first difference of two series' samples: their
// times, and each column's presence and value at each (a column of no
// value is the same as none).
func pointsDiff(a, b *store.Points) string {
	switch {
	case a == nil:
		return "missing"
	case !reflect.DeepEqual(a.Times, b.Times):
		return fmt.Sprintf("times %v, want %v", a.Times, b.Times)
	}
	present := func(p *store.Points, j, i int) bool { return p.Has[j] && (p.Absent[j] == nil || !p.Absent[j][i]) }
	for j := range b.Cols {
		for i := range b.Times {
			pa, pb := present(a, j, i), present(b, j, i)
			if pa != pb || pa && a.Cols[j][i] != b.Cols[j][i] {
				return fmt.Sprintf("column %d at %d", j, a.Times[i])
			}
		}
	}
	return ""
}
