package clickhouse

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// The host index (table host_index): which attempts ran on a host when.
// The attempts table is ordered by job: HostAttempts (what else ran on a
// straggler's host meanwhile, which a job's analysis asks of each
// straggler) read by host and time scanned every row of it, FINAL, and
// its cost grew with the table. The index is ordered by host and time
// bucket: a row per attempt and bucket of hostBucket its life overlaps,
// with its job's key and the day of its rows, written with its rows as
// its life grows (attemptRow). An attempt whose start is not known, or
// whose life spans more than maxHostBuckets buckets, has one row of
// bucket -1 instead, which every read of its host takes. The index is a
// superset: the attempts it names are read and the window's condition
// applied to their rows, so HostAttempts says what the scan said.

const (
	// hostBucket is the span of a bucket of the index (ms).
	hostBucket = 10 * 60_000
	// maxHostBuckets: an attempt whose life spans more buckets (a week's)
	// is indexed by one row of bucket -1.
	maxHostBuckets = 7 * 24 * 6
	// maxHostIndexed is how many attempts a read of the index takes at
	// most: a window with more (a host's whole history) is read by the
	// scan, as the index would name too many to read by their keys.
	maxHostIndexed = 2000
)

// hostBuckets are the buckets of an attempt's life [first, last], or -1,
// -1 for the row of bucket -1.
func hostBuckets(first, last int64) (lo, hi int64) {
	if first <= 0 || last < first || last/hostBucket-first/hostBucket >= maxHostBuckets {
		return -1, -1
	}
	return first / hostBucket, last / hostBucket
}

// hostRows writes the host index rows of an attempt that this replica has
// not written yet (all of them when it does not know which: its state
// read back from the table, or its host or job changed).
func (w *writeSet) hostRows(st *attState, job uint64) {
	first, last := store.AttemptSpan(&st.Meta, &st.Sum)
	lo, hi := hostBuckets(first, last)
	b := &st.B
	switch {
	case !b.hosted || b.host != st.Host || b.hostJob != job:
		b.hosted, b.host, b.hostJob, b.lo, b.hi = true, st.Host, job, lo, hi
		w.hostIndexRows(st, lo, hi)
	case b.lo == -1:
		// (bucket -1 names it in every window)
	case lo == -1:
		b.lo, b.hi = -1, -1
		w.hostIndexRows(st, -1, -1)
	default:
		if lo < b.lo {
			w.hostIndexRows(st, lo, b.lo-1)
			b.lo = lo
		}
		if hi > b.hi {
			w.hostIndexRows(st, b.hi+1, hi)
			b.hi = hi
		}
	}
}

// hostIndexRows writes an attempt's rows of buckets lo to hi (-1, -1: the
// row of bucket -1, in the partition of its rows).
func (w *writeSet) hostIndexRows(st *attState, lo, hi int64) {
	r := &w.hostIndex
	for k := lo; k <= hi; k++ {
		r.Row()
		if k < 0 {
			r.Date(st.Born)
		} else {
			r.Date(k * hostBucket)
		}
		r.String(st.Host)
		r.Int64(k)
		r.UInt64(st.B.hostJob)
		r.String(st.Meta.AttemptID)
		r.Date(st.Born)
	}
}

// hits are the distinct jobs, days and attempts the host index named:
// the keys of the attempts' rows to read.
type hits struct {
	jobs, days       []uint64
	ids              []string
	seenJob, seenDay map[uint64]bool
	seenID           map[string]bool
}

func newHits() *hits {
	return &hits{seenJob: map[uint64]bool{}, seenDay: map[uint64]bool{}, seenID: map[string]bool{}}
}

func (h *hits) add(job, day uint64, id string) {
	if !h.seenJob[job] {
		h.seenJob[job] = true
		h.jobs = append(h.jobs, job)
	}
	if !h.seenDay[day] {
		h.seenDay[day] = true
		h.days = append(h.days, day)
	}
	if !h.seenID[id] {
		h.seenID[id] = true
		h.ids = append(h.ids, id)
	}
}

// cond is the condition on the attempts' rows of the hits (their days in
// order).
func (h *hits) cond() string {
	sort.Slice(h.days, func(i, j int) bool { return h.days[i] < h.days[j] })
	return fmt.Sprintf("job_key IN (%s) AND day IN (%s) AND attempt_id IN (%s)", numList(h.jobs), numList(h.days), QuoteList(h.ids))
}

// HostAttempts lists the attempts that ran on host within [from, to): the
// index's for the window, then their rows (by their jobs' keys and days),
// with the window's condition.
func (s *Store) HostAttempts(ctx context.Context, host string, from, to int64) (_ []store.Attempt, err error) {
	defer store.WrapErr(&err, "cannot read the attempts of host %s", host)
	if to <= 0 {
		to = 1 << 62
	}
	cond := fmt.Sprintf("host = %s AND last_ms >= %d AND first_ms < %d", Quote(host), from, to)
	lo, hi := max(from, 0)/hostBucket, max(to-1, 0)/hostBucket
	rows, err := s.query(ctx, fmt.Sprintf("SELECT DISTINCT job_key, att_day, attempt_id FROM %s WHERE host = %s AND (bucket = -1 OR bucket >= %d AND bucket <= %d) LIMIT %d",
		s.read("host_index"), Quote(host), lo, hi, maxHostIndexed+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the host index: %w", err)
	}
	hit := newHits()
	n := 0
	for rows.Next() {
		hit.add(rows.UInt64(), uint64(rows.UInt16()), rows.String())
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the host index: %w", err)
	}
	var atts []*attState
	switch {
	case n > maxHostIndexed:
		atts, err = s.readAttempts(ctx, cond)
	case len(hit.ids) > 0:
		atts, err = s.readAttempts(ctx, hit.cond()+" AND "+cond)
	}
	if err != nil {
		return nil, err
	}
	return s.apiAttempts(ctx, atts)
}

// hostIndexMissing reports whether the tables here are of a store made
// before the host index (attempts without host_index): Open fills the
// index from the attempts once it has made it.
func (s *Store) hostIndexMissing(ctx context.Context) (bool, error) {
	rows, err := s.c.WithDatabase("system").Query(ctx, fmt.Sprintf("SELECT name FROM system.tables WHERE database = %s AND name IN (%s, %s)",
		Quote(s.c.Database()), Quote(s.schema.localName("attempts")), Quote(s.schema.localName("host_index"))), nil)
	if err != nil {
		return false, fmt.Errorf("cannot list tables: %w", err)
	}
	var attempts, index bool
	for rows.Next() {
		switch rows.String() {
		case s.schema.localName("attempts"):
			attempts = true
		default:
			index = true
		}
	}
	return attempts && !index, rows.Err()
}

// fillHostIndex writes the host index rows of every attempt stored, as
// hostRows would have (one INSERT ... SELECT over the attempts' latest
// rows).
func (s *Store) fillHostIndex(ctx context.Context) error {
	span := fmt.Sprintf("(intDiv(last_ms, %[1]d) - intDiv(first_ms, %[1]d))", hostBucket)
	q := fmt.Sprintf(`INSERT INTO %[1]s (day, host, bucket, job_key, attempt_id, att_day)
SELECT if(bucket < 0, att_day, toDate(toUInt16(intDiv(bucket * %[3]d, 86400000)))), host, bucket, job_key, attempt_id, att_day
FROM (SELECT host, job_key, attempt_id, day AS att_day,
	arrayJoin(if(first_ms <= 0 OR last_ms < first_ms OR %[5]s >= %[4]d, [toInt64(-1)],
		arrayMap(i -> toInt64(intDiv(first_ms, %[3]d) + i), range(toUInt64(least(greatest(%[5]s + 1, 0), %[4]d)))))) AS bucket
	FROM %[2]s FINAL)`, s.schema.Write("host_index"), s.read("attempts"), hostBucket, maxHostBuckets, span)
	if err := s.c.Exec(ctx, q, s.schema.InsertSettings()); err != nil {
		return fmt.Errorf("cannot fill the host index from the attempts: %w", err)
	}
	return nil
}

// HostsAttempts returns what HostAttempts returns for each window of ws
// (store.HostsReader): the index's rows of all the hosts' windows in one
// read, then their attempts' rows in one. A host with several windows,
// or whose window the index names more than maxHostIndexed attempts of,
// is read alone (HostAttempts).
func (s *Store) HostsAttempts(ctx context.Context, ws []store.HostWindow) (_ [][]store.Attempt, err error) {
	defer store.WrapErr(&err, "cannot read the attempts of %d hosts' windows", len(ws))
	out := make([][]store.Attempt, len(ws))
	byHost := map[string][]int{}
	for i, w := range ws {
		byHost[w.Host] = append(byHost[w.Host], i)
	}
	alone := func(i int) error {
		atts, err := s.HostAttempts(ctx, ws[i].Host, ws[i].From, ws[i].To)
		out[i] = atts
		return err
	}
	var conds, idxConds []string
	win := map[string]int{} // the window of each host read together
	for i, w := range ws {
		if len(byHost[w.Host]) > 1 {
			if err := alone(i); err != nil {
				return nil, err
			}
			continue
		}
		to := w.To
		if to <= 0 {
			to = 1 << 62
		}
		win[w.Host] = i
		lo, hi := max(w.From, 0)/hostBucket, max(to-1, 0)/hostBucket
		idxConds = append(idxConds, fmt.Sprintf("host = %s AND (bucket = -1 OR bucket >= %d AND bucket <= %d)", Quote(w.Host), lo, hi))
		conds = append(conds, fmt.Sprintf("host = %s AND last_ms >= %d AND first_ms < %d", Quote(w.Host), w.From, to))
	}
	if len(win) == 0 {
		return out, nil
	}
	rows, err := s.query(ctx, fmt.Sprintf("SELECT DISTINCT host, job_key, att_day, attempt_id FROM %s WHERE (%s) LIMIT %d BY host",
		s.read("host_index"), strings.Join(idxConds, ") OR ("), maxHostIndexed+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the host index: %w", err)
	}
	hit := newHits()
	indexed := map[string]map[string]bool{} // the attempts of each host's window
	n := map[string]int{}                   // its rows
	for rows.Next() {
		h, j, d, id := rows.String(), rows.UInt64(), uint64(rows.UInt16()), rows.String()
		if indexed[h] == nil {
			indexed[h] = map[string]bool{}
		}
		indexed[h][id] = true
		n[h]++
		hit.add(j, d, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the host index: %w", err)
	}
	for h := range indexed {
		if n[h] > maxHostIndexed {
			// (Its whole history: the scan, as HostAttempts reads it.)
			if err := alone(win[h]); err != nil {
				return nil, err
			}
			delete(win, h)
		}
	}
	if len(hit.ids) == 0 || len(win) == 0 {
		return out, nil
	}
	atts, err := s.readAttempts(ctx, fmt.Sprintf("%s AND ((%s))", hit.cond(), strings.Join(conds, ") OR (")))
	if err != nil {
		return nil, err
	}
	stale := s.staleBefore()
	for _, st := range atts {
		i, ok := win[st.Host]
		if !ok || !indexed[st.Host][st.Meta.AttemptID] {
			continue
		}
		if a := apiAttempt(st, stale); ws[i].InWindow(&a) {
			out[i] = append(out[i], a)
		}
	}
	return out, nil
}
