package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

func count(t *testing.T, c *Client, q string) uint64 {
	t.Helper()
	rows, err := c.Query(context.Background(), q, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := rows.UInt64()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// chunkRow is a row of chunks (or rollups) for tests.
func chunkRow(b *Block, dayMs int64, job, key uint64, data string) {
	b.Row()
	b.Date(dayMs)
	b.UInt8(0)
	b.UInt64(job)
	b.UInt64(key)
	b.Int64(dayMs)
	b.Int64(dayMs + 4000)
	b.UInt32(5)
	b.UInt8(0)
	b.Int64(dayMs - 1000)
	b.String(data)
}

var chunkColumns = []string{"day", "kind", "job_key", "key", "t_min", "t_max", "n", "level", "start_ms", "data"}

// TestSchemaOneServer: 18.16 takes the schema, twice (it is idempotent);
// a row written twice is read once with FINAL and kept once after a merge;
// a day's partition is dropped whole.
func TestSchemaOneServer(t *testing.T) {
	srv := chtest.Start(t)
	c, err := NewClient(srv.URL()+"?database=ts", ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := c.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &Schema{Database: "ts", Features: FeaturesOf(v)}
	for i := 0; i < 2; i++ {
		if err := s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, c, "SELECT count() FROM system.tables WHERE database = 'ts'"); n != uint64(len(tables)) {
		t.Errorf("%d tables, want %d", n, len(tables))
	}
	day1 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()
	day2 := day1 + 86_400_000
	var b Block
	chunkRow(&b, day1, 1, 10, "a")
	chunkRow(&b, day2, 1, 10, "b")
	for i := 0; i < 2; i++ {
		if err := c.Insert(ctx, s.Write("chunks"), chunkColumns, b.Bytes(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, c, "SELECT count() FROM "+s.Read("chunks")+" FINAL"); n != 2 {
		t.Errorf("two rows written twice: %d read with FINAL, want 2", n)
	}
	if err := c.Exec(ctx, "OPTIMIZE TABLE "+s.Write("chunks")+" PARTITION '2026-11-30' FINAL", nil); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT count() FROM "+s.Read("chunks")+" WHERE day = '2026-11-30'"); n != 1 {
		t.Errorf("a row written twice: %d after a merge, want 1", n)
	}
	if err := c.Exec(ctx, "ALTER TABLE "+s.Write("chunks")+" DROP PARTITION '2026-11-30'", nil); err != nil {
		t.Fatal(err)
	}
	if n := count(t, c, "SELECT count() FROM "+s.Read("chunks")+" FINAL"); n != 1 {
		t.Errorf("after the first day's partition is dropped: %d rows, want 1", n)
	}
}

// TestSchemaDDLFeatures: what newer servers get (not installable here:
// their DDL is checked as text).
func TestSchemaDDLFeatures(t *testing.T) {
	old := &Schema{Database: "ts", Features: FeaturesOf(Version{18, 16, 1})}
	recent := &Schema{Database: "ts", Cluster: "c1", Features: FeaturesOf(Version{23, 8, 0})}
	oldDDL, newDDL := strings.Join(old.DDL(), "\n"), strings.Join(recent.DDL(), "\n")
	for _, no := range []string{"CODEC", "LowCardinality", "ON CLUSTER", "Replicated", "Distributed"} {
		if strings.Contains(oldDDL, no) {
			t.Errorf("18.16's DDL has %s", no)
		}
	}
	for _, yes := range []string{"data String CODEC(ZSTD(3))", "host LowCardinality(String)", "ON CLUSTER c1",
		"ReplicatedReplacingMergeTree('/clickhouse/tables/taskscope/{shard}/ts/attempts', '{replica}', version)",
		"CREATE TABLE IF NOT EXISTS ts.chunks ON CLUSTER c1 AS ts.chunks_local ENGINE = Distributed(c1, ts, chunks_local, job_key)"} {
		if !strings.Contains(newDDL, yes) {
			t.Errorf("23.8's DDL lacks %s", yes)
		}
	}
	if ttl := old.TTL(map[retentionKind]int{keepRaw: 14, keepRollup: 180}); len(ttl) != 0 {
		t.Errorf("18.16 has no TTL: %v", ttl)
	}
	ttl := strings.Join(recent.TTL(map[retentionKind]int{keepRaw: 14, keepRollup: 180}), "\n")
	if !strings.Contains(ttl, "ALTER TABLE ts.chunks_local ON CLUSTER c1 MODIFY TTL day + INTERVAL 14 DAY") ||
		!strings.Contains(ttl, "ts.events_local ON CLUSTER c1 MODIFY TTL day + INTERVAL 180 DAY") {
		t.Errorf("TTL: %s", ttl)
	}
}

// TestSchemaCluster: on 2 shards of 2 replicas, the schema is made ON
// CLUSTER from one server; a row written to a shard's first replica is on
// its second; the distributed table reads every shard; the same block
// written again to the other replica is dropped by replicated
// deduplication; a partition dropped ON CLUSTER goes from every replica.
func TestSchemaCluster(t *testing.T) {
	cl := chtest.StartCluster(t, "tscluster", 2, 2)
	ctx := context.Background()
	clients := map[*chtest.Server]*Client{}
	for _, srv := range cl.Servers() {
		c, err := NewClient(srv.URL()+"?database=ts", ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		clients[srv] = c
	}
	first := clients[cl.Shards[0][0]]
	v, err := first.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &Schema{Database: "ts", Cluster: "tscluster", Features: FeaturesOf(v)}
	t0 := time.Now()
	if err := s.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	t.Logf("schema made ON CLUSTER in %s", time.Since(t0).Round(time.Millisecond))
	day := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()
	for i, row := range cl.Shards {
		var b Block
		for k := 0; k < 3; k++ {
			// Keys of this shard: job_key % 2 == i.
			chunkRow(&b, day, uint64(2*k+i), uint64(k), fmt.Sprintf("shard %d row %d", i, k))
		}
		// To the shard's local table on its first replica, then the same
		// block to its second: deduplicated.
		if err := clients[row[0]].Insert(ctx, s.Local("chunks"), chunkColumns, b.Bytes(), nil); err != nil {
			t.Fatal(err)
		}
		if err := clients[row[1]].Insert(ctx, s.Local("chunks"), chunkColumns, b.Bytes(), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, row := range cl.Shards {
		for _, srv := range row {
			c := clients[srv]
			testsrv.WaitUntil(t, srv.Name+" to hold its shard's rows", 30*time.Second, func() bool {
				return count(t, c, "SELECT count() FROM "+s.Local("chunks")) == 3
			})
		}
	}
	for _, srv := range cl.Servers() {
		if n := count(t, clients[srv], "SELECT count() FROM "+s.Read("chunks")); n != 6 {
			t.Errorf("%s reads %d rows of the distributed table, want 6", srv.Name, n)
		}
	}
	// Through the distributed table, synchronously: each row to its shard.
	var b Block
	for k := 0; k < 4; k++ {
		chunkRow(&b, day, uint64(100+k), uint64(100+k), "routed")
	}
	if err := clients[cl.Shards[1][1]].Insert(ctx, s.Write("chunks"), chunkColumns, b.Bytes(), s.InsertSettings()); err != nil {
		t.Fatal(err)
	}
	for i, row := range cl.Shards {
		for _, srv := range row {
			c := clients[srv]
			testsrv.WaitUntil(t, fmt.Sprintf("%s to hold shard %d's 2 rows", srv.Name, i), 30*time.Second, func() bool {
				return count(t, c, "SELECT count() FROM "+s.Local("chunks")+" WHERE data = 'routed'") == 2
			})
			if n := count(t, c, "SELECT count() FROM "+s.Local("chunks")+" WHERE data = 'routed' AND job_key % 2 = "+fmt.Sprint(i)); n != 2 {
				t.Errorf("%s holds rows of another shard", srv.Name)
			}
		}
	}
	if err := first.Exec(ctx, "ALTER TABLE "+s.Local("chunks")+" ON CLUSTER tscluster DROP PARTITION '2026-11-30'", nil); err != nil {
		t.Fatal(err)
	}
	for _, srv := range cl.Servers() {
		c := clients[srv]
		testsrv.WaitUntil(t, srv.Name+" to drop the partition", 30*time.Second, func() bool {
			return count(t, c, "SELECT count() FROM "+s.Local("chunks")) == 0
		})
	}
	t.Logf("RSS of ZooKeeper and the 4 servers: %.0f MB", float64(cl.RSS())/1e6)
}

// exitColumnNames are the columns of attempts that the first schema had
// not (an attempt's end).
var exitColumnNames = []string{"exit_jvm", "exit_jvm_ms", "exit_root", "exit_root_ms", "exit_file", "exit_file_ms", "exit_nm",
	"exit_nm_ms", "exit_diag", "oom_kills", "exit_log", "exit_log_ms"}

// TestSchemaMigrate: a database made before the exit columns (18.16 here)
// gets them when a store opens it, keeps its rows (read with the new
// columns' defaults), and takes attempts' ends; opening it again changes
// nothing.
func TestSchemaMigrate(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	st, err := Open(ctx, Options{URL: srv.URL() + "?database=old", InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	c := st.Client()
	for _, col := range exitColumnNames {
		if err := c.Exec(ctx, "ALTER TABLE old.attempts DROP COLUMN "+col, nil); err != nil {
			t.Fatal(err)
		}
	}
	old := st.Schema()
	var b Block
	b.Row()
	b.Date(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli())
	b.UInt64(jobKey("job_1_0001"))
	b.String("attempt_1_0001_m_000000_0")
	b.UInt64(1)
	b.UInt64(1)
	b.String("job_1_0001")
	if err := c.Insert(ctx, old.Write("attempts"), []string{"day", "job_key", "attempt_id", "attempt_key", "version", "job_id"},
		b.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	st.Close()
	have := func() int {
		return int(count(t, c, "SELECT count() FROM system.columns WHERE database = 'old' AND table = 'attempts' AND name IN ("+
			QuoteList(exitColumnNames)+")"))
	}
	if n := have(); n != 0 {
		t.Fatalf("%d exit columns after dropping them", n)
	}
	for i := 0; i < 2; i++ {
		st, err := Open(ctx, Options{URL: srv.URL() + "?database=old", InsertEvery: -1})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if n := have(); n != len(exitColumnNames) {
			t.Errorf("open %d: %d exit columns, want %d", i, n, len(exitColumnNames))
		}
		j, err := st.Job(ctx, "job_1_0001")
		if err != nil {
			t.Fatal(err)
		}
		if len(j.AttemptList) != 1 || j.AttemptList[0].ExitCode != nil || j.AttemptList[0].ExitSource != "" {
			t.Errorf("open %d: the old row reads %+v", i, j.AttemptList)
		}
		st.Close()
	}
}

// TestSchemaMigrations: in a cluster, a column missing is added ON
// CLUSTER to the replicated table and to the Distributed one over it.
func TestSchemaMigrations(t *testing.T) {
	s := &Schema{Database: "ts", Cluster: "c1", Features: FeaturesOf(Version{23, 8, 0})}
	have := map[[2]string]bool{}
	for _, tb := range tables {
		for _, c := range tb.columns {
			have[[2]string{tb.name + "_local", c.name}] = true
			have[[2]string{tb.name, c.name}] = true
		}
	}
	if m := s.migrations(have); len(m) != 0 {
		t.Errorf("nothing missing: %v", m)
	}
	delete(have, [2]string{"attempts_local", "exit_diag"})
	delete(have, [2]string{"attempts", "exit_diag"})
	got := strings.Join(s.migrations(have), "\n")
	want := "ALTER TABLE ts.attempts_local ON CLUSTER c1 ADD COLUMN exit_diag String\n" +
		"ALTER TABLE ts.attempts ON CLUSTER c1 ADD COLUMN exit_diag String"
	if got != want {
		t.Errorf("migrations:\n%s\nwant\n%s", got, want)
	}
}
