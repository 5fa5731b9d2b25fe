package duckdb

import (
	"context"
	"encoding/json"
	"testing"
)

// TestGenRangesPruned: the reads that find an attempt's rows by a range
// of commits (proc_log's gen, attempts' gen_first) scan only the row
// groups whose zone maps overlap the range, as SeriesPoints' statement
// does those of the chunks that end in its windows (t_max). Their commits are bound as
// UBIGINT arguments: compared with a Go integer as it is bound, DuckDB
// casts the column to HUGEINT and scans every row group (the whole log
// at every attempt page and every analysis pass).
func TestGenRangesPruned(t *testing.T) {
	ctx := context.Background()
	st, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// 200,000 rows of 2,000 commits, in commit order as a store writes
	// them (a job's attempts all along).
	const rows, perGen = 200_000, 100
	for _, q := range []string{
		`INSERT INTO proc_log (gen, attempt_key, proc_key, member) SELECT i // 100 + 1, i % 1000, i, true FROM range(200000) t(i)`,
		`INSERT INTO series_fresh_0 SELECT 1, i % 1000, 0, i * 1000, i * 1000 + 999, 1, 0, NULL FROM range(200000) t(i)`,
		`INSERT INTO attempts (attempt_id, job_id, gen_first, gen_last) SELECT 'a' || i, 'j' || (i % 100), i // 100 + 1, i // 100 + 1 FROM range(200000) t(i)`,
	} {
		if _, err := st.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// 40 of the last commits, with the Go types the store binds.
	lo, hi := uint64(rows/perGen-50), uint64(rows/perGen-10)
	procs, procArgs := processesQuery(lo, hi, hi, []any{int64(7), int64(8)})
	r := attemptRange{key: 7, lo: lo, hi: hi, after: hi}
	t0 := int64(rows-4000) * 1000 // (series: chunks of a second, one a second)
	for _, c := range []struct {
		name, q string
		args    []any
	}{
		{"an attempt's rows (attemptRange)", r.where(""), r.args()},
		{"attempts' processes (processesQuery)", procs, procArgs},
		{"a job's attempts (jobAttempts)", `SELECT attempt_id FROM attempts WHERE ` + jobAttempts, []any{"j7", lo, hi}},
		{"series' points and counts (pointsQuery)", pointsQuery, []any{[]int64{7, 8}, []int64{t0, t0}, []int64{t0 - 1000, t0 - 1000},
			1, t0, 1, t0 - 1000}},
	} {
		scanned := rowsScanned(t, st, c.q, c.args...)
		if scanned == 0 || scanned > rows/10 {
			t.Errorf("%s: %d rows scanned of %d (want those near commits %d to %d only)", c.name, scanned, rows, lo, hi)
		}
	}
}

// rowsScanned is how many rows DuckDB scanned to run q (EXPLAIN ANALYZE).
func rowsScanned(t *testing.T, st *Store, q string, args ...any) int64 {
	t.Helper()
	rows, err := st.DB().QueryContext(context.Background(), `EXPLAIN (ANALYZE, FORMAT json) `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		var prof struct {
			Scanned int64 `json:"cumulative_rows_scanned"`
		}
		if err := json.Unmarshal([]byte(v), &prof); err != nil {
			t.Fatalf("the profile of %.60s: %v", q, err)
		}
		total += prof.Scanned
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}
