package duckdb

import (
	"context"
	"fmt"
	"slices"

	"github.com/taskscope/taskscope/internal/store"
)

// schemaVersion is the version of the tables this store writes. The
// tables of attempts follow the fields package store declares
// (attempts.go): an open adds the columns a field added since (it needs
// no new version); a version is for a change of another kind (before11).
const schemaVersion = "11"

func schema() []string {
	return append([]string{
		`CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)`,
		// Agents' summaries, written with the other summaries; their
		// sequences are also logged in agent_seqs at every commit (the
		// exactly-once high-water mark, in the same transaction as the data)
		// until a summary write takes them in.
		`CREATE TABLE IF NOT EXISTS agents (agent_id VARCHAR PRIMARY KEY, host VARCHAR NOT NULL, seq UBIGINT NOT NULL,
			first_ms BIGINT, last_ms BIGINT, batches UBIGINT, samples UBIGINT, dropped_samples UBIGINT,
			dropped_batches UBIGINT, read_errors UBIGINT, overruns UBIGINT)`,
		`CREATE TABLE IF NOT EXISTS agent_seqs (agent_id VARCHAR, seq UBIGINT)`,
		// A job's stored_ms is when its row was last written (the store's
		// clock): the order its data arrived in, by which the analyser
		// finds the jobs to analyse (store.FindingStore.AnalysisStates).
		// Rows are appended as jobs come and updated while they run, so
		// its zone maps leave out the row groups of jobs written long ago.
		`CREATE TABLE IF NOT EXISTS jobs (job_id VARCHAR PRIMARY KEY, app_id VARCHAR, framework VARCHAR, name VARCHAR,
			user_name VARCHAR, queue VARCHAR, first_ms BIGINT, last_ms BIGINT, attempts INTEGER, running INTEGER,
			cpu_ms BIGINT, peak_rss BIGINT, mem_gb_hours DOUBLE, used_gb_hours DOUBLE, hosts INTEGER, by_type VARCHAR,
			gen_lo UBIGINT, gen_hi UBIGINT, stored_ms BIGINT)`,
		// An attempt's gen_first is the commit that first stored anything of
		// it; gen_last the last one. Attempts are appended in that order (at
		// the summary write that follows), so a job's attempts are found
		// by the range of their gen_first that its row keeps (gen_lo,
		// gen_hi) and the zone maps of gen_first, without an index on
		// job_id (DuckDB reads an ART index only up to 2,048 rows, and it
		// was slower than the scan below that count).
		attemptsDDL(),
		// Every description of an attempt an agent sent, with the commit that
		// stored it: after a crash, those the summaries had not taken in yet
		// are read again.
		attemptLogDDL(),
		// What an attempt's page shows of its processes, as a log: a row
		// each time an agent describes a process of the attempt (first
		// sight, exec, exit: the process's columns) or its membership
		// (the membership's columns), one row per attempt, process and
		// commit; queries take the latest of each column. A process
		// record goes to the row of every attempt the process is a member
		// of (attempt_key 0: none known). gen is the commit: rows are in
		// its order, so an attempt's rows are found by the range of
		// commits its row in attempts keeps (gen_first, gen_last) and the
		// zone maps of gen, without an index (an ART index of random keys
		// takes 40 bytes a row and is written again whole at every
		// checkpoint). A command line is logged once per attempt and
		// process, against a template (cmd_tmpl, cmd_args) or as text.
		// (A commit is compared with a ?::UBIGINT argument, here as with
		// attempts' gen_first: against a Go integer as bound, DuckDB casts
		// the column to HUGEINT and its zone maps prune nothing;
		// TestGenRangesPruned.)
		`CREATE TABLE IF NOT EXISTS proc_log (gen UBIGINT, attempt_key BIGINT, proc_key BIGINT, member BOOLEAN,
			host VARCHAR, pid INTEGER, ppid INTEGER, sid INTEGER, start_ms BIGINT, end_ms BIGINT, cmd_tmpl INTEGER,
			cmd_args BLOB, cmdline VARCHAR, comm VARCHAR, role VARCHAR, uid UINTEGER, user_name VARCHAR,
			from_ms BIGINT, to_ms BIGINT, cpu_base_ms BIGINT, member_role VARCHAR)`,
		// Command line templates (cmdline.go): the first command line of
		// each shape, numbered from 0, with the hash of its shape.
		`CREATE TABLE IF NOT EXISTS cmd_templates (id INTEGER, tmpl BIGINT, text VARCHAR)`,
		// Time series: one row per series per batch, a compressed chunk of
		// columns (package chunk). Maintain merges fresh chunks (level 0) into
		// zstd-compressed ones (level 1) and per-minute rollups (level 2).
		// Fresh chunks go to one of two tables in turn: merging takes a whole
		// table, then drops it, which is how DuckDB gives the space back (it
		// does not reclaim rows deleted here and there). No index: queries
		// always give a time range, and rows are written in time order, so
		// the zone maps of t_min and t_max leave few row groups to scan.
		freshTable(0), freshTable(1),
		// res_att and res_job name the attempt and the job whose reads
		// take a chunk (its key, and the job key of the attempt's
		// chunks): an attempt's own chunks, and the merged chunks of a
		// process whose samples an attempt's residual chunks of the same
		// compaction subtracted (residual.go). An attempt's or job's read
		// thus finds its chunks and the processes' that its residuals
		// need in one scan, by these columns only. Added to stores made
		// before by ADD COLUMN (NULL: none), and filled for their
		// attempts' chunks at open (migrateChunkReaders).
		`CREATE TABLE IF NOT EXISTS series_chunks (kind TINYINT, key BIGINT, job_key BIGINT, t_min BIGINT,
			t_max BIGINT, n INTEGER, level TINYINT, data BLOB, res_att BIGINT, res_job BIGINT)`,
		`ALTER TABLE series_chunks ADD COLUMN IF NOT EXISTS res_att BIGINT`,
		`ALTER TABLE series_chunks ADD COLUMN IF NOT EXISTS res_job BIGINT`,
		`CREATE OR REPLACE VIEW series_all AS SELECT *, NULL::BIGINT AS res_att, NULL::BIGINT AS res_job FROM series_fresh_0
			UNION ALL SELECT *, NULL::BIGINT, NULL::BIGINT FROM series_fresh_1
			UNION ALL SELECT kind, key, job_key, t_min, t_max, n, level, data, res_att, res_job FROM series_chunks`,
		`CREATE OR REPLACE VIEW series_fresh AS SELECT * FROM series_fresh_0 UNION ALL SELECT * FROM series_fresh_1`,
		// The metrics agents sent with no column of their own, by series
		// kind (store.KindProcessExt, store.KindAttemptExt): their series are chunks of
		// those kinds (store.ExtKey, store.ExtColumns).
		`CREATE TABLE IF NOT EXISTS ext_metrics (kind TINYINT, metric VARCHAR)`,
		`CREATE TABLE IF NOT EXISTS events (ts BIGINT, host VARCHAR, kind VARCHAR, job_id VARCHAR, attempt_id VARCHAR,
			proc_key BIGINT, pid INTEGER, message VARCHAR, value BIGINT)`,
		profileTables[0], profileTables[1], // profiles.go
		`INSERT INTO meta VALUES ('schema_version', '` + schemaVersion + `') ON CONFLICT DO NOTHING`,
		`INSERT INTO meta VALUES ('fresh', '0') ON CONFLICT DO NOTHING`,
		`INSERT INTO meta VALUES ('flushed_gen', '0') ON CONFLICT DO NOTHING`,
		`INSERT INTO meta VALUES ('clean', '1') ON CONFLICT DO NOTHING`,
	}, findingsSchema()...)
}

// Staging tables live on the writer's connection only (TEMP): a summary
// write appends the changed attempts there and upserts them in one
// statement.
func stagingSchema() []string {
	return []string{
		`CREATE TEMP TABLE IF NOT EXISTS stage_attempts AS SELECT * FROM attempts LIMIT 0`,
		`CREATE TEMP TABLE IF NOT EXISTS stage_jobs AS SELECT * FROM jobs LIMIT 0`,
		`CREATE TEMP TABLE IF NOT EXISTS stage_agents AS SELECT * FROM agents LIMIT 0`,
	}
}

// The upserts from the staging tables: the summaries as they are in memory,
// absolute values, so that writing one twice changes nothing. They set
// every column but the keys (and, of attempts, what never changes once
// written: attempts.go): DuckDB turns an update of an indexed column into
// a delete and an insert, which leaves dead rows behind at every summary
// write. The staged rows go in the order of the rows they
// update (their rowid; new ones last): the writer stages them in map order,
// and DuckDB updates rows in random order some 20 times slower (1,800 of
// 3,000 attempts: 500 ms against 25 ms, the writer's lock held all along).
var upsertJobs = upsertSQL("jobs", "job_id", jobColumns)

var upsertAgents = upsertSQL("agents", "agent_id", agentColumns)

var (
	jobColumns = []string{"job_id", "app_id", "framework", "name", "user_name", "queue", "first_ms", "last_ms", "attempts",
		"running", "cpu_ms", "peak_rss", "mem_gb_hours", "used_gb_hours", "hosts", "by_type", "gen_lo", "gen_hi", "stored_ms"}
	agentColumns = []string{"agent_id", "host", "seq", "first_ms", "last_ms", "batches", "samples", "dropped_samples",
		"dropped_batches", "read_errors", "overruns"}
)

func upsertSQL(table, key string, cols []string, fixed ...string) string {
	q := "INSERT INTO " + table + " SELECT s.* FROM stage_" + table + " s LEFT JOIN " + table + " t USING (" + key +
		") ORDER BY t.rowid NULLS LAST ON CONFLICT (" + key + ") DO UPDATE SET "
	first := true
	for _, c := range cols {
		skip := c == key
		for _, f := range fixed {
			skip = skip || c == f
		}
		if skip {
			continue
		}
		if !first {
			q += ", "
		}
		first = false
		q += c + " = excluded." + c
	}
	return q
}

// migrateJobs gives the jobs of a data directory made before stored_ms
// that column, each job's last sighting in it (as if its data had come
// in time).
func (s *Store) migrateJobs(ctx context.Context) error {
	names, _, err := s.liveColumns(ctx, "jobs")
	if err != nil {
		return err
	}
	if slices.Contains(names, "stored_ms") {
		return nil
	}
	for _, q := range []string{`ALTER TABLE jobs ADD COLUMN stored_ms BIGINT`, `UPDATE jobs SET stored_ms = last_ms`} {
		if _, err := s.handle().ExecContext(ctx, q); err != nil {
			return fmt.Errorf("cannot migrate jobs (%s): %w", q, err)
		}
	}
	return nil
}

// migrateChunkReaders names, in the merged chunks of attempts of a
// store made before, their attempt and job (res_att, res_job), which
// reads of attempts and jobs look for (the stores of before 2026-12-07
// had no such columns, those of that day set them on processes' chunks
// only). A store where all are set updates nothing.
func (s *Store) migrateChunkReaders(ctx context.Context) error {
	q := fmt.Sprintf(`UPDATE series_chunks SET res_att = key, res_job = job_key WHERE kind = %d AND res_att IS NULL`, store.KindAttempt)
	if _, err := s.handle().ExecContext(ctx, q); err != nil {
		return fmt.Errorf("cannot name the attempts of their chunks: %w", err)
	}
	return nil
}

func freshName(i int) string { return fmt.Sprintf("series_fresh_%d", i) }

// freshTable makes a fresh table. Its chunks are stored as they come,
// without DuckDB's compression (USING COMPRESSION uncompressed): they are
// compressed already, and a commit of a row group of them or more (which
// DuckDB writes to the file at once) spent about a tenth of its CPU
// trying dictionary and FSST on them, for 8 % fewer bytes of blocks that
// compaction frees (BenchmarkCommitSize, 2026-12-07). A table made before
// keeps its compression until compaction drops it.
func freshTable(i int) string {
	return `CREATE TABLE IF NOT EXISTS ` + freshName(i) + ` (kind TINYINT, key BIGINT, job_key BIGINT, t_min BIGINT,
		t_max BIGINT, n INTEGER, level TINYINT, data BLOB USING COMPRESSION uncompressed)`
}
