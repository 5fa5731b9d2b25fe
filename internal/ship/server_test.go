package ship

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// jobBatch is a batch of one attempt with one process and n samples.
func jobBatch(n int, t0 int64) *wire.Batch {
	const attempt, job = "attempt_1700000000123_0001_m_000000_0", "job_1700000000123_0001"
	key := wire.ProcessKey("node1", 4242, 1_700_000_000_000)
	b := &wire.Batch{Version: wire.Version, Host: "node1", Metrics: []string{wire.CPUUserMs, wire.RSSBytes}}
	b.Processes = []wire.Process{{Key: key, PID: 4242, PPID: 1, StartMs: 1_700_000_000_000, Cmdline: "java YarnChild", Comm: "java", Role: wire.RoleTaskJVM}}
	b.Attempts = []wire.Attempt{{AttemptID: attempt, JobID: job, Type: "map", Framework: "mapreduce", FirstMs: 1_700_000_000_000, LastMs: t0 + int64(n)*1000}}
	b.Members = []wire.Membership{{Process: key, AttemptID: attempt, FromMs: 1_700_000_000_000, Role: wire.RoleTaskJVM}}
	s := wire.Series{Key: key, Columns: []wire.Column{{Metric: 0}, {Metric: 1}}}
	for i := 0; i < n; i++ {
		s.Times = append(s.Times, t0+int64(i)*1000)
		s.Columns[0].Values = append(s.Columns[0].Values, int64(i)*100)
		s.Columns[1].Values = append(s.Columns[1].Values, 100<<20)
	}
	b.ProcSeries = []wire.Series{s}
	return b
}

// TestRealServer ships to `taskscope server` with a DuckDB store, through
// a proxy that loses the answer to the first delivery: the retry is answered
// as a duplicate, and the store has the batch once.
func TestRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server with a DuckDB store")
	}
	st, err := duckdb.Open(duckdb.Options{SummaryEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tokens, err := auth.ParseTokens(strings.NewReader("tok"), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(server.Config{Listen: "127.0.0.1:0", Store: st, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(t.Context())
	target, _ := url.Parse(srv.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	var n atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			// Deliver, then lose the answer.
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK && rec.Code != http.StatusAccepted && rec.Code != http.StatusNoContent {
				t.Errorf("first delivery: %d %s", rec.Code, rec.Body)
			}
			http.Error(w, "lost", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	s := start(t, Config{URLs: []string{proxy.URL}, Token: "tok", SpoolDir: t.TempDir()})
	t0 := time.Now().Add(-time.Minute).UnixMilli()
	s.Enqueue(jobBatch(10, t0))
	s.Enqueue(jobBatch(10, t0+10_000))
	s.flush(t, 20*time.Second)
	if stt := s.Stats(); stt.Sent != 2 || stt.Duplicates != 1 || stt.Retries != 1 || stt.Rejected != 0 {
		t.Errorf("stats %+v: want 2 sent, one of them a duplicate after one retry", stt)
	}
	resp, err := http.Get(srv.URL() + "/api/v1/jobs/job_1700000000123_0001")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("job: %d %s", resp.StatusCode, body)
	}
	var job struct {
		Attempts    int `json:"attempts"`
		AttemptList []struct {
			AttemptID string `json:"attempt_id"`
			Processes int    `json:"processes"`
		} `json:"attempt_list"`
	}
	if err := json.Unmarshal(body, &job); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if job.Attempts != 1 || len(job.AttemptList) != 1 || job.AttemptList[0].Processes != 1 {
		t.Errorf("job as the server has it: %s", body)
	}
	// A wrong token is retried, not rejected: nothing is lost.
	bad := start(t, Config{URLs: []string{srv.URL()}, Token: "wrong"})
	bad.Enqueue(jobBatch(1, t0+30_000))
	testsrv.WaitUntil(t, "retries with a wrong token", 10*time.Second, func() bool { return bad.Stats().Retries >= 2 })
	if stt := bad.Stats(); stt.Rejected != 0 || stt.QueuedBatches != 1 {
		t.Errorf("with a wrong token: %+v", stt)
	}
}
