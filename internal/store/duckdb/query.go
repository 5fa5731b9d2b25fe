package duckdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

func (s *Store) staleBefore() int64 { return s.opt.Clock.StaleBefore() }

const jobCols = `job_id, coalesce(app_id, ''), coalesce(framework, 'unknown'), coalesce(name, ''), coalesce(user_name, ''),
	coalesce(queue, ''), coalesce(first_ms, 0), coalesce(last_ms, 0), coalesce(attempts, 0), coalesce(running, 0),
	coalesce(cpu_ms, 0), coalesce(peak_rss, 0), coalesce(mem_gb_hours, 0), coalesce(used_gb_hours, 0), coalesce(hosts, 0)`

func (s *Store) scanJob(sc interface{ Scan(...any) error }, extra ...any) (store.Job, error) {
	var j store.Job
	var first, last int64
	dst := []any{&j.JobID, &j.AppID, &j.Framework, &j.Name, &j.User, &j.Queue, &first, &last, &j.Attempts,
		&j.Running, &j.CPUMs, &j.PeakRSS, &j.MemGBHours, &j.UsedGBHours, &j.Hosts}
	if err := sc.Scan(append(dst, extra...)...); err != nil {
		return j, err
	}
	j.Start, j.LastSeen = store.Time(first), store.Time(last)
	j.State, j.End = store.JobState(j.Running, last, s.staleBefore())
	return j, nil
}

// Jobs lists jobs, newest first.
func (s *Store) Jobs(ctx context.Context, f store.JobFilter) (store.JobPage, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 1000 {
		f.Limit = 1000
	}
	var where []string
	var args []any
	if f.User != "" {
		where, args = append(where, "user_name = ?"), append(args, f.User)
	}
	if f.Queue != "" {
		where, args = append(where, "queue = ?"), append(args, f.Queue)
	}
	if f.Framework != "" {
		where, args = append(where, "framework = ?"), append(args, f.Framework)
	}
	if f.Visible != nil {
		c, a := visibleSQL(f.Visible)
		where, args = append(where, c), append(args, a...)
	}
	if f.Name != "" {
		where, args = append(where, `(name ILIKE ? ESCAPE '\' OR job_id ILIKE ? ESCAPE '\')`), append(args, "%"+likeEscape(f.Name)+"%", "%"+likeEscape(f.Name)+"%")
	}
	if f.From > 0 {
		where, args = append(where, "last_ms >= ?"), append(args, f.From)
	}
	if f.To > 0 {
		where, args = append(where, "first_ms < ?"), append(args, f.To)
	}
	switch f.State {
	case "":
	case store.StateRunning:
		where, args = append(where, "running > 0 AND last_ms >= ?"), append(args, s.staleBefore())
	case store.StateFinished:
		where, args = append(where, "NOT (running > 0 AND last_ms >= ?)"), append(args, s.staleBefore())
	default:
		return store.JobPage{}, fmt.Errorf("state must be running or finished, not %q", f.State)
	}
	join, joinArgs, awhere, order := jobsAnalysis(f)
	analysed := `a.worst, coalesce(a.heuristics, []::VARCHAR[]), count(*) OVER ()`
	if f.Bare {
		analysed = `NULL::SMALLINT, []::VARCHAR[], 0`
		if f.MinSeverity == nil && f.Heuristic == "" && !f.BySeverity && !f.CountSeverities {
			join, joinArgs, awhere = "", nil, nil // (no filter needs them)
		}
	}
	where = append(where, awhere...)
	args = append(joinArgs, args...)
	cond := ` FROM jobs` + join + ` WHERE attempts > 0`
	if len(where) > 0 {
		cond += " AND " + strings.Join(where, " AND ")
	}
	page := store.JobPage{Jobs: []store.Job{}}
	if f.CountSeverities {
		// (Without MinSeverity: the counts of every severity.)
		c, err := s.countSeverities(ctx, cond, args)
		if err != nil {
			return page, err
		}
		page.Severities = c
	}
	if f.MinSeverity != nil {
		cond += " AND a.sev >= ?"
		args = append(args, int8(*f.MinSeverity))
	}
	filterArgs := args
	q := `SELECT ` + jobCols + `, coalesce(by_type, ''), ` + analysed + cond + ` ORDER BY ` + order + ` LIMIT ? OFFSET ?`
	args = append(append([]any{}, args...), f.Limit, f.Offset)
	rows, err := s.handle().QueryContext(ctx, q, args...)
	if err != nil {
		return store.JobPage{}, fmt.Errorf("cannot list jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var byType string
		var worst sql.NullInt16
		var heuristics []any
		j, err := s.scanJob(rows, &byType, &worst, &heuristics, &page.Total)
		if err != nil {
			return page, err
		}
		if byType != "" {
			j.ByType = store.ParseByType(byType)
		}
		scanWorst(&j, worst, heuristics)
		page.Jobs = append(page.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return page, err
	}
	if len(page.Jobs) == 0 && f.Offset > 0 && !f.Bare {
		// Past the end: still report how many match.
		err := s.handle().QueryRowContext(ctx, `SELECT count(*)`+cond, filterArgs...).Scan(&page.Total)
		return page, err
	}
	return page, nil
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func (s *Store) scanAttempt(sc interface{ Scan(...any) error }, stale int64) (store.Attempt, error) {
	var r store.AttemptRow
	if err := scanAttemptRow(sc, &r); err != nil {
		return store.Attempt{}, err
	}
	return store.AttemptOf(&r.Meta, r.Host, &r.Sum, int(r.NProcs), stale), nil
}

// scanState reads an attempts row (attemptCols, gen_first, gen_last) into
// the state ingest keeps.
func scanState(sc interface{ Scan(...any) error }) (*attState, error) {
	st := &attState{}
	err := scanAttemptRow(sc, &st.AttemptRow, &st.GenFirst, &st.GenLast)
	return st, err
}

// JobSummary returns a job's summary, without its attempts nor their count
// by type (ErrNotFound if unknown).
func (s *Store) JobSummary(ctx context.Context, id string) (*store.Job, error) {
	j, _, _, err := s.job(ctx, id)
	return j, err
}

// JobOwner is a job's user and queue (store.OwnerReader): two columns of
// its row, found by the primary key's index whether it exists or not.
func (s *Store) JobOwner(ctx context.Context, id string) (store.Owner, error) {
	var o store.Owner
	err := s.queryRow(ctx, `SELECT coalesce(user_name, ''), coalesce(queue, '') FROM jobs WHERE job_id = ?`, id).Scan(&o.User, &o.Queue)
	if isNoRows(err) {
		return o, store.ErrNotFound
	}
	if err != nil {
		return o, fmt.Errorf("cannot read the owner of job %s: %w", id, err)
	}
	return o, nil
}

// AttemptJob is the job of an attempt (store.OwnerReader): one column of
// its row, found by the primary key's index.
func (s *Store) AttemptJob(ctx context.Context, id string) (string, error) {
	var job string
	err := s.queryRow(ctx, `SELECT job_id FROM attempts WHERE attempt_id = ?`, id).Scan(&job)
	if isNoRows(err) {
		return "", store.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the job of attempt %s: %w", id, err)
	}
	return job, nil
}

// job reads a job's row, and the range of its attempts' gen_first.
func (s *Store) job(ctx context.Context, id string) (j *store.Job, lo, hi uint64, err error) {
	one, err := s.scanJob(s.queryRow(ctx, `SELECT `+jobCols+`, coalesce(gen_lo, 0), coalesce(gen_hi, 0)
		FROM jobs WHERE job_id = ?`, id), &lo, &hi)
	if isNoRows(err) {
		return nil, 0, 0, store.ErrNotFound
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("cannot read job %s: %w", id, err)
	}
	return &one, lo, hi, nil
}

// Job returns a job with all its attempts.
func (s *Store) Job(ctx context.Context, id string) (*store.JobDetail, error) {
	j, lo, hi, err := s.job(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &store.JobDetail{Job: *j}
	atts, err := s.attempts(ctx, jobAttempts, id, lo, hi)
	if err != nil {
		return nil, err
	}
	store.LinkAttempts(atts)
	d.AttemptList = atts
	d.ByType = map[string]int{}
	for _, a := range atts {
		d.ByType[a.Type]++
	}
	return d, nil
}

// jobAttempts selects a job's attempts (job_id, and the range of their
// gen_first from the job's row): the zone maps of gen_first leave out the
// row groups of other times.
const jobAttempts = `job_id = ? AND gen_first BETWEEN ?::UBIGINT AND ?::UBIGINT`

func (s *Store) attempts(ctx context.Context, where string, args ...any) ([]store.Attempt, error) {
	rows, err := s.query(ctx, `SELECT `+attemptCols+` FROM attempts WHERE `+where+` ORDER BY first_ms, attempt_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list attempts: %w", err)
	}
	defer rows.Close()
	stale := s.staleBefore()
	out := []store.Attempt{}
	for rows.Next() {
		a, err := s.scanAttempt(rows, stale)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// HostAttempts lists the attempts that ran on host within [from, to).
func (s *Store) HostAttempts(ctx context.Context, host string, from, to int64) ([]store.Attempt, error) {
	if to <= 0 {
		to = 1 << 62
	}
	return s.attempts(ctx, `host = ? AND last_ms >= ? AND first_ms < ?`, host, from, to)
}

// AttemptSummary returns an attempt's summary, without its processes and
// events (ErrNotFound if unknown).
func (s *Store) AttemptSummary(ctx context.Context, id string) (*store.Attempt, error) {
	atts, err := s.attempts(ctx, `attempt_id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(atts) == 0 {
		return nil, store.ErrNotFound
	}
	return &atts[0], nil
}

// link sets a's RetryOf and Speculative from the attempts of its task
// (store.LinkAttempt).
func (s *Store) link(ctx context.Context, a *store.Attempt) error {
	prefix := store.TaskPrefix(a.AttemptID)
	if prefix == "" {
		return nil
	}
	_, lo, hi, err := s.job(ctx, a.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	task, err := s.attempts(ctx, jobAttempts+` AND starts_with(attempt_id, ?)`, a.JobID, lo, hi, prefix)
	if err != nil {
		return err
	}
	store.LinkAttempt(a, task)
	return nil
}

// Attempt returns an attempt with its processes and events.
func (s *Store) Attempt(ctx context.Context, id string) (_ *store.AttemptDetail, err error) {
	defer store.WrapErr(&err, "cannot read attempt %s", id)
	atts, err := s.attempts(ctx, `attempt_id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(atts) == 0 {
		return nil, store.ErrNotFound
	}
	if err := s.link(ctx, &atts[0]); err != nil {
		return nil, err
	}
	d := &store.AttemptDetail{Attempt: atts[0], ProcessList: []store.Process{}}
	lists := map[string][]store.Process{}
	if err := s.processLists(ctx, []string{id}, lists); err != nil {
		return nil, err
	}
	if l := lists[id]; l != nil {
		d.ProcessList = l
	}
	d.Processes = len(d.ProcessList)
	keys := make([]any, len(d.ProcessList))
	for i, p := range d.ProcessList {
		keys[i] = keyValue(uint64(p.Key))
	}
	d.Events, err = s.events(ctx, store.EventFilter{AttemptID: id, Limit: 5000}, keys)
	d.Events = store.ProcessEvents(d.Events, d.ProcessList)
	return d, err
}

// Events lists events, oldest first. Filtering by attempt also finds the
// events of the attempt's processes.
func (s *Store) Events(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	var keys []any
	if f.AttemptID != "" {
		r, err := s.attemptRange(ctx, f.AttemptID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil {
			if keys, err = s.attemptProcKeys(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	return s.events(ctx, f, keys)
}

// events is Events with the keys of the attempt's processes.
func (s *Store) events(ctx context.Context, f store.EventFilter, keys []any) ([]store.Event, error) {
	f.Limit = store.EventsLimit(f.Limit)
	var where []string
	var args []any
	if f.Host != "" {
		where, args = append(where, "host = ?"), append(args, f.Host)
	}
	if f.JobID != "" {
		where, args = append(where, "job_id = ?"), append(args, f.JobID)
	}
	if f.AttemptID != "" {
		if len(keys) == 0 {
			where, args = append(where, "attempt_id = ?"), append(args, f.AttemptID)
		} else {
			where = append(where, "(attempt_id = ? OR proc_key IN ("+placeholders(len(keys))+"))")
			args = append(append(args, f.AttemptID), keys...)
		}
	}
	if f.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, f.Kind)
	}
	if f.From > 0 {
		where, args = append(where, "ts >= ?"), append(args, f.From)
	}
	if f.To > 0 {
		where, args = append(where, "ts < ?"), append(args, f.To)
	}
	q := `SELECT ` + eventCols + ` FROM events`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY ts, kind LIMIT ?"
	args = append(args, f.Limit)
	rows, err := s.handle().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list events: %w", err)
	}
	defer rows.Close()
	out := []store.Event{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Hosts lists the hosts with their agents and attempts.
func (s *Store) Hosts(ctx context.Context) ([]store.Host, error) {
	rows, err := s.handle().QueryContext(ctx, `WITH ag AS (SELECT host, max(last_ms) AS last, count(*) AS agents,
			sum(dropped_samples) AS dropped FROM agents GROUP BY host),
		att AS (SELECT host, count(*) AS n, count(*) FILTER (WHERE NOT coalesce(ended, false) AND last_ms >= ?) AS running,
			max(last_ms) AS last FROM attempts GROUP BY host),
		ev AS (SELECT host, count(*) AS orphans FROM events WHERE kind IN ('orphan', 'lost_jvm', 'unknown_container', 'outlived_job') GROUP BY host)
		SELECT ag.host, greatest(ag.last, coalesce(att.last, 0)), coalesce(att.running, 0), coalesce(att.n, 0), ag.agents,
			coalesce(ag.dropped, 0), coalesce(ev.orphans, 0)
		FROM ag LEFT JOIN att USING (host) LEFT JOIN ev USING (host) ORDER BY ag.host`, s.staleBefore())
	if err != nil {
		return nil, fmt.Errorf("cannot list hosts: %w", err)
	}
	defer rows.Close()
	out := []store.Host{}
	for rows.Next() {
		var h store.Host
		var last int64
		if err := rows.Scan(&h.Host, &last, &h.Running, &h.Attempts, &h.Agents, &h.DroppedSamples, &h.Orphans); err != nil {
			return nil, err
		}
		h.LastSeen = store.Time(last)
		out = append(out, h)
	}
	return out, rows.Err()
}

// AgentSeq is the highest sequence stored of an agent: in agent_seqs, its
// log since the agents' rows were last written, or in its row.
func (s *Store) AgentSeq(ctx context.Context, agentID string) (uint64, error) {
	var seq uint64
	err := s.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM (SELECT seq FROM agent_seqs WHERE agent_id = ?
		UNION ALL SELECT seq FROM agents WHERE agent_id = ?)`, agentID, agentID).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("cannot read the sequence of agent %s: %w", agentID, err)
	}
	return seq, nil
}
