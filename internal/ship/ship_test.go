package ship

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// batch is a small valid batch with n process samples; tag goes in its
// host name so that the test can tell batches apart.
func batch(n int) *wire.Batch {
	b := &wire.Batch{Version: wire.Version, Host: "node1", Metrics: []string{wire.CPUUserMs}}
	key := wire.ProcessKey("node1", 42, 1_700_000_000_000)
	b.Processes = []wire.Process{{Key: key, PID: 42, StartMs: 1_700_000_000_000, Cmdline: "java", Role: wire.RoleTaskJVM}}
	s := wire.Series{Key: key}
	col := wire.Column{Metric: 0}
	for i := 0; i < n; i++ {
		s.Times = append(s.Times, 1_700_000_000_000+int64(i)*1000)
		col.Values = append(col.Values, int64(i*7919%1000))
	}
	s.Columns = []wire.Column{col}
	b.ProcSeries = []wire.Series{s}
	return b
}

// received is a batch as a server got it.
type received struct {
	agent string
	seq   uint64
	stats wire.AgentStats
	at    time.Time
}

// ingestServer decodes what agents post (zstd, then the wire format) and
// answers what status says (nil: 200).
type ingestServer struct {
	t      *testing.T
	mu     sync.Mutex
	got    []received
	tries  []time.Time
	status func(n int, agent string, seq uint64) (int, http.Header)
	dec    *zstd.Decoder
	// lists: requests of several batches taken; noLists: answer them 415.
	lists   int
	noLists bool
}

func newIngestServer(t *testing.T) *ingestServer {
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dec.Close)
	return &ingestServer{t: t, dec: dec}
}

func (s *ingestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries = append(s.tries, time.Now())
	if r.URL.Path != "/api/v1/ingest" || r.Method != http.MethodPost {
		http.Error(w, "not here", http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	ct := r.Header.Get("Content-Type")
	if r.Header.Get("Content-Encoding") != "zstd" || ct != wire.ContentType && ct != wire.ListContentType {
		s.t.Errorf("headers %v", r.Header)
	}
	if ct == wire.ListContentType && s.noLists {
		http.Error(w, "no lists here", http.StatusUnsupportedMediaType)
		return
	}
	raw, err := s.dec.DecodeAll(body, nil)
	if err != nil {
		s.t.Errorf("body is not zstd: %v", err)
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	parts, err := wire.Bodies(ct, raw)
	if err != nil {
		s.t.Errorf("body: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []received
	for i, part := range parts {
		b, err := wire.Unmarshal(part, wire.DefaultLimits)
		if err == nil {
			err = wire.Validate(b)
		}
		if err != nil {
			s.t.Errorf("batch: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if i == 0 && (r.Header.Get("X-Taskscope-Agent") != b.AgentID || r.Header.Get("X-Taskscope-Seq") != fmt.Sprint(b.Seq)) {
			s.t.Errorf("headers %s/%s for batch %s/%d", r.Header.Get("X-Taskscope-Agent"), r.Header.Get("X-Taskscope-Seq"), b.AgentID, b.Seq)
		}
		if s.status != nil {
			code, h := s.status(len(s.tries), b.AgentID, b.Seq)
			for k, v := range h {
				w.Header()[k] = v
			}
			if code/100 != 2 {
				http.Error(w, "no", code)
				return
			}
		}
		got = append(got, received{agent: b.AgentID, seq: b.Seq, stats: b.Stats, at: time.Now()})
	}
	s.got = append(s.got, got...)
	if ct == wire.ListContentType {
		s.lists++
	}
}

func (s *ingestServer) setStatus(f func(n int, agent string, seq uint64) (int, http.Header)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = f
}

func (s *ingestServer) triesAt() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.tries...)
}

func (s *ingestServer) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// deadURL is the URL of a port nothing listens on (connection refused).
func deadURL(t *testing.T) (string, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr, addr
}

// running is a Shipper with its Run goroutine.
type running struct {
	*Shipper
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	return run(t, newShipper(t, cfg))
}

// newShipper makes a Shipper with the tests' short backoffs, not yet running.
func newShipper(t *testing.T, cfg Config) *Shipper {
	t.Helper()
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	}
	if cfg.Host == "" {
		cfg.Host = "node1"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs s until the test ends.
func run(t *testing.T, s *Shipper) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Shipper: s, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); s.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

func (r *running) flush(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.batch"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func wantOrder(t *testing.T, got []received, want ...string) {
	t.Helper()
	var g []string
	for _, r := range got {
		g = append(g, fmt.Sprintf("%s/%d", r.agent, r.seq))
	}
	if strings.Join(g, " ") != strings.Join(want, " ") {
		t.Errorf("server received\n %s\nwant\n %s", strings.Join(g, " "), strings.Join(want, " "))
	}
}

func seqs(agent string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s/%d", agent, i))
	}
	return out
}

// Batches spooled while no server answers are replayed in order by the
// next agent that starts with the same spool, before its own.
func TestSpoolReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	dead, _ := deadURL(t)
	a := start(t, Config{URLs: []string{dead}, SpoolDir: dir})
	for i := 0; i < 5; i++ {
		if err := a.Enqueue(batch(3)); err != nil {
			t.Fatal(err)
		}
	}
	testsrv.WaitUntil(t, "a failed delivery", 10*time.Second, func() bool { return a.Stats().Retries > 0 })
	a.stop()
	if n := len(spoolFiles(t, dir)); n != 5 {
		t.Fatalf("%d batches in the spool after the agent stopped, want 5", n)
	}
	if st := a.Stats(); st.SpooledBatches != 5 || st.SpooledBytes != st.QueuedBytes {
		t.Errorf("stats %+v: want all 5 queued batches spooled", st)
	}
	srv := newIngestServer(t)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	// What the new agent found in the spool, before it sends anything.
	nb := newShipper(t, Config{URLs: []string{hs.URL}, SpoolDir: dir})
	if st := nb.Stats(); st.QueuedBatches != 5 {
		t.Errorf("the new agent queued %d spooled batches, want 5", st.QueuedBatches)
	}
	b := run(t, nb)
	b.Enqueue(batch(1))
	b.Enqueue(batch(1))
	b.flush(t, 10*time.Second)
	wantOrder(t, srv.received(), append(seqs(a.AgentID(), 1, 5), seqs(b.AgentID(), 1, 2)...)...)
	if n := len(spoolFiles(t, dir)); n != 0 {
		t.Errorf("%d batches left in the spool", n)
	}
	if st := b.Stats(); st.Sent != 7 || st.SentSamples != 17 || st.QueuedBatches != 0 || st.QueuedBytes != 0 {
		t.Errorf("stats %+v", st)
	}
}

// While no server listens batches wait (in the spool); when it comes back
// they go in order, each once.
func TestCatchUpWhenServerReturns(t *testing.T) {
	for _, spool := range []bool{true, false} {
		t.Run(fmt.Sprintf("spool=%v", spool), func(t *testing.T) {
			url, addr := deadURL(t)
			cfg := Config{URLs: []string{url}}
			if spool {
				cfg.SpoolDir = t.TempDir()
			}
			s := start(t, cfg)
			for i := 0; i < 10; i++ {
				s.Enqueue(batch(2))
				time.Sleep(2 * time.Millisecond) // batches a tick apart, as an agent queues them
			}
			testsrv.WaitUntil(t, "retries", 10*time.Second, func() bool { return s.Stats().Retries >= 3 })
			if spool && len(spoolFiles(t, cfg.SpoolDir)) != 10 {
				t.Errorf("%d batches spooled, want 10", len(spoolFiles(t, cfg.SpoolDir)))
			}
			srv := newIngestServer(t)
			var ln net.Listener
			var err error
			testsrv.Poll(time.Second, func() bool { ln, err = net.Listen("tcp", addr); return err == nil })
			if err != nil {
				t.Skipf("cannot listen on %s again: %v", addr, err)
			}
			hs := &http.Server{Handler: srv}
			go hs.Serve(ln)
			defer hs.Close()
			s.flush(t, 10*time.Second)
			wantOrder(t, srv.received(), seqs(s.AgentID(), 1, 10)...)
		})
	}
}

// A server that refuses connections or fails is left for the next URL.
func TestFailOver(t *testing.T) {
	dead, _ := deadURL(t)
	good := newIngestServer(t)
	hg := httptest.NewServer(good)
	defer hg.Close()
	failing := newIngestServer(t)
	failing.status = func(int, string, uint64) (int, http.Header) { return http.StatusBadGateway, nil }
	hf := httptest.NewServer(failing)
	defer hf.Close()

	s := start(t, Config{URLs: []string{dead, hf.URL + "/", hg.URL}})
	for i := 0; i < 4; i++ {
		s.Enqueue(batch(1))
	}
	s.flush(t, 10*time.Second)
	wantOrder(t, good.received(), seqs(s.AgentID(), 1, 4)...)
	if len(failing.triesAt()) == 0 {
		t.Error("the failing server was never tried")
	}
	if st := s.Stats(); st.Retries < 2 || st.Sent != 4 {
		t.Errorf("stats %+v: want two failed deliveries, then 4 sent", st)
	}
	// The good one goes away: back to the first that works.
	hg.Close()
	failing.setStatus(nil)
	s.Enqueue(batch(1))
	s.flush(t, 10*time.Second)
	wantOrder(t, failing.received(), s.AgentID()+"/5")
}

// 503 with Retry-After: the next try waits that long, whatever the backoff.
func TestRetryAfter(t *testing.T) {
	srv := newIngestServer(t)
	srv.status = func(n int, _ string, _ uint64) (int, http.Header) {
		if n == 1 {
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}
		}
		if n == 2 {
			return http.StatusTooManyRequests, nil // no Retry-After: backoff
		}
		return http.StatusOK, nil
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	s := start(t, Config{URLs: []string{hs.URL}, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	s.Enqueue(batch(1))
	s.flush(t, 10*time.Second)
	tries := srv.triesAt()
	if len(tries) != 3 {
		t.Fatalf("%d tries, want 3", len(tries))
	}
	if d := tries[1].Sub(tries[0]); d < 990*time.Millisecond {
		t.Errorf("retried %v after a 503 with Retry-After: 1", d)
	}
	if d := tries[2].Sub(tries[1]); d > 500*time.Millisecond {
		t.Errorf("retried %v after a 429 without Retry-After (backoff at most 20 ms)", d)
	}
	if st := s.Stats(); st.Retries != 2 || st.Sent != 1 {
		t.Errorf("stats %+v", st)
	}
}

// The backoff grows from MinBackoff to MaxBackoff (with full jitter: each
// wait is at most the current backoff).
func TestBackoff(t *testing.T) {
	var b time.Duration
	var got []time.Duration
	for i := 0; i < 8; i++ {
		b = nextBackoff(b, 10*time.Millisecond, 300*time.Millisecond)
		got = append(got, b)
	}
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoffs %v, want %v ms", got, want)
		}
	}
}

// A batch the server refuses as invalid (4xx other than 401, 403, 408, 429)
// is kept aside in spool/rejected and the next ones go on; a wrong token
// (401) is retried.
func TestRejectedKeptAside(t *testing.T) {
	dir := t.TempDir()
	srv := newIngestServer(t)
	srv.status = func(n int, _ string, seq uint64) (int, http.Header) {
		switch {
		case seq == 2:
			return http.StatusBadRequest, nil
		case seq == 3 && n < 6:
			return http.StatusUnauthorized, nil
		}
		return http.StatusOK, nil
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	s := start(t, Config{URLs: []string{hs.URL}, SpoolDir: dir, Token: "secret"})
	for i := 0; i < 4; i++ {
		s.Enqueue(batch(1))
	}
	s.flush(t, 10*time.Second)
	wantOrder(t, srv.received(), s.AgentID()+"/1", s.AgentID()+"/3", s.AgentID()+"/4")
	rej, _ := filepath.Glob(filepath.Join(dir, "rejected", "*.batch"))
	if len(rej) != 1 || !strings.HasSuffix(rej[0], "-000000000002.batch") {
		t.Errorf("rejected/ holds %v, want seq 2's batch", rej)
	}
	if it, err := readSpoolFile(rej[0]); err != nil || it.seq != 2 || it.agentID != s.AgentID() {
		t.Errorf("the rejected batch reads back as %+v, %v", it, err)
	}
	if st := s.Stats(); st.Rejected != 1 || st.Sent != 3 || st.Retries < 2 {
		t.Errorf("stats %+v", st)
	}
	if len(spoolFiles(t, dir)) != 0 {
		t.Error("batches left in the spool")
	}
}

// Beyond the spool's bound the oldest batches (but the one being sent) are
// dropped and counted, with their samples.
func TestSpoolBound(t *testing.T) {
	for _, spool := range []bool{true, false} {
		t.Run(fmt.Sprintf("spool=%v", spool), func(t *testing.T) {
			dead, _ := deadURL(t)
			cfg := Config{URLs: []string{dead}, MaxSpoolBytes: 4000, MaxMemoryBytes: 4000}
			if spool {
				cfg.SpoolDir = t.TempDir()
			}
			s := start(t, cfg)
			one := int64(len(s.enc.EncodeAll(wire.Marshal(nil, batch(50)), nil)))
			for i := 0; i < 30; i++ {
				s.Enqueue(batch(50))
			}
			st := s.Stats()
			kept := int64(st.QueuedBatches)
			if st.DroppedBatches != 30-uint64(kept) || st.DroppedSamples != 50*st.DroppedBatches || st.DroppedBatches == 0 {
				t.Errorf("stats %+v", st)
			}
			if st.QueuedBytes > 4000+2*one {
				t.Errorf("%d bytes queued over a bound of 4000 (batches of %d)", st.QueuedBytes, one)
			}
			if spool && int64(len(spoolFiles(t, cfg.SpoolDir))) != kept {
				t.Errorf("%d files in the spool, %d batches queued", len(spoolFiles(t, cfg.SpoolDir)), kept)
			}
		})
	}
}

// An unreadable or damaged spool file is set aside at start, not sent.
func TestDamagedSpoolFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "00000000000000000001-000000000001.batch"), []byte("garbage\n"), 0o640)
	os.WriteFile(filepath.Join(dir, "00000000000000000002-000000000001.batch.tmp"), []byte("half"), 0o640)
	srv := newIngestServer(t)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	s := start(t, Config{URLs: []string{hs.URL}, SpoolDir: dir})
	if st := s.Stats(); st.QueuedBatches != 0 {
		t.Errorf("%d damaged batches queued", st.QueuedBatches)
	}
	if rej, _ := filepath.Glob(filepath.Join(dir, "rejected", "*")); len(rej) != 1 {
		t.Errorf("rejected/ holds %v", rej)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
		t.Errorf("unfinished writes left: %v", tmp)
	}
}
