package duckdb

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// An attempt's chunks stored as residuals of its processes' (compaction's
// since 2026-12-07's second change) read exactly as the attempt's own
// samples: a store that writes them and one that keeps attempts' chunks
// absolute, given the same batches, answer every attempt's, process's and
// job's series (one by one and together) the same. The batches are
// loadgen's cluster with what real agents send too: processes that came
// late and went early, a process missing a sample, a counter reset, an
// attempt whose processes sent no samples, an attempt without processes;
// and the short tasks' recording (processes coming and going by the
// hundred). Then past the raw samples' retention (rollups, cut in the
// middle of attempts' chunks) and past the rollups' (chunks deleted).
func TestAttemptResiduals(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	start := time.Now().Add(-6 * time.Hour).Truncate(time.Minute)
	clock := store.Clock{Now: func() time.Time { return start.Add(8 * time.Hour) }}
	open := func(dir string, absolute bool, retention, rollupRetention time.Duration) *Store {
		s, err := Open(Options{Dir: dir, CompactAge: 2 * time.Minute, Clock: clock, PlainAttempts: absolute,
			Retention: retention, RollupRetention: rollupRetention})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rec, err := loadgen.ReadRecordingFile("../../loadgen/testdata/agent-sim.rec.zst")
	if err != nil {
		t.Fatal(err)
	}
	var odd [5]int
	for _, src := range []struct {
		name   string
		rounds func() loadgen.Rounds
		read   func(t *testing.T, s *Store) map[string]string
	}{
		{"loadgen", func() loadgen.Rounds { return oddRounds(loadgen.GeneratorRounds(2, 0.25, start), &odd) }, readEverything},
		// (Attempts by the thousand: their series read together, and
		// the jobs'.)
		{"short-tasks", func() loadgen.Rounds { return loadgen.ReplayRounds(rec, 1, 0.2, start) }, readJobs},
	} {
		t.Run(src.name, func(t *testing.T) {
			dir, refDir := t.TempDir(), t.TempDir()
			s, ref := open(dir, false, 0, 0), open(refDir, true, 0, 0)
			end := storetest.FillRounds(t, s, start, src.rounds())
			storetest.FillRounds(t, ref, start, src.rounds())
			if src.name == "loadgen" && slices.Contains(odd[:], 0) {
				t.Fatalf("batches changed: %v, want some of each", odd)
			}
			if v := chunkVersions(t, s); v[4] == 0 {
				t.Fatalf("no residual chunk written: formats %v", v)
			}
			if v := chunkVersions(t, ref); v[4] != 0 {
				t.Fatalf("the reference store holds residuals: formats %v", v)
			}
			compareReads(t, "stored", src.read(t, ref), src.read(t, s))
			if s.wholes.ownHits == 0 {
				t.Fatal("no residual's own samples kept by compaction were read")
			}
			checkKeptReads(t, s)
			compareReads(t, "read together", readTogether(t, ref), readTogether(t, s))
			// Each metric alone, its residuals made whole in its columns
			// only and kept so, then all of them: a read of more columns
			// does not take what a narrower one kept.
			s.wholes.clear()
			compareReads(t, "each metric alone", readEachMetric(t, ref), readEachMetric(t, s))
			checkSumsFirst(t, s)
			checkResidualsSmaller(t, s)
			if s.wholes.hits == 0 {
				t.Fatal("no residual made whole was read again from wholes")
			}
			// And all made whole again.
			s.wholes.clear()
			compareReads(t, "read together again", readTogether(t, ref), readTogether(t, s))
			// Reopened with the raw samples' retention ending within
			// attempts' residual chunks: they are made whole, the rest
			// before it rolled up. Then past the rollups' retention,
			// later (chunks deleted, those of processes too).
			later := end.Add(time.Hour)
			for _, p := range []struct {
				what                       string
				cut                        time.Time
				retention, rollupRetention bool
			}{{"rolled up", start.Add(end.Sub(start) / 2), true, false},
				{"deleted", start.Add(end.Sub(start) * 3 / 4), false, true}} {
				for _, st := range []*Store{s, ref} {
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
				}
				var keep [2]time.Duration
				if p.retention {
					keep[0] = later.Sub(p.cut)
				} else {
					keep[1] = later.Sub(p.cut)
				}
				s, ref = open(dir, false, keep[0], keep[1]), open(refDir, true, keep[0], keep[1])
				cut := p.cut.UnixMilli()
				if n := residualsAcross(t, s, cut); n == 0 {
					t.Fatalf("%s: no residual chunk spans %d", p.what, cut)
				}
				for _, st := range []*Store{s, ref} {
					if err := st.Maintain(context.Background(), later); err != nil {
						t.Fatal(err)
					}
				}
				if n := residualsAcross(t, s, cut); n != 0 {
					t.Fatalf("%s: %d residual chunks still span the retention's end", p.what, n)
				}
				compareReads(t, p.what, src.read(t, ref), src.read(t, s))
				compareReads(t, p.what+", read together", readTogether(t, ref), readTogether(t, s))
			}
			s.Close()
			ref.Close()
		})
	}
}

// oddRounds are rounds with what real agents send beside loadgen's even
// lives. Of every 8 attempts (in the order they appear), the first's first
// process came a minute late and went at five (the attempt's sums still
// count it: the agent saw it), the second's first process misses one
// sample in each of its batches, the third's task JVM has its CPU
// counters reset after 10 minutes, the fourth's processes send no
// samples, and the fifth has no process at all (no records, no
// memberships, no samples). odd counts the batches changed each way.
func oddRounds(next loadgen.Rounds, odd *[5]int) loadgen.Rounds {
	var first time.Time
	type member struct{ att, nth int }
	members := map[uint64]member{}
	atts := map[string]int{}
	procs := map[string]int{}
	return func() ([]*wire.Batch, time.Time) {
		batches, at := next()
		if batches == nil {
			return nil, at
		}
		if first.IsZero() {
			first = at
		}
		age := at.Sub(first)
		for _, b := range batches {
			for _, m := range b.Members {
				if _, ok := members[m.Process]; ok {
					continue
				}
				if _, ok := atts[m.AttemptID]; !ok {
					atts[m.AttemptID] = len(atts)
				}
				members[m.Process] = member{atts[m.AttemptID] % 8, procs[m.AttemptID]}
				procs[m.AttemptID]++
			}
			gone := map[uint64]bool{}
			var series []wire.Series
			for _, s := range b.ProcSeries {
				m, ok := members[s.Key]
				switch {
				case !ok:
				case m.att == 0 && m.nth == 0 && (age < time.Minute || age > 5*time.Minute):
					odd[0]++
					continue // came late, went early
				case m.att == 1 && m.nth == 0 && len(s.Times) > 2:
					odd[1]++
					s = dropSample(s, len(s.Times)/2)
				case m.att == 2 && age > 10*time.Minute && reset(b, &s):
					odd[2]++
				case m.att == 3 || m.att == 4:
					odd[m.att]++
					gone[s.Key] = m.att == 4
					continue
				}
				series = append(series, s)
			}
			b.ProcSeries = series
			var ps []wire.Process
			for _, p := range b.Processes {
				if !gone[p.Key] {
					ps = append(ps, p)
				}
			}
			b.Processes = ps
			var ms []wire.Membership
			for _, m := range b.Members {
				if !gone[m.Process] {
					ms = append(ms, m)
				}
			}
			b.Members = ms
		}
		return batches, at
	}
}

// reset divides s's CPU counters by 1,000 (a counter reset), if it has
// any.
func reset(b *wire.Batch, s *wire.Series) bool {
	did := false
	for i := range s.Columns {
		if m := b.Metrics[s.Columns[i].Metric]; m == wire.CPUUserMs || m == wire.CPUSysMs {
			vs := append([]int64(nil), s.Columns[i].Values...)
			for j := range vs {
				vs[j] /= 1000
			}
			s.Columns[i].Values, did = vs, true
		}
	}
	return did
}

// dropSample is s without its sample i.
func dropSample(s wire.Series, i int) wire.Series {
	out := wire.Series{Key: s.Key, AttemptID: s.AttemptID}
	out.Times = append(append([]int64(nil), s.Times[:i]...), s.Times[i+1:]...)
	for _, c := range s.Columns {
		nc := wire.Column{Metric: c.Metric, Values: append(append([]int64(nil), c.Values[:i]...), c.Values[i+1:]...)}
		if c.Absent != nil {
			nc.Absent = make([]byte, (len(out.Times)+7)/8)
			for j := range out.Times {
				src := j
				if j >= i {
					src++
				}
				if c.IsAbsent(src) {
					nc.Absent[j/8] |= 1 << (j % 8)
				}
			}
		}
		out.Columns = append(out.Columns, nc)
	}
	return out
}

// residualsAcross counts the residual chunks holding samples before cut
// and from it.
func residualsAcross(t *testing.T, s *Store, cut int64) int {
	t.Helper()
	var n int
	if err := s.handle().QueryRow(`SELECT count(*) FROM series_chunks WHERE t_min < ? AND t_max >= ? AND `+isResidualSQL,
		cut, cut).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// readTogether is what SeriesMany answers of every attempt's series.
func readTogether(t *testing.T, s *Store) map[string]string {
	t.Helper()
	var qs []store.SeriesQuery
	for _, a := range storetest.Attempts(t, s) {
		qs = append(qs, store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID,
			Metrics: []string{"cpu_percent", "rss_bytes", "processes", "read_bytes_per_s", "sched_wait_percent", "heap_used_bytes", "gc_percent"},
			From:    int64(a.Start) - 60_000, To: int64(a.LastSeen) + 60_000, Step: 15_000})
	}
	res, err := s.SeriesMany(context.Background(), qs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, r := range res {
		if r == nil {
			t.Fatalf("%s: not found", qs[i].AttemptID)
		}
		out[qs[i].AttemptID] = fmt.Sprint(*r)
	}
	return out
}

// readJobs is what the store answers of every job's series over its
// life, and (readTogether) every attempt's.
func readJobs(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := readTogether(t, s)
	jobs := map[string][2]int64{}
	for _, a := range storetest.Attempts(t, s) {
		j := jobs[a.JobID]
		if from := int64(a.Start) - 60_000; j[0] == 0 || from < j[0] {
			j[0] = from
		}
		j[1] = max(j[1], int64(a.LastSeen)+60_000)
		jobs[a.JobID] = j
	}
	for id, r := range jobs {
		q := store.SeriesQuery{Scope: store.ScopeJob, JobID: id, Metrics: []string{"cpu_percent", "rss_bytes", "processes",
			"read_bytes_per_s", "heap_used_bytes", "gc_percent", "sched_wait_percent"}, From: r[0], To: r[1], Step: 5000}
		res, err := s.Series(context.Background(), q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		out["job "+id] = fmt.Sprint(*res)
	}
	if len(jobs) < 3 {
		t.Fatalf("%d jobs: want more", len(jobs))
	}
	return out
}

// A data directory made before residuals (format 3 chunks, attempts'
// chunks their own samples, series_chunks without res_att and res_job)
// reads as it did once a store that writes residuals opens it, and on as
// residuals are compacted beside its chunks: the same as a store that
// kept attempts' chunks absolute all along.
func TestChunksBeforeResiduals(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a loadgen cluster's worth of data: not in -short runs (make check); make test runs it")
	}
	start := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	clock := store.Clock{Now: func() time.Time { return start.Add(3 * time.Hour) }}
	open := func(dir string, absolute bool) *Store {
		s, err := Open(Options{Dir: dir, CompactAge: 2 * time.Minute, Clock: clock, PlainAttempts: absolute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cfg := loadgen.Config{Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 22, Start: start}
	g, gRef := loadgen.NewGenerator(cfg), loadgen.NewGenerator(cfg)
	dir := t.TempDir()
	old, ref := open(dir, true), open(t.TempDir(), true)
	defer func() { ref.Close() }()
	storetest.Fill(t, old, g, start, 20*60)
	storetest.Fill(t, ref, gRef, start, 20*60)
	before := readEverything(t, old)
	// The tables as stores before residuals made them.
	for _, q := range []string{`DROP VIEW series_all`, `ALTER TABLE series_chunks DROP COLUMN res_att`,
		`ALTER TABLE series_chunks DROP COLUMN res_job`,
		`CREATE VIEW series_all AS SELECT * FROM series_fresh_0 UNION ALL SELECT * FROM series_fresh_1
			UNION ALL SELECT * FROM series_chunks`} {
		if _, err := old.handle().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if v := chunkVersions(t, old); v[4] != 0 || v[3] == 0 {
		t.Fatalf("the store made before holds chunks of formats %v", v)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := open(dir, false)
	defer func() { s.Close() }()
	compareReads(t, "opened again", before, readEverything(t, s))
	storetest.Fill(t, s, g, start, 40*60)
	storetest.Fill(t, ref, gRef, start, 40*60)
	if v := chunkVersions(t, s); v[4] == 0 || v[3] == 0 {
		t.Fatalf("compacted since: chunks of formats %v, want 3 and 4", v)
	}
	compareReads(t, "compacted since", readEverything(t, ref), readEverything(t, s))
	// As a store of the day residuals came (2026-12-07) left them: its
	// attempts' own chunks did not name their attempt and job.
	if _, err := s.handle().Exec(fmt.Sprintf(`UPDATE series_chunks SET res_att = NULL, res_job = NULL WHERE kind = %d`,
		store.KindAttempt)); err != nil {
		t.Fatal(err)
	}
	// A store that does not write residuals reads them the same.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(dir, true)
	compareReads(t, "opened not writing residuals", readEverything(t, ref), readEverything(t, s))
}

// checkKeptReads checks how attempts' reads take their processes' chunks,
// one by one (points) and together (SeriesMany: readChunkRange): a read
// of attempts with nothing kept takes them in its scan; one of attempts
// whose residuals were kept takes none; and one of attempts marked as
// kept whose residuals are no longer kept reads their processes by key.
// All three answer the same.
func checkKeptReads(t *testing.T, s *Store) {
	t.Helper()
	read := func() map[string]string {
		out := map[string]string{}
		for _, a := range storetest.Attempts(t, s) {
			q := store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID, Metrics: []string{"cpu_percent", "rss_bytes", "read_bytes_per_s"},
				From: int64(a.Start) - 60_000, To: int64(a.LastSeen) + 60_000, Step: 5000}
			res, err := s.Series(context.Background(), q)
			if err != nil {
				t.Fatalf("%+v: %v", q, err)
			}
			out[a.AttemptID] = fmt.Sprint(*res)
		}
		return out
	}
	for _, c := range []struct {
		what string
		read func() map[string]string
	}{{"one by one", read}, {"together", func() map[string]string { return readTogether(t, s) }}} {
		s.wholes.clear()
		s.wholes.carried, s.wholes.hits = 0, 0
		first := c.read()
		if s.wholes.carried == 0 {
			t.Fatalf("%s: no attempt's first read took its processes' chunks in its scan", c.what)
		}
		s.wholes.carried = 0
		compareReads(t, c.what+", kept", first, c.read())
		if s.wholes.carried != 0 || s.wholes.hits == 0 {
			t.Fatalf("%s: reads of attempts whose residuals were kept: processes' chunks of %d taken in their scans, %d kept read; want none, some",
				c.what, s.wholes.carried, s.wholes.hits)
		}
		// (Made whole from their processes read by key, then: nothing
		// else has them.)
		s.wholes.forgetEntries()
		compareReads(t, c.what+", marked, none kept", first, c.read())
		if s.wholes.carried != 0 {
			t.Fatalf("%s: reads of attempts marked kept, none kept: processes' chunks of %d taken in their scans, want none", c.what, s.wholes.carried)
		}
	}
}

// forgetEntries forgets what is kept but not which attempts had some
// (tests: as when entries went for others).
func (w *wholes) forgetEntries() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m, w.bytes = nil, 0
}

// readEachMetric is what the store answers of some attempts' and jobs'
// series, each metric alone, then all of them together.
func readEachMetric(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	var all []string
	for _, m := range store.AttemptSeriesMetrics {
		all = append(all, m.Name)
	}
	read := func(q store.SeriesQuery, names []string) {
		q.Metrics = names
		res, err := s.Series(context.Background(), q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		out[fmt.Sprintf("%s %s%s %v", q.Scope, q.JobID, q.AttemptID, names)] = fmt.Sprint(*res)
	}
	jobs := map[string]bool{}
	for i, a := range storetest.Attempts(t, s) {
		if i%7 != 0 {
			continue // (some of them)
		}
		q := store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID,
			From: int64(a.Start) - 60_000, To: int64(a.LastSeen) + 60_000, Step: 5000}
		j := store.SeriesQuery{Scope: store.ScopeJob, JobID: a.JobID, From: q.From, To: q.To, Step: 5000}
		for _, name := range all {
			read(q, []string{name})
			if !jobs[a.JobID] {
				read(j, []string{name})
			}
		}
		read(q, all)
		if !jobs[a.JobID] {
			read(j, []string{store.JobAttemptsMetric})
			read(j, append([]string{store.JobAttemptsMetric}, all...))
		}
		jobs[a.JobID] = true
	}
	return out
}

// checkSumsFirst checks that compaction wrote the processes' merged
// chunks with the columns attempts' sums read first (sumsFirst).
func checkSumsFirst(t *testing.T, s *Store) {
	t.Helper()
	var data []byte
	if err := s.handle().QueryRow(`SELECT data FROM series_chunks WHERE kind = ? AND level = ? AND octet_length(data) > 100 LIMIT 1`,
		store.KindProcess, levelMerged).Scan(&data); err != nil {
		t.Fatal(err)
	}
	c, err := chunk.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, col := range c.Columns {
		ids = append(ids, int(col.ID))
	}
	if len(ids) < 8 || !slices.Equal(ids[:4], sumsFirst[:4]) || !slices.IsSortedFunc(ids, func(a, b int) int { return columnRank[a] - columnRank[b] }) {
		t.Fatalf("a process's merged chunk has its columns in the order %v, want those of %v first, in that order", ids, sumsFirst)
	}
}

// checkResidualsSmaller checks that every residual chunk is shorter than
// the attempt's own samples of it would be, and that a process's chunk
// names an attempt (res_att) only if a residual of that attempt names the
// process.
func checkResidualsSmaller(t *testing.T, s *Store) {
	t.Helper()
	rows, err := s.handle().Query(`SELECT key, t_min, t_max, data FROM series_chunks WHERE kind = ? AND level = ? AND `+isResidualSQL,
		store.KindAttempt, levelMerged)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []chunkRow
	var keys []int64
	for rows.Next() {
		var c chunkRow
		var key int64
		if err := rows.Scan(&key, &c.tMin, &c.tMax, &c.data); err != nil {
			t.Fatal(err)
		}
		c.level = levelMerged
		chunks, keys = append(chunks, c), append(keys, key)
	}
	rows.Close()
	if len(chunks) == 0 {
		t.Fatal("no residual chunk")
	}
	s.wholes.clear()
	if err := s.resolve(context.Background(), nil, 0, 0, allAttemptColumns, chunks); err != nil {
		t.Fatal(err)
	}
	needs := map[[2]int64]bool{}
	var w chunk.Writer
	for i, c := range chunks {
		if own := w.Encode(nil, c.whole, chunk.Packed); len(own) <= len(c.data) {
			t.Fatalf("a residual chunk of %d samples takes %d bytes, the attempt's own samples %d", len(c.whole.Times), len(c.data), len(own))
		}
		procs, _, _, err := chunk.Residual(c.data, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			needs[[2]int64{keys[i], int64(p)}] = true
		}
	}
	rows, err = s.handle().Query(`SELECT DISTINCT res_att, key FROM series_chunks WHERE kind = ? AND res_att IS NOT NULL`, store.KindProcess)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	named := 0
	for rows.Next() {
		var att, key int64
		if err := rows.Scan(&att, &key); err != nil {
			t.Fatal(err)
		}
		if !needs[[2]int64{att, key}] {
			t.Fatalf("process %d names attempt %d, whose residuals do not name it", key, att)
		}
		named++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Fatal("no process's chunk names its attempt")
	}
}
