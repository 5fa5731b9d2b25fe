package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

func (s *Store) staleBefore() int64 { return s.opt.Clock.StaleBefore() }

// Jobs lists jobs, newest first.
func (s *Store) Jobs(ctx context.Context, f store.JobFilter) (store.JobPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 1000)
	f.Offset = max(f.Offset, 0)
	stale := s.staleBefore()
	where := []string{"attempts > 0"}
	if f.User != "" {
		where = append(where, "user_name = "+Quote(f.User))
	}
	if f.Queue != "" {
		where = append(where, "queue = "+Quote(f.Queue))
	}
	if f.Framework != "" {
		where = append(where, "framework = "+Quote(f.Framework))
	}
	if f.Visible != nil {
		where = append(where, visibleSQL(f.Visible))
	}
	if f.Name != "" {
		// A substring in any case (as ILIKE '%name%', which 18.16 lacks).
		where = append(where, fmt.Sprintf("(positionCaseInsensitiveUTF8(name, %[1]s) > 0 OR positionCaseInsensitiveUTF8(job_id, %[1]s) > 0)", Quote(f.Name)))
	}
	if f.From > 0 {
		where = append(where, fmt.Sprintf("last_ms >= %d", f.From))
	}
	if f.To > 0 {
		where = append(where, fmt.Sprintf("first_ms < %d", f.To))
	}
	switch f.State {
	case "":
	case store.StateRunning:
		where = append(where, fmt.Sprintf("running > 0 AND last_ms >= %d", stale))
	case store.StateFinished:
		where = append(where, fmt.Sprintf("NOT (running > 0 AND last_ms >= %d)", stale))
	default:
		return store.JobPage{}, fmt.Errorf("state must be running or finished, not %q", f.State)
	}
	join, awhere, sev, order := s.jobsAnalysis(f)
	analysed := ", analysed, a_worst, a_heuristics"
	if f.Bare {
		analysed = ""
		if f.MinSeverity == nil && f.Heuristic == "" && !f.BySeverity && !f.CountSeverities {
			join, awhere = "", nil // (no filter needs them)
		}
	}
	where = append(where, awhere...)
	from := "(SELECT * FROM " + s.read("jobs") + " FINAL)" + join + " WHERE " + strings.Join(where, " AND ")
	page := store.JobPage{Jobs: []store.Job{}}
	if f.CountSeverities {
		// (Without MinSeverity: the counts of every severity.)
		c, err := s.countSeverities(ctx, from, sev)
		if err != nil {
			return page, err
		}
		page.Severities = c
	}
	if f.MinSeverity != nil {
		from += fmt.Sprintf(" AND %s >= %d", sev, *f.MinSeverity)
	}
	rows, err := s.query(ctx, "SELECT "+strings.Join(jobColumns, ", ")+analysed+" FROM "+from+
		fmt.Sprintf(" ORDER BY %s LIMIT %d, %d", order, f.Offset, f.Limit))
	if err != nil {
		return store.JobPage{}, fmt.Errorf("cannot list jobs: %w", err)
	}
	for rows.Next() {
		job := readJob(rows, stale)
		if !f.Bare {
			scanWorst(rows, &job)
		}
		page.Jobs = append(page.Jobs, job)
	}
	if err := rows.Err(); err != nil {
		return page, err
	}
	if f.Bare {
		return page, nil
	}
	if page.Severities != nil {
		page.Total = page.Severities.AtLeast(f.MinSeverity)
		return page, nil
	}
	rows, err = s.query(ctx, "SELECT count() FROM "+from)
	if err != nil {
		return page, fmt.Errorf("cannot count jobs: %w", err)
	}
	page.Total = int(rows.UInt64())
	return page, rows.Err()
}

// jobColumns are the columns of a job's row that readJob reads, in its order.
var jobColumns = []string{"job_id", "app_id", "framework", "name", "user_name", "queue", "first_ms", "last_ms", "attempts",
	"running", "cpu_ms", "peak_rss", "mem_gb_hours", "used_gb_hours", "hosts", "by_type"}

// readJob reads a job of jobColumns, its state decided by stale.
func readJob(rows *Rows, stale int64) store.Job {
	var j store.JobTotals
	id := rows.String()
	j.AppID, j.Framework, j.Name, j.User, j.Queue = rows.String(), rows.String(), rows.String(), rows.String(), rows.String()
	j.First, j.Last, j.Attempts, j.Running = rows.Int64(), rows.Int64(), int(rows.UInt32()), int(rows.UInt32())
	j.CPUMs, j.PeakRSS = rows.Int64(), rows.Int64()
	j.SetGBHours(rows.Float64(), rows.Float64())
	hosts := int(rows.UInt32())
	j.ByType = store.ParseByType(rows.String())
	job := j.Job(id, stale)
	job.Hosts = hosts
	if len(j.ByType) == 0 {
		job.ByType = nil
	}
	return job
}

// jobAttempts reads a job's attempts.
func (s *Store) jobAttempts(ctx context.Context, id string) ([]*attState, error) {
	return s.readAttempts(ctx, fmt.Sprintf("job_key = %d AND job_id = %s", jobKey(id), Quote(id)))
}

// Job returns a job with its attempts, its figures added up from them.
func (s *Store) Job(ctx context.Context, id string) (_ *store.JobDetail, err error) {
	defer store.WrapErr(&err, "cannot read job %s", id)
	atts, err := s.jobAttempts(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(atts) == 0 {
		return nil, store.ErrNotFound
	}
	return jobDetail(id, atts, s.staleBefore()), nil
}

// jobDetail is job id of its attempts atts (at least one), its figures
// added up from them.
func jobDetail(id string, atts []*attState, stale int64) *store.JobDetail {
	var j store.JobTotals
	d := &store.JobDetail{AttemptList: make([]store.Attempt, 0, len(atts))}
	for _, st := range atts {
		j.AddAttempt(&st.Meta, st.Host, &st.Sum)
		d.AttemptList = append(d.AttemptList, apiAttempt(st, stale))
	}
	store.LinkAttempts(d.AttemptList)
	d.Job = j.Job(id, stale)
	d.ByType = map[string]int{}
	for _, a := range d.AttemptList {
		d.ByType[a.Type]++
	}
	return d
}

// maxJobsRead bounds the jobs of one read of JobsDetail and JobEvents.
const maxJobsRead = 500

// jobsWhere selects the rows of jobs ids (by their keys, then their ids).
func jobsWhere(ids []string) string {
	keys := make([]uint64, len(ids))
	for i, id := range ids {
		keys[i] = jobKey(id)
	}
	return "job_key IN (" + numList(keys) + ") AND job_id IN (" + QuoteList(ids) + ")"
}

// JobsDetail returns what Job returns for each job of ids it knows
// (store.JobReader): their attempts in one read (by the jobs' keys, as
// Job reads one's).
func (s *Store) JobsDetail(ctx context.Context, ids []string) (_ map[string]*store.JobDetail, err error) {
	defer store.WrapErr(&err, "cannot read %d jobs", len(ids))
	out := map[string]*store.JobDetail{}
	stale := s.staleBefore()
	for len(ids) > 0 {
		part := ids[:min(len(ids), maxJobsRead)]
		ids = ids[len(part):]
		atts, err := s.readAttempts(ctx, jobsWhere(part))
		if err != nil {
			return nil, err
		}
		byJob := map[string][]*attState{}
		for _, st := range atts {
			byJob[st.Meta.JobID] = append(byJob[st.Meta.JobID], st)
		}
		for id, atts := range byJob {
			out[id] = jobDetail(id, atts, stale)
		}
	}
	return out, nil
}

// attempt reads one attempt (ErrNotFound if unknown).
func (s *Store) attempt(ctx context.Context, id string) (*attState, error) {
	var st *attState
	err := s.readAttempt(ctx, id, func(where string) (bool, error) {
		atts, err := s.readAttempts(ctx, where)
		for _, a := range atts {
			// Rows of one attempt under two jobs (stored before its job was
			// known, then under it): the latest version is the attempt.
			if st == nil || a.B.version > st.B.version {
				st = a
			}
		}
		return st != nil, err
	})
	return st, err
}

// readAttempt finds an attempt (ErrNotFound if unknown): its jobs' keys
// and its days from the index; then read reads the rows of a condition on
// the attempts table, and says whether it found the attempt.
func (s *Store) readAttempt(ctx context.Context, id string, read func(where string) (bool, error)) error {
	jobs, days, err := s.indexed(ctx, []string{id})
	if err != nil {
		return fmt.Errorf("cannot find attempt %s: %w", id, err)
	}
	if len(days) == 0 {
		return store.ErrNotFound
	}
	where := fmt.Sprintf("job_key IN (%s) AND attempt_id = %s", numList(jobs), Quote(id))
	// Its rows are all in the day it was first stored, as its index rows
	// (writeSet.attemptRow): a read of one partition, where a read of
	// every day's took a few milliseconds a day on 18.16.
	found, err := read(where + " AND day IN (" + numList(days) + ")")
	if err == nil && !found {
		// (Not where its index says: read every day's.)
		found, err = read(where)
	}
	if err != nil {
		return err
	}
	if !found {
		return store.ErrNotFound
	}
	return nil
}

// indexed reads from the index where the rows of attempts ids are: the
// keys of the jobs they are stored under, with the empty job's (an
// attempt stored before its description named its job has rows there
// first, and an index row for each job), and the days of their partitions
// (none when no attempt of ids is indexed). Another replica may have
// indexed an attempt too, in the same day.
func (s *Store) indexed(ctx context.Context, ids []string) (jobs, days []uint64, err error) {
	_, jobs, days, err = s.indexOf(ctx, ids, nil)
	if err != nil {
		return nil, nil, err
	}
	if !slices.Contains(jobs, jobKey("")) {
		jobs = append(jobs, jobKey(""))
	}
	return jobs, days, nil
}

// indexOf reads the index's rows of attempts ids: which of them it has
// (found), and the keys of the jobs and the days they are stored under.
// With look (jobs' keys), the same query looks for ids in the attempts
// table too, under those jobs (narrow: their keys and days, in every
// day): the jobs and days of the attempts the index has not are added
// (found says which the index has).
func (s *Store) indexOf(ctx context.Context, ids []string, look []uint64) (found map[string]bool, jobs, days []uint64, err error) {
	keys := make([]uint64, len(ids))
	for i, id := range ids {
		keys[i] = store.AttemptKey(id)
	}
	q := "SELECT DISTINCT attempt_id, job_key, day, 1 FROM " + s.read("attempt_index") + " WHERE attempt_key IN (" +
		numList(keys) + ") AND attempt_id IN (" + QuoteList(ids) + ")"
	if len(look) > 0 {
		q = "SELECT DISTINCT * FROM (" + q + " UNION ALL SELECT attempt_id, job_key, day, 0 FROM " + s.read("attempts") +
			" WHERE job_key IN (" + numList(look) + ") AND attempt_id IN (" + QuoteList(ids) + "))"
	}
	rows, err := s.query(ctx, q)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cannot read the attempts' index: %w", err)
	}
	found = map[string]bool{}
	for rows.Next() {
		id, j, d, indexed := rows.String(), rows.UInt64(), uint64(rows.UInt16()), rows.UInt8() == 1
		if indexed {
			found[id] = true
		}
		if !slices.Contains(jobs, j) {
			jobs = append(jobs, j)
		}
		if !slices.Contains(days, d) {
			days = append(days, d)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("cannot read the attempts' index: %w", err)
	}
	return found, jobs, days, nil
}

// JobOwner is a job's user and queue (store.OwnerReader), from its row of
// the jobs table (found by its key, whether it exists or not; written by
// Flush, as the jobs list's): not its attempts, whose number would tell
// in the time a read takes how large a job is.
func (s *Store) JobOwner(ctx context.Context, id string) (store.Owner, error) {
	rows, err := s.query(ctx, fmt.Sprintf("SELECT user_name, queue FROM %s WHERE job_key = %d AND job_id = %s ORDER BY version DESC LIMIT 1",
		s.read("jobs"), jobKey(id), Quote(id)))
	if err != nil {
		return store.Owner{}, fmt.Errorf("cannot read the owner of job %s: %w", id, err)
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return store.Owner{}, err
		}
		return store.Owner{}, store.ErrNotFound
	}
	o := store.Owner{User: rows.String(), Queue: rows.String()}
	return o, rows.Err()
}

// AttemptJob is the job of an attempt (store.OwnerReader), in one query
// whether it exists or not: its rows under the jobs' keys and in the days
// the index gives (GLOBAL: in a cluster, the index's set is made once and
// sent to the shards).
func (s *Store) AttemptJob(ctx context.Context, id string) (string, error) {
	index := fmt.Sprintf("FROM %s WHERE attempt_key = %d AND attempt_id = %s", s.read("attempt_index"), store.AttemptKey(id), Quote(id))
	rows, err := s.query(ctx, fmt.Sprintf("SELECT job_id FROM %s WHERE job_key GLOBAL IN (SELECT job_key %s) AND day GLOBAL IN (SELECT day %s) "+
		"AND attempt_id = %s ORDER BY version DESC LIMIT 1", s.read("attempts"), index, index, Quote(id)))
	if err != nil {
		return "", fmt.Errorf("cannot read the job of attempt %s: %w", id, err)
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", store.ErrNotFound
	}
	job := rows.String()
	return job, rows.Err()
}

// AttemptLife returns an attempt's job and life (store.AttemptSeriesReader):
// six columns of its row, which has fifty (a read of the whole row took
// twice as long).
func (s *Store) AttemptLife(ctx context.Context, id string) (_ *store.AttemptLife, err error) {
	defer store.WrapErr(&err, "cannot read attempt %s", id)
	var life *store.AttemptLife
	err = s.readAttempt(ctx, id, func(where string) (bool, error) {
		rows, err := s.query(ctx, "SELECT "+lifeColumns+" FROM "+s.read("attempts")+" FINAL WHERE "+where+" ORDER BY version")
		if err != nil {
			return false, fmt.Errorf("cannot read attempts: %w", err)
		}
		for rows.Next() { // (the latest version, as attempt)
			life = readLife(rows, id, s.staleBefore())
		}
		return life != nil, rows.Err()
	})
	return life, err
}

// lifeColumns are the columns of an attempt's row readLife reads.
const lifeColumns = "job_id, meta_first_ms, meta_last_ms, ended, sum_first_ms, sum_last_ms"

// readLife reads the life of attempt id from lifeColumns, its state
// decided by stale.
func readLife(rows *Rows, id string, stale int64) *store.AttemptLife {
	var m wire.Attempt
	var sum store.AttemptSummary
	m.JobID, m.FirstMs, m.LastMs, m.Ended, sum.FirstMs, sum.LastMs = rows.String(), rows.Int64(), rows.Int64(), rows.Bool(),
		rows.Int64(), rows.Int64()
	first, last := store.AttemptSpan(&m, &sum)
	_, end := store.AttemptState(m.Ended, last, stale)
	return &store.AttemptLife{AttemptID: id, JobID: m.JobID, Start: store.Time(first), End: end}
}

// link sets a's RetryOf and Speculative from the attempts of its task
// (store.LinkAttempt).
func (s *Store) link(ctx context.Context, a *store.Attempt) error {
	prefix := store.TaskPrefix(a.AttemptID)
	if prefix == "" {
		return nil
	}
	task, err := s.readAttempts(ctx, fmt.Sprintf("job_key = %d AND job_id = %s AND startsWith(attempt_id, %s)",
		jobKey(a.JobID), Quote(a.JobID), Quote(prefix)))
	if err != nil {
		return err
	}
	list, err := s.apiAttempts(ctx, task)
	if err != nil {
		return err
	}
	store.LinkAttempt(a, list)
	return nil
}

func (s *Store) apiAttempts(ctx context.Context, atts []*attState) ([]store.Attempt, error) {
	stale := s.staleBefore()
	out := make([]store.Attempt, 0, len(atts))
	for _, st := range atts {
		out = append(out, apiAttempt(st, stale))
	}
	return out, nil
}

// AttemptSummary returns what Attempt says of an attempt, without its
// processes and events and not linked to its task's attempts
// (store.AttemptSummarizer): the series routes need no more, and reading
// every process's series and events made an attempt's series take
// several times what its chunks take.
func (s *Store) AttemptSummary(ctx context.Context, id string) (_ *store.Attempt, err error) {
	defer store.WrapErr(&err, "cannot read attempt %s", id)
	st, err := s.attempt(ctx, id)
	if err != nil {
		return nil, err
	}
	a := apiAttempt(st, s.staleBefore())
	return &a, nil
}

// Attempt returns an attempt with its processes and events.
func (s *Store) Attempt(ctx context.Context, id string) (_ *store.AttemptDetail, err error) {
	defer store.WrapErr(&err, "cannot read attempt %s", id)
	st, err := s.attempt(ctx, id)
	if err != nil {
		return nil, err
	}
	lists, err := s.processLists(ctx, []procOwner{{id: id, job: st.Meta.JobID}})
	if err != nil {
		return nil, err
	}
	d := &store.AttemptDetail{Attempt: apiAttempt(st, s.staleBefore()), ProcessList: []store.Process{}}
	if err := s.link(ctx, &d.Attempt); err != nil {
		return nil, err
	}
	if l := lists[id]; l != nil {
		d.ProcessList = l
	}
	d.Processes = len(d.ProcessList)
	keys := make([]uint64, len(d.ProcessList))
	for i, p := range d.ProcessList {
		keys[i] = uint64(p.Key)
	}
	d.Events, err = s.events(ctx, store.EventFilter{AttemptID: id, Limit: 5000}, keys)
	if err != nil {
		return nil, err
	}
	d.Events = store.ProcessEvents(d.Events, d.ProcessList)
	return d, nil
}

// AttemptProcesses returns the process lists of attempts as Attempt does
// (store.ProcessLister), read together: the attempts' jobs with their
// lives (two queries), then, for the attempts of all their jobs, their
// processes' rows, the descriptions found elsewhere and the processes'
// chunks and rollups (four). A job's analysis reads the lists of many of
// its attempts: one by one, each took five queries (its index, its whole
// row, its processes, their chunks and rollups), and the 193 lists of 40
// jobs took about 115 ms of ClickHouse's CPU a job (BenchmarkKeepUp's
// query log), most of what its analysis took there.
func (s *Store) AttemptProcesses(ctx context.Context, ids []string) (_ map[string][]store.Process, err error) {
	defer store.WrapErr(&err, "cannot read the processes of %d attempts", len(ids))
	lives, err := s.lives(ctx, ids)
	if err != nil {
		return nil, err
	}
	var owners []procOwner
	seen := map[string]bool{}
	for _, id := range ids {
		if l := lives[id]; l != nil && !seen[id] {
			seen[id] = true
			owners = append(owners, procOwner{id: id, job: l.JobID})
		}
	}
	return s.processLists(ctx, owners)
}

// procColumns are the columns of procs that scanProc reads.
const procColumns = `proc_key, gen, member, described, has_cmd, host, pid, ppid, sid, start_ms, end_ms, cmdline, comm,
	role, uid, user_name, from_ms, to_ms, cpu_base_ms, member_role`

const procSelect = "SELECT " + procColumns + " FROM "

// procRecord is a row of procs.
type procRecord struct {
	key, gen                  uint64
	member, described, hasCmd bool
	host                      string
	p                         wire.Process
	m                         wire.Membership
}

func scanProc(r *Rows) procRecord {
	var x procRecord
	x.key, x.gen, x.member, x.described, x.hasCmd, x.host = r.UInt64(), r.UInt64(), r.Bool(), r.Bool(), r.Bool(), r.String()
	x.p.PID, x.p.PPID, x.p.SID, x.p.StartMs, x.p.EndMs = r.Int32(), r.Int32(), r.Int32(), r.Int64(), r.Int64()
	x.p.Cmdline, x.p.Comm, x.p.Role, x.p.UID, x.p.User = r.String(), r.String(), r.String(), r.UInt32(), r.String()
	x.m.FromMs, x.m.ToMs, x.m.CPUBaseMs, x.m.Role = r.Int64(), r.Int64(), r.Int64(), r.String()
	x.p.Key, x.m.Process = x.key, x.key
	return x
}

// procView is a process's view with its command line.
type procView struct {
	v   store.ProcessView
	cmd string
}

// add takes a row. A row both a membership and a description (one batch
// said both: writeSet.Process) is the membership just before the
// description, as the batch ordered them (stores made before wrote them
// as two rows in that order).
func (pv *procView) add(x *procRecord) {
	if x.member {
		gen := x.gen
		if x.described {
			gen--
		}
		pv.v.Join(gen, &x.m)
	}
	if x.described {
		pv.v.Describe(x.gen, x.host, &x.p)
		if x.hasCmd && pv.v.LatestCmd(x.gen) {
			pv.cmd = x.p.Cmdline
		}
	}
}

// procOwner is an attempt whose processes are read, and its job (its
// rows' and its processes' are under its job's key and the empty job's).
type procOwner struct{ id, job string }

// processLists reads the processes of attempts (their members, with
// their latest descriptions and their summaries from their samples),
// a thousand attempts at a time, of all their jobs together (an
// attempt's rows are under its job's key or the empty job's: those of
// other jobs' keys are other attempts'). Attempts without processes are
// absent.
func (s *Store) processLists(ctx context.Context, owners []procOwner) (map[string][]store.Process, error) {
	out := map[string][]store.Process{}
	for len(owners) > 0 {
		part := owners[:min(len(owners), 1000)]
		owners = owners[len(part):]
		jobs := []uint64{jobKey("")}
		ids := make([]string, len(part))
		for i, o := range part {
			ids[i] = o.id
			if k := jobKey(o.job); !slices.Contains(jobs, k) {
				jobs = append(jobs, k)
			}
		}
		if err := s.jobProcessLists(ctx, jobs, ids, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// jobProcessLists adds to out the process lists of attempts ids, whose
// rows are under the keys of jobs.
func (s *Store) jobProcessLists(ctx context.Context, jobs []uint64, ids []string, out map[string][]store.Process) error {
	byKey := map[uint64]string{}
	keys := make([]uint64, 0, len(ids))
	for _, id := range ids {
		k := store.AttemptKey(id)
		if _, ok := byKey[k]; !ok {
			byKey[k] = id
			keys = append(keys, k)
		}
	}
	rows, err := s.query(ctx, "SELECT attempt_key, "+procColumns+" FROM "+s.read("procs")+
		fmt.Sprintf(" FINAL WHERE job_key IN (%s) AND attempt_key IN (%s) ORDER BY gen", numList(jobs), numList(keys)))
	if err != nil {
		return fmt.Errorf("cannot read the processes of %d attempts: %w", len(ids), err)
	}
	// Each attempt's processes, in the order of their first rows.
	type attProcs struct {
		views map[uint64]*procView
		order []uint64
	}
	atts := map[uint64]*attProcs{}
	for rows.Next() {
		a := rows.UInt64()
		x := scanProc(rows)
		ap := atts[a]
		if ap == nil {
			ap = &attProcs{views: map[uint64]*procView{}}
			atts[a] = ap
		}
		v := ap.views[x.key]
		if v == nil {
			v = &procView{}
			ap.views[x.key] = v
			ap.order = append(ap.order, x.key)
		}
		v.add(&x)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// Members their attempts' rows do not describe: their descriptions
	// elsewhere.
	var missing []uint64
	isMissing := map[uint64]bool{}
	for _, k := range keys {
		if ap := atts[k]; ap != nil {
			for _, p := range ap.order {
				if v := ap.views[p]; v.v.Member() && !v.v.Described() && !isMissing[p] {
					isMissing[p] = true
					missing = append(missing, p)
				}
			}
		}
	}
	if len(missing) > 0 {
		rows, err := s.query(ctx, procSelect+s.read("procs")+" FINAL WHERE described AND proc_key IN ("+numList(missing)+") ORDER BY gen")
		if err != nil {
			return err
		}
		others := map[uint64]*procView{}
		for rows.Next() {
			x := scanProc(rows)
			o := others[x.key]
			if o == nil {
				o = &procView{}
				others[x.key] = o
			}
			o.add(&x)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, ap := range atts {
			for k, o := range others {
				if v := ap.views[k]; v != nil && v.v.DescribeFrom(&o.v) {
					v.cmd = o.cmd
				}
			}
		}
	}
	lists := map[uint64][]store.Process{}
	var procKeys []uint64
	listed := map[uint64]bool{}
	for _, k := range keys {
		ap := atts[k]
		if ap == nil {
			continue
		}
		for _, p := range ap.order {
			v := ap.views[p]
			if !v.v.Member() || !v.v.Described() {
				continue
			}
			proc := v.v.Process(store.Key(p))
			proc.Cmdline = v.cmd
			lists[k] = append(lists[k], proc)
			if !listed[p] {
				listed[p] = true
				procKeys = append(procKeys, p)
			}
		}
	}
	if len(procKeys) == 0 {
		return nil
	}
	// Summaries from each process's samples.
	chunks, err := s.chunksOf(ctx, store.KindProcess, jobs, procKeys, 0, 1<<62)
	if err != nil {
		return err
	}
	points := map[uint64]*store.Points{}
	for k, list := range lists {
		for i := range list {
			key := uint64(list[i].Key)
			pts, ok := points[key]
			if !ok {
				if pts, err = pointsOf(chunks[key], store.SampleColumns); err != nil {
					return err
				}
				points[key] = pts
			}
			store.ProcessSummary(pts, &list[i])
		}
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].Start != list[j].Start {
				return list[i].Start < list[j].Start
			}
			return list[i].PID < list[j].PID
		})
		out[byKey[k]] = list
	}
	return nil
}

// Events lists events, oldest first; by attempt, with its processes'.
func (s *Store) Events(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	var keys []uint64
	if f.AttemptID != "" {
		st, err := s.attempt(ctx, f.AttemptID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil {
			if keys, err = s.memberKeys(ctx, st); err != nil {
				return nil, err
			}
		}
	}
	return s.events(ctx, f, keys)
}

// memberKeys lists an attempt's member processes.
func (s *Store) memberKeys(ctx context.Context, st *attState) ([]uint64, error) {
	return s.uint64s(ctx, fmt.Sprintf("SELECT DISTINCT proc_key FROM %s WHERE job_key IN (%d, %d) AND attempt_key = %d AND member",
		s.read("procs"), jobKey(st.Meta.JobID), jobKey(""), store.AttemptKey(st.Meta.AttemptID)))
}

func (s *Store) events(ctx context.Context, f store.EventFilter, keys []uint64) ([]store.Event, error) {
	f.Limit = store.EventsLimit(f.Limit)
	var where []string
	if f.Host != "" {
		where = append(where, "host = "+Quote(f.Host))
	}
	if f.JobID != "" {
		// (job_key: the events' order; a job's events are under its key)
		where = append(where, fmt.Sprintf("job_key = %d AND job_id = %s", jobKey(f.JobID), Quote(f.JobID)))
	}
	if f.AttemptID != "" {
		if len(keys) == 0 {
			where = append(where, "attempt_id = "+Quote(f.AttemptID))
		} else {
			where = append(where, "(attempt_id = "+Quote(f.AttemptID)+" OR proc_key IN ("+numList(keys)+"))")
		}
	}
	if f.Kind != "" {
		where = append(where, "kind = "+Quote(f.Kind))
	}
	if f.From > 0 {
		where = append(where, fmt.Sprintf("ts >= %d", f.From))
	}
	if f.To > 0 {
		where = append(where, fmt.Sprintf("ts < %d", f.To))
	}
	q := "SELECT " + eventColumns + " FROM " + s.read("events") + " FINAL"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY ts, kind LIMIT %d", f.Limit)
	rows, err := s.query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("cannot list events: %w", err)
	}
	out := []store.Event{}
	for rows.Next() {
		out = append(out, readEvent(rows))
	}
	return out, rows.Err()
}

// eventColumns are the columns of an event that readEvent reads.
const eventColumns = "ts, host, kind, job_id, attempt_id, proc_key, pid, message, value"

func readEvent(rows *Rows) store.Event {
	var e store.Event
	e.Time, e.Host, e.Kind, e.JobID, e.AttemptID = store.Time(rows.Int64()), rows.String(), rows.String(), rows.String(), rows.String()
	e.Process, e.PID, e.Message, e.Value = store.Key(rows.UInt64()), rows.Int32(), rows.String(), rows.Int64()
	return e
}

// JobEvents returns each job's events of kinds (all if none), oldest
// first, at most limit a job (store.JobEventsReader): one read (LIMIT
// BY job).
func (s *Store) JobEvents(ctx context.Context, jobIDs, kinds []string, limit int) (_ map[string][]store.Event, err error) {
	defer store.WrapErr(&err, "cannot list the events of %d jobs", len(jobIDs))
	limit = store.EventsLimit(limit)
	out := map[string][]store.Event{}
	for len(jobIDs) > 0 {
		part := jobIDs[:min(len(jobIDs), maxJobsRead)]
		jobIDs = jobIDs[len(part):]
		where := "job_id IN (" + QuoteList(part) + ")"
		if !slices.Contains(part, "") {
			// A job's events are under its key (an event of no job id,
			// under its attempt's job's: read by job_id alone). Without
			// the keys, the table's order, each read scanned the whole
			// table, FINAL: the analyser's reads of ended jobs' events
			// were a fifth of ClickHouse's CPU with short tasks
			// (BenchmarkStoresIngest's replay).
			keys := make([]uint64, len(part))
			for i, id := range part {
				keys[i] = jobKey(id)
			}
			where = "job_key IN (" + numList(keys) + ") AND " + where
		}
		if len(kinds) > 0 {
			where += " AND kind IN (" + QuoteList(kinds) + ")"
		}
		rows, err := s.query(ctx, fmt.Sprintf("SELECT %s FROM %s FINAL WHERE %s ORDER BY ts, kind LIMIT %d BY job_id",
			eventColumns, s.read("events"), where, limit))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			e := readEvent(rows)
			out[e.JobID] = append(out[e.JobID], e)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Hosts lists the hosts that sent data: their agents, attempts and
// orphan events, read apart (18.16 joins one table a query) and put
// together here.
func (s *Store) Hosts(ctx context.Context) ([]store.Host, error) {
	byHost := map[string]*store.Host{}
	var order []string
	rows, err := s.query(ctx, "SELECT host, max(last_ms), count(), sum(dropped_samples) FROM "+s.read("agents")+
		" FINAL GROUP BY host ORDER BY host")
	if err != nil {
		return nil, fmt.Errorf("cannot list hosts: %w", err)
	}
	for rows.Next() {
		h := &store.Host{Host: rows.String(), LastSeen: store.Time(rows.Int64()), Agents: int(rows.UInt64()), DroppedSamples: rows.UInt64()}
		byHost[h.Host] = h
		order = append(order, h.Host)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = s.query(ctx, fmt.Sprintf("SELECT host, count(), countIf(NOT ended AND last_ms >= %d), max(last_ms) FROM %s FINAL GROUP BY host",
		s.staleBefore(), s.read("attempts")))
	if err != nil {
		return nil, fmt.Errorf("cannot list hosts' attempts: %w", err)
	}
	for rows.Next() {
		host, n, running, last := rows.String(), rows.UInt64(), rows.UInt64(), rows.Int64()
		if h := byHost[host]; h != nil {
			h.Attempts, h.Running = int(n), int(running)
			h.LastSeen = max(h.LastSeen, store.Time(last))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = s.query(ctx, "SELECT host, count() FROM "+s.read("events")+
		" FINAL WHERE kind IN ('orphan', 'lost_jvm', 'unknown_container', 'outlived_job') GROUP BY host")
	if err != nil {
		return nil, fmt.Errorf("cannot count orphans: %w", err)
	}
	for rows.Next() {
		host, n := rows.String(), rows.UInt64()
		if h := byHost[host]; h != nil {
			h.Orphans = int(n)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]store.Host, 0, len(order))
	for _, h := range order {
		out = append(out, *byHost[h])
	}
	return out, nil
}
