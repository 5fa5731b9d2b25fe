package duckdb

import (
	"fmt"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

const schemaVersion = "1"

// sampleCols and attCols are the stored metric columns (see store.SampleColumns).
func colDefs(cols []store.StoredColumn) string {
	var b strings.Builder
	for _, c := range cols {
		fmt.Fprintf(&b, ", %s BIGINT", c.Name)
	}
	return b.String()
}

func colNames(cols []store.StoredColumn) string {
	var n []string
	for _, c := range cols {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}

func schema() []string {
	sc := colDefs(store.SampleColumns)
	ac := colDefs(store.AttemptColumns)
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
			rss_byte_ms DOUBLE, processes INTEGER, sample_ms BIGINT, state BLOB)`,
		`CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id)`,
		`CREATE TABLE IF NOT EXISTS processes (proc_key BIGINT PRIMARY KEY, host VARCHAR, pid INTEGER, ppid INTEGER,
			sid INTEGER, start_ms BIGINT, end_ms BIGINT, cmdline VARCHAR, comm VARCHAR, role VARCHAR, uid UINTEGER,
			user_name VARCHAR)`,
		`CREATE TABLE IF NOT EXISTS memberships (proc_key BIGINT, attempt_id VARCHAR, from_ms BIGINT, to_ms BIGINT,
			cpu_base_ms BIGINT, role VARCHAR, PRIMARY KEY (proc_key, attempt_id))`,
		`CREATE INDEX IF NOT EXISTS memberships_attempt ON memberships (attempt_id)`,
		// Samples arrive in *_hot and are moved, sorted by series and time, to
		// the main tables by Maintain: sorted runs compress to a few bits per value.
		`CREATE TABLE IF NOT EXISTS samples (proc_key BIGINT, ts BIGINT` + sc + `)`,
		`CREATE TABLE IF NOT EXISTS samples_hot (proc_key BIGINT, ts BIGINT` + sc + `)`,
		`CREATE TABLE IF NOT EXISTS samples_ext (proc_key BIGINT, ts BIGINT, metric VARCHAR, value BIGINT)`,
		`CREATE TABLE IF NOT EXISTS attempt_samples (attempt_id VARCHAR, job_id VARCHAR, ts BIGINT` + ac + `)`,
		`CREATE TABLE IF NOT EXISTS attempt_samples_hot (attempt_id VARCHAR, job_id VARCHAR, ts BIGINT` + ac + `)`,
		`CREATE TABLE IF NOT EXISTS events (ts BIGINT, host VARCHAR, kind VARCHAR, job_id VARCHAR, attempt_id VARCHAR,
			proc_key BIGINT, pid INTEGER, message VARCHAR, value BIGINT)`,
		`CREATE OR REPLACE VIEW samples_all AS SELECT * FROM samples UNION ALL SELECT * FROM samples_hot`,
		`CREATE OR REPLACE VIEW attempt_samples_all AS SELECT * FROM attempt_samples UNION ALL SELECT * FROM attempt_samples_hot`,
		`INSERT INTO meta VALUES ('schema_version', '` + schemaVersion + `') ON CONFLICT DO NOTHING`,
	}
}

// Staging tables live on the writer's connection only (TEMP): each commit
// appends the transaction's merged summaries there and upserts them in one
// statement per table.
func stagingSchema() []string {
	return []string{
		`CREATE TEMP TABLE IF NOT EXISTS stage_procs (proc_key BIGINT, host VARCHAR, pid INTEGER, ppid INTEGER,
			sid INTEGER, start_ms BIGINT, end_ms BIGINT, cmdline VARCHAR, comm VARCHAR, role VARCHAR, uid UINTEGER,
			user_name VARCHAR)`,
		`CREATE TEMP TABLE IF NOT EXISTS stage_attempts (attempt_id VARCHAR, job_id VARCHAR, host VARCHAR,
			container_id VARCHAR, app_id VARCHAR, type VARCHAR, framework VARCHAR, first_ms BIGINT, last_ms BIGINT,
			ended BOOLEAN, job_name VARCHAR, user_name VARCHAR, queue VARCHAR, memory_mb BIGINT, java_opts VARCHAR,
			xmx_bytes BIGINT, streaming BOOLEAN, cpu_ms BIGINT, peak_rss BIGINT, peak_pss BIGINT, peak_vms BIGINT,
			peak_heap BIGINT, read_bytes BIGINT, write_bytes BIGINT, gc_time_ms BIGINT, sched_wait_us BIGINT,
			rss_byte_ms DOUBLE, sample_ms BIGINT, state BLOB)`,
		`CREATE TEMP TABLE IF NOT EXISTS stage_agents (agent_id VARCHAR, host VARCHAR, seq UBIGINT, first_ms BIGINT,
			last_ms BIGINT, batches UBIGINT, samples UBIGINT, dropped_samples UBIGINT, dropped_batches UBIGINT,
			read_errors UBIGINT, overruns UBIGINT)`,
		`CREATE TEMP TABLE IF NOT EXISTS stage_members (proc_key BIGINT, attempt_id VARCHAR, from_ms BIGINT,
			to_ms BIGINT, cpu_base_ms BIGINT, role VARCHAR)`,
	}
}

// The upserts from the staging tables. A value that a batch did not carry is
// NULL in the staging row and leaves the stored one as it was.
// Processes hold their description only; their summaries (CPU, peaks) are
// computed from their samples when asked for: an attempt has few processes,
// and keeping per-process summaries current would cost an update per
// process per commit.
const upsertProcs = `INSERT INTO processes SELECT * FROM stage_procs WHERE true
ON CONFLICT (proc_key) DO UPDATE SET
	host = coalesce(excluded.host, processes.host), pid = coalesce(excluded.pid, processes.pid),
	ppid = coalesce(excluded.ppid, processes.ppid), sid = coalesce(excluded.sid, processes.sid),
	start_ms = coalesce(excluded.start_ms, processes.start_ms),
	end_ms = coalesce(excluded.end_ms, processes.end_ms),
	cmdline = coalesce(excluded.cmdline, processes.cmdline), comm = coalesce(excluded.comm, processes.comm),
	role = coalesce(excluded.role, processes.role), uid = coalesce(excluded.uid, processes.uid),
	user_name = coalesce(excluded.user_name, processes.user_name)`

const upsertAttempts = `INSERT INTO attempts SELECT attempt_id, job_id, host, container_id, app_id, type, framework,
	first_ms, last_ms, ended, job_name, user_name, queue, memory_mb, java_opts, xmx_bytes, streaming, cpu_ms, peak_rss,
	peak_pss, peak_vms, peak_heap, read_bytes, write_bytes, gc_time_ms, sched_wait_us, rss_byte_ms, 0, sample_ms, state
	FROM stage_attempts WHERE true
ON CONFLICT (attempt_id) DO UPDATE SET
	job_id = coalesce(excluded.job_id, attempts.job_id), host = coalesce(excluded.host, attempts.host),
	container_id = coalesce(excluded.container_id, attempts.container_id),
	app_id = coalesce(excluded.app_id, attempts.app_id), type = coalesce(excluded.type, attempts.type),
	framework = coalesce(excluded.framework, attempts.framework),
	first_ms = least(excluded.first_ms, attempts.first_ms),
	last_ms = greatest(excluded.last_ms, attempts.last_ms),
	ended = coalesce(excluded.ended, attempts.ended),
	job_name = coalesce(excluded.job_name, attempts.job_name),
	user_name = coalesce(excluded.user_name, attempts.user_name),
	queue = coalesce(excluded.queue, attempts.queue),
	memory_mb = coalesce(excluded.memory_mb, attempts.memory_mb),
	java_opts = coalesce(excluded.java_opts, attempts.java_opts),
	xmx_bytes = coalesce(excluded.xmx_bytes, attempts.xmx_bytes),
	streaming = coalesce(excluded.streaming, attempts.streaming),
	cpu_ms = coalesce(excluded.cpu_ms, attempts.cpu_ms),
	peak_rss = greatest(excluded.peak_rss, attempts.peak_rss),
	peak_pss = greatest(excluded.peak_pss, attempts.peak_pss),
	peak_vms = greatest(excluded.peak_vms, attempts.peak_vms),
	peak_heap = greatest(excluded.peak_heap, attempts.peak_heap),
	read_bytes = coalesce(excluded.read_bytes, attempts.read_bytes),
	write_bytes = coalesce(excluded.write_bytes, attempts.write_bytes),
	gc_time_ms = coalesce(excluded.gc_time_ms, attempts.gc_time_ms),
	sched_wait_us = coalesce(excluded.sched_wait_us, attempts.sched_wait_us),
	rss_byte_ms = coalesce(attempts.rss_byte_ms, 0) + coalesce(excluded.rss_byte_ms, 0),
	sample_ms = greatest(excluded.sample_ms, attempts.sample_ms),
	state = coalesce(excluded.state, attempts.state)`

const upsertMembers = `INSERT INTO memberships SELECT * FROM stage_members WHERE true
ON CONFLICT (proc_key, attempt_id) DO UPDATE SET
	from_ms = least(excluded.from_ms, memberships.from_ms),
	to_ms = coalesce(excluded.to_ms, memberships.to_ms),
	cpu_base_ms = coalesce(memberships.cpu_base_ms, excluded.cpu_base_ms),
	role = coalesce(excluded.role, memberships.role)`

const upsertAgents = `INSERT INTO agents SELECT * FROM stage_agents WHERE true
ON CONFLICT (agent_id) DO UPDATE SET seq = greatest(agents.seq, excluded.seq), last_ms = excluded.last_ms,
	batches = agents.batches + excluded.batches, samples = agents.samples + excluded.samples,
	dropped_samples = excluded.dropped_samples, dropped_batches = excluded.dropped_batches,
	read_errors = excluded.read_errors, overruns = excluded.overruns`
