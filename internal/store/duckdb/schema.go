package duckdb

import "fmt"

const schemaVersion = "4"

func schema() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)`,
		`CREATE TABLE IF NOT EXISTS agents (agent_id VARCHAR PRIMARY KEY, host VARCHAR NOT NULL, seq UBIGINT NOT NULL,
			first_ms BIGINT, last_ms BIGINT, batches UBIGINT, samples UBIGINT, dropped_samples UBIGINT,
			dropped_batches UBIGINT, read_errors UBIGINT, overruns UBIGINT)`,
		`CREATE TABLE IF NOT EXISTS jobs (job_id VARCHAR PRIMARY KEY, app_id VARCHAR, framework VARCHAR, name VARCHAR,
			user_name VARCHAR, queue VARCHAR, first_ms BIGINT, last_ms BIGINT, attempts INTEGER, running INTEGER,
			cpu_ms BIGINT, peak_rss BIGINT, mem_gb_hours DOUBLE, used_gb_hours DOUBLE, hosts INTEGER)`,
		`CREATE TABLE IF NOT EXISTS attempts (attempt_id VARCHAR PRIMARY KEY, job_id VARCHAR NOT NULL, host VARCHAR,
			container_id VARCHAR, app_id VARCHAR, type VARCHAR, framework VARCHAR, first_ms BIGINT, last_ms BIGINT,
			ended BOOLEAN, job_name VARCHAR, user_name VARCHAR, queue VARCHAR, memory_mb BIGINT, java_opts VARCHAR,
			xmx_bytes BIGINT, streaming BOOLEAN, cpu_ms BIGINT, peak_rss BIGINT, peak_pss BIGINT, peak_vms BIGINT,
			peak_heap BIGINT, read_bytes BIGINT, write_bytes BIGINT, gc_time_ms BIGINT, sched_wait_us BIGINT,
			rss_byte_ms DOUBLE, processes INTEGER, sample_ms BIGINT, attempt_key BIGINT)`,
		`CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id)`,
		// Processes and memberships are logs: a row each time an agent
		// describes them (first sight, exec, exit); queries take the latest.
		`CREATE TABLE IF NOT EXISTS processes (proc_key BIGINT, host VARCHAR, pid INTEGER, ppid INTEGER,
			sid INTEGER, start_ms BIGINT, end_ms BIGINT, cmdline VARCHAR, comm VARCHAR, role VARCHAR, uid UINTEGER,
			user_name VARCHAR, seen_ms BIGINT)`,
		`CREATE INDEX IF NOT EXISTS processes_key ON processes (proc_key)`,
		`CREATE TABLE IF NOT EXISTS memberships (proc_key BIGINT, attempt_id VARCHAR, from_ms BIGINT, to_ms BIGINT,
			cpu_base_ms BIGINT, role VARCHAR)`,
		`CREATE INDEX IF NOT EXISTS memberships_attempt ON memberships (attempt_id)`,
		// Time series: one row per series per batch, a compressed chunk of
		// columns (package chunk). Maintain merges fresh chunks (level 0) into
		// zstd-compressed ones (level 1) and per-minute rollups (level 2).
		// Fresh chunks go to one of two tables in turn: merging takes a whole
		// table, then drops it, which is how DuckDB gives the space back (it
		// does not reclaim rows deleted here and there).
		freshTable(0), freshIndex(0), freshTable(1), freshIndex(1),
		`CREATE TABLE IF NOT EXISTS series_chunks (kind TINYINT, key BIGINT, job_key BIGINT, t_min BIGINT,
			t_max BIGINT, n INTEGER, level TINYINT, data BLOB)`,
		`CREATE INDEX IF NOT EXISTS series_chunks_key ON series_chunks (key)`,
		`CREATE OR REPLACE VIEW series_all AS SELECT * FROM series_fresh_0 UNION ALL SELECT * FROM series_fresh_1
			UNION ALL SELECT * FROM series_chunks`,
		`CREATE TABLE IF NOT EXISTS samples_ext (proc_key BIGINT, ts BIGINT, metric VARCHAR, value BIGINT)`,
		`CREATE TABLE IF NOT EXISTS events (ts BIGINT, host VARCHAR, kind VARCHAR, job_id VARCHAR, attempt_id VARCHAR,
			proc_key BIGINT, pid INTEGER, message VARCHAR, value BIGINT)`,
		`INSERT INTO meta VALUES ('schema_version', '` + schemaVersion + `') ON CONFLICT DO NOTHING`,
		`INSERT INTO meta VALUES ('fresh', '0') ON CONFLICT DO NOTHING`,
	}
}

// Staging tables live on the writer's connection only (TEMP): each commit
// appends the transaction's merged summaries there and upserts them in one
// statement per table.
func stagingSchema() []string {
	return []string{
		`CREATE TEMP TABLE IF NOT EXISTS stage_attempts (attempt_id VARCHAR, job_id VARCHAR, host VARCHAR,
			container_id VARCHAR, app_id VARCHAR, type VARCHAR, framework VARCHAR, first_ms BIGINT, last_ms BIGINT,
			ended BOOLEAN, job_name VARCHAR, user_name VARCHAR, queue VARCHAR, memory_mb BIGINT, java_opts VARCHAR,
			xmx_bytes BIGINT, streaming BOOLEAN, cpu_ms BIGINT, peak_rss BIGINT, peak_pss BIGINT, peak_vms BIGINT,
			peak_heap BIGINT, read_bytes BIGINT, write_bytes BIGINT, gc_time_ms BIGINT, sched_wait_us BIGINT,
			rss_byte_ms DOUBLE, sample_ms BIGINT, attempt_key BIGINT)`,
		`CREATE TEMP TABLE IF NOT EXISTS stage_agents (agent_id VARCHAR, host VARCHAR, seq UBIGINT, first_ms BIGINT,
			last_ms BIGINT, batches UBIGINT, samples UBIGINT, dropped_samples UBIGINT, dropped_batches UBIGINT,
			read_errors UBIGINT, overruns UBIGINT)`,
	}
}

// The upserts from the staging tables. A value that a batch did not carry is
// NULL in the staging row and leaves the stored one as it was.
// upsertAttempts writes the attempts' summaries as they are in memory:
// absolute values, so that writing one twice changes nothing.
const upsertAttempts = `INSERT INTO attempts SELECT attempt_id, job_id, host, container_id, app_id, type, framework,
	first_ms, last_ms, ended, job_name, user_name, queue, memory_mb, java_opts, xmx_bytes, streaming, cpu_ms, peak_rss,
	peak_pss, peak_vms, peak_heap, read_bytes, write_bytes, gc_time_ms, sched_wait_us, rss_byte_ms, 0, sample_ms, attempt_key
	FROM stage_attempts WHERE true
ON CONFLICT (attempt_id) DO UPDATE SET
	job_id = excluded.job_id, host = excluded.host, container_id = excluded.container_id, app_id = excluded.app_id,
	type = excluded.type, framework = excluded.framework, first_ms = excluded.first_ms, last_ms = excluded.last_ms,
	ended = excluded.ended, job_name = excluded.job_name, user_name = excluded.user_name, queue = excluded.queue,
	memory_mb = excluded.memory_mb, java_opts = excluded.java_opts, xmx_bytes = excluded.xmx_bytes,
	streaming = excluded.streaming, cpu_ms = excluded.cpu_ms, peak_rss = excluded.peak_rss,
	peak_pss = excluded.peak_pss, peak_vms = excluded.peak_vms, peak_heap = excluded.peak_heap,
	read_bytes = excluded.read_bytes, write_bytes = excluded.write_bytes, gc_time_ms = excluded.gc_time_ms,
	sched_wait_us = excluded.sched_wait_us, rss_byte_ms = excluded.rss_byte_ms, sample_ms = excluded.sample_ms,
	attempt_key = excluded.attempt_key`

const upsertAgents = `INSERT INTO agents SELECT * FROM stage_agents WHERE true
ON CONFLICT (agent_id) DO UPDATE SET seq = greatest(agents.seq, excluded.seq), last_ms = excluded.last_ms,
	batches = agents.batches + excluded.batches, samples = agents.samples + excluded.samples,
	dropped_samples = excluded.dropped_samples, dropped_batches = excluded.dropped_batches,
	read_errors = excluded.read_errors, overruns = excluded.overruns`

// upsertJobs describes the jobs of the transaction's attempts; updateJobs
// recomputes their figures from their attempts.
const upsertJobs = `INSERT INTO jobs (job_id, app_id, framework, name, user_name, queue)
	SELECT job_id, max(app_id), max(framework), max(job_name), max(user_name), max(queue)
	FROM stage_attempts WHERE job_id IS NOT NULL GROUP BY job_id
	ON CONFLICT (job_id) DO UPDATE SET app_id = coalesce(excluded.app_id, jobs.app_id),
	framework = CASE WHEN excluded.framework IS NULL OR excluded.framework = 'unknown' THEN coalesce(jobs.framework, excluded.framework) ELSE excluded.framework END,
	name = coalesce(excluded.name, jobs.name), user_name = coalesce(excluded.user_name, jobs.user_name),
	queue = coalesce(excluded.queue, jobs.queue)`

const updateJobs = `UPDATE jobs SET attempts = a.n, running = a.running, cpu_ms = a.cpu, peak_rss = a.peak, first_ms = a.first,
	last_ms = a.last, mem_gb_hours = a.mem, used_gb_hours = a.used, hosts = a.hosts
	FROM (SELECT job_id, count(*) AS n, count(*) FILTER (WHERE NOT coalesce(ended, false)) AS running,
		sum(coalesce(cpu_ms, 0)) AS cpu, max(coalesce(peak_rss, 0)) AS peak, min(first_ms) AS first,
		max(last_ms) AS last,
		sum(coalesce(memory_mb, 0) * (last_ms - first_ms)) / 1024.0 / 3600000.0 AS mem,
		sum(coalesce(rss_byte_ms, 0)) / 1073741824.0 / 3600000.0 AS used,
		count(DISTINCT host) AS hosts
		FROM attempts WHERE job_id IN (SELECT DISTINCT job_id FROM stage_attempts) GROUP BY job_id) a
	WHERE jobs.job_id = a.job_id`

func freshName(i int) string { return fmt.Sprintf("series_fresh_%d", i) }

func freshTable(i int) string {
	return `CREATE TABLE IF NOT EXISTS ` + freshName(i) + ` (kind TINYINT, key BIGINT, job_key BIGINT, t_min BIGINT,
		t_max BIGINT, n INTEGER, level TINYINT, data BLOB)`
}

func freshIndex(i int) string {
	return fmt.Sprintf(`CREATE INDEX IF NOT EXISTS series_fresh_%d_key ON series_fresh_%d (key)`, i, i)
}
