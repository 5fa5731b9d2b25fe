package server

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

var chShape = flag.String("ch.cluster", "2x1", "TestClickHouseClusterKilled: ClickHouse shards x replicas (make test-cluster: 2x2)")

// balancer is an HTTP load balancer: each request to the next backend in
// turn, and to the one after if that one does not answer (as a balancer
// that takes a dead server out). Consecutive batches of one agent go to
// different taskscope replicas.
type balancer struct {
	backends []string
	next     atomic.Int64
	client   *http.Client
	resent   atomic.Int64 // requests sent again to another backend
}

func (lb *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	first := int(lb.next.Add(1))
	for i := range lb.backends {
		be := lb.backends[(first+i)%len(lb.backends)]
		req, err := http.NewRequestWithContext(r.Context(), r.Method, be+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := lb.client.Do(req)
		if err != nil {
			// Down, or killed before it answered: the next one (a batch
			// it may have stored is sent again).
			if i+1 < len(lb.backends) {
				lb.resent.Add(1)
			}
			continue
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	http.Error(w, "no backend answers", http.StatusBadGateway)
}

// TestClickHouseClusterKilled: two taskscope replicas behind a round-robin
// balancer store into a ClickHouse cluster (2 shards on one ZooKeeper; 2
// replicas each with -ch.cluster=2x2, make test-cluster) while agents ship;
// one taskscope replica and one ClickHouse server are killed with SIGKILL
// mid-ingest and started again. In the end every sample the agents sent is
// stored exactly once: the counts against what was sent, per process too.
func TestClickHouseClusterKilled(t *testing.T) {
	var shards, reps int
	if _, err := fmt.Sscanf(*chShape, "%dx%d", &shards, &reps); err != nil || shards < 1 || reps < 1 {
		t.Fatalf("-ch.cluster %q: want SHARDSxREPLICAS", *chShape)
	}
	t0 := time.Now()
	cl := chtest.StartCluster(t, "tsc", shards, reps)
	t.Logf("%d x %d ClickHouse servers and ZooKeeper up in %s, RSS %.0f MB", shards, reps, time.Since(t0).Round(time.Millisecond),
		float64(cl.RSS())/1e6)
	first, last := cl.Shards[0][0], cl.Shards[shards-1][reps-1]
	urlA, urlB := first.URL()+"?database=ts", last.URL()+"?database=ts"
	// The schema, made ON CLUSTER once before the servers start.
	pre, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: urlA, Cluster: "tsc"})
	if err != nil {
		t.Fatal(err)
	}
	pre.Close()
	args := func(u string) []string {
		return []string{"--store", "clickhouse", "--clickhouse-url", u, "--clickhouse-cluster", "tsc"}
	}
	addrA, addrB := testsrv.FreeAddr(t), testsrv.FreeAddr(t)
	a := startServer(t, addrA, t.TempDir(), plainClient, "http", args(urlA)...)
	b := startServer(t, addrB, t.TempDir(), plainClient, "http", args(urlB)...)
	lb := &balancer{backends: []string{a.url, b.url}, client: &http.Client{Timeout: 30 * time.Second}}
	lbSrv := &http.Server{Handler: lb}
	lbAddr := testsrv.FreeAddr(t)
	ln, err := netListen(lbAddr)
	if err != nil {
		t.Fatal(err)
	}
	go lbSrv.Serve(ln)
	defer lbSrv.Close()

	const nodes, total = 4, 48
	g := source(nodes)
	sh := newShippers(t, nodes, "http://"+lbAddr, &http.Client{Timeout: 30 * time.Second}, t.TempDir(), "")
	var exp expected
	next := 0
	feed := func(until int) {
		for ; next < until; next++ {
			sh.enqueue(t, &exp, g)
		}
	}
	feed(total / 3)
	testsrv.WaitUntil(t, "batches acknowledged", 120*time.Second, func() bool { return sh.sent() >= uint64(total/6*nodes) })
	// Mid-ingest: a taskscope replica and a ClickHouse server (of the
	// second shard: its other replica takes its writes, or with one
	// replica the shard's writes wait for it).
	victim := cl.Shards[shards-1][0]
	a.kill()
	victim.Kill()
	killedAt := sh.sent()
	feed(2 * total / 3)
	testsrv.WaitUntil(t, "some batches while they are down", 120*time.Second, func() bool { return sh.sent() > killedAt || reps == 1 })
	victim.StartRecovering(t)
	a = startServer(t, addrA, t.TempDir(), plainClient, "http", args(urlA)...)
	lb.backends[0] = a.url
	feed(total)
	sh.flush(t, 180*time.Second)
	retries, dups := sh.totals(t)
	t.Logf("%d batches, %d samples sent; %d sends retried by the agents, %d sent again to the other replica by the balancer, %d answered as duplicates",
		total*nodes, exp.samples, retries, lb.resent.Load(), dups)
	if retries == 0 && lb.resent.Load() == 0 {
		t.Error("no retries: the kills did not interrupt ingest")
	}
	sh.stop()
	a.stop(t)
	b.stop(t)
	// Every replica of every shard has its shard's rows.
	st, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: urlA, Cluster: "tsc"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !exp.checkStore(t, st) {
		overlaps(t, st.Client())
	}
	// The analyser's look (job_changes over the shards, by the time the
	// replicas wrote them) lists every job stored, written since the test
	// began.
	page, err := st.Jobs(context.Background(), store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	states, err := st.AnalysisStates(context.Background(), t0.UnixMilli(), 10_000)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range states {
		listed[s.Job.JobID] = true
		if time.UnixMilli(int64(s.Changed)).Before(t0) {
			t.Errorf("job %s written at %d, before the test began", s.Job.JobID, s.Changed)
		}
	}
	for _, j := range page.Jobs {
		if !listed[j.JobID] {
			t.Errorf("job %s is not among the %d jobs written since the test began", j.JobID, len(states))
		}
	}
	if len(states) != len(page.Jobs) || len(states) == 0 {
		t.Errorf("%d jobs written since the test began, %d stored", len(states), len(page.Jobs))
	}
	c := st.Client()
	// The samples of the chunks' rows, a batch's chunks counted once a
	// slot (one stored by two replicas at once in two slots, across the
	// 10 minutes that separate them, is twice on disk and read once).
	physical := func() uint64 {
		rows, err := c.Query(context.Background(), `SELECT sum(n) - (SELECT sum(n * (slots - 1)) FROM (SELECT any(n) AS n,
			uniqExact(slot) AS slots FROM ts.series_chunks WHERE kind = 0 GROUP BY job_key, key, t_min, level))
			FROM ts.series_chunks WHERE kind = 0`, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rows.UInt64()
	}
	before := physical()
	// (18.16 fails OPTIMIZE of a replicated table ON CLUSTER: each
	// shard's first replica is asked, and its replicas merge alike.)
	// A replica killed and started again rejoins ZooKeeper, its table's
	// leader election and its replication queue: until it has, 18.16's
	// OPTIMIZE fails with "No active replicas" (254), "Leader was suddenly
	// changed" (292) or "Unknown log entry type" (49), and is asked again.
	for _, row := range cl.Shards {
		var err error
		tries, codes := 0, map[int]int{}
		testsrv.Poll(90*time.Second, func() bool {
			tries++
			err = c.WithHost(row[0].Addr()).Exec(context.Background(), "OPTIMIZE TABLE ts.series_chunks_local FINAL", nil)
			var ex *clickhouse.Exception
			if errors.As(err, &ex) {
				codes[ex.Code]++
			}
			return err == nil || ex == nil
		})
		if err != nil {
			queues(t, c, cl)
			t.Fatalf("OPTIMIZE, %d tries (exception codes and their counts %v): %v", tries, codes, err)
		}
		if tries > 1 {
			t.Logf("OPTIMIZE on %s took %d tries (exception codes and their counts %v)", row[0].Addr(), tries, codes)
		}
	}
	var after uint64
	if !testsrv.Poll(60*time.Second, func() bool { after = physical(); return after == uint64(exp.samples) }) {
		queues(t, c, cl)
		t.Fatalf("timed out waiting for the merges: %d process samples in the chunks' rows, %d sent", after, exp.samples)
	}
	t.Logf("process samples: %d sent; %d in the chunks' rows before the merges (rows written twice by retries not merged yet), %d after",
		exp.samples, before, after)
	t.Logf("test took %s; RSS of ClickHouse and ZooKeeper at the end %.0f MB", time.Since(t0).Round(time.Second), float64(cl.RSS())/1e6)
}

// queues logs what each ClickHouse server's replication queue holds and why
// its entries wait, for a test that timed out waiting for them.
func queues(t *testing.T, c *clickhouse.Client, cl *chtest.Cluster) {
	t.Helper()
	for _, row := range cl.Shards {
		for _, srv := range row {
			rows, err := c.WithHost(srv.Addr()).Query(context.Background(), `SELECT concat(table, ' ', toString(type),
				' tries ', toString(num_tries), ' postponed ', toString(num_postponed), ': ', postpone_reason, ' / ', last_exception)
				FROM system.replication_queue WHERE database = 'ts' LIMIT 20`, nil)
			if err != nil {
				t.Logf("%s: the replication queue cannot be read: %v", srv.Addr(), err)
				continue
			}
			var q []string
			for rows.Next() {
				q = append(q, rows.String())
			}
			t.Logf("%s: replication queue %q", srv.Addr(), q)
		}
	}
}

// overlaps logs process chunks that hold samples of the same times as
// another chunk of their process, for a test whose counts disagree.
func overlaps(t *testing.T, c *clickhouse.Client) {
	t.Helper()
	rows, err := c.Query(context.Background(), `SELECT key, job_key, t_min, t_max, n, level, slot
		FROM ts.series_chunks WHERE kind = 0 ORDER BY key, t_min, job_key, slot`, nil)
	if err != nil {
		t.Logf("the chunks cannot be read: %v", err)
		return
	}
	type row struct {
		key, job   uint64
		tmin, tmax int64
		n          uint32
		level      uint8
		slot       uint32
	}
	var prev row
	shown := 0
	for rows.Next() && shown < 20 {
		r := row{key: rows.UInt64(), job: rows.UInt64(), tmin: rows.Int64(), tmax: rows.Int64(), n: rows.UInt32(),
			level: rows.UInt8(), slot: rows.UInt32()}
		if r.key == prev.key && r.tmin <= prev.tmax {
			t.Logf("process %016x: chunk %+v overlaps %+v", r.key, r, prev)
			shown++
		}
		prev = r
	}
}

func netListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
