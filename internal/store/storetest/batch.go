package storetest

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
)

// Many series, or many attempts' processes, read together
// (store.ReadSeriesMany, store.ReadAttemptProcesses: by the store's
// SeriesBatcher and ProcessLister where it has them) are what reading them
// one by one gives: the same buckets, the same processes with the same
// summaries, nothing for what is unknown; over fresh and compacted chunks,
// windows that overlap and windows far apart. An attempt's series read
// from its life (store.ReadAttemptLife, store.ReadAttemptSeries) are what
// Series gives.
func testBatchReads(t *testing.T, f Factory) {
	s := open(t, f)
	ctx := context.Background()
	start := T0.Add(-40 * time.Minute)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 11, Start: start})
	Fill(t, s, g, start, 40*60)
	atts := Attempts(t, s)
	if len(atts) < 20 {
		t.Fatalf("%d attempts: want more to compare", len(atts))
	}
	testHostWindows(t, s, atts, start.UnixMilli(), T0.UnixMilli())
	var qs []store.SeriesQuery
	var ids []string
	details := map[string]*store.AttemptDetail{}
	for _, a := range atts {
		ids = append(ids, a.AttemptID)
		from := int64(a.Start)
		to := max(int64(a.End), int64(a.LastSeen), from+a.DurationMs) + 1
		qs = append(qs,
			store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID, Metrics: []string{"rss_bytes", "heap_used_bytes"},
				From: from, To: to, Step: max(250, (to-from)/120)},
			store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID, Metrics: []string{"short_lived", "cpu_percent"},
				From: from, To: to, Step: to - from},
			store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID, Metrics: []string{"cpu_percent"},
				From: from - 15*60_000, To: to + 60_000, Step: 10_000})
		d, err := s.Attempt(ctx, a.AttemptID)
		if err != nil {
			t.Fatal(err)
		}
		details[a.AttemptID] = d
		for _, p := range d.ProcessList {
			pf, pt := int64(p.Start), max(int64(p.End), int64(p.LastSeen))+1
			if pf <= 0 || pt <= pf {
				pf, pt = from, to
			}
			qs = append(qs, store.SeriesQuery{Scope: store.ScopeProcess, Process: p.Key,
				Metrics: []string{"cpu_percent", "rss_bytes", "heap_max_bytes"}, From: pf, To: pt, Step: pt - pf},
				// Named with its attempt, as the UI asks.
				store.SeriesQuery{Scope: store.ScopeProcess, Process: p.Key, AttemptID: a.AttemptID,
					Metrics: []string{"cpu_percent"}, From: pf, To: pt, Step: max(1, (pt-pf)/10)})
		}
	}
	if d := details[atts[0].AttemptID]; d != nil && len(d.ProcessList) > 0 && len(atts) > 1 {
		// A process named with an attempt it is not in: not found.
		qs = append(qs, store.SeriesQuery{Scope: store.ScopeProcess, Process: d.ProcessList[0].Key,
			AttemptID: atts[len(atts)-1].AttemptID, Metrics: []string{"rss_bytes"}, From: start.UnixMilli(), To: T0.UnixMilli(),
			Step: 60_000})
	}
	qs = append(qs, store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: "attempt_0_0_m_0_0", Metrics: []string{"rss_bytes"},
		From: start.UnixMilli(), To: T0.UnixMilli(), Step: 60_000},
		store.SeriesQuery{Scope: store.ScopeProcess, Process: 12345, Metrics: []string{"rss_bytes"},
			From: start.UnixMilli(), To: T0.UnixMilli(), Step: 60_000},
		store.SeriesQuery{Scope: store.ScopeJob, JobID: atts[0].JobID, Metrics: []string{"cpu_percent"},
			From: start.UnixMilli(), To: T0.UnixMilli(), Step: 60_000})
	{
		got, err := store.ReadSeriesMany(ctx, s, qs)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(qs) {
			t.Fatalf("%d results for %d queries", len(got), len(qs))
		}
		for i, q := range qs {
			want, err := s.Series(ctx, q)
			if errors.Is(err, store.ErrNotFound) {
				if got[i] != nil {
					t.Errorf("query %d (%+v): not found one by one, but %+v together", i, q, got[i])
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameSeries(got[i], want) {
				t.Errorf("query %d (%+v):\n together  %+v\n one by one %+v", i, q, got[i], want)
			}
		}
	}
	{
		for _, a := range atts {
			life, err := store.ReadAttemptLife(ctx, s, a.AttemptID)
			if err != nil {
				t.Fatal(err)
			}
			if want := (store.AttemptLife{AttemptID: a.AttemptID, JobID: a.JobID, Start: a.Start, End: a.End}); *life != want {
				t.Errorf("%s: life %+v, want %+v as Attempt says", a.AttemptID, *life, want)
			}
		}
		if _, err := store.ReadAttemptLife(ctx, s, "attempt_0_0_m_0_0"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the life of an unknown attempt: %v, want ErrNotFound", err)
		}
		n := 0
		for i, q := range qs {
			if q.Scope != store.ScopeAttempt {
				continue
			}
			life, err := store.ReadAttemptLife(ctx, s, q.AttemptID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := store.ReadAttemptSeries(ctx, s, life, q)
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.Series(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if !sameSeries(got, want) {
				t.Errorf("query %d (%+v):\n of its life %+v\n by its id    %+v", i, q, got, want)
			}
			n++
		}
		if n < 20 {
			t.Errorf("%d attempts' series compared: want more", n)
		}
		// The series of another attempt than the one of life: an error.
		life, err := store.ReadAttemptLife(ctx, s, atts[0].AttemptID)
		if err != nil {
			t.Fatal(err)
		}
		q := store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: atts[1].AttemptID, Metrics: []string{"rss_bytes"},
			From: start.UnixMilli(), To: T0.UnixMilli(), Step: 60_000}
		if res, err := store.ReadAttemptSeries(ctx, s, life, q); err == nil {
			t.Errorf("the series of %s from the life of %s: %+v, no error", atts[1].AttemptID, life.AttemptID, res)
		}
	}
	{
		got, err := store.ReadAttemptProcesses(ctx, s, append(ids, "attempt_0_0_m_0_0"))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["attempt_0_0_m_0_0"]; ok {
			t.Error("an unknown attempt has processes")
		}
		for id, d := range details {
			want := d.ProcessList
			if len(want) == 0 {
				want = nil
			}
			if !reflect.DeepEqual(got[id], want) {
				t.Errorf("%s:\n together  %+v\n one by one %+v", id, got[id], want)
			}
		}
	}
}

// testHostWindows: HostAttempts of every host of a loadgen cluster, over
// its whole history and over windows of every size and place (each
// attempt's life, five-minute slices, hours), lists the attempts that Job
// lists on that host whose life meets the window: a store that indexes
// attempts by host and time (ClickHouse's host_index) finds what a scan
// finds.
func testHostWindows(t *testing.T, s store.Store, atts []store.Attempt, from, to int64) {
	ctx := context.Background()
	want := func(host string, from, to int64) []string {
		if to <= 0 {
			to = 1 << 62
		}
		var out []string
		for _, a := range atts {
			if a.Host == host && int64(a.LastSeen) >= from && int64(a.Start) < to {
				out = append(out, a.AttemptID)
			}
		}
		sort.Strings(out)
		return out
	}
	hosts := map[string]bool{}
	for _, a := range atts {
		hosts[a.Host] = true
	}
	type window struct{ from, to int64 }
	windows := []window{{0, 0}, {from, to}, {from - time.Hour.Milliseconds(), from}, {to, to + time.Hour.Milliseconds()}}
	for at := from; at < to; at += 5 * 60_000 {
		windows = append(windows, window{at, at + 5*60_000}, window{at + 1, at + 2})
	}
	for i, a := range atts {
		if i%3 == 0 {
			windows = append(windows, window{int64(a.Start), int64(a.LastSeen) + 1}, window{int64(a.LastSeen), int64(a.LastSeen) + 1})
		}
	}
	n := 0
	var all []store.HostWindow
	var each [][]store.Attempt
	for h := range hosts {
		for _, w := range windows {
			got, err := s.HostAttempts(ctx, h, w.from, w.to)
			if err != nil {
				t.Fatal(err)
			}
			all, each = append(all, store.HostWindow{Host: h, From: w.from, To: w.to}), append(each, got)
			var ids []string
			for _, a := range got {
				ids = append(ids, a.AttemptID)
			}
			sort.Strings(ids)
			if exp := want(h, w.from, w.to); !reflect.DeepEqual(ids, exp) {
				t.Errorf("attempts on %s in [%d, %d): %v, want %v", h, w.from, w.to, ids, exp)
			} else {
				n += len(ids)
			}
		}
	}
	if n < 100 {
		t.Errorf("%d attempts found on hosts: want more to compare", n)
	}
	// All the hosts' windows read together (store.ReadHostsAttempts: by
	// the store's HostsReader where it has one), the same host's several
	// at once, and an unknown host's: what each read alone gave.
	all = append(all, store.HostWindow{Host: "node-unknown", From: from, To: to})
	each = append(each, nil)
	ids := func(atts []store.Attempt) []string {
		var out []string
		for _, a := range atts {
			out = append(out, a.AttemptID)
		}
		return out
	}
	for _, part := range [][2]int{{0, len(all)}, {0, 1}, {len(all) - 1, len(all)}} {
		ws := all[part[0]:part[1]]
		got, err := store.ReadHostsAttempts(ctx, s, ws)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ws) {
			t.Fatalf("%d windows read together, %d results", len(ws), len(got))
		}
		for i, w := range ws {
			alone := each[part[0]+i]
			if len(got[i]) != len(alone) || len(alone) > 0 && !reflect.DeepEqual(got[i], alone) {
				t.Errorf("attempts on %s in [%d, %d): together %v, alone %v", w.Host, w.From, w.To, ids(got[i]), ids(alone))
			}
		}
	}
}

// sameSeries compares results, NaN equal to NaN.
func sameSeries(a, b *store.SeriesResult) bool {
	if a == nil || b == nil || a.Scope != b.Scope || a.Step != b.Step || a.From != b.From || a.To != b.To ||
		!reflect.DeepEqual(a.Times, b.Times) || len(a.Series) != len(b.Series) {
		return false
	}
	for i := range a.Series {
		x, y := a.Series[i], b.Series[i]
		if x.Metric != y.Metric || x.Unit != y.Unit || len(x.Values) != len(y.Values) {
			return false
		}
		for j := range x.Values {
			u, v := float64(x.Values[j]), float64(y.Values[j])
			if u != v && !(math.IsNaN(u) && math.IsNaN(v)) {
				return false
			}
		}
	}
	return true
}
