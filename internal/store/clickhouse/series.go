package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/taskscope/taskscope/internal/store"
)

// lookback is how far before a window the chunks are read, so that the
// window's first sample has the one before it to make a rate from (as the
// embedded store: a series with a gap of more than that just before the
// window has, in its first bucket, the average since its start).
const lookback = 2 * 60 * 1000

// chunk is a chunk as the tables hold it.
type chunkRec struct {
	tMin  int64
	tMax  int64
	level uint8
	start int64
	data  []byte
}

// chunksOf reads the chunks of kind, of the series keys under the job keys,
// overlapping [from, to), by series, in time order; raw and rollups.
func (s *Store) chunksOf(ctx context.Context, kind uint8, jobs []uint64, keys []uint64, from, to int64) (map[uint64][]chunkRec, error) {
	out := map[uint64][]chunkRec{}
	for len(keys) > 0 {
		part := keys[:min(len(keys), 1000)]
		keys = keys[len(part):]
		where := fmt.Sprintf("kind = %d AND job_key IN (%s) AND key IN (%s) AND t_max >= %d AND t_min < %d", kind, numList(jobs),
			numList(part), from, to)
		if err := s.readChunks(ctx, where, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readChunks reads the chunks (and rollups) a condition selects into out,
// by series, in one query. A chunk stored twice (a batch written by two
// replicas) is read once: DISTINCT over the row, which is the same both
// times; a slot's chunks read beside their merged chunk (while Maintain
// merges it) give their samples twice, which store.Decode keeps once.
func (s *Store) readChunks(ctx context.Context, where string, out map[uint64][]chunkRec) error {
	rows, err := s.query(ctx, "SELECT DISTINCT key, t_min, t_max, level, start_ms, data FROM "+
		s.union("key, t_min, t_max, level, start_ms, data", where, "series_chunks", "chunks", "rollups"))
	if err != nil {
		return fmt.Errorf("cannot read series: %w", err)
	}
	for rows.Next() {
		k := rows.UInt64()
		c := chunkRec{tMin: rows.Int64(), tMax: rows.Int64(), level: rows.UInt8(), start: rows.Int64(), data: rows.Bytes()}
		out[k] = append(out[k], c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for k, cs := range out {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].tMin < cs[j].tMin })
		out[k] = cs
	}
	return nil
}

// pointsOf decodes a series' chunks: raw samples, and rollups before the
// oldest raw one.
func pointsOf(cs []chunkRec, cols []store.StoredColumn) (*store.Points, error) {
	var raw, rollup [][]byte
	for _, c := range cs {
		if c.level >= 2 {
			rollup = append(rollup, c.data)
		} else {
			raw = append(raw, c.data)
		}
	}
	return store.DecodeLevels(raw, rollup, cols)
}

func schemaOf(kind uint8) []store.StoredColumn { return store.ColumnsOf(int(kind)) }

// Series returns bucketed series, computed from the chunks by package
// store's shared code.
func (s *Store) Series(ctx context.Context, q store.SeriesQuery) (_ *store.SeriesResult, err error) {
	defer store.WrapErr(&err, "cannot read the series of %s", q.Scope)
	return s.series(ctx, q, nil)
}

// AttemptSeries returns what Series returns for an attempt's series, from
// its life as AttemptLife read it (store.AttemptSeriesReader): its job and
// its start, without reading its row again.
func (s *Store) AttemptSeries(ctx context.Context, life *store.AttemptLife, q store.SeriesQuery) (_ *store.SeriesResult, err error) {
	defer store.WrapErr(&err, "cannot read the series of attempt %s", life.AttemptID)
	if q.Scope != store.ScopeAttempt || q.AttemptID != life.AttemptID {
		return nil, fmt.Errorf("the series of attempt %s asked for those of %s %q", life.AttemptID, q.Scope, q.AttemptID)
	}
	return s.series(ctx, q, life)
}

// series is Series, of the attempt of life when it is given (ScopeAttempt).
func (s *Store) series(ctx context.Context, q store.SeriesQuery, life *store.AttemptLife) (*store.SeriesResult, error) {
	if q.Step <= 0 || q.To <= q.From {
		return nil, fmt.Errorf("series needs from < to and a step > 0")
	}
	if q.Buckets() > 100000 {
		return nil, fmt.Errorf("series of %d buckets: at most 100000", q.Buckets())
	}
	metrics, err := store.LookupMetrics(q.Scope, q.Metrics)
	if err != nil {
		return nil, err
	}
	res := store.NewSeriesResult(&q, metrics)
	switch q.Scope {
	case store.ScopeProcess:
		err = s.processSeries(ctx, &q, metrics, res)
	case store.ScopeAttempt:
		err = s.attemptSeries(ctx, &q, metrics, res, life)
	case store.ScopeJob:
		err = s.jobSeries(ctx, &q, metrics, res)
	default:
		err = fmt.Errorf("unknown scope %q", q.Scope)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// one computes the metrics of one series, and its ext metrics.
func (s *Store) one(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric, res *store.SeriesResult,
	kind, extKind uint8, jobs []uint64, key uint64, start int64, fromChunks bool) (bool, error) {
	byKey, err := s.chunksOf(ctx, kind, jobs, []uint64{key}, q.From-lookback, q.To)
	if err != nil {
		return false, err
	}
	cs := byKey[key]
	if fromChunks {
		for _, c := range cs {
			start = max(start, c.start)
		}
	}
	p, err := pointsOf(cs, schemaOf(kind))
	if err != nil {
		return false, err
	}
	store.ComputeOne(q, res, metrics, schemaOf(kind), p, start)
	for i, m := range metrics {
		if m.Ext == "" {
			continue
		}
		ek := store.ExtKey(key, m.Ext)
		byKey, err := s.chunksOf(ctx, extKind, jobs, []uint64{ek}, q.From-lookback, q.To)
		if err != nil {
			return false, err
		}
		ep, err := pointsOf(byKey[ek], store.ExtColumns)
		if err != nil {
			return false, err
		}
		one := *res
		one.Series = res.Series[i : i+1]
		store.ComputeOne(q, &one, metrics[i:i+1], store.ExtColumns, ep, start)
	}
	return len(p.Times) > 0, nil
}

// attemptSeries computes an attempt's series: of life if it is given (its
// job, and its start: store.AttemptOf's is store.AttemptSpan's first), else
// of the attempt read.
func (s *Store) attemptSeries(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric, res *store.SeriesResult,
	life *store.AttemptLife) error {
	if life == nil {
		var err error
		if life, err = s.AttemptLife(ctx, q.AttemptID); err != nil {
			return err
		}
	}
	job, first := life.JobID, int64(life.Start)
	_, err := s.one(ctx, q, metrics, res, store.KindAttempt, store.KindAttemptExt, []uint64{jobKey(job), jobKey("")},
		store.AttemptKey(q.AttemptID), first, false)
	return err
}

func (s *Store) processSeries(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric, res *store.SeriesResult) error {
	key := uint64(q.Process)
	var jobs []uint64
	if q.AttemptID != "" {
		st, err := s.attempt(ctx, q.AttemptID)
		if err != nil {
			return err
		}
		rows, err := s.query(ctx, fmt.Sprintf("SELECT minIf(start_ms, start_ms != 0), countIf(member) FROM %s FINAL WHERE job_key IN (%d, %d) AND attempt_key = %d AND proc_key = %d",
			s.read("procs"), jobKey(st.Meta.JobID), jobKey(""), store.AttemptKey(q.AttemptID), key))
		if err != nil {
			return err
		}
		start, members := rows.Int64(), rows.UInt64()
		if err := rows.Err(); err != nil {
			return err
		}
		if members == 0 {
			return fmt.Errorf("process %s is not in attempt %s: %w", q.Process, q.AttemptID, store.ErrNotFound)
		}
		jobs = []uint64{jobKey(st.Meta.JobID), jobKey("")}
		_, err = s.one(ctx, q, metrics, res, store.KindProcess, store.KindProcessExt, jobs, key, start, false)
		return err
	}
	// Without an attempt: its job from the index (or none known).
	js, err := s.procJobs(ctx, key)
	if err != nil {
		return err
	}
	jobs = append(js, jobKey(""))
	found, err := s.one(ctx, q, metrics, res, store.KindProcess, store.KindProcessExt, jobs, key, 0, true)
	if err != nil || found {
		return err
	}
	// Known by its records?
	rows, err := s.query(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE proc_key = %d", s.read("procs"), key))
	if err != nil {
		return err
	}
	if rows.UInt64() == 0 && rows.Err() == nil {
		// Without samples in the window nor records: is it known at all?
		byKey, err := s.chunksOf(ctx, store.KindProcess, jobs, []uint64{key}, 0, 1<<62)
		if err != nil {
			return err
		}
		if len(byKey[key]) == 0 {
			return store.ErrNotFound
		}
	}
	return rows.Err()
}

// procJobs lists the job keys a process's rows are under.
func (s *Store) procJobs(ctx context.Context, key uint64) ([]uint64, error) {
	return s.uint64s(ctx, fmt.Sprintf("SELECT DISTINCT job_key FROM %s WHERE proc_key = %d", s.read("proc_index"), key))
}

// jobSeries sums the job's attempts.
func (s *Store) jobSeries(ctx context.Context, q *store.SeriesQuery, metrics []store.SeriesMetric, res *store.SeriesResult) error {
	atts, err := s.jobAttempts(ctx, q.JobID)
	if err != nil {
		return err
	}
	if len(atts) == 0 {
		return store.ErrNotFound
	}
	starts := map[uint64]int64{}
	var keys []uint64
	for _, st := range atts {
		first, _ := store.AttemptSpan(&st.Meta, &st.Sum)
		k := store.AttemptKey(st.Meta.AttemptID)
		starts[k] = first
		keys = append(keys, k)
	}
	jobs := []uint64{jobKey(q.JobID)}
	add := func(kind uint8, acc *store.JobAccumulator, keyOf func(uint64) uint64) error {
		var ks []uint64
		start := map[uint64]int64{}
		for _, k := range keys {
			ks = append(ks, keyOf(k))
			start[keyOf(k)] = starts[k]
		}
		byKey, err := s.chunksOf(ctx, kind, jobs, ks, q.From-lookback, q.To)
		if err != nil {
			return err
		}
		found := make([]uint64, 0, len(byKey))
		for k := range byKey {
			found = append(found, k)
		}
		// The order the sums are taken in, as the embedded store's (its
		// keys are signed).
		slices.SortFunc(found, func(a, b uint64) int { return cmpInt(int64(a), int64(b)) })
		for _, k := range found {
			p, err := pointsOf(byKey[k], schemaOf(kind))
			if err != nil {
				return err
			}
			acc.Add(p, start[k])
		}
		return nil
	}
	acc := store.NewJobAccumulator(q, metrics)
	if err := add(store.KindAttempt, acc, func(k uint64) uint64 { return k }); err != nil {
		return err
	}
	acc.Fill(res)
	for i, m := range metrics {
		if m.Ext == "" {
			continue
		}
		acc := store.NewExtAccumulator(q, m)
		if err := add(store.KindAttemptExt, acc, func(k uint64) uint64 { return store.ExtKey(k, m.Ext) }); err != nil {
			return err
		}
		one := *res
		one.Series = res.Series[i : i+1]
		acc.Fill(&one)
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
