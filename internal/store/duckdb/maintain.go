package duckdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
)

// rollupPeriod is the resolution of the rollups kept after raw samples expire.
const rollupPeriod = 60_000

// mergeLevel is how compaction encodes the chunks it writes: format 3,
// packed (docs/storage.md has the figures of each level and format).
// Stores before 2026-12-07 wrote format 2 with zstd's Fast level
// (legacyMergeLevel): those chunks are read as they are, and merged into
// format 3 only if a compaction or a rollup rewrites them.
const (
	mergeLevel       = chunk.Packed
	legacyMergeLevel = chunk.Fast
)

// Maintain merges the fresh chunks once there are CompactRows of them or
// the oldest is CompactAge old, turns raw samples past Retention into
// per-minute rollups, drops what is past RollupRetention, and checkpoints.
// Ingest goes on meanwhile: merging reads a fresh table ingest no longer
// writes, in a transaction of its own; only the switch of tables and the
// checkpoint take the writer's lock.
func (s *Store) Maintain(ctx context.Context, now time.Time) error {
	s.mmu.Lock()
	defer s.mmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	return mapErr(s.failed(s.maintain(ctx, now)))
}

func (s *Store) maintain(ctx context.Context, now time.Time) error {
	var fresh, oldest int64
	if err := s.handle().QueryRowContext(ctx, `SELECT count(*), coalesce(min(t_min), 0) FROM `+freshName(s.current())).Scan(&fresh, &oldest); err != nil {
		return fmt.Errorf("cannot count the fresh chunks: %w", err)
	}
	changed := false
	if fresh >= s.opt.CompactRows || (fresh > 0 && now.UnixMilli()-oldest >= s.opt.CompactAge.Milliseconds()) {
		if err := s.compact(ctx); err != nil {
			return fmt.Errorf("cannot compact: %w", err)
		}
		changed = true
	}
	deleted := func(res sql.Result, err error) error {
		if err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			changed = true
		}
		return nil
	}
	if s.opt.Retention > 0 {
		// Raw samples past their retention become per-minute rollups.
		cut := now.Add(-s.opt.Retention).UnixMilli()
		// Attempts' residuals that need processes' chunks past the cut
		// are made whole first (residual.go).
		made, err := s.absolutize(ctx, cut)
		if err != nil {
			return err
		}
		changed = changed || made > 0
		n, err := s.rewrite(ctx, "series_chunks", fmt.Sprintf("level = %d AND t_max < %d", levelMerged, cut), false, rollup)
		if err != nil {
			return fmt.Errorf("cannot make the rollups: %w", err)
		}
		changed = changed || n > 0
	}
	if s.opt.RollupRetention > 0 {
		cut := now.Add(-s.opt.RollupRetention).UnixMilli()
		made, err := s.absolutize(ctx, cut)
		if err != nil {
			return err
		}
		changed = changed || made > 0
		for _, q := range []string{`DELETE FROM series_chunks WHERE t_max < ?`, `DELETE FROM events WHERE ts < ?`,
			`DELETE FROM profiles WHERE end_ms < ?`, `DELETE FROM profile_requests WHERE requested_ms < ?`} {
			if err := deleted(s.handle().ExecContext(ctx, q, cut)); err != nil {
				return err
			}
		}
	}
	// Checkpoint only when compaction or retention changed the tables, or
	// the WAL grew large: fresh chunks then live in the WAL only until the
	// compaction that drops their table, and never take blocks in the file
	// (a checkpoint every 30 s wrote them there, rewrote the open row
	// groups again and again, and left the blocks free once the table was
	// dropped).
	// A checkpoint that failed is owed until one succeeds.
	if !changed && !s.ckptOwed && s.walBytes() < walCheckpointBytes {
		return nil
	}
	if err := s.checkpointWaiting(ctx); err != nil {
		s.ckptOwed = true
		return fmt.Errorf("cannot checkpoint after maintenance: %w", err)
	}
	s.ckptOwed = false
	return nil
}

// checkpointPatience is how long checkpointWaiting waits, in all, for the
// transactions that keep a checkpoint out.
const checkpointPatience = 5 * time.Second

// checkpointWaiting is Checkpoint, tried again (after 20 ms, 40 ms, ...,
// checkpointPatience in all) while DuckDB refuses it for another
// transaction's updates. ckmu keeps out the updates being made; but a
// transaction that updated rows keeps DuckDB's checkpoint lock after its
// commit for as long as a transaction that began before it is open (its
// versions are kept for that one): a summary write or an analysis stored
// beside a long read (an analysis', the API's). Ingest goes on between
// the tries.
func (s *Store) checkpointWaiting(ctx context.Context) error {
	wait, waited := 20*time.Millisecond, time.Duration(0)
	for {
		err := s.Checkpoint(ctx)
		if err == nil || !isRefused(err) || waited+wait > checkpointPatience {
			return err
		}
		if s.refused != nil {
			s.refused()
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		waited += wait
		wait *= 2
	}
}

// isRefused reports whether err is DuckDB refusing a checkpoint for
// other transactions ("Cannot CHECKPOINT: there are other write
// transactions active").
func isRefused(err error) bool {
	var de *duck.Error
	return errors.As(err, &de) && de.Type == duck.ErrorTypeTransaction && strings.Contains(de.Msg, "CHECKPOINT")
}

// walCheckpointBytes is the WAL size past which Maintain checkpoints even
// when nothing was compacted.
const walCheckpointBytes = 256 << 20

func (s *Store) walBytes() int64 {
	if s.path == "" {
		return 0
	}
	fi, err := os.Stat(s.path + ".wal")
	if err != nil {
		return 0
	}
	return fi.Size()
}

// writable is nil unless the store is closed or its database is being
// reopened.
func (s *Store) writable() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	return s.unavailableLocked()
}

func (s *Store) current() int {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.fresh
}

// Compact merges every fresh chunk into series_chunks now.
func (s *Store) Compact(ctx context.Context) error {
	s.mmu.Lock()
	defer s.mmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	return mapErr(s.failed(s.compact(ctx)))
}

// compact switches ingest to the other fresh table, then merges every chunk
// of the one it left into series_chunks and empties it by dropping it.
func (s *Store) compact(ctx context.Context) error {
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return errClosed
	}
	if err := s.unavailableLocked(); err != nil {
		s.wmu.Unlock()
		return err
	}
	old := s.fresh
	next := 1 - old
	s.wmu.Unlock()
	// The other table is empty (its last compaction dropped it) unless a
	// compaction failed half-way: then merge it first.
	var leftover int64
	if err := s.handle().QueryRowContext(ctx, `SELECT count(*) FROM `+freshName(next)).Scan(&leftover); err != nil {
		return fmt.Errorf("cannot count the chunks of %s: %w", freshName(next), err)
	}
	if leftover > 0 {
		if _, err := s.rewrite(ctx, freshName(next), "true", true, merge); err != nil {
			return fmt.Errorf("cannot merge what a compaction left in %s: %w", freshName(next), err)
		}
	}
	s.wmu.Lock()
	if err := s.unavailableLocked(); err != nil {
		s.wmu.Unlock()
		return err
	}
	if _, err := s.wconn.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'fresh'`, fmt.Sprint(next)); err != nil {
		s.failedLocked(err)
		s.wmu.Unlock()
		return fmt.Errorf("cannot switch ingest to %s: %w", freshName(next), err)
	}
	s.fresh = next
	s.wmu.Unlock()
	if _, err := s.rewrite(ctx, freshName(old), "true", true, merge); err != nil {
		return fmt.Errorf("cannot merge %s: %w", freshName(old), err)
	}
	return nil
}

// rollup turns a series' raw samples into one point per minute.
func rollup(p *store.Points, cols []store.StoredColumn) (int8, *chunk.Chunk) {
	return levelRollup, store.Downsample(p, cols, rollupPeriod)
}

// merge turns a series' fresh chunks into compressed ones.
func merge(p *store.Points, cols []store.StoredColumn) (int8, *chunk.Chunk) {
	return levelMerged, store.ToChunk(p, cols)
}

// maxInlineChunk bounds the chunks compaction writes. DuckDB keeps a BLOB
// shorter than 4 KiB inside its column segment, and a longer one in an
// overflow block of the segment; a segment of mostly short chunks with a
// few long ones then takes a block and most of an overflow block it hardly
// uses: a third more blocks than the chunks' bytes. A longer chunk is cut
// in time into chunks below this size (each decodes alone).
const maxInlineChunk = 4000

// encodeChunks encodes c at lvl (with w) and calls emit with each chunk it
// makes of it: one, or more if it would be longer than maxInlineChunk or
// hold more than chunk.MaxDenseSamples.
// perSample is the bytes per sample of the chunks encoded before (0:
// unknown), updated here: a series that would be too long is cut before it
// is encoded whole, not after.
func encodeChunks(w *chunk.Writer, c *chunk.Chunk, lvl chunk.Level, buf []byte, perSample *float64, emit func(c *chunk.Chunk, data []byte) error) ([]byte, error) {
	n := len(c.Times)
	if n > chunk.MaxDenseSamples {
		return encodeParts(w, c, lvl, (n+chunk.MaxDenseSamples-1)/chunk.MaxDenseSamples, buf, perSample, emit)
	}
	target := maxInlineChunk * 3 / 4
	if guess := float64(n) * *perSample; n >= 2 && guess > 1.5*maxInlineChunk {
		return encodeParts(w, c, lvl, min(n, int(guess)/target+1), buf, perSample, emit)
	}
	buf = w.Encode(buf[:0], c, lvl)
	if n > 0 {
		*perSample = 0.8**perSample + 0.2*float64(len(buf))/float64(n)
	}
	if len(buf) < maxInlineChunk || n < 2 {
		return buf, emit(c, buf)
	}
	return encodeParts(w, c, lvl, min(n, (len(buf)+target-1)/target), buf, perSample, emit)
}

// encodeParts encodes c cut in parts of as many samples.
func encodeParts(w *chunk.Writer, c *chunk.Chunk, lvl chunk.Level, parts int, buf []byte, perSample *float64, emit func(c *chunk.Chunk, data []byte) error) ([]byte, error) {
	n := len(c.Times)
	for k := 0; k < parts; k++ {
		var err error
		buf, err = encodeChunks(w, c.Slice(k*n/parts, (k+1)*n/parts), lvl, buf, perSample, emit)
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// rewrite replaces, series by series, the chunks of table that where
// selects with what produce makes of their points, written to
// series_chunks, in one transaction of its own connection: drop empties a
// whole fresh table by dropping it (and making it again), else the chunks
// are deleted. The chunks are read on another connection as the merged ones
// are appended, so that memory holds one series at a time. It returns how
// many series it rewrote.
func (s *Store) rewrite(ctx context.Context, table, where string, drop bool,
	produce func(p *store.Points, cols []store.StoredColumn) (int8, *chunk.Chunk)) (int, error) {
	wc, err := s.handle().Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot open a connection: %w", err)
	}
	defer wc.Close()
	var series int
	err = wc.Raw(func(dc any) error {
		conn := dc.(driver.Conn)
		ex := conn.(driver.ExecerContext)
		if _, err := ex.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
			return fmt.Errorf("cannot begin: %w", err)
		}
		fail := func(what string, err error) error {
			ex.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
			return fmt.Errorf("cannot %s: %w", what, err)
		}
		app, err := newAppender(conn, "series_chunks")
		if err != nil {
			return fail("append to series_chunks", err)
		}
		perSample := map[int]float64{} // by kind and number of columns
		var w chunk.Writer
		lvl := mergeLevel
		if s.opt.legacyChunks {
			lvl = legacyMergeLevel
		}
		// A compaction of fresh chunks writes attempts as residuals of
		// their processes (residual.go).
		var res *residuals
		if drop && lvl == chunk.Packed && !s.opt.PlainAttempts {
			res = &residuals{kept: &s.wholes}
		}
		// A group's processes' chunks are held until its attempt is
		// written (residuals.hold): those of the processes its residuals
		// need name it. held: the group they are of.
		var held [2]int64
		release := func() error {
			if res == nil || held[0] == 0 {
				return nil
			}
			defer func() { held = [2]int64{} }()
			return res.release(held, func(kind int8, key, job, tMin, tMax int64, n int32, level int8, data []byte, resAtt, resJob any) error {
				return app.AppendRow(kind, key, job, tMin, tMax, n, level, data, resAtt, resJob)
			})
		}
		n, err := s.scanSeries(ctx, table, where, res != nil, func(kind int8, key, job int64, grp [2]int64, p *store.Points, buf []byte) ([]byte, error) {
			var wrap func(c *chunk.Chunk, data []byte) []byte
			// The attempt and job whose reads take the chunks (schema.go):
			// an attempt's own; a member process's whose samples the
			// attempt's residuals subtract, its attempt's key and job key
			// (release).
			var resAtt, resJob any
			hold := false
			if held[0] != 0 && !(kind == store.KindProcess && grp[0] == held[0]) && !(kind == store.KindAttempt && key == held[0]) {
				if err := release(); err != nil { // (a group whose attempt was not written)
					return buf, err
				}
			}
			switch {
			case kind == store.KindAttempt:
				resAtt = key
				if job != 0 {
					resJob = job
				}
				if res != nil {
					wrap, _ = res.attempt(uint64(key), p)
				}
			case res == nil:
			case kind == store.KindProcess && grp[0] != 0:
				res.process(grp[0], uint64(key), p)
				hold, held = true, grp
			}
			level, c := produce(p, schemaOf(int(kind)))
			if kind == store.KindProcess && lvl == chunk.Packed {
				orderColumns(c) // (the columns attempts' sums read first: resolve)
			}
			shape := int(kind)<<8 | len(c.Columns)
			ps := perSample[shape]
			buf, err := encodeChunks(&w, c, lvl, buf, &ps, func(c *chunk.Chunk, data []byte) error {
				if hold {
					res.hold(key, job, c, level, data)
					return nil
				}
				if wrap != nil {
					data = wrap(c, data)
				}
				return app.AppendRow(kind, key, job, c.Times[0], c.Times[len(c.Times)-1], int32(len(c.Times)), level, data,
					resAtt, resJob)
			})
			perSample[shape] = ps
			if err == nil && kind == store.KindAttempt {
				err = release()
			}
			return buf, err
		})
		if err == nil {
			err = release()
		}
		if err != nil {
			app.Close()
			return fail("rewrite the series of "+table, err)
		}
		if err := app.Close(); err != nil {
			return fail("append the rewritten series to series_chunks", err)
		}
		series = n
		if n == 0 && !drop {
			if _, err := ex.ExecContext(ctx, "ROLLBACK", nil); err != nil {
				return fmt.Errorf("cannot roll back: %w", err)
			}
			return nil
		}
		stmts := []string{`DELETE FROM ` + table + ` WHERE ` + where}
		if drop {
			stmts = []string{`DROP TABLE ` + table, freshTable(int(table[len(table)-1] - '0'))}
		}
		for _, q := range stmts {
			if _, err := ex.ExecContext(ctx, q, nil); err != nil {
				return fail("empty "+table, err)
			}
		}
		if _, err = ex.ExecContext(ctx, "COMMIT", nil); err != nil {
			return fail("commit", err)
		}
		return nil
	})
	return series, err
}

// scanSeries reads the chunks of table that where selects, in series and
// time order, and calls fn with each series' points (an attempt's made
// whole where they are residuals: resolve); it returns how many series
// there were. groups: in memberGroups' order, each with its group (the
// attempt's key and job key).
func (s *Store) scanSeries(ctx context.Context, table, where string, groups bool,
	fn func(kind int8, key, job int64, grp [2]int64, p *store.Points, buf []byte) ([]byte, error)) (int, error) {
	q := `SELECT kind, key, job_key, data, t_min, t_max, 0, 0 FROM ` + table + `
		WHERE ` + where + ` ORDER BY kind, key, t_min`
	if groups {
		from, err := s.membersFrom(ctx, table)
		if err != nil {
			return 0, err
		}
		q = memberGroups(table, where, from)
	}
	rows, err := s.handle().QueryContext(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("cannot read the chunks: %w", err)
	}
	defer rows.Close()
	var curKind int8 = -1
	var curKey, curJob int64
	var curGrp [2]int64
	var group [][]byte
	var spans [][2]int64
	var blobs, buf []byte // the series' chunks, copied from the rows
	var dec store.Decoder
	n := 0
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		defer func() { group, spans, blobs = group[:0], spans[:0], blobs[:0] }()
		if err := s.resolveGroup(ctx, group, spans); err != nil {
			return err
		}
		p, err := dec.Decode(group, schemaOf(int(curKind)))
		if err != nil {
			s.opt.Log.Error("compaction: dropping a damaged series", "key", curKey, "err", err)
			return nil
		}
		if len(p.Times) == 0 {
			return nil
		}
		n++
		buf, err = fn(curKind, curKey, curJob, curGrp, p, buf)
		return err
	}
	for rows.Next() {
		var kind int8
		var key, job, tMin, tMax int64
		var grp [2]int64
		var data sql.RawBytes // (valid until the next row)
		if err := rows.Scan(&kind, &key, &job, &data, &tMin, &tMax, &grp[0], &grp[1]); err != nil {
			return n, fmt.Errorf("cannot read the chunks: %w", err)
		}
		if kind != curKind || key != curKey {
			if err := flush(); err != nil {
				return n, err
			}
			curKind, curKey, curJob, curGrp = kind, key, 0, grp
		}
		if job != 0 {
			curJob = job // (a process's start may be known from some of its chunks only)
		}
		at := len(blobs)
		blobs = append(blobs, data...)
		group = append(group, blobs[at:len(blobs):len(blobs)])
		spans = append(spans, [2]int64{tMin, tMax})
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("cannot read the chunks: %w", err)
	}
	return n, flush()
}

// resolveGroup makes whole, in place, the residual chunks of one series'
// chunks (with their spans). It fails rather than drop what it cannot make
// whole.
func (s *Store) resolveGroup(ctx context.Context, group [][]byte, spans [][2]int64) error {
	if !slices.ContainsFunc(group, chunk.IsResidual) {
		return nil
	}
	rows := make([]chunkRow, len(group))
	for i := range group {
		rows[i] = chunkRow{tMin: spans[i][0], tMax: spans[i][1], level: levelMerged, data: group[i]}
	}
	if err := s.resolve(ctx, nil, 0, 0, allAttemptColumns, rows); err != nil {
		return err
	}
	var w chunk.Writer
	for i := range rows {
		if rows[i].whole != nil {
			group[i] = w.Encode(nil, rows[i].whole, chunk.None)
		}
	}
	return nil
}

// Checkpoint writes the WAL into the database file.
func (s *Store) Checkpoint(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return errClosed
	}
	if err := s.unavailableLocked(); err != nil {
		return err
	}
	s.ckmu.Lock()
	defer s.ckmu.Unlock()
	if _, err := s.wconn.ExecContext(ctx, "CHECKPOINT"); err != nil {
		s.failedLocked(err)
		return mapErr(fmt.Errorf("cannot checkpoint: %w", err))
	}
	return nil
}
