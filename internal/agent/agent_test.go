package agent

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// fakeServer takes batches and keeps them decoded; while down it answers 503.
type fakeServer struct {
	t       *testing.T
	mu      sync.Mutex
	batches []*wire.Batch
	down    bool
	dec     *zstd.Decoder
}

func newFakeServer(t *testing.T) (*fakeServer, *httptest.Server) {
	dec, _ := zstd.NewReader(nil)
	t.Cleanup(dec.Close)
	s := &fakeServer{t: t, dec: dec}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs
}

func (s *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	raw, err := s.dec.DecodeAll(body, nil)
	if err != nil {
		s.t.Errorf("body: %v", err)
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	parts, err := wire.Bodies(r.Header.Get("Content-Type"), raw)
	if err != nil {
		s.t.Errorf("body: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []*wire.Batch
	for _, part := range parts {
		b, err := wire.Unmarshal(part, wire.DefaultLimits)
		if err == nil {
			err = wire.Validate(b)
		}
		if err != nil {
			s.t.Errorf("batch: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, b)
	}
	s.batches = append(s.batches, got...)
}

func (s *fakeServer) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *fakeServer) got() []*wire.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*wire.Batch(nil), s.batches...)
}

// scrape reads the agent's /metrics into name{labels} -> value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsScrape runs the agent over a fixture node and scrapes its own
// metrics while it runs.
func TestMetricsScrape(t *testing.T) {
	root := writeNode(t)
	_, hs := newFakeServer(t)
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Config{Servers: []string{hs.URL}, Interval: 20 * time.Millisecond, FlushInterval: 50 * time.Millisecond,
			ProcFS: root, Host: "node1", Listen: "127.0.0.1:0", MaxTicks: -1, Exits: "off", SpoolDir: t.TempDir(),
			PSSEvery: 10, StatusEvery: 5, Ready: func(addr string) { ready <- addr }})
		done <- err
	}()
	addr := <-ready
	var m map[string]float64
	testsrv.WaitUntil(t, "the agent to tick and ship", 10*time.Second, func() bool {
		m = scrape(t, addr)
		return m["taskscope_agent_ticks_total"] >= 5 && m["taskscope_agent_batches_sent_total"] >= 1
	})
	checkExposition(t, addr)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := map[string]func(v float64) bool{
		"taskscope_agent_processes_scanned":                     func(v float64) bool { return v == fxProcesses },
		"taskscope_agent_processes_tracked":                     func(v float64) bool { return v == fxTracked },
		"taskscope_agent_units":                                 func(v float64) bool { return v == 2 },
		"taskscope_agent_tick_seconds_count":                    func(v float64) bool { return v >= 5 },
		"taskscope_agent_tick_seconds_sum":                      func(v float64) bool { return v > 0 && v < 5 },
		`taskscope_agent_tick_seconds_bucket{le="+Inf"}`:        func(v float64) bool { return v >= 5 },
		`taskscope_agent_read_errors_total{source="io"}`:        func(v float64) bool { return v >= 1 }, // unparsable at every tick
		"taskscope_agent_processes_classified_total":            func(v float64) bool { return v == fxProcesses },
		"taskscope_agent_processes_attributed_total":            func(v float64) bool { return v == fxTracked },
		"taskscope_agent_queue_batches":                         func(v float64) bool { return v >= 0 },
		"taskscope_agent_queue_bytes":                           func(v float64) bool { return v >= 0 },
		"taskscope_agent_spool_batches":                         func(v float64) bool { return v >= 0 },
		"taskscope_agent_spool_bytes":                           func(v float64) bool { return v >= 0 },
		"taskscope_agent_dropped_samples_total":                 func(v float64) bool { return v == 0 },
		"taskscope_agent_dropped_batches_total":                 func(v float64) bool { return v == 0 },
		"taskscope_agent_samples_sent_total":                    func(v float64) bool { return v >= fxTracked },
		"taskscope_agent_send_retries_total":                    func(v float64) bool { return v == 0 },
		"taskscope_agent_batches_rejected_total":                func(v float64) bool { return v == 0 },
		"taskscope_agent_overruns_total":                        func(v float64) bool { return v >= 0 },
		"taskscope_agent_exit_records_total":                    func(v float64) bool { return v == 0 },
		"taskscope_agent_exit_records_lost_total":               func(v float64) bool { return v == 0 },
		"taskscope_agent_exit_records_dropped_total":            func(v float64) bool { return v == 0 },
		"taskscope_agent_exits_without_record_total":            func(v float64) bool { return v == 0 },
		"taskscope_agent_cpu_split_guesses_total":               func(v float64) bool { return v == 0 },
		"taskscope_agent_cpu_standing_guesses_total":            func(v float64) bool { return v == 0 },
		"taskscope_agent_nodemanager_poll_errors_total":         func(v float64) bool { return v == 0 },
		"taskscope_agent_exit_records_unclaimed_total":          func(v float64) bool { return v == 0 },
		"taskscope_agent_vanished_reads_total":                  func(v float64) bool { return v == 0 },
		"taskscope_agent_short_lived_processes_total":           func(v float64) bool { return v == 0 },
		"taskscope_agent_processes_exited_total":                func(v float64) bool { return v == 0 },
		"taskscope_agent_spool_errors_total":                    func(v float64) bool { return v == 0 },
		"taskscope_agent_profiles_running":                      func(v float64) bool { return v == 0 },
		"taskscope_agent_profiles_total":                        func(v float64) bool { return v == 0 },
		"taskscope_agent_profile_paused_microseconds_total":     func(v float64) bool { return v == 0 },
		`taskscope_agent_nodemanager_failing{cause="kerberos"}`: func(v float64) bool { return v == 0 },
		`taskscope_agent_nodemanager_failing{cause="tls"}`:      func(v float64) bool { return v == 0 },
		"taskscope_agent_kerberos_logins_total":                 func(v float64) bool { return v == 0 },
		"process_resident_memory_bytes":                         func(v float64) bool { return v > 0 },
		"go_goroutines":                                         func(v float64) bool { return v > 0 },
	}
	for name, ok := range want {
		v, found := m[name]
		if !found {
			t.Errorf("%s is missing", name)
		} else if !ok(v) {
			t.Errorf("%s = %v", name, v)
		}
	}
}

// TestMaxTicksLastLine checks the contract of run --max-ticks N: it samples N
// times, ships everything, exits 0, and its last line on standard error is
// ticks=N tracked=M.
func TestMaxTicksLastLine(t *testing.T) {
	root := writeNode(t)
	srv, hs := newFakeServer(t)
	var stdout, stderr bytes.Buffer
	code := Main([]string{"run", "--server", hs.URL, "--procfs", root, "--interval", "10ms", "--max-ticks", "3",
		"--exits", "off", "--host", "node1", "--log-level", "debug"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "ticks=3 tracked=7" {
		t.Errorf("last line %q, want ticks=3 tracked=7", last)
	}
	// Everything was shipped: the last batch holds the third tick.
	samples := 0
	for _, b := range srv.got() {
		samples += b.SampleCount()
		if b.Host != "node1" || b.Stats.Ticks == 0 {
			t.Errorf("batch host %q stats %+v", b.Host, b.Stats)
		}
	}
	if samples != 3*fxTracked {
		t.Errorf("%d process samples shipped, want %d", samples, 3*fxTracked)
	}
	// --max-ticks 0 only starts up.
	stderr.Reset()
	start := time.Now()
	if code := Main([]string{"run", "--server", hs.URL, "--procfs", root, "--max-ticks", "0", "--exits", "off"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--max-ticks 0: exit code %d: %s", code, stderr.String())
	}
	lines = strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "ticks=0 tracked=0" {
		t.Errorf("--max-ticks 0: last line %q", last)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("--max-ticks 0 took %v", d)
	}
	// No server: an error, and the line anyway.
	stderr.Reset()
	if code := Main([]string{"run", "--procfs", root, "--max-ticks", "1"}, &stdout, &stderr); code == 0 {
		t.Error("run without --server exited 0")
	}
}

// TestDropsInAgentStats: while the server is down and the spool is full, the
// agent drops its oldest batches; the batches that reach the server later
// say how many samples were dropped.
func TestDropsInAgentStats(t *testing.T) {
	root := writeNode(t)
	srv, hs := newFakeServer(t)
	srv.setDown(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan Result, 1)
	ready := make(chan string, 1)
	go func() {
		r, _ := Run(ctx, Config{Servers: []string{hs.URL}, Interval: 5 * time.Millisecond, FlushInterval: 10 * time.Millisecond,
			ProcFS: root, Host: "node1", MaxTicks: 400, Exits: "off", SpoolDir: t.TempDir(), MaxSpoolBytes: 3000,
			Listen: "127.0.0.1:0", Ready: func(addr string) { ready <- addr }})
		res <- r
	}()
	addr := <-ready
	// The server stays down until the full spool made the agent drop.
	testsrv.WaitUntil(t, "the agent to drop batches", 10*time.Second, func() bool {
		return scrape(t, addr)["taskscope_agent_dropped_batches_total"] >= 1
	})
	srv.setDown(false)
	r := <-res
	if r.Stats.DroppedSamples == 0 || r.Stats.DroppedBatches == 0 {
		t.Fatalf("nothing dropped: %+v", r.Stats)
	}
	var last wire.AgentStats
	for _, b := range srv.got() {
		last = b.Stats
	}
	if last.DroppedSamples == 0 || last.DroppedBatches == 0 || last.DroppedSamples > r.Stats.DroppedSamples {
		t.Errorf("the last batch reports %+v, the shipper dropped %d samples in %d batches", last, r.Stats.DroppedSamples, r.Stats.DroppedBatches)
	}
}
