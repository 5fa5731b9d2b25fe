package duckdb

import (
	"context"
	"math"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// Reads of many jobs at once (the background analyser's passes over the
// running jobs read tens of them a round): one query for their rows, one
// for their attempts, one for their events, where one job at a time made
// three queries a job, each a few milliseconds however little it read.

// paddedIn is the placeholders and arguments of an IN list of ids, padded
// to a power of two by repeating the last id: the text of a query takes
// one of a few forms, and each is prepared once (stmts), where a list of
// any length was prepared at each call (a wide select costs more to plan
// than to run).
func paddedIn(ids []string) (string, []any) {
	n := 1
	for n < len(ids) {
		n *= 2
	}
	args := make([]any, n)
	for i := range args {
		args[i] = ids[min(i, len(ids)-1)]
	}
	return placeholders(n), args
}

// JobsDetail returns what Job returns for each job of ids it knows
// (store.JobReader): their rows in one read, and their attempts in one
// read of the range of gen_first their rows keep.
func (s *Store) JobsDetail(ctx context.Context, ids []string) (_ map[string]*store.JobDetail, err error) {
	defer store.WrapErr(&err, "cannot read %d jobs", len(ids))
	out := map[string]*store.JobDetail{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), maxInKeys)]
		ids = ids[len(part):]
		if err := s.jobsDetail(ctx, part, out); err != nil {
			return nil, err
		}
	}
	for _, d := range out {
		store.LinkAttempts(d.AttemptList)
		d.ByType = map[string]int{}
		for _, a := range d.AttemptList {
			d.ByType[a.Type]++
		}
	}
	return out, nil
}

// jobsDetail adds the jobs of ids (at most maxInKeys) to out.
func (s *Store) jobsDetail(ctx context.Context, ids []string, out map[string]*store.JobDetail) error {
	in, args := paddedIn(ids)
	rows, err := s.query(ctx, `SELECT `+jobCols+`, coalesce(gen_lo, 0), coalesce(gen_hi, 0) FROM jobs WHERE job_id IN (`+in+`)`, args...)
	if err != nil {
		return err
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	var found []string
	for rows.Next() {
		var l, h uint64
		j, err := s.scanJob(rows, &l, &h)
		if err != nil {
			rows.Close()
			return err
		}
		if out[j.JobID] == nil {
			found = append(found, j.JobID)
		}
		out[j.JobID] = &store.JobDetail{Job: j, AttemptList: []store.Attempt{}}
		lo, hi = min(lo, l), max(hi, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	// (Each job's attempts are within its own range, which is within
	// this one: the same rows as Job reads.)
	in, args = paddedIn(found)
	atts, err := s.attempts(ctx, `job_id IN (`+in+`) AND gen_first BETWEEN ?::UBIGINT AND ?::UBIGINT`, append(args, lo, hi)...)
	if err != nil {
		return err
	}
	for _, a := range atts {
		if d := out[a.JobID]; d != nil {
			d.AttemptList = append(d.AttemptList, a)
		}
	}
	return nil
}

// JobEvents returns each job's events of kinds (all if none), oldest
// first, at most limit a job (store.JobEventsReader): one read.
func (s *Store) JobEvents(ctx context.Context, jobIDs, kinds []string, limit int) (_ map[string][]store.Event, err error) {
	defer store.WrapErr(&err, "cannot list the events of %d jobs", len(jobIDs))
	limit = store.EventsLimit(limit)
	out := map[string][]store.Event{}
	for len(jobIDs) > 0 {
		part := jobIDs[:min(len(jobIDs), maxInKeys)]
		jobIDs = jobIDs[len(part):]
		in, args := paddedIn(part)
		where := `job_id IN (` + in + `)`
		if len(kinds) > 0 {
			kin, kargs := paddedIn(kinds)
			where += ` AND kind IN (` + kin + `)`
			args = append(args, kargs...)
		}
		rows, err := s.query(ctx, `SELECT `+eventCols+` FROM events WHERE `+where+`
			QUALIFY row_number() OVER (PARTITION BY job_id ORDER BY ts, kind) <= ? ORDER BY ts, kind`, append(args, limit)...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			e, err := scanEvent(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out[e.JobID] = append(out[e.JobID], e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eventCols are the columns of an event that scanEvent reads.
var eventCols = strings.TrimSpace(`ts, coalesce(host, ''), kind, coalesce(job_id, ''), coalesce(attempt_id, ''), coalesce(proc_key, 0),
		coalesce(pid, 0), coalesce(message, ''), coalesce(value, 0)`)

// scanEvent reads an event of eventCols.
func scanEvent(sc interface{ Scan(...any) error }) (store.Event, error) {
	var e store.Event
	var ts, key int64
	if err := sc.Scan(&ts, &e.Host, &e.Kind, &e.JobID, &e.AttemptID, &key, &e.PID, &e.Message, &e.Value); err != nil {
		return e, err
	}
	e.Time, e.Process = store.Time(ts), store.Key(key)
	return e, nil
}

// HostsAttempts returns what HostAttempts returns for each window of ws
// (store.HostsReader): one read of the hosts' attempts within the span of
// all the windows, each window then taking its own.
func (s *Store) HostsAttempts(ctx context.Context, ws []store.HostWindow) (_ [][]store.Attempt, err error) {
	defer store.WrapErr(&err, "cannot read the attempts of %d hosts' windows", len(ws))
	out := make([][]store.Attempt, len(ws))
	byHost := map[string][]int{}
	var hosts []string
	from, to := int64(math.MaxInt64), int64(math.MinInt64)
	for i, w := range ws {
		if _, ok := byHost[w.Host]; !ok {
			hosts = append(hosts, w.Host)
		}
		byHost[w.Host] = append(byHost[w.Host], i)
		t := w.To
		if t <= 0 {
			t = 1 << 62
		}
		from, to = min(from, w.From), max(to, t)
	}
	for len(hosts) > 0 {
		part := hosts[:min(len(hosts), maxInKeys)]
		hosts = hosts[len(part):]
		in, args := paddedIn(part)
		atts, err := s.attempts(ctx, `host IN (`+in+`) AND last_ms >= ? AND first_ms < ?`, append(args, from, to)...)
		if err != nil {
			return nil, err
		}
		for _, a := range atts {
			for _, i := range byHost[a.Host] {
				if ws[i].InWindow(&a) {
					out[i] = append(out[i], a)
				}
			}
		}
	}
	return out, nil
}
