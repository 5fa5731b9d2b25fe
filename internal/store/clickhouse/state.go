package clickhouse

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// apiAttempt is an attempt as the API shows it.
func apiAttempt(st *attState, staleBefore int64) store.Attempt { return st.Attempt(staleBefore) }

// readAttempts reads the attempts a condition selects (on the attempts
// table), each its latest version, with its member processes' count.
func (s *Store) readAttempts(ctx context.Context, where string) ([]*attState, error) {
	return s.readAttemptsAs(ctx, attemptSelect, scanAttempt, where)
}

// readAttemptsAs is readAttempts with a select and its scan (of some of
// the fields: jobAttemptSelect).
func (s *Store) readAttemptsAs(ctx context.Context, sel string, scan func(*Rows) *attState, where string) ([]*attState, error) {
	rows, err := s.query(ctx, sel+s.read("attempts")+" FINAL WHERE "+where+" ORDER BY first_ms, attempt_id")
	if err != nil {
		return nil, fmt.Errorf("cannot read attempts: %w", err)
	}
	var out []*attState
	for rows.Next() {
		out = append(out, scan(rows))
	}
	return out, rows.Err()
}

// loadAttempts reads attempts' states with their member processes; those
// not found are absent. jobOf names the jobs the batches gave some of
// them.
//
// The attempts table is ordered by job: a read by attempt id alone scans
// all of it, FINAL, at every commit that meets a new attempt (with short
// tasks, every commit; the cost grew with the table). So where their rows
// are comes first (stored), and the attempts are read there.
//
// A commit that meets thousands of attempts (a server's first, or a
// restart's beside a thousand agents) reads them a thousand at a time,
// several parts at once (partsAtOnce): one after another, their queries
// were most of that commit's time, and its batches' acknowledgements
// waited for it (BenchmarkStoresIngest's ack-p99).
func (s *Store) loadAttempts(ctx context.Context, ids []string, jobOf map[string]string) (map[string]*attState, error) {
	defer s.timeFoldRead(time.Now())
	s.lookedUp += len(ids)
	var parts [][]string
	for len(ids) > 0 {
		part := ids[:min(len(ids), 1000)]
		ids = ids[len(part):]
		parts = append(parts, part)
	}
	outs := make([]map[string]*attState, len(parts))
	err := partsAtOnce(len(parts), func(i int) error {
		out, err := s.loadAttemptsPart(ctx, parts[i], jobOf)
		outs[i] = out
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(outs) == 1 {
		return outs[0], nil
	}
	out := map[string]*attState{}
	for _, o := range outs {
		maps.Copy(out, o)
	}
	return out, nil
}

// timeFoldRead adds the time since start to the fold's reads (wmu held).
func (s *Store) timeFoldRead(start time.Time) { s.foldReads += time.Since(start) }

// maxPartsAtOnce is how many parts of a large read run at once.
const maxPartsAtOnce = 4

// partsAtOnce runs f for parts 0 to n-1, at most maxPartsAtOnce at once,
// and returns the first part's error (of the parts that failed).
func partsAtOnce(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	errs := make([]error, n)
	slots := make(chan struct{}, maxPartsAtOnce)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
			<-slots
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// loadAttemptsPart is loadAttempts of up to a thousand ids.
func (s *Store) loadAttemptsPart(ctx context.Context, ids []string, jobOf map[string]string) (map[string]*attState, error) {
	out := map[string]*attState{}
	where, err := s.stored(ctx, ids, jobOf)
	if err != nil {
		return nil, err
	}
	if where == "" {
		return out, nil // none is stored
	}
	sts, err := s.readAttempts(ctx, where)
	if err != nil {
		return nil, err
	}
	if len(sts) == 0 {
		return out, nil
	}
	byKey := map[uint64]*attState{}
	var jobs, keys []uint64
	for _, st := range sts {
		// Memberships under every job the attempt's rows are under.
		jobs = append(jobs, jobKey(st.Meta.JobID))
		keys = append(keys, store.AttemptKey(st.Meta.AttemptID))
		// Rows of one attempt under two jobs (stored before its job
		// was known, then under it): the latest version is the
		// attempt.
		if old := out[st.Meta.AttemptID]; old != nil && old.B.version > st.B.version {
			continue
		}
		st.ReadMembers()
		out[st.Meta.AttemptID] = st
		byKey[store.AttemptKey(st.Meta.AttemptID)] = st
	}
	// (and under the empty job's: memberships an agent sent before the
	// attempt's description named its job)
	jobs = append(jobs, jobKey(""))
	rows, err := s.query(ctx, "SELECT DISTINCT attempt_key, proc_key FROM "+s.read("procs")+" WHERE job_key IN ("+
		numList(jobs)+") AND attempt_key IN ("+numList(keys)+") AND member")
	if err != nil {
		return nil, fmt.Errorf("cannot read memberships: %w", err)
	}
	for rows.Next() {
		a, k := rows.UInt64(), rows.UInt64()
		if st := byKey[a]; st != nil {
			st.AddMember(k)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// stored is where the rows of attempts ids are, as a condition on the
// attempts table ("" if none of them is stored): the jobs and days the
// index gives (with the jobs the batches name, jobOf: this commit may be
// the one that tells an attempt's job); for the attempts it has no row
// of (a commit that failed half way wrote its attempts' rows but not
// their index's: in a store made before the index was written first,
// indexFirst), the jobs the batches name and the empty job's, read
// narrow (their keys and days) in every day, in the same query (indexOf:
// a commit meeting thousands of new attempts, none in the index, waited
// for two round trips a thousand). The whole rows are then read FINAL in
// those days only: in every day's partition, beside a long retention,
// that was most of what a commit meeting new attempts cost
// (BenchmarkCommitNewAttempts).
func (s *Store) stored(ctx context.Context, ids []string, jobOf map[string]string) (string, error) {
	named := []uint64{jobKey("")}
	for _, id := range ids {
		if j, ok := jobOf[id]; ok && !slices.Contains(named, jobKey(j)) {
			named = append(named, jobKey(j))
		}
	}
	look := named
	if s.indexFirst {
		look = nil // (every attempt with a row has its index row)
	}
	found, jobs, days, err := s.indexOf(ctx, ids, look)
	if err != nil {
		return "", err
	}
	for _, id := range ids {
		if j, ok := jobOf[id]; ok && found[id] && !slices.Contains(jobs, jobKey(j)) {
			jobs = append(jobs, jobKey(j))
		}
	}
	if len(days) == 0 {
		return "", nil
	}
	if !slices.Contains(jobs, jobKey("")) {
		jobs = append(jobs, jobKey(""))
	}
	return "job_key IN (" + numList(jobs) + ") AND day IN (" + numList(days) + ") AND attempt_id IN (" + QuoteList(ids) + ")", nil
}

// procAttempts reads the attempts processes are members of, from the
// index; processes without any are absent. (A thousand at a time, several
// at once: loadAttempts.)
func (s *Store) procAttempts(ctx context.Context, keys []uint64) (map[uint64][]string, error) {
	defer s.timeFoldRead(time.Now())
	var parts [][]uint64
	for len(keys) > 0 {
		part := keys[:min(len(keys), 1000)]
		keys = keys[len(part):]
		parts = append(parts, part)
	}
	outs := make([]map[uint64][]string, len(parts))
	err := partsAtOnce(len(parts), func(i int) error {
		out := map[uint64][]string{}
		outs[i] = out
		rows, err := s.query(ctx, "SELECT DISTINCT proc_key, attempt_id FROM "+s.read("proc_index")+
			" WHERE proc_key IN ("+numList(parts[i])+") ORDER BY proc_key, attempt_id")
		if err != nil {
			return fmt.Errorf("cannot read the processes' attempts: %w", err)
		}
		for rows.Next() {
			k, id := rows.UInt64(), rows.String()
			if !slices.Contains(out[k], id) {
				out[k] = append(out[k], id)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	out := map[uint64][]string{}
	for _, o := range outs {
		for k, ids := range o {
			for _, id := range ids {
				if !slices.Contains(out[k], id) {
					out[k] = append(out[k], id)
				}
			}
		}
	}
	return out, nil
}

// Flush writes the jobs whose attempts changed since they were last
// written (once the commits started are stored): each job's figures added
// up again from its attempts.
func (s *Store) Flush(ctx context.Context) error {
	s.waitWrites()
	_, err := s.flushJobs(ctx, false)
	return err
}

// FlushDue is Flush but for the jobs written in the last JobsEvery, which
// wait (store.PacedFlusher: the server's periodic flush). A job is added
// up again from every one of its attempts' rows: with short tasks every
// running job changes each second, and reading all their attempts each
// second was the most of ClickHouse's CPU (BenchmarkStoresIngest's
// replay, docs/scaling.md).
func (s *Store) FlushDue(ctx context.Context) (waiting bool, err error) {
	return s.flushJobs(ctx, true)
}

// flushJobs writes the jobs whose attempts changed since they were last
// written; when due (FlushDue), not those written in the last JobsEvery,
// and none within JobsInsertEvery of the last insert; it says whether
// some wait. One flush at a time (fmu); it holds the writer's lock (wmu)
// only to take the jobs due and what it needs of the cache, and to say
// what it wrote: its reads and inserts go without it, and commits go on
// meanwhile.
func (s *Store) flushJobs(ctx context.Context, due bool) (waiting bool, err error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return false, errClosed
	}
	now := time.Now()
	for id, t := range s.jobsWritten {
		if now.Sub(t) >= s.opt.JobsEvery {
			delete(s.jobsWritten, id)
		}
	}
	dirty := s.fold.TakeDirtyJobs()
	if due && len(dirty) > 0 && now.Sub(s.jobsInserted) < s.opt.JobsInsertEvery {
		s.fold.UntakeDirtyJobs(dirty)
		s.wmu.Unlock()
		return true, nil
	}
	if due && s.opt.JobsEvery > 0 {
		var wait []string
		dirty = slices.DeleteFunc(dirty, func(id string) bool {
			_, recent := s.jobsWritten[id]
			if recent {
				wait = append(wait, id)
			}
			return recent
		})
		s.fold.UntakeDirtyJobs(wait)
		waiting = len(wait) > 0
	}
	s.wmu.Unlock()
	err = s.writeJobs(ctx, dirty)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err != nil {
		s.fold.UntakeDirtyJobs(dirty)
		return waiting, fmt.Errorf("cannot write the jobs: %w", err)
	}
	if s.opt.JobsEvery > 0 {
		for _, id := range dirty {
			s.jobsWritten[id] = now
		}
	}
	if due && len(dirty) > 0 {
		s.jobsInserted = now
	}
	return waiting, nil
}

// writeJobs writes jobs ids, each added up from its attempts' rows (held
// in memory, or read: jobRows); wmu not held.
func (s *Store) writeJobs(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, f, err := s.jobRows(ctx, ids)
	if err != nil {
		return err
	}
	var b, changes Block
	stored := s.opt.Clock.Now().UnixMilli()
	for _, id := range ids {
		atts := rows[id]
		if len(atts) == 0 {
			continue // (none of its attempts' rows is visible yet)
		}
		var j store.JobTotals
		var version uint64
		day := DayOf(atts[0].Born)
		for _, st := range atts {
			j.AddAttempt(&st.Meta, st.Host, &st.Sum)
			version += st.B.version
			day = min(day, DayOf(st.Born))
		}
		jobRow(&b, id, &j, version, day)
		changeRow(&changes, id, &j, version, stored)
	}
	if err := s.insert(ctx, "jobs", jobCols, &b); err != nil {
		return err
	}
	// (Their rows now say the earliest day of their attempts.)
	s.wmu.Lock()
	s.written(f, ids)
	s.wmu.Unlock()
	// After the jobs: a reader that finds a change finds the job.
	return s.insert(ctx, "job_changes", changeCols, &changes)
}

// readJobAttempts reads the rows of jobs ids' attempts (the fields their
// figures are added up from, jobAttemptSelect), by job; days are the
// earliest days of the rows this replica stored of them since they were
// last written (jobsFrom).
func (s *Store) readJobAttempts(ctx context.Context, ids []string, days map[string]uint16) (map[string][]*attState, error) {
	out := map[string][]*attState{}
	s.jobsRead += len(ids)
	for len(ids) > 0 {
		part := ids[:min(len(ids), 200)]
		ids = ids[len(part):]
		where := jobsWhere(part)
		from, err := s.jobsFrom(ctx, part, where, days)
		if err != nil {
			return nil, err
		}
		if from > 0 {
			where += " AND day >= toDate(" + Quote(time.UnixMilli(int64(from)*86_400_000).UTC().Format(time.DateOnly)) + ")"
		}
		atts, err := s.readAttemptsAs(ctx, jobAttemptSelect, func(r *Rows) *attState { return scanFields(r, jobAttemptFields) }, where)
		if err != nil {
			return nil, err
		}
		for _, st := range atts {
			out[st.Meta.JobID] = append(out[st.Meta.JobID], st)
		}
	}
	return out, nil
}

// jobsFrom is the earliest day the attempts of jobs ids (where: their
// condition) may have rows in (0: any): the day of their rows in jobs
// (the earliest of their attempts' when last written), or of an attempt
// this replica stored since (jobDays: told late, of an earlier day); for
// a job with no row yet, the earliest day of its attempts' rows (a narrow
// read: their job and day columns). The jobs' flush reads their
// attempts' whole rows from there on, not in every day's partition:
// beside a long retention, that was most of what a commit and its flush
// cost (BenchmarkCommitNewAttempts). (A day missed by a read races with
// another replica's write of an attempt: that replica writes the job
// after it, with a higher version.)
func (s *Store) jobsFrom(ctx context.Context, ids []string, where string, stored map[string]uint16) (uint16, error) {
	rows, err := s.query(ctx, "SELECT job_id, min(day) FROM "+s.read("jobs")+" WHERE "+where+" GROUP BY job_id")
	if err != nil {
		return 0, fmt.Errorf("cannot read the jobs' days: %w", err)
	}
	days := map[string]uint16{}
	for rows.Next() {
		id, d := rows.String(), rows.UInt16()
		days[id] = d
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("cannot read the jobs' days: %w", err)
	}
	var unwritten []string
	for _, id := range ids {
		if _, ok := days[id]; !ok {
			unwritten = append(unwritten, id)
		}
	}
	if len(unwritten) > 0 {
		rows, err := s.query(ctx, "SELECT job_id, min(day) FROM "+s.read("attempts")+" WHERE "+jobsWhere(unwritten)+
			" GROUP BY job_id")
		if err != nil {
			return 0, fmt.Errorf("cannot read the days of the jobs' attempts: %w", err)
		}
		for rows.Next() {
			id, d := rows.String(), rows.UInt16()
			days[id] = d
		}
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("cannot read the days of the jobs' attempts: %w", err)
		}
	}
	from := uint16(0)
	for i, id := range ids {
		d, ok := days[id]
		if !ok {
			return 0, nil // (none of its attempts' rows is visible yet)
		}
		if w, ok := stored[id]; ok && w < d {
			d = w
		}
		if i == 0 || d < from {
			from = d
		}
	}
	return from, nil
}

var jobCols = []string{"day", "job_key", "job_id", "version", "app_id", "framework", "name", "user_name", "queue", "first_ms",
	"last_ms", "attempts", "running", "cpu_ms", "peak_rss", "mem_gb_hours", "used_gb_hours", "hosts", "by_type"}

func jobRow(b *Block, id string, j *store.JobTotals, version uint64, day uint16) {
	b.Row()
	b.UInt16(day)
	jobFields(b, id, j, version)
}

// jobFields appends the columns of a job's row after its day.
func jobFields(b *Block, id string, j *store.JobTotals, version uint64) {
	b.UInt64(jobKey(id))
	b.String(id)
	b.UInt64(version)
	b.String(j.AppID)
	b.String(j.Framework)
	b.String(j.Name)
	b.String(j.User)
	b.String(j.Queue)
	b.Int64(j.First)
	b.Int64(j.Last)
	b.UInt32(uint32(j.Attempts))
	b.UInt32(uint32(j.Running))
	b.Int64(j.CPUMs)
	b.Int64(j.PeakRSS)
	b.Float64(j.MemGBHours())
	b.Float64(j.UsedGBHours())
	b.UInt32(uint32(len(j.Hosts)))
	b.String(store.FormatByType(j.ByType))
}
