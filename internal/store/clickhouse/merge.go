package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/chunk"
)

// Merging chunks, as the embedded store compacts its fresh ones: a commit
// writes a chunk per series per batch (level 0) into series_chunks, in the
// partition of its day and of its slot (slotMs of the writer's clock).
// Once a slot has ended and slotGrace has passed, Maintain reads its
// chunks series by series, writes each series' samples of the slot as one
// chunk a day (level 1, zstd, in the partition of the day alone), then
// drops the slot's partitions (ALTER TABLE ... DROP PARTITION: at once on
// 18.16, where a DELETE is a mutation rewriting the parts).
//
// Reads are the same before, during and after: a series' chunks of the
// slot read beside its merged chunk give each sample twice, and
// store.Decode keeps a time once (the same values). A Maintain that dies
// half way leaves merged chunks beside the slot's, merged again (the same
// rows, kept once) by the next; two replicas merging a slot at once write
// the same rows. The slot's partitions are dropped only if it still holds
// the rows the merge read; in a cluster, only while no replica of the
// table has inserts still to fetch (merge what one replica has and drop
// what the other has too would lose it). Batches arriving late go to the
// slot of their arrival: a merged window takes them as any other.
const (
	slotMs    = 10 * 60 * 1000
	slotGrace = 10 * 60 * 1000
	// mergedSamples bounds a merged chunk (a series whose slot brings
	// hours of samples, an agent's spool, is cut): a read of a window
	// decodes at most this much before it.
	mergedSamples = 3600
	// mergeReadBytes is about how much of a slot's chunks one read takes
	// (the answer is held whole): a slot is read in as many parts of its
	// series' keys.
	mergeReadBytes = 64 << 20
	// mergeLevel is how the merged chunks are encoded: format 3, packed,
	// as the embedded store's compaction writes them (docs/storage.md).
	// Stores before 2026-12-07 wrote format 2 without zstd of its own
	// (legacyMergeLevel; the server's zstd over the parts): those chunks
	// are read as they are.
	mergeLevel       = chunk.Packed
	legacyMergeLevel = chunk.None
)

// slotOf is the slot of a time (unix ms) of the writer's clock; 0 is no
// slot's (the partition of merged chunks).
func slotOf(ms int64) uint32 { return uint32(1 + max(ms, 0)/slotMs) }

// union is a subquery of columns of the rows of the tables that where
// selects, one after the other.
func (s *Store) union(columns, where string, names ...string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = "SELECT " + columns + " FROM " + s.read(n) + " WHERE " + where
	}
	return "(" + strings.Join(parts, " UNION ALL ") + ")"
}

// seriesRow writes a row of series_chunks.
func seriesRow(b *Block, slot uint32, kind uint8, job, key uint64, tMin, tMax int64, n int, level uint8, start int64, data []byte) {
	b.Row()
	b.Date(tMin)
	b.UInt32(slot)
	b.UInt8(kind)
	b.UInt64(job)
	b.UInt64(key)
	b.Int64(tMin)
	b.Int64(tMax)
	b.UInt32(uint32(n))
	b.UInt8(level)
	b.Int64(start)
	b.Blob(data)
}

// mergeSlots merges every slot that ended slotGrace ago, oldest first. It
// returns how many it merged.
func (s *Store) mergeSlots(ctx context.Context) (int, error) {
	cut := slotOf(s.opt.Clock.Now().UnixMilli() - slotGrace)
	rows, err := s.query(ctx, fmt.Sprintf("SELECT DISTINCT slot, toUInt16(day) FROM %s WHERE level = 0 AND slot < %d ORDER BY slot",
		s.read("series_chunks"), cut))
	if err != nil {
		return 0, fmt.Errorf("cannot list the slots to merge: %w", err)
	}
	var slots []uint32
	days := map[uint32][]uint16{}
	for rows.Next() {
		slot, day := rows.UInt32(), rows.UInt16()
		if len(days[slot]) == 0 {
			slots = append(slots, slot)
		}
		days[slot] = append(days[slot], day)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("cannot list the slots to merge: %w", err)
	}
	merged := 0
	for _, slot := range slots {
		ok, err := s.mergeSlot(ctx, slot, days[slot])
		if err != nil {
			return merged, fmt.Errorf("cannot merge slot %d: %w", slot, err)
		}
		if !ok {
			break // (the next Maintain tries again, from this one)
		}
		merged++
	}
	return merged, nil
}

// mergeSlot merges a slot's chunks and drops its partitions (of days):
// false, with nothing dropped, if the slot changed meanwhile or a replica
// is behind.
func (s *Store) mergeSlot(ctx context.Context, slot uint32, days []uint16) (bool, error) {
	if ok, err := s.replicasCaughtUp(ctx); err != nil || !ok {
		return false, err
	}
	// (count() reads two small columns; the chunks' length would read
	// them all.)
	count := func() (uint64, error) {
		rows, err := s.query(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE level = 0 AND slot = %d",
			s.read("series_chunks"), slot))
		if err != nil {
			return 0, fmt.Errorf("cannot count the slot's chunks: %w", err)
		}
		n := rows.UInt64()
		return n, rows.Err()
	}
	before, err := count()
	if err != nil {
		return false, err
	}
	// Parts of the keys (a power of two of them, by their top bits), of
	// about mergeReadBytes of chunks (some 150 B each).
	shift := 0
	for shift < 8 && before*150>>shift > mergeReadBytes {
		shift++
	}
	m := merger{lvl: mergeLevel}
	if s.opt.legacyChunks {
		m.lvl = legacyMergeLevel
	}
	for kind := uint8(0); kind <= store.KindAttemptExt; kind++ {
		for part := uint64(0); part < 1<<shift; part++ {
			where := fmt.Sprintf("level = 0 AND slot = %d AND kind = %d", slot, kind)
			if shift > 0 {
				where += fmt.Sprintf(" AND bitShiftRight(key, %d) = %d", 64-shift, part)
			}
			if err := m.read(ctx, s, slot, kind, where); err != nil {
				return false, err
			}
			if err := s.insert(ctx, "series_chunks", seriesCols, &m.b); err != nil {
				return false, fmt.Errorf("cannot write the merged chunks: %w", err)
			}
			m.b.Reset()
		}
	}
	after, err := count()
	if err != nil {
		return false, err
	}
	if after != before {
		s.opt.Log.Info("ClickHouse: a slot's chunks changed while they were merged; merged again later", "slot", slot,
			"rows", before, "now", after)
		return false, nil
	}
	for _, d := range days {
		p := fmt.Sprintf("(%s, %d)", Quote(dayString(d)), slot)
		if err := s.c.Exec(ctx, "ALTER TABLE "+s.schema.Local("series_chunks")+s.schema.On()+" DROP PARTITION "+p, nil); err != nil {
			return false, fmt.Errorf("cannot drop the merged partition %s: %w", p, err)
		}
	}
	return true, nil
}

// replicasCaughtUp is whether no replica of series_chunks has inserts
// still to fetch from another (true on one server).
func (s *Store) replicasCaughtUp(ctx context.Context) (bool, error) {
	if s.schema.Cluster == "" {
		return true, nil
	}
	hosts, err := s.clusterHosts(ctx)
	if err != nil {
		return false, fmt.Errorf("cannot list the cluster's servers: %w", err)
	}
	var parts []string
	for _, h := range hosts {
		parts = append(parts, "SELECT inserts_in_queue, is_readonly, is_session_expired FROM remote("+Quote(h)+
			", system.replicas) WHERE database = "+Quote(s.c.Database())+" AND table = "+Quote(s.schema.localName("series_chunks")))
	}
	rows, err := s.query(ctx, "SELECT count(), sum(inserts_in_queue + is_readonly + is_session_expired) FROM ("+
		strings.Join(parts, " UNION ALL ")+")")
	if err != nil {
		return false, fmt.Errorf("cannot read the replicas' queues: %w", err)
	}
	n, behind := rows.UInt64(), rows.UInt64()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("cannot read the replicas' queues: %w", err)
	}
	return n == uint64(len(hosts)) && behind == 0, nil
}

// merger makes the merged chunks of the series of a read.
type merger struct {
	b   Block
	dec store.Decoder
	w   chunk.Writer
	buf []byte
	lvl chunk.Level // mergeLevel
}

// read reads the chunks where selects (of a slot and kind), series by
// series (a series' chunks under one job key), and adds their merged
// chunks to m.b.
func (m *merger) read(ctx context.Context, s *Store, slot uint32, kind uint8, where string) error {
	rows, err := s.query(ctx, "SELECT job_key, key, t_min, start_ms, data FROM "+s.read("series_chunks")+
		" WHERE "+where+" ORDER BY job_key, key, t_min")
	if err != nil {
		return fmt.Errorf("cannot read the chunks to merge: %w", err)
	}
	cols := schemaOf(kind)
	var job, key uint64
	var start int64
	var group [][]byte
	emit := func() error {
		if len(group) == 0 {
			return nil
		}
		p, err := m.dec.Decode(group, cols)
		group = group[:0]
		if err != nil {
			return fmt.Errorf("cannot decode the chunks of series %016x: %w", key, err)
		}
		m.add(slot, kind, job, key, start, p, cols)
		return nil
	}
	for rows.Next() {
		j, k, _, st, data := rows.UInt64(), rows.UInt64(), rows.Int64(), rows.Int64(), rows.Bytes()
		if k != key || j != job || len(group) == 0 {
			if err := emit(); err != nil {
				return err
			}
			job, key, start = j, k, 0
		}
		start = max(start, st)
		group = append(group, data)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read the chunks to merge: %w", err)
	}
	return emit()
}

// add writes a series' points as merged chunks: one a day, of at most
// mergedSamples.
func (m *merger) add(slot uint32, kind uint8, job, key uint64, start int64, p *store.Points, cols []store.StoredColumn) {
	c := store.ToChunk(p, cols)
	for i := 0; i < len(c.Times); {
		j := i + 1
		day := DayOf(c.Times[i])
		for j < len(c.Times) && j-i < mergedSamples && DayOf(c.Times[j]) == day {
			j++
		}
		part := c
		if i > 0 || j < len(c.Times) {
			part = c.Slice(i, j)
		}
		m.buf = m.w.Encode(m.buf[:0], part, m.lvl)
		seriesRow(&m.b, slot, kind, job, key, part.Times[0], part.Times[len(part.Times)-1], len(part.Times), 1, start, m.buf)
		i = j
	}
}

// dayString is a Date as ClickHouse writes it.
func dayString(d uint16) string {
	return time.UnixMilli(int64(d) * 86_400_000).UTC().Format("2006-01-02")
}
