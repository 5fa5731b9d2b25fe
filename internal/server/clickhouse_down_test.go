package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestClickHouseDown: while its ClickHouse is down (killed, then started
// again), a server answers every read of the API 503 with Retry-After and a
// reason that names no address of ClickHouse's (it named it in a 500
// before), and the ingest endpoint 503 (the agents keep their batches);
// once ClickHouse is back, reads answer again and every sample the agents
// sent is stored once.
func TestClickHouseDown(t *testing.T) {
	ch := chtest.Start(t)
	ctx := context.Background()
	st, err := clickhouse.Open(ctx, clickhouse.Options{URL: ch.URL() + "?database=down", InsertEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	const nodes = 2
	g := source(nodes)
	sh := newShippers(t, nodes, srv.URL(), plainClient, t.TempDir(), "")
	var exp expected
	for range 6 {
		sh.enqueue(t, &exp, g)
	}
	testsrv.WaitUntil(t, "batches stored", 60*time.Second, func() bool { return sh.sent() == 6*nodes })
	var jobs struct {
		Jobs []struct {
			JobID string `json:"job_id"`
		} `json:"jobs"`
	}
	// (The jobs' rows are written at the summaries' flush, within a
	// second of the commit.)
	var code int
	var body string
	if !testsrv.Poll(10*time.Second, func() bool {
		code, body = getText(t, srv.URL()+"/api/v1/jobs")
		return code == http.StatusOK && json.Unmarshal([]byte(body), &jobs) == nil && len(jobs.Jobs) > 0
	}) {
		t.Fatalf("jobs before: %d %s", code, body)
	}
	job := jobs.Jobs[0].JobID
	ch.Kill()
	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/" + job, "/api/v1/jobs/" + job + "/findings",
		"/api/v1/jobs/" + job + "/series?metrics=cpu_percent", "/api/v1/hosts", "/api/v1/events", "/api/v1/waste"} {
		resp, err := plainClient.Get(srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(string(body), "the store is unavailable") {
			t.Errorf("GET %s with ClickHouse down: %d (Retry-After %q) %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if strings.Contains(string(body), ch.Addr()) || strings.Contains(string(body), "127.0.0.1") {
			t.Errorf("GET %s with ClickHouse down names its address: %s", path, body)
		}
	}
	// The agents go on: their batches are refused (503), kept, sent again.
	retried, _ := sh.totals(t)
	for range 6 {
		sh.enqueue(t, &exp, g)
	}
	testsrv.WaitUntil(t, "the agents' batches refused", 60*time.Second, func() bool {
		r, _ := sh.totals(t)
		return r > retried
	})
	if code, body := getText(t, srv.URL()+"/healthz"); strings.Contains(body, ch.Addr()) {
		t.Errorf("/healthz with ClickHouse down names its address: %d %s", code, body)
	}
	ch.Start(t)
	sh.flush(t, 120*time.Second)
	if code, body := getText(t, srv.URL()+"/api/v1/jobs/"+job); code != http.StatusOK {
		t.Errorf("GET a job once ClickHouse is back: %d %s", code, body)
	}
	sh.stop()
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	exp.checkStore(t, st)
}

// getText GETs u: its status and body.
func getText(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := plainClient.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
