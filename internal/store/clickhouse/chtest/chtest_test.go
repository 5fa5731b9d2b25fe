package chtest

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// query runs q on s over HTTP and returns its answer, trimmed.
func query(t *testing.T, s *Server, q string) string {
	t.Helper()
	resp, err := http.Post(s.URL()+"?"+url.Values{"query": {q}}.Encode(), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %s", q, resp.Status, body)
	}
	return strings.TrimSpace(string(body))
}

func TestServer(t *testing.T) {
	t0 := time.Now()
	s := Start(t)
	t.Logf("one server: up in %s, RSS %.1f MB", time.Since(t0).Round(time.Millisecond), float64(s.RSS())/1e6)
	if v := query(t, s, "SELECT version()"); !strings.HasPrefix(v, "1") && !strings.HasPrefix(v, "2") {
		t.Errorf("version() = %q", v)
	}
	query(t, s, "CREATE TABLE default.t (x UInt64) ENGINE = MergeTree ORDER BY x")
	query(t, s, "INSERT INTO default.t SELECT number FROM system.numbers LIMIT 1000")
	// Killed and started again on the same data: what was inserted is there.
	s.Kill()
	if s.Pid() != 0 {
		t.Fatal("still running after Kill")
	}
	s.Start(t)
	if n := query(t, s, "SELECT count() FROM default.t"); n != "1000" {
		t.Errorf("after kill -9 and a restart: %s rows, want 1000", n)
	}
}

// TestCluster starts 2 shards of 2 replicas on one ZooKeeper, creates a
// replicated table under a distributed one ON CLUSTER, and checks that a
// row written to one replica of a shard is read from the other, and that
// the distributed table reads both shards.
func TestCluster(t *testing.T) {
	t0 := time.Now()
	c := StartCluster(t, "tc", 2, 2)
	t.Logf("ZooKeeper and 4 servers: up in %s, RSS %.1f MB (ZooKeeper %.1f)", time.Since(t0).Round(time.Millisecond),
		float64(c.RSS())/1e6, float64(c.ZK.RSS())/1e6)
	first := c.Shards[0][0]
	query(t, first, "CREATE DATABASE IF NOT EXISTS db ON CLUSTER tc")
	query(t, first, "CREATE TABLE db.local ON CLUSTER tc (k UInt64, v String) ENGINE = "+
		"ReplicatedMergeTree('/tables/{shard}/db/local', '{replica}') ORDER BY k")
	query(t, first, "CREATE TABLE db.all ON CLUSTER tc AS db.local ENGINE = Distributed(tc, db, local, k)")
	for i, row := range c.Shards {
		query(t, row[0], fmt.Sprintf("INSERT INTO db.local VALUES (%d, 'shard %d')", i, i))
	}
	for i, row := range c.Shards {
		testsrv.WaitUntil(t, "replication", 30*time.Second, func() bool {
			return query(t, row[1], "SELECT count() FROM db.local") == "1"
		})
		if v := query(t, row[1], "SELECT v FROM db.local"); v != fmt.Sprintf("shard %d", i) {
			t.Errorf("shard %d's second replica holds %q", i, v)
		}
	}
	if n := query(t, first, "SELECT count() FROM db.all"); n != "2" {
		t.Errorf("the distributed table reads %s rows, want 2", n)
	}
	t.Logf("after the DDL and inserts: RSS %.1f MB", float64(c.RSS())/1e6)
}
