package duckdb

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Space is where the database file's bytes go.
type Space struct {
	FileBytes  int64 // the database file
	WALBytes   int64
	BlockSize  int64
	UsedBlocks int64
	FreeBlocks int64 // blocks the file holds but nothing uses (reused before the file grows)
	// Tables: bytes of the blocks each table's columns are in (a block
	// shared by several tables' small segments counts for each); what used
	// blocks hold beyond them is indexes and metadata.
	Tables []TableSpace
}

// TableSpace is one table's share.
type TableSpace struct {
	Name  string
	Rows  int64
	Bytes int64
	Data  int64 // chunk tables: the chunks' own bytes
}

// IndexAndMetaBytes is what used blocks hold beyond the tables' columns.
func (s Space) IndexAndMetaBytes() int64 {
	n := s.UsedBlocks * s.BlockSize
	for _, t := range s.Tables {
		n -= t.Bytes
	}
	return max(n, 0)
}

func (s Space) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "file %d B, wal %d B, used %d blocks, free %d blocks of %d B\n", s.FileBytes, s.WALBytes, s.UsedBlocks, s.FreeBlocks, s.BlockSize)
	for _, t := range s.Tables {
		fmt.Fprintf(&b, "  %-16s %10d rows %12d B", t.Name, t.Rows, t.Bytes)
		if t.Data > 0 {
			fmt.Fprintf(&b, " (chunks %d B)", t.Data)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  %-16s %10s      %12d B\n", "indexes+meta", "", s.IndexAndMetaBytes())
	return b.String()
}

// Space reports where the file's bytes go (meaningful after a checkpoint).
func (s *Store) Space(ctx context.Context) (Space, error) {
	var sp Space
	err := s.handle().QueryRowContext(ctx, `SELECT block_size, used_blocks, free_blocks FROM pragma_database_size() WHERE database_name = current_database()`).
		Scan(&sp.BlockSize, &sp.UsedBlocks, &sp.FreeBlocks)
	if err != nil {
		return sp, err
	}
	if s.path != "" {
		if fi, err := os.Stat(s.path); err == nil {
			sp.FileBytes = fi.Size()
		}
		if fi, err := os.Stat(s.path + ".wal"); err == nil {
			sp.WALBytes = fi.Size()
		}
	}
	rows, err := s.handle().QueryContext(ctx, `SELECT table_name FROM duckdb_tables() WHERE NOT temporary AND database_name = current_database()`)
	if err != nil {
		return sp, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return sp, err
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		ts := TableSpace{Name: n}
		if err := s.handle().QueryRowContext(ctx, `SELECT count(*) FROM `+n).Scan(&ts.Rows); err != nil {
			return sp, err
		}
		if n == "series_chunks" || strings.HasPrefix(n, "series_fresh") {
			if err := s.handle().QueryRowContext(ctx, `SELECT coalesce(sum(octet_length(data)), 0) FROM `+n).Scan(&ts.Data); err != nil {
				return sp, err
			}
		}
		// The blocks the table's segments are in (small segments share
		// blocks, with other tables too: for small tables this overstates).
		err := s.handle().QueryRowContext(ctx, `SELECT count(DISTINCT b) * ? FROM (
				SELECT block_id AS b FROM pragma_storage_info('`+n+`') WHERE persistent AND block_id >= 0
				UNION ALL SELECT unnest(additional_block_ids) FROM pragma_storage_info('`+n+`') WHERE persistent)`,
			sp.BlockSize).Scan(&ts.Bytes)
		if err != nil {
			return sp, fmt.Errorf("storage of %s: %w", n, err)
		}
		sp.Tables = append(sp.Tables, ts)
	}
	sort.Slice(sp.Tables, func(i, j int) bool { return sp.Tables[i].Bytes > sp.Tables[j].Bytes })
	return sp, nil
}
