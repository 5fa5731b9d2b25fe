package clickhouse

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// The jobs' flush adds a job up again from every one of its attempts'
// rows (writeJobs). Read from ClickHouse at each flush, those rows were
// most of what ingest cost it with short tasks (every running job changes
// each second; BenchmarkStoresIngest's replay, docs/scaling.md). So the
// flush keeps the rows it read (jobCache), and each commit this replica
// stores puts its attempts' new rows in beside them: a job held is added
// up in memory, from the same rows a read would give, in the same order.
//
// What this replica did not write it cannot know: the cache is dropped
// whenever another replica has stored anything since it was filled (the
// agents' last sequences less this replica's own, Changes), when a commit
// fails (its inserts may be in part), and when Maintain drops partitions
// (attempts gone). A store with several replicas storing at once adds its
// jobs up from ClickHouse's rows at each flush, as before.

// jobCache is the attempts' rows of the jobs the flush read lately, and
// those this replica stored since their jobs were last written.
type jobCache struct {
	// others is Changes when the cache was last found current; valid
	// says it was read.
	others uint64
	valid  bool
	jobs   map[string]*cachedJob
	n      int // attempts held in jobs
	// own are the rows this replica's commits stored of the jobs not
	// written since, by job and attempt: a job read from ClickHouse gets
	// them too (a read that missed the latest rows, one of a replica of
	// the shard that has not fetched them yet, is not kept).
	own map[string]map[string]*attState
}

// cachedJob is a job's attempts' rows (their latest version), by attempt
// id, as a flush's read (jobAttemptSelect) and this replica's commits
// since gave them.
type cachedJob struct {
	atts map[string]*attState
	used time.Time // the last flush that wrote it
}

// Bounds of the cache: the attempts held at most (beyond, jobs are let go
// until it holds fewer; a row held is about 700 bytes), and how long a job
// not written stays.
const (
	maxCachedAttempts = 1 << 18
	cachedJobIdle     = time.Minute
)

// drop forgets the jobs held (not the rows this replica stored).
func (c *jobCache) drop() {
	c.jobs, c.n, c.valid = nil, 0, false
}

// stored takes the rows a commit of this replica stored (jobRowOf).
func (c *jobCache) stored(rows []*attState) {
	if c.own == nil && len(rows) > 0 {
		c.own = map[string]map[string]*attState{}
	}
	for _, st := range rows {
		m := c.own[st.Meta.JobID]
		if m == nil {
			m = map[string]*attState{}
			c.own[st.Meta.JobID] = m
		}
		putLatest(m, st)
	}
}

// jobsFlush is what a flush took of the jobs it writes under the writer's
// lock (jobRows): the rows this replica stored of them and the earliest
// days of those, as they were then. Commits that end while it reads and
// inserts add to the store's; written forgets only what it took.
type jobsFlush struct {
	own  map[string]map[string]*attState
	days map[string]uint16
}

// written forgets what f took of the rows this replica stored of jobs ids
// and of their days, written now (wmu held): rows and days a commit put
// since stay, for the next flush.
func (s *Store) written(f *jobsFlush, ids []string) {
	c := &s.jobCache
	for _, id := range ids {
		for att, st := range f.own[id] {
			if c.own[id][att] == st {
				delete(c.own[id], att)
			}
		}
		if len(c.own[id]) == 0 {
			delete(c.own, id)
		}
		if d, ok := f.days[id]; ok && s.jobDays[id] == d {
			delete(s.jobDays, id)
		}
	}
}

// jobRows are the rows to add jobs ids up from, each job's in the order a
// read gives them (by first_ms, then attempt id): the rows held of it, or
// else read (readJobAttempts), with the rows this replica stored of it
// since it was last written. Jobs read are held (unless another replica
// stored since the cache was filled: then it is dropped, and every job is
// read). It holds the writer's lock (wmu) only to take what it needs of
// the cache, and to hold what it read: its reads go without it, and
// commits go on meanwhile (a read of 68 new jobs took 0.9 s at load 12,
// and held the next commit back that long).
func (s *Store) jobRows(ctx context.Context, ids []string) (map[string][]*attState, *jobsFlush, error) {
	// (The agents not read: nothing is held, and every job is read, as
	// before; that read reports what failed.)
	others, changesErr := s.Changes(ctx)
	s.wmu.Lock()
	c := &s.jobCache
	now := time.Now()
	othersStored := false
	if changesErr != nil || !c.valid || others != c.others {
		othersStored = changesErr == nil && c.valid
		c.drop()
		c.others, c.valid = others, changesErr == nil
	}
	for id, j := range c.jobs {
		if now.Sub(j.used) >= cachedJobIdle || c.n > maxCachedAttempts {
			c.n -= len(j.atts)
			delete(c.jobs, id)
		}
	}
	f := &jobsFlush{own: make(map[string]map[string]*attState, len(ids)), days: map[string]uint16{}}
	out := make(map[string][]*attState, len(ids))
	var unheld []string
	for _, id := range ids {
		if own := c.own[id]; len(own) > 0 {
			f.own[id] = maps.Clone(own)
		}
		if d, ok := s.jobDays[id]; ok {
			f.days[id] = d
		}
		j := c.jobs[id]
		if j == nil {
			unheld = append(unheld, id)
			continue
		}
		j.used = now
		for _, st := range f.own[id] {
			if j.put(st) {
				c.n++
			}
		}
		out[id] = j.rows()
	}
	// (Not when another replica stored since the last flush: replicas
	// storing at once share jobs, and the look would cost every flush a
	// read in every day's partition, most of them read whole after it.)
	look := c.valid && !othersStored
	s.wmu.Unlock()
	if s.flushHeld != nil {
		s.flushHeld()
	}
	read := unheld
	if look {
		var err error
		if read, err = s.notOwnOnly(ctx, unheld, f.own); err != nil {
			return nil, nil, err
		}
	}
	got, err := s.readJobAttempts(ctx, read, f.days)
	if err != nil {
		return nil, nil, err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// (Held only if the cache was not dropped meanwhile, by a commit that
	// failed or partitions dropped: only a flush, one at a time, finds it
	// valid again.)
	hold := c.valid
	if hold && c.jobs == nil {
		c.jobs = map[string]*cachedJob{}
	}
	for _, id := range unheld {
		j := &cachedJob{atts: make(map[string]*attState, len(got[id])), used: now}
		for _, st := range got[id] {
			j.put(st)
		}
		for _, st := range f.own[id] {
			j.put(st)
		}
		if hold && c.jobs[id] == nil {
			c.jobs[id] = j
			c.n += len(j.atts)
		}
		out[id] = j.rows()
	}
	return out, f, nil
}

// notOwnOnly are those of jobs ids (none held) that must be read whole:
// all but those whose every attempt's row in ClickHouse this replica
// stored since it last wrote the job, of that version or a later one
// (own, as the flush took them), of which a read would give back only
// those rows. A job first met, of attempts that this replica alone
// stored, is then added up from its own rows after a narrow read (the ids
// and versions of its attempts'), not a whole one
// (BenchmarkStoresIngest's replay: new jobs every second). Jobs of no
// rows of its own are left to read, unlooked.
func (s *Store) notOwnOnly(ctx context.Context, ids []string, own map[string]map[string]*attState) ([]string, error) {
	var look, out []string
	for _, id := range ids {
		if len(own[id]) > 0 {
			look = append(look, id)
		} else {
			out = append(out, id)
		}
	}
	s.jobsLooked += len(look)
	for len(look) > 0 {
		part := look[:min(len(look), 200)]
		look = look[len(part):]
		rows, err := s.query(ctx, "SELECT job_id, attempt_id, max(version) FROM "+s.read("attempts")+" WHERE "+
			jobsWhere(part)+" GROUP BY job_id, attempt_id")
		if err != nil {
			return nil, fmt.Errorf("cannot read the ids of the jobs' attempts: %w", err)
		}
		others := map[string]bool{}
		for rows.Next() {
			job, att, v := rows.String(), rows.String(), rows.UInt64()
			if st := own[job][att]; st == nil || st.B.version < v {
				others[job] = true
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("cannot read the ids of the jobs' attempts: %w", err)
		}
		for _, id := range part {
			if others[id] {
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// put takes an attempt's row unless the one held is of a later version;
// it says whether the attempt is new to the job.
func (j *cachedJob) put(st *attState) bool { return putLatest(j.atts, st) }

// putLatest puts an attempt's row in m (by attempt id) unless the one
// there is of a later version; it says whether the attempt is new to m.
func putLatest(m map[string]*attState, st *attState) bool {
	old := m[st.Meta.AttemptID]
	if old == nil || st.B.version >= old.B.version {
		m[st.Meta.AttemptID] = st
	}
	return old == nil
}

// rows is the job's attempts' rows in the order a read gives them.
func (j *cachedJob) rows() []*attState {
	out := make([]*attState, 0, len(j.atts))
	for _, st := range j.atts {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *attState) int {
		fa, _ := store.AttemptSpan(&a.Meta, &a.Sum)
		fb, _ := store.AttemptSpan(&b.Meta, &b.Sum)
		return cmp.Or(cmp.Compare(fa, fb), cmp.Compare(a.Meta.AttemptID, b.Meta.AttemptID))
	})
	return out
}

// jobRowOf is what the flush adds up of an attempt's row as a commit
// writes it: the row as a read gives it back (its day, not its time; its
// version).
func jobRowOf(a *attState) *attState {
	st := &attState{AttemptRow: a.AttemptRow, Born: int64(DayOf(a.Born)) * 86_400_000}
	st.B.version = a.B.version
	return st
}
