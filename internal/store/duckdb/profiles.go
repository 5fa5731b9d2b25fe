package duckdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Stack profiles (store.ProfileStore): the requests, written when they are
// made, and the profiles agents send, appended with their batches. A few
// a minute on a busy cluster: no index, an attempt's are found by a scan.
var _ store.ProfileStore = (*Store)(nil)

var profileTables = []string{
	`CREATE TABLE IF NOT EXISTS profile_requests (id VARCHAR, attempt_id VARCHAR, host VARCHAR, pid INTEGER,
		proc_key BIGINT, start_ms BIGINT, trigger VARCHAR, requested_by VARCHAR, requested_ms BIGINT, baseline VARCHAR,
		baseline_attempt VARCHAR, window_ms BIGINT, interval_ms BIGINT)`,
	`CREATE TABLE IF NOT EXISTS profiles (id VARCHAR, attempt_id VARCHAR, host VARCHAR, pid INTEGER, proc_key BIGINT,
		start_ms BIGINT, end_ms BIGINT, interval_ms BIGINT, dumps INTEGER, paused_us BIGINT, max_pause_us BIGINT,
		status VARCHAR, error VARCHAR, stacks INTEGER, data BLOB)`,
}

// writeProfiles appends the profiles of the transaction's batches.
func (t *tx) writeProfiles(conn driver.Conn) error {
	type rec struct {
		host string
		p    *wire.Profile
	}
	var rs []rec
	for _, p := range t.f.Prepared() {
		for i := range p.Batch.Profiles {
			rs = append(rs, rec{p.Batch.Host, &p.Batch.Profiles[i]})
		}
	}
	return t.appendRows(conn, "profiles", len(rs), func(i int, a *duck.Appender) error {
		p := rs[i].p
		return a.AppendRow(p.ID, p.AttemptID, rs[i].host, p.PID, keyValue(p.Process), p.StartMs, p.EndMs, p.IntervalMs,
			int32(p.Dumps), p.PausedUs, p.MaxPauseUs, p.Status, p.Error, int32(len(p.Stacks)), wire.MarshalProfile(nil, p))
	})
}

// RequestProfile stores a request.
func (s *Store) RequestProfile(ctx context.Context, r store.ProfileRequest) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	if err := s.unavailableLocked(); err != nil {
		return err
	}
	_, err := s.wconn.ExecContext(ctx, `INSERT INTO profile_requests (`+requestColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.AttemptID, r.Host, r.PID, keyValue(uint64(r.Process)), r.StartMs, r.Trigger, r.RequestedBy,
		int64(r.Requested), r.Baseline, r.BaselineAttempt, r.WindowMs, r.IntervalMs)
	if err != nil {
		return mapErr(fmt.Errorf("cannot store the request for profile %s: %w", r.ID, err))
	}
	return nil
}

const requestColumns = `id, attempt_id, host, pid, proc_key, start_ms, trigger, requested_by, requested_ms, baseline, baseline_attempt,
	window_ms, interval_ms`

func scanRequest(sc interface{ Scan(...any) error }) (store.ProfileRequest, error) {
	var r store.ProfileRequest
	var key, req int64
	var by, base, baseAtt sql.NullString
	err := sc.Scan(&r.ID, &r.AttemptID, &r.Host, &r.PID, &key, &r.StartMs, &r.Trigger, &by, &req, &base, &baseAtt, &r.WindowMs, &r.IntervalMs)
	r.Process, r.Requested, r.RequestedBy, r.Baseline, r.BaselineAttempt = store.Key(key), store.Time(req), by.String, base.String, baseAtt.String
	return r, err
}

const resultColumns = `id, attempt_id, host, pid, proc_key, start_ms, end_ms, interval_ms, dumps, paused_us, max_pause_us,
	status, error, stacks, octet_length(data)`

// scanResult reads resultColumns, and then extra.
func scanResult(sc interface{ Scan(...any) error }, extra ...any) (store.ProfileInfo, error) {
	var p wire.Profile
	var host string
	var key, stacks, size int64
	var errText sql.NullString
	err := sc.Scan(append([]any{&p.ID, &p.AttemptID, &host, &p.PID, &key, &p.StartMs, &p.EndMs, &p.IntervalMs, &p.Dumps, &p.PausedUs,
		&p.MaxPauseUs, &p.Status, &errText, &stacks, &size}, extra...)...)
	p.Process, p.Error = uint64(key), errText.String
	info := store.ProfileResult(host, &p, int(size))
	info.Stacks = int(stacks)
	return info, err
}

// Profiles lists an attempt's profiles.
func (s *Store) Profiles(ctx context.Context, attemptID string) ([]store.ProfileInfo, error) {
	reqs, err := s.requests(ctx, `WHERE attempt_id = ?`, attemptID)
	if err != nil {
		return nil, err
	}
	rows, err := s.handle().QueryContext(ctx, `SELECT `+resultColumns+` FROM profiles WHERE attempt_id = ?`, attemptID)
	if err != nil {
		return nil, fmt.Errorf("cannot read the profiles of %s: %w", attemptID, err)
	}
	defer rows.Close()
	var res []store.ProfileInfo
	for rows.Next() {
		p, err := scanResult(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot read the profiles of %s: %w", attemptID, err)
		}
		res = append(res, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the profiles of %s: %w", attemptID, err)
	}
	return store.MergeProfiles(reqs, res, s.opt.Clock.Now().UnixMilli()), nil
}

func (s *Store) requests(ctx context.Context, where string, args ...any) ([]store.ProfileRequest, error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT `+requestColumns+` FROM profile_requests `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read profile requests: %w", err)
	}
	defer rows.Close()
	var out []store.ProfileRequest
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot read profile requests: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ProfileData returns one of an attempt's profiles and its encoding.
func (s *Store) ProfileData(ctx context.Context, attemptID, id string) (*store.ProfileInfo, []byte, error) {
	reqs, err := s.requests(ctx, `WHERE attempt_id = ? AND id = ?`, attemptID, id)
	if err != nil {
		return nil, nil, err
	}
	var res *store.ProfileInfo
	var data []byte
	p, err := scanResult(s.handle().QueryRowContext(ctx, `SELECT `+resultColumns+`, data FROM profiles WHERE attempt_id = ? AND id = ? LIMIT 1`,
		attemptID, id), &data)
	switch {
	case err == nil:
		res = &p
	case !errors.Is(err, sql.ErrNoRows):
		return nil, nil, fmt.Errorf("cannot read profile %s: %w", id, err)
	}
	if res == nil && len(reqs) == 0 {
		return nil, nil, fmt.Errorf("profile %s of %s: %w", id, attemptID, store.ErrNotFound)
	}
	var req *store.ProfileRequest
	if len(reqs) > 0 {
		req = &reqs[0]
	}
	info := store.ProfileOf(req, res, s.opt.Clock.Now().UnixMilli()-store.ProfileExpiry)
	return &info, data, nil
}

// PendingProfiles lists the requests since sinceMs without a profile.
func (s *Store) PendingProfiles(ctx context.Context, sinceMs int64) ([]store.ProfileRequest, error) {
	return s.requests(ctx, `WHERE requested_ms >= ? AND id NOT IN (SELECT id FROM profiles) ORDER BY requested_ms, id`, sinceMs)
}
