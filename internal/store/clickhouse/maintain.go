package clickhouse

import (
	"context"
	"fmt"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
)

// rollupPeriod is a rollup's point: one a minute.
const rollupPeriod = 60_000

// rollup makes the per-minute rollups of a day's raw chunks (before its
// partition is dropped): each series' points of the day downsampled,
// counters their last value in each minute, gauges their peak. A part of
// the keys at a time (by their top 4 bits), so that a day is read in
// sixteen reads per kind.
func (s *Store) rollup(ctx context.Context, day uint16) error {
	date := fmt.Sprintf("toDate(%d)", day)
	for kind := uint8(0); kind <= store.KindAttemptExt; kind++ {
		for part := uint64(0); part < 16; part++ {
			rows, err := s.query(ctx, fmt.Sprintf(`SELECT DISTINCT job_key, key, t_min, start_ms, data FROM %s ORDER BY key, t_min`,
				s.union("job_key, key, t_min, start_ms, data", fmt.Sprintf("day = %s AND kind = %d AND level < 2 AND intDiv(key, %d) = %d",
					date, kind, uint64(1)<<60, part), "series_chunks", "chunks")))
			if err != nil {
				return fmt.Errorf("cannot read chunks to roll up: %w", err)
			}
			var b Block
			var cur uint64
			var job uint64
			var start int64
			var group [][]byte
			cols := schemaOf(kind)
			emit := func() error {
				if len(group) == 0 {
					return nil
				}
				p, err := store.Decode(group, cols)
				if err != nil {
					return fmt.Errorf("cannot decode the chunks of series %016x: %w", cur, err)
				}
				group = group[:0]
				if len(p.Times) == 0 {
					return nil
				}
				c := store.Downsample(p, cols, rollupPeriod)
				data := chunk.EncodeLevel(nil, c, chunk.Fast)
				b.Row()
				b.Date(c.Times[0])
				b.UInt8(kind)
				b.UInt64(job)
				b.UInt64(cur)
				b.Int64(c.Times[0])
				b.Int64(c.Times[len(c.Times)-1])
				b.UInt32(uint32(len(c.Times)))
				b.UInt8(2)
				b.Int64(start)
				b.Blob(data)
				return nil
			}
			for rows.Next() {
				j, k, _, st, data := rows.UInt64(), rows.UInt64(), rows.Int64(), rows.Int64(), rows.Bytes()
				if k != cur || len(group) == 0 {
					if err := emit(); err != nil {
						return err
					}
					cur, job, start = k, j, 0
				}
				start = max(start, st)
				group = append(group, data)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("cannot read chunks to roll up: %w", err)
			}
			if err := emit(); err != nil {
				return err
			}
			if err := s.insert(ctx, "rollups", chunkCols, &b); err != nil {
				return fmt.Errorf("cannot write the rollups of day %s: %w", date, err)
			}
		}
	}
	return nil
}
