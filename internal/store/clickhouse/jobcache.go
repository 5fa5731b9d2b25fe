package clickhouse

import (
	"cmp"
	"context"
	"fmt"
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

// written forgets the rows this replica stored of jobs ids, written now.
func (c *jobCache) written(ids []string) {
	for _, id := range ids {
		delete(c.own, id)
	}
}

// jobRows are the rows to add jobs ids up from, each job's in the order a
// read gives them (by first_ms, then attempt id): the rows held of it, or
// else read (readJobAttempts), with the rows this replica stored of it
// since it was last written. Jobs read are held (unless another replica
// stored since the cache was filled: then it is dropped, and every job is
// read).
func (s *Store) jobRows(ctx context.Context, ids []string) (map[string][]*attState, error) {
	c := &s.jobCache
	now := time.Now()
	// (The agents not read: nothing is held, and every job is read, as
	// before; that read reports what failed.)
	othersStored := false
	if others, err := s.Changes(ctx); err != nil || !c.valid || others != c.others {
		othersStored = err == nil && c.valid
		c.drop()
		c.others, c.valid = others, err == nil
	}
	for id, j := range c.jobs {
		if now.Sub(j.used) >= cachedJobIdle || c.n > maxCachedAttempts {
			c.n -= len(j.atts)
			delete(c.jobs, id)
		}
	}
	var unheld []string
	for _, id := range ids {
		if c.jobs[id] == nil {
			unheld = append(unheld, id)
		}
	}
	// (Not when another replica stored since the last flush: replicas
	// storing at once share jobs, and the look would cost every flush a
	// read in every day's partition, most of them read whole after it.)
	if c.valid && !othersStored {
		var err error
		if unheld, err = s.notOwnOnly(ctx, unheld); err != nil {
			return nil, err
		}
	}
	got, err := s.readJobAttempts(ctx, unheld)
	if err != nil {
		return nil, err
	}
	if c.jobs == nil {
		c.jobs = map[string]*cachedJob{}
	}
	out := make(map[string][]*attState, len(ids))
	for _, id := range ids {
		j := c.jobs[id]
		if j == nil {
			j = &cachedJob{atts: make(map[string]*attState, len(got[id]))}
			for _, st := range got[id] {
				j.put(st)
			}
			if c.valid {
				c.jobs[id] = j
				c.n += len(j.atts)
			}
		}
		j.used = now
		for _, st := range c.own[id] {
			if j.put(st) && c.jobs[id] == j {
				c.n++
			}
		}
		out[id] = j.rows()
	}
	return out, nil
}

// notOwnOnly are those of jobs ids (none held) that must be read whole:
// all but those whose every attempt's row in ClickHouse this replica
// stored since it last wrote the job, of that version or a later one
// (c.own), of which a read would give back only those rows. A job first
// met, of attempts that this replica alone stored, is then added up from
// its own rows after a narrow read (the ids and versions of its
// attempts'), not a whole one (BenchmarkStoresIngest's replay: new jobs
// every second). Jobs of no rows of its own are left to read, unlooked.
func (s *Store) notOwnOnly(ctx context.Context, ids []string) ([]string, error) {
	own := s.jobCache.own
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
