package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

func TestHostBuckets(t *testing.T) {
	const b, day = hostBucket, 86_400_000
	t0 := int64(20_000_000) * b // a bucket's start
	for _, c := range []struct {
		first, last int64
		lo, hi      int64
	}{
		{t0, t0, t0 / b, t0 / b},
		{t0 + 1, t0 + b - 1, t0 / b, t0 / b},
		{t0 - 1, t0 + b, t0/b - 1, t0/b + 1},
		{t0, t0 + 7*day - 1, t0 / b, t0/b + maxHostBuckets - 1}, // a week less a ms: its buckets
		{t0, t0 + 7*day, -1, -1},                                // a week: bucket -1
		{0, t0, -1, -1},                                         // no start
		{t0, t0 - 1, -1, -1},                                    // ends before it starts
	} {
		if lo, hi := hostBuckets(c.first, c.last); lo != c.lo || hi != c.hi {
			t.Errorf("hostBuckets(%d, %d) = %d, %d; want %d, %d", c.first, c.last, lo, hi, c.lo, c.hi)
		}
	}
}

// TestHostIndex: HostAttempts, read through the host index, finds what a
// scan of the attempts table by host and time finds: in a loadgen
// cluster's attempts, growing over many buckets and commits; in an attempt
// whose life grows past a week (bucket -1); after a store is opened again
// (its attempts' index rows written again, kept once); and in a store made
// before the index, which Open fills from its attempts.
func TestHostIndex(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	url := srv.URL() + "?database=hostidx"
	s, err := Open(ctx, Options{URL: url, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 5, Start: start})
	end := storetest.Fill(t, s, g, start, 30*60)

	// An attempt of a week and more, told in two batches.
	long := func(seq uint64, first, last time.Time) *wire.Batch {
		return &wire.Batch{Version: wire.Version, AgentID: "longhost-agent", Seq: seq, Host: "longhost", SentMs: last.UnixMilli(),
			Attempts: []wire.Attempt{{AttemptID: "attempt_9_0001_m_000000_0", JobID: "job_9_0001", Type: "map",
				Framework: "mapreduce", FirstMs: first.UnixMilli(), LastMs: last.UnixMilli()}}}
	}
	lstart := start.Add(-6 * 24 * time.Hour)
	storetest.Ingest(t, s, long(1, lstart, lstart.Add(time.Minute)))
	mid := lstart.Add(3 * 24 * time.Hour).UnixMilli()
	check := func(when string, host string, from, to int64) int {
		t.Helper()
		got, err := s.HostAttempts(ctx, host, from, to)
		if err != nil {
			t.Fatal(err)
		}
		if to <= 0 {
			to = 1 << 62
		}
		scan, err := s.readAttempts(ctx, fmt.Sprintf("host = %s AND last_ms >= %d AND first_ms < %d", Quote(host), from, to))
		if err != nil {
			t.Fatal(err)
		}
		var ids, want []string
		for _, a := range got {
			ids = append(ids, a.AttemptID)
		}
		for _, st := range scan {
			want = append(want, st.Meta.AttemptID)
		}
		sort.Strings(ids)
		sort.Strings(want)
		if !reflect.DeepEqual(ids, want) {
			t.Errorf("%s: attempts on %s in [%d, %d): %v; the scan finds %v", when, host, from, to, ids, want)
		}
		return len(ids)
	}
	if n := check("a day's life", "longhost", mid, mid+1); n != 0 {
		t.Errorf("an attempt of a minute found 3 days later")
	}
	check("a day's life", "longhost", lstart.UnixMilli(), lstart.UnixMilli()+1)
	storetest.Ingest(t, s, long(2, lstart, start.Add(2*24*time.Hour)))
	if n := check("8 days' life", "longhost", mid, mid+1); n != 1 {
		t.Errorf("an attempt of 8 days not found in its middle")
	}
	all := func(when string) {
		t.Helper()
		n := 0
		hosts, err := s.Hosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(hosts) != 4 {
			t.Fatalf("%d hosts, want 4: %+v", len(hosts), hosts)
		}
		for _, host := range hosts {
			h := host.Host
			n += check(when, h, 0, 0)
			for at := start.UnixMilli(); at < end.UnixMilli(); at += 7 * 60_000 {
				n += check(when, h, at, at+7*60_000)
				n += check(when, h, at, at+1)
			}
		}
		if n < 100 {
			t.Errorf("%s: %d attempts found: want more to compare", when, n)
		}
	}
	all("written")
	rows := func() uint64 { return count(t, s.Client(), "SELECT count() FROM hostidx.host_index") }
	written := rows()

	// Opened again: its attempts' rows are written again as they change.
	s.Close()
	if s, err = Open(ctx, Options{URL: url, InsertEvery: -1}); err != nil {
		t.Fatal(err)
	}
	end = storetest.Fill(t, s, g, start, 40*60)
	all("opened again")

	// A store made before the index: Open fills it.
	if err := s.Client().Exec(ctx, "DROP TABLE hostidx.host_index", nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(ctx, Options{URL: url, InsertEvery: -1}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := rows(); n < written {
		t.Errorf("the index filled from the attempts has %d rows, fewer than the %d written before", n, written)
	}
	all("filled")
}
