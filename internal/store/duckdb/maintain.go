package duckdb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
)

// rollupPeriod is the resolution of the rollups kept after raw samples expire.
const rollupPeriod = 60_000

// Maintain merges fresh chunks older than CompactAge (or all of them when
// there are more than CompactRows) into compressed chunks and rollups, then
// drops what is past its retention, then checkpoints.
func (s *Store) Maintain(ctx context.Context, now time.Time) error {
	var fresh, oldest int64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*), coalesce(min(t_min), 0) FROM `+freshName(s.current())).Scan(&fresh, &oldest); err != nil {
		return err
	}
	if fresh >= s.opt.CompactRows || (fresh > 0 && now.UnixMilli()-oldest >= s.opt.CompactAge.Milliseconds()) {
		if err := s.Compact(ctx); err != nil {
			return err
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	if s.opt.Retention > 0 {
		// Raw samples past their retention become per-minute rollups.
		cut := now.Add(-s.opt.Retention).UnixMilli()
		s.wmu.Unlock()
		err := s.rewrite(ctx, "series_chunks", "level = 1", cut, rollup, -1)
		s.wmu.Lock()
		if err != nil {
			return err
		}
		if _, err := s.wconn.ExecContext(ctx, `DELETE FROM samples_ext WHERE ts < ?`, cut); err != nil {
			return fmt.Errorf("retention: %w", err)
		}
	}
	if s.opt.RollupRetention > 0 {
		cut := now.Add(-s.opt.RollupRetention).UnixMilli()
		for _, q := range []string{`DELETE FROM series_chunks WHERE t_max < ?`, `DELETE FROM events WHERE ts < ?`} {
			if _, err := s.wconn.ExecContext(ctx, q, cut); err != nil {
				return fmt.Errorf("retention: %w", err)
			}
		}
	}
	_, err := s.wconn.ExecContext(ctx, "CHECKPOINT")
	return err
}

func (s *Store) current() int {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.fresh
}

// Compact switches ingest to the other fresh table, then merges every chunk
// of the one it left into series_chunks and empties it by dropping it.
func (s *Store) Compact(ctx context.Context) error {
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return errClosed
	}
	old := s.fresh
	next := 1 - old
	// The other table is empty (its last compaction dropped it) unless a
	// compaction failed half-way: then merge it first.
	var leftover int64
	if err := s.wconn.QueryRowContext(ctx, `SELECT count(*) FROM `+freshName(next)).Scan(&leftover); err != nil {
		s.wmu.Unlock()
		return err
	}
	s.wmu.Unlock()
	if leftover > 0 {
		if err := s.rewrite(ctx, freshName(next), "true", 1<<62, merge, next); err != nil {
			return err
		}
	}
	s.wmu.Lock()
	if _, err := s.wconn.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'fresh'`, fmt.Sprint(next)); err != nil {
		s.wmu.Unlock()
		return err
	}
	s.fresh = next
	s.wmu.Unlock()
	return s.rewrite(ctx, freshName(old), "true", 1<<62, merge, old)
}

// rollup turns a series' raw samples into one point per minute.
func rollup(p *store.Points, cols []store.StoredColumn, c *mergedChunk) []mergedChunk {
	r := store.Downsample(p, cols, rollupPeriod)
	c.level, c.tmin, c.tmax, c.n, c.data = levelRollup, r.Times[0], r.Times[len(r.Times)-1], int32(len(r.Times)), chunk.Encode(nil, r, true)
	return []mergedChunk{*c}
}

// merge turns a series' fresh chunks into one compressed chunk.
func merge(p *store.Points, cols []store.StoredColumn, c *mergedChunk) []mergedChunk {
	c.level, c.tmin, c.tmax, c.n = levelMerged, p.Times[0], p.Times[len(p.Times)-1], int32(len(p.Times))
	c.data = chunk.Encode(nil, store.ToChunk(p, cols), true)
	return []mergedChunk{*c}
}

type mergedChunk struct {
	kind, level int8
	key, job    int64
	tmin, tmax  int64
	n           int32
	data        []byte
}

// rewrite replaces, series by series, the chunks of table (of the given
// levels) that end before cutoff with what produce makes of their points,
// written to series_chunks, in one transaction.
func (s *Store) rewrite(ctx context.Context, table, levels string, cutoff int64,
	produce func(p *store.Points, cols []store.StoredColumn, c *mergedChunk) []mergedChunk, drop int) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	rows, err := s.wconn.QueryContext(ctx, `SELECT kind, key, job_key, data FROM `+table+`
		WHERE `+levels+` AND t_max < ? ORDER BY kind, key, t_min`, cutoff)
	if err != nil {
		return fmt.Errorf("compaction: %w", err)
	}
	var out []mergedChunk
	var curKind int8 = -1
	var curKey, curJob int64
	var group [][]byte
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		cols := schemaOf(int(curKind))
		p, err := store.Decode(group, cols)
		group = group[:0]
		if err != nil {
			s.opt.Log.Error("compaction: dropping a damaged series", "key", curKey, "err", err)
			return nil
		}
		if len(p.Times) == 0 {
			return nil
		}
		out = append(out, produce(p, cols, &mergedChunk{kind: curKind, key: curKey, job: curJob})...)
		return nil
	}
	for rows.Next() {
		var kind int8
		var key, job int64
		var data []byte
		if err := rows.Scan(&kind, &key, &job, &data); err != nil {
			rows.Close()
			return err
		}
		if kind != curKind || key != curKey {
			if err := flush(); err != nil {
				rows.Close()
				return err
			}
			curKind, curKey = kind, key
		}
		curJob = job
		group = append(group, data)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	if len(out) == 0 {
		return nil
	}
	return s.wconn.Raw(func(dc any) error {
		conn := dc.(driver.Conn)
		ex := conn.(driver.ExecerContext)
		if _, err := ex.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
			return err
		}
		fail := func(err error) error {
			ex.ExecContext(ctx, "ROLLBACK", nil)
			return fmt.Errorf("compaction: %w", err)
		}
		del := fmt.Sprintf(`DELETE FROM %s WHERE %s AND t_max < %d`, table, levels, cutoff)
		if drop >= 0 {
			// A fresh table merged whole: drop and make it again.
			del = `DROP TABLE ` + freshName(drop) + `; ` + freshTable(drop) + `; ` + freshIndex(drop)
		}
		for _, q := range strings.Split(del, "; ") {
			if _, err := ex.ExecContext(ctx, q, nil); err != nil {
				return fail(err)
			}
		}
		app, err := newAppender(conn, "series_chunks")
		if err != nil {
			return fail(err)
		}
		for _, c := range out {
			if err := app.AppendRow(c.kind, c.key, c.job, c.tmin, c.tmax, c.n, c.level, c.data); err != nil {
				app.Close()
				return fail(err)
			}
		}
		if err := app.Close(); err != nil {
			return fail(err)
		}
		_, err = ex.ExecContext(ctx, "COMMIT", nil)
		return err
	})
}
