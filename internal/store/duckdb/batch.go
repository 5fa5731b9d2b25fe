package duckdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
)

// The chunk tables have no index on the key: a read of one series scans
// every chunk of its time range (and the lookback before it), whatever its
// key. Reads of many series (the findings of a job read tens of attempts)
// therefore read together: one scan of a time range for all the series
// that need it, each series then taking its own chunks as one read would
// have, so that what is computed is the same.

// need is one series' chunks in [from, to).
type need struct {
	kind     int
	key      uint64
	from, to int64
}

// chunkRow is a chunk as the tables hold it.
type chunkRow struct {
	tMin, tMax int64
	level      int
	job        int64 // job_key: a process's start, for process chunks that know it
	data       []byte
	whole      *chunk.Chunk // a residual made whole (resolve): data is not read
}

// seriesKey names a series.
type seriesKey struct {
	kind int
	key  uint64
}

// maxInKeys bounds the keys of one query's IN list.
const maxInKeys = 512

// readChunks reads the chunks every need asks for, by series, in t_min
// order: the needs are sorted by time and those whose ranges overlap (or
// nearly: within lookback) read one range together.
func (s *Store) readChunks(ctx context.Context, needs []need) (map[seriesKey][]chunkRow, error) {
	out := map[seriesKey][]chunkRow{}
	ns := append([]need(nil), needs...)
	sort.Slice(ns, func(i, j int) bool { return ns[i].from < ns[j].from })
	for i := 0; i < len(ns); {
		// A group: needs of one range.
		from, to := ns[i].from, ns[i].to
		j := i + 1
		for j < len(ns) && ns[j].from <= to+lookback {
			to = max(to, ns[j].to)
			j++
		}
		byKind := map[int][]uint64{}
		seen := map[seriesKey]bool{}
		for _, n := range ns[i:j] {
			k := seriesKey{n.kind, n.key}
			if !seen[k] {
				seen[k] = true
				byKind[n.kind] = append(byKind[n.kind], n.key)
			}
		}
		for kind, keys := range byKind {
			for len(keys) > 0 {
				part := keys[:min(len(keys), maxInKeys)]
				keys = keys[len(part):]
				if err := s.readChunkRange(ctx, kind, part, from, to, out); err != nil {
					return nil, err
				}
			}
		}
		i = j
	}
	return out, nil
}

// readChunkRange reads the chunks of kind and keys overlapping [from, to)
// into out. A series' chunks from two ranges are kept once each.
// Attempts' residual chunks are made whole, from their processes' merged
// chunks read in the same scan (those that name the attempts: res_att;
// points), or, when every attempt read is marked (wholes.atts: its
// residuals kept), from what is kept and their processes read by key for
// the rest (resolve), as points reads one attempt.
func (s *Store) readChunkRange(ctx context.Context, kind int, keys []uint64, from, to int64, out map[seriesKey][]chunkRow) error {
	args := []any{kind, from, to}
	for _, k := range keys {
		args = append(args, keyValue(k))
	}
	q := `SELECT kind, key, t_min, t_max, level, coalesce(job_key, 0), data FROM series_all
		WHERE kind = ? AND t_max >= ? AND t_min < ? AND key IN (` + placeholders(len(keys)) + `)`
	kept := false
	if kind == store.KindAttempt {
		kept = !slices.ContainsFunc(keys, func(k uint64) bool { return !s.wholes.marked(k) })
		q = `SELECT kind, key, t_min, t_max, level, coalesce(job_key, 0), data FROM series_fresh
			WHERE kind = ? AND t_max >= ? AND t_min < ? AND key IN (` + placeholders(len(keys)) + `)
			UNION ALL SELECT kind, key, t_min, t_max, level, coalesce(job_key, 0), data FROM series_chunks
			WHERE t_max >= ? AND t_min < ? AND res_att IN (` + placeholders(len(keys)) + `)`
		args = append(append(args, from, to), args[3:]...)
		if kept {
			q += ` AND kind = ?`
			args = append(args, kind)
		}
	}
	rows, err := s.handle().QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("cannot read series: %w", err)
	}
	defer rows.Close()
	read := map[uint64][]chunkRow{}
	procs := map[uint64][]chunkRow{}
	for rows.Next() {
		var k int
		var key int64
		var c chunkRow
		if err := rows.Scan(&k, &key, &c.tMin, &c.tMax, &c.level, &c.job, &c.data); err != nil {
			return err
		}
		if k != kind {
			procs[uint64(key)] = append(procs[uint64(key)], c)
			continue
		}
		read[uint64(key)] = append(read[uint64(key)], c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if kind == store.KindAttempt {
		all := make([][]chunkRow, 0, len(read))
		for _, rs := range read {
			all = append(all, rs)
		}
		if len(procs) > 0 {
			s.wholes.took(len(procs))
		}
		if err := s.resolve(ctx, procs, from, to, allAttemptColumns, all...); err != nil {
			return err
		}
		for _, k := range keys {
			s.wholes.mark(k)
		}
	}
	for key, rs := range read {
		k := seriesKey{kind, key}
		out[k] = append(out[k], rs...)
	}
	return nil
}

// pointsIn merges the chunks of one series that overlap [from, to), as
// points(kind, key, from, to) reads them (a chunk that two ranges both read
// is there twice: the merge keeps each time once), with the number of
// those chunks and, for a process, the start they keep (as processPoints).
func pointsIn(chunks []chunkRow, kind int, from, to int64) (*store.Points, int, int64, error) {
	if !sort.SliceIsSorted(chunks, func(i, j int) bool { return chunks[i].tMin < chunks[j].tMin }) {
		chunks = append([]chunkRow(nil), chunks...)
		sort.SliceStable(chunks, func(i, j int) bool { return chunks[i].tMin < chunks[j].tMin })
	}
	var raw, rollup [][]byte
	var start int64
	whole := false
	for _, c := range chunks {
		if c.tMax < from || c.tMin >= to {
			continue
		}
		start = max(start, c.job)
		if c.level == levelRollup {
			rollup = append(rollup, c.data)
		} else {
			raw = append(raw, c.data)
			whole = whole || c.whole != nil
		}
	}
	if whole {
		p, err := decodeWhole(chunks, kind, from, to, rollup)
		return p, len(raw) + len(rollup), start, err
	}
	p, err := store.DecodeLevels(raw, rollup, schemaOf(kind))
	return p, len(raw) + len(rollup), start, err
}

// decodeWhole is pointsIn's points of chunks some of which are residuals
// made whole.
func decodeWhole(chunks []chunkRow, kind int, from, to int64, rollup [][]byte) (*store.Points, error) {
	var cs []*chunk.Chunk
	var dec chunk.Decoder
	for _, c := range chunks {
		if c.tMax < from || c.tMin >= to || c.level == levelRollup {
			continue
		}
		if c.whole != nil {
			cs = append(cs, c.whole)
			continue
		}
		d, err := dec.Decode(c.data)
		if err != nil {
			return nil, err
		}
		cs = append(cs, d)
	}
	return store.DecodeLevelsOf(cs, rollup, schemaOf(kind))
}

// SeriesMany returns what Series returns for each query (nil for a series
// not found), reading the chunks of attempt and process series together.
// (A process's series asked with its attempt, jobs' series and ext metrics
// are read one by one.) An invalid query fails the whole call.
func (s *Store) SeriesMany(ctx context.Context, qs []store.SeriesQuery) (_ []*store.SeriesResult, err error) {
	defer store.WrapErr(&err, "cannot read %d series", len(qs))
	out := make([]*store.SeriesResult, len(qs))
	metrics := make([][]store.SeriesMetric, len(qs))
	together := make([]bool, len(qs))
	var attIDs []any
	for i := range qs {
		q := &qs[i]
		m, err := checkSeries(q)
		if err != nil {
			return nil, err
		}
		metrics[i] = m
		switch {
		case hasExt(m):
		case q.Scope == store.ScopeAttempt:
			together[i] = true
			attIDs = append(attIDs, q.AttemptID)
		case q.Scope == store.ScopeProcess && q.AttemptID == "":
			together[i] = true
		}
	}
	// The starts (the base of a series' first increment), as Series reads
	// them: an attempt's from its row, a process's from its chunks (a
	// process without chunks that know it is read alone, as are ext
	// metrics and jobs).
	attStart := map[string]int64{}
	for len(attIDs) > 0 {
		part := attIDs[:min(len(attIDs), maxInKeys)]
		attIDs = attIDs[len(part):]
		rows, err := s.handle().QueryContext(ctx, `SELECT attempt_id, coalesce(first_ms, 0) FROM attempts
			WHERE attempt_id IN (`+placeholders(len(part))+`)`, part...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			var start int64
			if err := rows.Scan(&id, &start); err != nil {
				rows.Close()
				return nil, err
			}
			attStart[id] = start
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	type found struct {
		n     need
		start int64
	}
	todo := map[int]found{}
	var needs []need
	for i := range qs {
		q := &qs[i]
		var f found
		switch {
		case !together[i]:
			if err := s.seriesAlone(ctx, qs, i, out); err != nil {
				return nil, err
			}
			continue
		case q.Scope == store.ScopeAttempt:
			start, ok := attStart[q.AttemptID]
			if !ok {
				continue // not found
			}
			f = found{need{store.KindAttempt, store.AttemptKey(q.AttemptID), q.From - lookback, q.To}, start}
		default: // a process, its start from its chunks
			f = found{need{store.KindProcess, uint64(q.Process), q.From - lookback, q.To}, -1}
		}
		todo[i] = f
		needs = append(needs, f.n)
	}
	chunks, err := s.readChunks(ctx, needs)
	if err != nil {
		return nil, err
	}
	for i, f := range todo {
		p, n, start, err := pointsIn(chunks[seriesKey{f.n.kind, f.n.key}], f.n.kind, f.n.from, f.n.to)
		if err != nil {
			return nil, err
		}
		if f.start < 0 {
			if n == 0 || start == 0 {
				if err := s.seriesAlone(ctx, qs, i, out); err != nil {
					return nil, err
				}
				continue
			}
			f.start = start
		}
		res := store.NewSeriesResult(&qs[i], metrics[i])
		store.ComputeOne(&qs[i], res, metrics[i], schemaOf(f.n.kind), p, f.start)
		out[i] = res
	}
	return out, nil
}

// seriesAlone reads qs[i] by itself into out[i] (nil if not found).
func (s *Store) seriesAlone(ctx context.Context, qs []store.SeriesQuery, i int, out []*store.SeriesResult) error {
	r, err := s.Series(ctx, qs[i])
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	out[i] = r
	return nil
}

func hasExt(ms []store.SeriesMetric) bool {
	for _, m := range ms {
		if m.Ext != "" {
			return true
		}
	}
	return false
}

// AttemptProcesses returns the process lists of attempts as Attempt does
// (each process with its summary), read together; an unknown attempt, or
// one without processes, is absent.
func (s *Store) AttemptProcesses(ctx context.Context, ids []string) (_ map[string][]store.Process, err error) {
	defer store.WrapErr(&err, "cannot read the processes of %d attempts", len(ids))
	out := map[string][]store.Process{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), maxInKeys)]
		ids = ids[len(part):]
		if err := s.processLists(ctx, part, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// processLists adds the process lists of attempts ids to out (those of
// attemptsProcesses), with each process's summary from its samples over its
// life, the samples of all read together.
func (s *Store) processLists(ctx context.Context, ids []string, out map[string][]store.Process) error {
	type at struct {
		id string
		i  int
	}
	var all []at
	lists := map[string][]store.Process{}
	got, err := s.attemptsProcesses(ctx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		l := got[id]
		if len(l) == 0 {
			continue
		}
		for i := range l {
			all = append(all, at{id, i})
		}
		lists[id] = l
	}
	// Each process's summary, from its samples: those of its life (with a
	// margin), so that the zone maps of t_min and t_max leave out the
	// chunks of other times; or, for a process whose summary an earlier
	// read made (procAggs), those that came since.
	type read struct {
		need
		life  int64             // the life's start, less the margin
		agg   *store.ProcessAgg // nil: from the start
		after int64
		made  time.Time // of the read from the start
	}
	now := time.Now()
	reads := make([]read, len(all))
	var needs []need
	for i, a := range all {
		p := &lists[a.id][a.i]
		from, to := int64(0), int64(1<<62)
		if p.Start > 0 {
			from = int64(p.Start) - lookback
		}
		if p.End > 0 {
			to = int64(p.End) + lookback
		}
		r := read{need: need{store.KindProcess, uint64(p.Key), from, to}, life: from, after: math.MinInt64, made: now}
		if agg, made := s.procAggs.get(uint64(p.Key), from, now); agg != nil {
			r.agg, r.after, r.made = agg, agg.LastMs, made
			r.from = max(from, agg.LastMs+1)
		}
		reads[i] = r
		if r.from < r.to {
			needs = append(needs, r.need) // else: nothing can come after the summary
		}
	}
	chunks, err := s.readChunks(ctx, needs)
	if err != nil {
		return err
	}
	for i, a := range all {
		r := reads[i]
		pts, _, _, err := pointsIn(chunks[seriesKey{r.kind, r.key}], r.kind, r.from, r.to)
		if err != nil {
			return err
		}
		agg := r.agg
		if agg == nil {
			agg = &store.ProcessAgg{}
		}
		agg.Add(pts, r.after)
		agg.Fill(&lists[a.id][a.i])
		s.procAggs.put(r.key, r.life, agg, r.made)
	}
	for id, l := range lists {
		out[id] = l
	}
	return nil
}

// procAggs are the summaries of processes that earlier reads made
// (processLists), so that the next read adds only the samples that came
// since: a running attempt's page asks for its processes' summaries at
// every live update, each over the process's whole life. An agent sends a
// process's samples in time order, so a summary made of the samples up to
// some time holds all of them. Each is made again from the start after
// procAggTTL (rollups replace raw samples past their retention).
type procAggs struct {
	mu   sync.Mutex
	m    map[uint64]procAgg
	hits int // reads that found one (tests)
}

type procAgg struct {
	life int64 // the start of the span it covers
	agg  *store.ProcessAgg
	made time.Time // when it was made from the start
}

const (
	procAggTTL  = time.Minute
	maxProcAggs = 1 << 16
)

// get returns a copy of the summary of process key over a life that
// starts at life, and when it was made from the start (nil if none, if made
// for another life, or made procAggTTL before now). The time is the
// machine's, not the store's clock (Options.Clock, which follows the data in
// tests and benchmarks): the TTL bounds how long a summary goes without
// being made again.
func (c *procAggs) get(key uint64, life int64, now time.Time) (*store.ProcessAgg, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.life != life || now.Sub(e.made) >= procAggTTL {
		return nil, time.Time{}
	}
	c.hits++
	return e.agg.Clone(), e.made
}

// put keeps agg (which its caller no longer changes), unless it has no
// samples. When maxProcAggs are kept, those made procAggTTL before made go
// first, then all.
func (c *procAggs) put(key uint64, life int64, agg *store.ProcessAgg, made time.Time) {
	if agg.Samples == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= maxProcAggs {
		for k, e := range c.m {
			if made.Sub(e.made) >= procAggTTL {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxProcAggs {
			c.m = nil
		}
	}
	if c.m == nil {
		c.m = map[uint64]procAgg{}
	}
	c.m[key] = procAgg{life, agg, made}
}
