package clickhouse

import (
	"context"
	"fmt"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Stack profiles (store.ProfileStore): the requests, inserted when they
// are made, and the profiles agents send, inserted with their batches
// (before the agents' rows: a commit that fails half way is stored again
// by the agents' retries, and a profile inserted twice is kept once, by
// its key). Both are read by attempt.
var _ store.ProfileStore = (*Store)(nil)

func init() {
	tables = append(tables,
		table{name: "profile_requests", columns: cols(`day Date, attempt_key UInt64, id String, attempt_id String, host String lc,
			pid Int32, proc_key UInt64, start_ms Int64, trigger String lc, requested_by String, requested_ms Int64, baseline String,
			baseline_attempt String, window_ms Int64, interval_ms Int64`),
			partition: "day", orderBy: "(attempt_key, id)", shardKey: "attempt_key", retention: keepRollup},
		table{name: "profiles", columns: cols(`day Date, attempt_key UInt64, id String, attempt_id String, host String lc, pid Int32,
			proc_key UInt64, start_ms Int64, end_ms Int64, interval_ms Int64, dumps UInt32, paused_us Int64, max_pause_us Int64,
			status String lc, error String, stacks UInt32, data String codec=ZSTD(3)`),
			partition: "day", orderBy: "(attempt_key, id)", shardKey: "attempt_key", retention: keepRollup})
}

var (
	requestCols = []string{"day", "attempt_key", "id", "attempt_id", "host", "pid", "proc_key", "start_ms", "trigger", "requested_by",
		"requested_ms", "baseline", "baseline_attempt", "window_ms", "interval_ms"}
	profileCols = []string{"day", "attempt_key", "id", "attempt_id", "host", "pid", "proc_key", "start_ms", "end_ms", "interval_ms",
		"dumps", "paused_us", "max_pause_us", "status", "error", "stacks", "data"}
)

// insertProfiles inserts the profiles of the batches.
func (s *Store) insertProfiles(ctx context.Context, prepared []*store.Prepared) error {
	var b Block
	for _, p := range prepared {
		for i := range p.Batch.Profiles {
			pr := &p.Batch.Profiles[i]
			b.Row()
			b.Date(max(pr.EndMs, pr.StartMs, p.Batch.SentMs))
			b.UInt64(store.AttemptKey(pr.AttemptID))
			b.String(pr.ID)
			b.String(pr.AttemptID)
			b.String(p.Batch.Host)
			b.Int32(pr.PID)
			b.UInt64(pr.Process)
			b.Int64(pr.StartMs)
			b.Int64(pr.EndMs)
			b.Int64(pr.IntervalMs)
			b.UInt32(pr.Dumps)
			b.Int64(pr.PausedUs)
			b.Int64(pr.MaxPauseUs)
			b.String(pr.Status)
			b.String(pr.Error)
			b.UInt32(uint32(len(pr.Stacks)))
			b.String(string(wire.MarshalProfile(nil, pr)))
		}
	}
	return s.insert(ctx, "profiles", profileCols, &b)
}

// RequestProfile stores a request.
func (s *Store) RequestProfile(ctx context.Context, r store.ProfileRequest) error {
	var b Block
	b.Row()
	b.Date(int64(r.Requested))
	b.UInt64(store.AttemptKey(r.AttemptID))
	b.String(r.ID)
	b.String(r.AttemptID)
	b.String(r.Host)
	b.Int32(r.PID)
	b.UInt64(uint64(r.Process))
	b.Int64(r.StartMs)
	b.String(r.Trigger)
	b.String(r.RequestedBy)
	b.Int64(int64(r.Requested))
	b.String(r.Baseline)
	b.String(r.BaselineAttempt)
	b.Int64(r.WindowMs)
	b.Int64(r.IntervalMs)
	if err := s.insert(ctx, "profile_requests", requestCols, &b); err != nil {
		return fmt.Errorf("cannot store the request for profile %s: %w", r.ID, err)
	}
	return nil
}

const (
	requestSelect = "SELECT id, attempt_id, host, pid, proc_key, start_ms, trigger, requested_by, requested_ms, baseline, baseline_attempt, window_ms, interval_ms"
	resultSelect  = "SELECT id, attempt_id, host, pid, proc_key, start_ms, end_ms, interval_ms, dumps, paused_us, max_pause_us, status, error, stacks, length(data)"
)

func (s *Store) requests(ctx context.Context, where string) ([]store.ProfileRequest, error) {
	rows, err := s.query(ctx, requestSelect+" FROM "+s.read("profile_requests")+" FINAL WHERE "+where)
	if err != nil {
		return nil, fmt.Errorf("cannot read profile requests: %w", err)
	}
	var out []store.ProfileRequest
	for rows.Next() {
		var r store.ProfileRequest
		r.ID, r.AttemptID, r.Host, r.PID, r.Process = rows.String(), rows.String(), rows.String(), rows.Int32(), store.Key(rows.UInt64())
		r.StartMs, r.Trigger, r.RequestedBy, r.Requested = rows.Int64(), rows.String(), rows.String(), store.Time(rows.Int64())
		r.Baseline, r.BaselineAttempt, r.WindowMs, r.IntervalMs = rows.String(), rows.String(), rows.Int64(), rows.Int64()
		out = append(out, r)
	}
	return out, rows.Err()
}

// results reads the profiles where; with data, their encodings too.
func (s *Store) results(ctx context.Context, where string, data bool) ([]store.ProfileInfo, [][]byte, error) {
	q := resultSelect
	if data {
		q += ", data"
	}
	rows, err := s.query(ctx, q+" FROM "+s.read("profiles")+" FINAL WHERE "+where)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read profiles: %w", err)
	}
	var out []store.ProfileInfo
	var datas [][]byte
	for rows.Next() {
		var p wire.Profile
		p.ID, p.AttemptID = rows.String(), rows.String()
		host := rows.String()
		p.PID, p.Process, p.StartMs, p.EndMs, p.IntervalMs = rows.Int32(), rows.UInt64(), rows.Int64(), rows.Int64(), rows.Int64()
		p.Dumps, p.PausedUs, p.MaxPauseUs, p.Status, p.Error = rows.UInt32(), rows.Int64(), rows.Int64(), rows.String(), rows.String()
		stacks, size := rows.UInt32(), rows.UInt64()
		info := store.ProfileResult(host, &p, int(size))
		info.Stacks = int(stacks)
		out = append(out, info)
		if data {
			datas = append(datas, append([]byte(nil), rows.Bytes()...))
		}
	}
	return out, datas, rows.Err()
}

func byAttempt(id string) string {
	return fmt.Sprintf("attempt_key = %d AND attempt_id = %s", store.AttemptKey(id), Quote(id))
}

// Profiles lists an attempt's profiles.
func (s *Store) Profiles(ctx context.Context, attemptID string) ([]store.ProfileInfo, error) {
	reqs, err := s.requests(ctx, byAttempt(attemptID))
	if err != nil {
		return nil, err
	}
	res, _, err := s.results(ctx, byAttempt(attemptID), false)
	if err != nil {
		return nil, err
	}
	return store.MergeProfiles(reqs, res, s.opt.Clock.Now().UnixMilli()), nil
}

// ProfileData returns one of an attempt's profiles and its encoding.
func (s *Store) ProfileData(ctx context.Context, attemptID, id string) (*store.ProfileInfo, []byte, error) {
	where := byAttempt(attemptID) + " AND id = " + Quote(id)
	reqs, err := s.requests(ctx, where)
	if err != nil {
		return nil, nil, err
	}
	res, datas, err := s.results(ctx, where, true)
	if err != nil {
		return nil, nil, err
	}
	if len(reqs) == 0 && len(res) == 0 {
		return nil, nil, fmt.Errorf("profile %s of %s: %w", id, attemptID, store.ErrNotFound)
	}
	var req *store.ProfileRequest
	if len(reqs) > 0 {
		req = &reqs[0]
	}
	var r *store.ProfileInfo
	var data []byte
	if len(res) > 0 {
		r, data = &res[0], datas[0]
	}
	info := store.ProfileOf(req, r, s.opt.Clock.Now().UnixMilli()-store.ProfileExpiry)
	return &info, data, nil
}

// PendingProfiles lists the requests since sinceMs without a profile:
// the requests, and the profiles since then, read apart (18.16 joins one
// table a query) and put together here.
func (s *Store) PendingProfiles(ctx context.Context, sinceMs int64) ([]store.ProfileRequest, error) {
	since := fmt.Sprintf("day >= toDate(%d) AND ", DayOf(sinceMs))
	reqs, err := s.requests(ctx, since+fmt.Sprintf("requested_ms >= %d ORDER BY requested_ms, id", sinceMs))
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	rows, err := s.query(ctx, "SELECT DISTINCT id FROM "+s.read("profiles")+" WHERE "+since+"id IN ("+requestIDs(reqs)+")")
	if err != nil {
		return nil, fmt.Errorf("cannot read profiles: %w", err)
	}
	taken := map[string]bool{}
	for rows.Next() {
		taken[rows.String()] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := reqs[:0]
	for _, r := range reqs {
		if !taken[r.ID] {
			out = append(out, r)
		}
	}
	return out, nil
}

func requestIDs(rs []store.ProfileRequest) string {
	ids := make([]string, len(rs))
	for i := range rs {
		ids[i] = rs[i].ID
	}
	return QuoteList(ids)
}
