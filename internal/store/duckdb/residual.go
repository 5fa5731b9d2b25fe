package duckdb

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
)

// Compaction writes an attempt's merged chunks as their difference from
// the sums of its processes' samples (chunk format 4, store.SubtractProcesses):
// the processes' merged chunks, written by the same compaction, hold the
// rest. Every read of an attempt's chunks makes them whole first
// (resolve), from the processes' merged chunks (level 1) only: rollups
// and retention make an attempt's chunk whole again before they touch
// the processes' chunks it needs (absolutize). Fresh chunks, and merged
// chunks written before, are the attempt's own samples.

// memberGroups is the query of compaction's fresh chunks in the order it
// merges them when it writes attempts as residuals: each attempt's member
// processes (by proc_log; a process of several attempts goes with one of
// those in the table) just before the attempt, grp naming the attempt (0:
// none) and grp_job its job key (that of its chunks). proc_log is read
// from commit gen on (membersFrom), not whole: its rows are in commit
// order, and DuckDB's zone maps of gen leave out those of attempts
// stored long before. (The memberships join on kind and key, both
// equal: with the kind as a condition of one side only, DuckDB compared
// every chunk with every membership, 6 s of CPU for 150,000 chunks.)
func memberGroups(table, where string, gen uint64) string {
	proc, att := fmt.Sprint(store.KindProcess), fmt.Sprint(store.KindAttempt)
	return `SELECT f.kind, f.key, f.job_key, f.data, f.t_min, f.t_max,
		CASE WHEN f.kind = ` + proc + ` THEN coalesce(m.a, 0) WHEN f.kind = ` + att + ` THEN f.key ELSE 0 END AS grp,
		coalesce(j.job, 0)
		FROM ` + table + ` f LEFT JOIN (SELECT ` + proc + `::TINYINT AS kind, proc_key, min(attempt_key) AS a FROM proc_log
			WHERE gen >= ` + fmt.Sprint(gen) + ` AND attempt_key IN (SELECT key FROM ` + table + ` WHERE kind = ` + att + `)
			AND proc_key IN (SELECT key FROM ` + table + ` WHERE kind = ` + proc + `)
			GROUP BY proc_key) m ON m.kind = f.kind AND m.proc_key = f.key
		LEFT JOIN (SELECT key, max(job_key) AS job FROM ` + table + ` WHERE kind = ` + att + ` GROUP BY key) j ON j.key = m.a
		WHERE ` + where + ` ORDER BY grp, f.kind, f.key, f.t_min`
}

// membersFrom is the first commit that can have logged a membership of
// an attempt with chunks in table: the first commit of the earliest of
// them (gen_first), or the first whose summaries are not written yet
// (those of an attempt without a row yet).
func (s *Store) membersFrom(ctx context.Context, table string) (uint64, error) {
	var first sql.NullInt64
	var flushed string
	err := s.handle().QueryRowContext(ctx, `SELECT min(gen_first)::BIGINT, (SELECT value FROM meta WHERE key = 'flushed_gen')
		FROM attempts WHERE attempt_key IN (SELECT key FROM `+table+` WHERE kind = ?)`, store.KindAttempt).Scan(&first, &flushed)
	if err != nil {
		return 0, fmt.Errorf("cannot read the first commit of the attempts of %s: %w", table, err)
	}
	from, err := strconv.ParseUint(flushed, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read the commit summaries were written to: %w", err)
	}
	from++
	if first.Valid {
		from = min(from, uint64(first.Int64))
	}
	return from, nil
}

// residuals keeps, as compaction goes through a group (memberGroups), the
// points of the attempt's processes, and writes the attempt as residuals
// where they are smaller than its own samples. The processes' chunks are
// held until then (hold): those a residual needs name the attempt and its
// job (res_att, res_job), the others nothing.
type residuals struct {
	grp   int64
	keys  []uint64
	procs []*store.Points
	spare []*store.Points // copies made before, reused
	hdr   []byte
	cnt   []int
	keep  []uint64
	orig  store.Points // the attempt's own points
	w     chunk.Writer
	own   []byte
	named map[uint64]bool // the processes a residual of the group needs
	held  []heldRow
	bytes []byte  // the held rows' data
	kept  *wholes // where each residual's own samples are kept (wholes.putOwn)
}

// heldRow is a process's merged chunk held until its group's attempt is
// written (residuals.hold).
type heldRow struct {
	key, job, tMin, tMax int64
	n                    int32
	level                int8
	data                 [2]int // its bytes in residuals.bytes
}

// hold keeps a chunk of a group's process to be appended by release.
func (r *residuals) hold(key, job int64, c *chunk.Chunk, level int8, data []byte) {
	r.held = append(r.held, heldRow{key, job, c.Times[0], c.Times[len(c.Times)-1], int32(len(c.Times)), level,
		[2]int{len(r.bytes), len(r.bytes) + len(data)}})
	r.bytes = append(r.bytes, data...)
}

// release appends the held chunks of the group (grp: the attempt's key
// and job key), those of the processes its residuals need naming it.
func (r *residuals) release(grp [2]int64, appendRow func(kind int8, key, job, tMin, tMax int64, n int32, level int8, data []byte, resAtt, resJob any) error) error {
	for _, h := range r.held {
		var resAtt, resJob any
		if r.named[uint64(h.key)] {
			resAtt = grp[0]
			if grp[1] != 0 {
				resJob = grp[1]
			}
		}
		if err := appendRow(int8(store.KindProcess), h.key, h.job, h.tMin, h.tMax, h.n, h.level, r.bytes[h.data[0]:h.data[1]], resAtt, resJob); err != nil {
			return err
		}
	}
	r.held, r.bytes = r.held[:0], r.bytes[:0]
	clear(r.named)
	return nil
}

// process keeps a copy of a member process's points (p is the decoder's).
func (r *residuals) process(grp int64, key uint64, p *store.Points) {
	r.enter(grp)
	var c *store.Points
	if n := len(r.procs); n < len(r.spare) {
		c = r.spare[n]
	} else {
		c = &store.Points{}
		r.spare = append(r.spare, c)
	}
	copyPoints(c, p)
	r.keys = append(r.keys, key)
	r.procs = append(r.procs, c)
}

// enter starts group grp (its processes come first).
func (r *residuals) enter(grp int64) {
	if grp != r.grp {
		r.grp, r.keys, r.procs = grp, r.keys[:0], r.procs[:0]
		clear(r.named)
	}
}

// copyPoints makes dst a copy of p, in dst's arrays.
func copyPoints(dst, p *store.Points) {
	dst.Times = append(dst.Times[:0], p.Times...)
	n := len(p.Cols)
	dst.Cols, dst.Absent, dst.Has = slices.Grow(dst.Cols[:0], n)[:n], slices.Grow(dst.Absent[:0], n)[:n], append(dst.Has[:0], p.Has...)
	for j := range p.Cols {
		if !p.Has[j] {
			continue
		}
		dst.Cols[j] = append(dst.Cols[j][:0], p.Cols[j]...)
		if p.Absent[j] == nil {
			dst.Absent[j] = nil
		} else {
			dst.Absent[j] = append(dst.Absent[j][:0], p.Absent[j]...)
		}
	}
}

// attempt subtracts the group's processes from the attempt's points p
// (key: the attempt's) and returns what emit should write of each chunk
// it is then cut into (at level Packed): its residual, or the attempt's
// own samples where they encode no longer (short tasks: a residual of 19
// samples names its processes at 9 bytes each), the residual's processes
// then named (release). ok is false when there is nothing to subtract:
// p is written as it is.
func (r *residuals) attempt(key uint64, p *store.Points) (wrap func(c *chunk.Chunk, data []byte) []byte, ok bool) {
	r.enter(int64(key))
	if len(r.procs) == 0 {
		return nil, false
	}
	copyPoints(&r.orig, p)
	var own *chunk.Chunk
	matched := store.SubtractProcesses(p, r.procs)
	times := p.Times
	return func(c *chunk.Chunk, data []byte) []byte {
		// The processes with samples at this part's times, and how many.
		lo, hi := c.Times[0], c.Times[len(c.Times)-1]
		r.keep, r.cnt = r.keep[:0], r.cnt[:0]
		for k, m := range matched {
			a := sort.Search(len(m), func(x int) bool { return times[m[x]] >= lo })
			b := sort.Search(len(m), func(x int) bool { return times[m[x]] > hi })
			if b > a {
				r.keep, r.cnt = append(r.keep, r.keys[k]), append(r.cnt, b-a)
			}
		}
		if len(r.keep) == 0 {
			return data // nothing subtracted here: the attempt's own samples
		}
		r.hdr = append(chunk.ResidualHeader(r.hdr[:0], r.keep, r.cnt), data...)
		if own == nil {
			own = store.ToChunk(&r.orig, schemaOf(store.KindAttempt))
		}
		i := sort.Search(len(own.Times), func(x int) bool { return own.Times[x] >= lo })
		if r.own = r.w.Encode(r.own[:0], own.Slice(i, i+len(c.Times)), chunk.Packed); len(r.own) <= len(r.hdr) {
			return r.own
		}
		if r.named == nil {
			r.named = map[uint64]bool{}
		}
		for _, k := range r.keep {
			r.named[k] = true
		}
		if r.kept != nil {
			r.kept.putOwn(key, c.Times[0], r.hdr, r.own)
		}
		return r.hdr
	}, true
}

// resolve makes whole the residual chunks among rows (attempts' chunks,
// with their spans): each one's whole is set to the attempt's own samples
// (pointsIn reads it in place of its bytes), from wholes if an earlier
// read made it. pre are processes' merged chunks already read with them
// (those that name their attempts: res_att, res_job) overlapping [from,
// to); the processes of a residual that is not wholly in [from, to), or
// not among pre, are read here, all together. want are the attempt
// columns made whole (bit j: AttemptColumns[j]; allAttemptColumns for
// compaction's and the analyser's reads): the others are left out of the
// wholes, and the processes are decoded only as far as the columns that
// sum into them (procWant).
func (s *Store) resolve(ctx context.Context, pre map[uint64][]chunkRow, from, to int64, want uint64, rows ...[]chunkRow) error {
	type res struct {
		row    *chunkRow
		procs  []uint64
		counts []int
		body   []byte
		again  bool // its processes are read here
		series int  // its index in rows
	}
	var rs []res
	keys := map[uint64]bool{}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for si, rr := range rows {
		for i := range rr {
			c := &rr[i]
			if !chunk.IsResidual(c.data) {
				continue
			}
			if c.whole = s.wholes.get(c.tMin, c.data, want); c.whole != nil {
				continue
			}
			procs, counts, body, err := chunk.Residual(c.data, nil, nil)
			if err != nil {
				return fmt.Errorf("cannot read an attempt's chunk: %w", err)
			}
			again := pre == nil || c.tMin < from || c.tMax >= to
			for _, k := range procs {
				if _, ok := pre[k]; !ok {
					again = true
				}
			}
			rs = append(rs, res{c, procs, counts, body, again, si})
			if again {
				for _, k := range procs {
					keys[k] = true
				}
				lo, hi = min(lo, c.tMin), max(hi, c.tMax)
			}
		}
	}
	if len(rs) == 0 {
		return nil
	}
	read := map[uint64][]chunkRow{}
	list := make([]uint64, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	slices.Sort(list)
	for len(list) > 0 {
		part := list[:min(len(list), maxInKeys)]
		list = list[len(part):]
		if err := s.readMerged(ctx, part, lo, hi, read); err != nil {
			return err
		}
	}
	// The processes are decoded once for each series (an attempt's
	// residuals name the same ones), into decoders reused from one series
	// to the next: a job's read makes hundreds of attempts whole.
	type procKey struct {
		key   uint64
		again bool
	}
	procs := map[procKey]*store.Points{}
	var decs []*store.Decoder
	used, series := 0, -1
	var dec chunk.Decoder
	var raws [][]byte
	pw := procWant(want)
	for _, r := range rs {
		if r.series != series {
			series, used = r.series, 0
			clear(procs)
		}
		pts := make([]*store.Points, len(r.procs))
		for k, key := range r.procs {
			p, ok := procs[procKey{key, r.again}]
			if !ok {
				src := pre[key]
				if r.again {
					src = read[key]
				}
				if used == len(decs) {
					decs = append(decs, &store.Decoder{})
				}
				var err error
				raws = raws[:0]
				for _, c := range sortedByTime(src) {
					raws = append(raws, c.data)
				}
				if p, err = decs[used].DecodeColumns(raws, schemaOf(store.KindProcess), pw); err != nil {
					return fmt.Errorf("cannot read the processes of an attempt's chunk: %w", err)
				}
				used++
				procs[procKey{key, r.again}] = p
			}
			pts[k] = p
		}
		c := &chunk.Chunk{}
		if err := dec.DecodeTo(r.body, c); err != nil {
			return fmt.Errorf("cannot read an attempt's chunk: %w", err)
		}
		if want != allAttemptColumns {
			c.Columns = slices.DeleteFunc(c.Columns, func(col chunk.Column) bool { return col.ID >= 64 || want&(1<<col.ID) == 0 })
		}
		if err := store.AddProcesses(c, pts, r.counts); err != nil {
			return fmt.Errorf("cannot read an attempt's chunk of %d samples from %d: %w", len(c.Times), r.row.tMin, err)
		}
		r.row.whole = c
		s.wholes.put(r.row.tMin, r.row.data, want, c)
	}
	return nil
}

// allAttemptColumns wants every column of an attempt's chunks (resolve).
var allAttemptColumns uint64 = 1<<len(store.AttemptColumns) - 1

// attemptWant are the attempt columns metrics read (resolve's want).
func attemptWant(metrics []store.SeriesMetric) uint64 {
	var want uint64
	for _, m := range metrics {
		for _, name := range m.Columns {
			if j := store.ColumnIndex(store.AttemptColumns, name); j >= 0 {
				want |= 1 << j
			}
		}
	}
	return want
}

// procWant are the process columns that sum into the attempt columns
// want: those a residual's processes are decoded to (store.AttemptSums).
// With none (a read of the attempts' times only, or of columns no
// process sums into) the first column written, so that the processes'
// times are still decoded and counted.
func procWant(want uint64) uint64 {
	if want == allAttemptColumns {
		return 0 // all
	}
	var pw uint64
	for j, srcs := range store.AttemptSums {
		if want&(1<<j) != 0 {
			for _, src := range srcs {
				pw |= 1 << src
			}
		}
	}
	if pw == 0 {
		pw = 1 << sumsFirst[0]
	}
	return pw
}

// sumsFirst are the process columns that sum into an attempt's, in the
// order compaction writes them first in a process's merged chunks
// (orderColumns): those of the metrics the pages ask for first (CPU,
// memory, IO), so that a read making residuals whole decodes a short
// start of each process chunk and leaves the rest (resolve, procWant).
// The columns no attempt's sums read follow, in their order.
var sumsFirst = func() []int {
	var out []int
	for _, name := range []string{"cpu_user_ms", "cpu_sys_ms", "cpu_children_user_ms", "cpu_children_sys_ms",
		"rss_kb", "pss_kb", "read_bytes", "write_bytes", "vms_kb", "heap_used_kb", "gc_time_ms", "sched_wait_ms"} {
		out = append(out, store.ColumnIndex(store.SampleColumns, name))
	}
	return out
}()

// columnRank is each process column's place in a merged chunk
// (orderColumns).
var columnRank = func() []int {
	rank := make([]int, len(store.SampleColumns))
	for j := range rank {
		rank[j] = len(sumsFirst) + j
	}
	for i, j := range sumsFirst {
		rank[j] = i
	}
	return rank
}()

// orderColumns puts a process chunk's columns in the order of columnRank
// (their ids say which they are: every reader takes them in any order).
func orderColumns(c *chunk.Chunk) {
	slices.SortStableFunc(c.Columns, func(a, b chunk.Column) int {
		return cmp.Compare(rankOf(a.ID), rankOf(b.ID))
	})
}

func rankOf(id uint8) int {
	if int(id) < len(columnRank) {
		return columnRank[id]
	}
	return int(id)
}

// sortedByTime is chunks in t_min order (a copy if they were not).
func sortedByTime(chunks []chunkRow) []chunkRow {
	less := func(a, b chunkRow) int { return cmp.Compare(a.tMin, b.tMin) }
	if slices.IsSortedFunc(chunks, less) {
		return chunks
	}
	chunks = slices.Clone(chunks)
	slices.SortStableFunc(chunks, less)
	return chunks
}

// wholes are residuals made whole by earlier reads, by their bytes and
// first time (a residual's processes' chunks do not change while it is
// stored: rollups and retention make it whole first), so that reading
// them again (a running attempt's or job's page, at every live update)
// does not decode their processes again; and the attempt's own samples
// of the residuals compaction wrote, encoded as compaction had them
// (putOwn), so that a first read of recent data decodes them as a plain
// store's chunk, not the processes'. At most maxWholeBytes of them.
//
// atts are the attempts whose residuals are kept (mark): those of which
// compaction kept some (putOwn), and those read since (a read keeps what
// it made whole, and an attempt read without residuals needs nothing
// kept). A read of such an attempt takes its own chunks only, and its
// processes' by key only for residuals not kept (points, readChunkRange);
// a read of another one takes its processes' chunks in the same scan,
// since it will need them. A hint only, never pruned as entries go: a
// read that finds less kept than its hint said reads the processes by
// key, as a cold read of two queries. At most maxMarked of them (then
// forgotten all at once).
type wholes struct {
	mu      sync.Mutex
	seed    maphash.Seed
	m       map[wholeKey]wholeEntry
	bytes   int
	atts    map[uint64]struct{}
	hits    int // (tests)
	ownHits int // (tests)
	carried int // processes whose chunks attempts' reads took in their scans (tests)
}

// maxMarked bounds wholes.atts (16 bytes each, and the map's own).
const maxMarked = 1 << 16

type wholeKey struct {
	hash uint64
	tMin int64
}

type wholeEntry struct {
	data  []byte // the residual's
	want  uint64 // the attempt columns made whole (resolve)
	whole *chunk.Chunk
	own   []byte // or the attempt's own samples, encoded (putOwn)
	size  int
}

const maxWholeBytes = 64 << 20

// get returns the residual data (first time tMin) made whole with at
// least the columns want, or nil. The chunk is shared: it is read, never
// changed.
func (w *wholes) get(tMin int64, data []byte, want uint64) *chunk.Chunk {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		return nil
	}
	e, ok := w.m[wholeKey{maphash.Bytes(w.seed, data), tMin}]
	if !ok || e.want&want != want || !bytes.Equal(e.data, data) {
		return nil
	}
	if e.whole == nil {
		c, err := chunk.Decode(e.own) // (a new chunk: the caller's)
		if err != nil {
			return nil // (made whole from its processes, then)
		}
		w.ownHits++
		return c
	}
	w.hits++
	return e.whole
}

// putOwn keeps own, the samples of residual data (first time tMin) of
// attempt att as compaction encoded them before it subtracted the
// processes.
func (w *wholes) putOwn(att uint64, tMin int64, data, own []byte) {
	if w.add(tMin, data, wholeEntry{want: allAttemptColumns, own: append([]byte(nil), own...), size: len(data) + len(own)}) {
		w.mark(att)
	}
}

// mark notes that the residuals of attempt att are kept (wholes.atts).
func (w *wholes) mark(att uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.atts) >= maxMarked {
		w.atts = nil
	}
	if w.atts == nil {
		w.atts = map[uint64]struct{}{}
	}
	w.atts[att] = struct{}{}
}

// marked reports whether the residuals of attempt att are kept, as far
// as marks tell (wholes.atts).
func (w *wholes) marked(att uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.atts[att]
	return ok
}

// put keeps c, the residual data made whole (its columns want), in place
// of what was kept of it.
func (w *wholes) put(tMin int64, data []byte, want uint64, c *chunk.Chunk) {
	size := len(data) + 8*len(c.Times)
	for _, col := range c.Columns {
		size += 8*len(col.Values) + len(col.Absent)
	}
	w.add(tMin, data, wholeEntry{want: want, whole: c, size: size})
}

// add keeps e for the residual data (first time tMin), unless it is too
// large to (false).
func (w *wholes) add(tMin int64, data []byte, e wholeEntry) bool {
	size := e.size
	if size > maxWholeBytes/16 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.seed, w.m = maphash.MakeSeed(), map[wholeKey]wholeEntry{}
	}
	for k, e := range w.m { // (in no order: as good as any here)
		if w.bytes+size <= maxWholeBytes {
			break
		}
		delete(w.m, k)
		w.bytes -= e.size
	}
	k := wholeKey{maphash.Bytes(w.seed, data), tMin}
	if e, ok := w.m[k]; ok {
		w.bytes -= e.size
	}
	e.data = append([]byte(nil), data...)
	w.m[k] = e
	w.bytes += size
	return true
}

// took counts the processes whose chunks an attempt's read took in its
// scan (tests).
func (w *wholes) took(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.carried += n
}

// clear forgets them all (benchmarks of reads that find none).
func (w *wholes) clear() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m, w.bytes, w.atts = nil, 0, nil
}

// readMerged reads the merged chunks (level 1) of processes keys
// overlapping [from, to] into out.
func (s *Store) readMerged(ctx context.Context, keys []uint64, from, to int64, out map[uint64][]chunkRow) error {
	args := []any{store.KindProcess, levelMerged, from, to}
	for _, k := range keys {
		args = append(args, keyValue(k))
	}
	rows, err := s.handle().QueryContext(ctx, `SELECT key, t_min, t_max, data FROM series_chunks
		WHERE kind = ? AND level = ? AND t_max >= ? AND t_min <= ? AND key IN (`+placeholders(len(keys))+`)`, args...)
	if err != nil {
		return fmt.Errorf("cannot read the processes of attempts' chunks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key int64
		c := chunkRow{level: levelMerged}
		if err := rows.Scan(&key, &c.tMin, &c.tMax, &c.data); err != nil {
			return err
		}
		out[uint64(key)] = append(out[uint64(key)], c)
	}
	return rows.Err()
}

// absolutize makes whole the attempts' residual chunks that hold samples
// both before cut and from it (merged again as the attempts' own
// samples), before rollups or retention take the processes' chunks
// before cut. It returns how many series it rewrote.
func (s *Store) absolutize(ctx context.Context, cut int64) (int, error) {
	n, err := s.rewrite(ctx, "series_chunks", fmt.Sprintf("kind = %d AND level = %d AND t_min < %d AND t_max >= %d AND %s",
		store.KindAttempt, levelMerged, cut, cut, isResidualSQL), false, merge)
	if err != nil {
		return 0, fmt.Errorf("cannot make attempts' chunks whole before %d: %w", cut, err)
	}
	return n, nil
}

// isResidualSQL selects the residual chunks: those whose first byte is
// format 4's.
const isResidualSQL = `data >= '\x04'::BLOB AND data < '\x05'::BLOB`
