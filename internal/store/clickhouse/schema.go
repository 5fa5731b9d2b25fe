package clickhouse

import (
	"context"
	"fmt"
	"strings"
)

// SchemaVersion is the version of the tables this package writes (table
// meta).
const SchemaVersion = "1"

// A table of the store. Every table but meta and ext_metrics is
// partitioned by day: retention drops whole partitions (ALTER TABLE ...
// DROP PARTITION), which 18.16 does at once, where a DELETE would be a
// mutation rewriting the parts. Every table is a ReplacingMergeTree keyed
// so that a row written twice (a batch stored again by a replica that did
// not know it was stored: see the exactly-once scheme in docs/scaling.md)
// is kept once when parts merge, and read once by the queries.
type table struct {
	name    string
	columns []column
	// version: the column whose largest value wins among rows of the same
	// key (state rows: an attempt's, a job's); "" for logs.
	version   string
	partition string // "" : none
	orderBy   string
	// shardKey: the column by which rows go to shards (a job's rows to one
	// shard: job_key, the hash of its id); "" : every row to the first.
	shardKey string
	// retention: how long its partitions are kept: raw samples, or
	// everything else (rollups, events, attempts, processes, jobs).
	retention retentionKind
	// granularity: rows per mark of the primary index (0: the server's
	// 8192). Chunk tables take 1024: a compacted chunk is kilobytes, and a
	// read of one series would otherwise decompress 8192 of them (an
	// attempt's hour read in 384 ms against 12 ms, BenchmarkSeriesLayout).
	granularity int
}

type retentionKind int

// byDay is whether the table is partitioned by its day column (by day
// first, or by month: retention drops its partitions whose last day is
// past it).
func (t *table) byDay() bool {
	return t.partition == "day" || strings.HasPrefix(t.partition, "(day,") || t.partition == "toStartOfMonth(day)"
}

const (
	keepForever retentionKind = iota
	keepRaw                   // --retention
	keepRollup                // --rollup-retention
	keepChanges               // changesRetention
)

// column is a column and its type; lowCard marks the strings of few
// distinct values (hosts, kinds, roles), LowCardinality(String) where the
// server has it without a setting; codec is its CODEC where the server has
// codecs ("" : the server's default compression).
type column struct {
	name, typ string
	lowCard   bool
	codec     string
}

// cols parses "name Type [lc] [codec=A+B], ..." (a codec's parts joined
// by +).
func cols(spec string) []column {
	var out []column
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		parts := strings.Fields(f)
		c := column{name: parts[0], typ: parts[1]}
		for _, p := range parts[2:] {
			switch {
			case p == "lc":
				c.lowCard = true
			case strings.HasPrefix(p, "codec="):
				c.codec = strings.ReplaceAll(strings.TrimPrefix(p, "codec="), "+", ", ")
			default:
				panic("schema: " + f)
			}
		}
		out = append(out, c)
	}
	return out
}

// tables are the store's tables. Keys: job_key is store.AttemptKey of
// the job id (also the shard key), attempt_key of the attempt id, key a
// process's key (or an attempt's, or store.ExtKey of either).
var tables = []table{
	{name: "meta", columns: cols("key String, value String"), orderBy: "key"},
	// Agents: the last batch stored of each (its sequence is the version),
	// with counts over its batches: the exactly-once check and the hosts'
	// page.
	{name: "agents", columns: cols(`agent_key UInt64, agent_id String, seq UInt64, host String lc, first_ms Int64,
		last_ms Int64, batches UInt64, samples UInt64, dropped_samples UInt64, dropped_batches UInt64, read_errors UInt64,
		overruns UInt64`), version: "seq", orderBy: "(agent_key, agent_id)", shardKey: "agent_key"},
	// Every batch stored, by agent and sequence (a ledger: what was stored
	// once, and its samples), as stores made before 2026-12-07 wrote it:
	// nothing read it, and it cost every commit an insert, a part and its
	// merges. Nothing writes it now; retention drops its partitions.
	{name: "batches", columns: cols(`day Date, agent_key UInt64, agent_id String, seq UInt64, host String lc,
		sent_ms Int64 codec=Delta+ZSTD, samples UInt64, dropped_samples UInt64, dropped_batches UInt64, read_errors UInt64,
		overruns UInt64`),
		partition: "day", orderBy: "(agent_key, agent_id, seq)", shardKey: "agent_key", retention: keepRollup},
	// Series, as stores made before series_chunks wrote them: a chunk
	// (package chunk) per series per batch (level 0). Read, rolled up and
	// dropped as series_chunks; nothing writes it now.
	{name: "chunks", columns: cols(`day Date, kind UInt8, job_key UInt64, key UInt64, t_min Int64 codec=Delta+ZSTD,
		t_max Int64 codec=Delta+ZSTD, n UInt32, level UInt8, start_ms Int64, data String codec=ZSTD(3)`),
		partition: "day", orderBy: "(kind, job_key, key, t_min, level)", shardKey: "job_key", retention: keepRaw,
		granularity: 1024},
	// Series (merge.go): a chunk per series per batch (level 0) in the
	// partition of its day and of the slot of its arrival (the writer's
	// clock), and, once Maintain has merged a slot, a chunk per series,
	// slot and day (level 1, in the partition of its day alone) where the
	// slot's partitions are then dropped. The version n keeps, of two
	// merged chunks of a slot starting at one sample (two replicas
	// merging it at once), the one of more samples; slot in the key keeps
	// apart the merged chunks of two slots.
	{name: "series_chunks", columns: cols(`day Date, slot UInt32, kind UInt8, job_key UInt64, key UInt64,
		t_min Int64 codec=Delta+ZSTD, t_max Int64 codec=Delta+ZSTD, n UInt32, level UInt8, start_ms Int64,
		data String codec=ZSTD(3)`),
		version: "n", partition: "(day, if(level = 0, slot, 0))", orderBy: "(kind, job_key, key, t_min, level, slot)",
		shardKey: "job_key", retention: keepRaw, granularity: 1024},
	// Per-minute rollups of chunks past the raw retention (level 2).
	{name: "rollups", columns: cols(`day Date, kind UInt8, job_key UInt64, key UInt64, t_min Int64 codec=Delta+ZSTD,
		t_max Int64 codec=Delta+ZSTD, n UInt32, level UInt8, start_ms Int64, data String codec=ZSTD(3)`),
		partition: "day", orderBy: "(kind, job_key, key, t_min, level)", shardKey: "job_key", retention: keepRollup,
		granularity: 1024},
	// Attempts: description and summary in absolute values, a row per
	// change; the highest version of each is the attempt. day is the day
	// it was first stored (it never changes: rows of one attempt stay in
	// one partition). Its columns are the store's own and the fields
	// package store declares (attempts.go).
	{name: "attempts", columns: attemptColumns(),
		version: "version", partition: "day", orderBy: "(job_key, attempt_id)", shardKey: "job_key", retention: keepRollup,
		// An attempt is read alone (its page, its series, a commit meeting
		// it): a mark of 8192 of these wide rows made each such read
		// decompress 8192 (2.9 MB); 1024 reads an eighth of it.
		granularity: 1024},
	// Where an attempt is, by its id alone (its job's key, and the day of
	// its rows). A commit looks up the attempts it meets here: a mark per
	// attempt and part, so the partitions are months and the marks small
	// (with a partition a day and marks of 1024, the lookup read 41,000
	// rows a commit beside 1,000,000 attempts of 10 days:
	// BenchmarkCommitNewAttempts). Retention drops a month once its last
	// day is past it. (Stores made before keep their table, by day.)
	{name: "attempt_index", columns: cols("day Date, attempt_key UInt64, attempt_id String, job_key UInt64"),
		partition: "toStartOfMonth(day)", orderBy: "(attempt_key, attempt_id)", shardKey: "job_key", retention: keepRollup,
		granularity: 256},
	// Which attempts ran on a host when (hostindex.go): a row per attempt
	// and span of hostBucket of its life, with its job's key and the day
	// of its rows; one of bucket -1 for an attempt of no known start or
	// too long a life. HostAttempts reads a host's window here, then the
	// rows of the attempts found, where a read of the attempts table by
	// host scans every row of it (ordered by job).
	{name: "host_index", columns: cols("day Date, host String lc, bucket Int64, job_key UInt64, attempt_id String, att_day Date"),
		partition: "day", orderBy: "(host, bucket, job_key, attempt_id)", shardKey: "job_key", retention: keepRollup},
	// Processes and memberships as the agents describe them, a row per
	// attempt, process and batch (as the embedded store's proc_log); gen
	// orders the rows of an attempt's process (the batch's time and
	// sequence).
	{name: "procs", columns: cols(`day Date, job_key UInt64, attempt_key UInt64, proc_key UInt64, gen UInt64,
		member UInt8, described UInt8, has_cmd UInt8, host String lc, pid Int32, ppid Int32, sid Int32, start_ms Int64, end_ms Int64,
		cmdline String, comm String lc, role String lc, uid UInt32, user_name String lc, from_ms Int64, to_ms Int64,
		cpu_base_ms Int64, member_role String lc`),
		partition: "day", orderBy: "(job_key, attempt_key, proc_key, gen)", shardKey: "job_key", retention: keepRollup},
	// Which attempts a process is a member of, by its key alone.
	{name: "proc_index", columns: cols("day Date, proc_key UInt64, attempt_key UInt64, attempt_id String, job_key UInt64, start_ms Int64"),
		partition: "day", orderBy: "(proc_key, attempt_key)", shardKey: "job_key", retention: keepRollup},
	{name: "events", columns: cols(`day Date, job_key UInt64, ts Int64, host String lc, kind String lc, job_id String,
		attempt_id String, proc_key UInt64, pid Int32, message String, value Int64, agent_key UInt64, seq UInt64, idx UInt32`),
		partition: "day", orderBy: "(job_key, ts, agent_key, seq, idx)", shardKey: "job_key", retention: keepRollup},
	// Jobs: their figures over their attempts, a row per change; the
	// highest version of each is the job (the sum of its attempts'
	// versions: a later sum has seen more). Not partitioned: a job's first
	// day can move when an earlier attempt is told late.
	{name: "jobs", columns: cols(`day Date, job_key UInt64, job_id String, version UInt64, app_id String,
		framework String lc, name String, user_name String lc, queue String lc, first_ms Int64, last_ms Int64,
		attempts UInt32, running UInt32, cpu_ms Int64, peak_rss Int64, mem_gb_hours Float64, used_gb_hours Float64,
		hosts UInt32, by_type String`),
		version: "version", orderBy: "(job_key, job_id)", shardKey: "job_key"},
	// The metrics agents sent with no column of their own, by series kind.
	{name: "ext_metrics", columns: cols("kind UInt8, metric String"), orderBy: "(kind, metric)"},
}

// Schema is the DDL of the store's tables for one server or one cluster,
// and the names to read and write them by.
type Schema struct {
	Database string
	// Cluster: the cluster of remote_servers that the tables are made ON
	// (ReplicatedReplacingMergeTree under Distributed tables); "" for one
	// server.
	Cluster  string
	Features Features
	// ZooKeeperPrefix is the path under which the replicated tables keep
	// their metadata (default /clickhouse/tables/taskscope).
	ZooKeeperPrefix string
}

// Read is the name queries read table by: the table itself on one server,
// the Distributed table over every shard in a cluster.
func (s *Schema) Read(name string) string { return s.Database + "." + name }

// Write is the name inserts write table by: the same as Read. In a
// cluster the Distributed table takes each insert's block, splits it by
// shard (shard key modulo the shards) and, with InsertSettings, writes each
// shard's rows to one live replica of it before it answers.
func (s *Schema) Write(name string) string { return s.Read(name) }

// Local is the name of a table on each server (the replicated table in a
// cluster): what ALTERs of partitions name.
func (s *Schema) Local(name string) string {
	if s.Cluster == "" {
		return s.Database + "." + name
	}
	return s.Database + "." + name + "_local"
}

// InsertSettings are the settings of inserts: in a cluster, synchronous
// inserts through the Distributed tables (the answer comes once every
// shard's rows are on a replica).
func (s *Schema) InsertSettings() Settings {
	if s.Cluster == "" {
		return nil
	}
	return Settings{"insert_distributed_sync": "1"}
}

// localName is Local without the database: a table's name in
// system.tables.
func (s *Schema) localName(name string) string {
	return strings.TrimPrefix(s.Local(name), s.Database+".")
}

// On is " ON CLUSTER name" in a cluster, "" on one server.
func (s *Schema) On() string {
	if s.Cluster == "" {
		return ""
	}
	return " ON CLUSTER " + s.Cluster
}

// Tables is how many tables the schema makes on each server.
func (s *Schema) Tables() int {
	if s.Cluster != "" {
		return 2 * len(tables)
	}
	return len(tables)
}

// DDL is the statements that make the database and its tables, each
// idempotent (IF NOT EXISTS), in order.
func (s *Schema) DDL() []string {
	on := ""
	if s.Cluster != "" {
		on = " ON CLUSTER " + s.Cluster
	}
	out := []string{"CREATE DATABASE IF NOT EXISTS " + s.Database + on}
	for i := range tables {
		t := &tables[i]
		out = append(out, s.createTable(t, on))
		if s.Cluster != "" {
			key := t.shardKey
			if key == "" {
				key = "0"
			}
			out = append(out, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s%s AS %s ENGINE = Distributed(%s, %s, %s, %s)",
				s.Read(t.name), on, s.Local(t.name), s.Cluster, s.Database, t.name+"_local", key))
		}
	}
	return out
}

func (s *Schema) createTable(t *table, on string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s%s (", s.Local(t.name), on)
	for i, c := range t.columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name + " " + s.columnType(c))
	}
	b.WriteString(") ENGINE = ")
	if s.Cluster != "" {
		prefix := s.ZooKeeperPrefix
		if prefix == "" {
			prefix = "/clickhouse/tables/taskscope"
		}
		fmt.Fprintf(&b, "ReplicatedReplacingMergeTree('%s/{shard}/%s/%s', '{replica}'", prefix, s.Database, t.name)
		if t.version != "" {
			b.WriteString(", " + t.version)
		}
		b.WriteString(")")
	} else {
		b.WriteString("ReplacingMergeTree(" + t.version + ")")
	}
	if t.partition != "" {
		b.WriteString(" PARTITION BY " + t.partition)
	}
	b.WriteString(" ORDER BY " + t.orderBy)
	if t.granularity > 0 {
		fmt.Fprintf(&b, " SETTINGS index_granularity = %d", t.granularity)
	}
	return b.String()
}

// TTL is the ALTER that gives the tables of a retention kind a TTL as
// well (servers with TTL: 19.6 and later), beside the partitions that
// Maintain drops: days after which a partition's rows go.
func (s *Schema) TTL(days map[retentionKind]int) []string {
	if !s.Features.TTL {
		return nil
	}
	on := ""
	if s.Cluster != "" {
		on = " ON CLUSTER " + s.Cluster
	}
	var out []string
	for i := range tables {
		t := &tables[i]
		if d := days[t.retention]; d > 0 && t.byDay() {
			out = append(out, fmt.Sprintf("ALTER TABLE %s%s MODIFY TTL day + INTERVAL %d DAY", s.Local(t.name), on, d))
		}
	}
	return out
}

// Migrate adds to the tables on c the columns this version has that an
// older one made them without (the exit columns of attempts: a store of
// before them), ALTER TABLE ... ADD COLUMN, ON CLUSTER in a cluster (the
// replicated tables and the Distributed ones over them). Missing columns
// are read from this server's system.columns: every server of a cluster
// has the same.
func (s *Schema) Migrate(ctx context.Context, c *Client) error {
	rows, err := c.WithDatabase("system").Query(ctx, "SELECT table, name FROM system.columns WHERE database = "+
		Quote(s.Database), nil)
	if err != nil {
		return fmt.Errorf("cannot list the tables' columns: %w", err)
	}
	have := map[[2]string]bool{}
	for rows.Next() {
		have[[2]string{rows.String(), rows.String()}] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot list the tables' columns: %w", err)
	}
	for _, q := range s.migrations(have) {
		if err := c.WithDatabase("default").Exec(ctx, q, nil); err != nil {
			return fmt.Errorf("cannot add a column: %w", err)
		}
	}
	return nil
}

// migrations are the ALTERs that add the columns missing from have
// (table, column) on this server.
func (s *Schema) migrations(have map[[2]string]bool) []string {
	var out []string
	for i := range tables {
		t := &tables[i]
		names := []string{s.Local(t.name)}
		if s.Cluster != "" {
			names = append(names, s.Read(t.name))
		}
		for _, full := range names {
			local := strings.TrimPrefix(full, s.Database+".")
			if !have[[2]string{local, t.columns[0].name}] {
				continue // no such table here: DDL makes it whole
			}
			for _, c := range t.columns {
				if !have[[2]string{local, c.name}] {
					out = append(out, fmt.Sprintf("ALTER TABLE %s%s ADD COLUMN %s %s", full, s.On(), c.name, s.columnType(c)))
				}
			}
		}
	}
	return out
}

func (s *Schema) columnType(c column) string {
	typ := c.typ
	if c.lowCard && s.Features.LowCardinality {
		typ = "LowCardinality(" + typ + ")"
	}
	if c.codec != "" && s.Features.Codecs {
		typ += " CODEC(" + c.codec + ")"
	}
	return typ
}

// Create runs DDL on c (one server; in a cluster, any server of it: the
// statements run ON CLUSTER).
func (s *Schema) Create(ctx context.Context, c *Client) error {
	for _, q := range s.DDL() {
		if err := c.WithDatabase("default").Exec(ctx, q, nil); err != nil {
			return fmt.Errorf("cannot create the schema: %w", err)
		}
	}
	return nil
}
