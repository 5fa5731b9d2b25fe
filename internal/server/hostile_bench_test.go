package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// BenchmarkHostile runs the hostile requests of issue 16 against a real
// `taskscope server` process (DuckDB in a temporary directory, fed by
// loadgen first), one kind at a time, while a normal client sends a batch
// and reads a job, its series and the job list every 200 ms. For each it
// reports the server's peak RSS above its idle RSS (VmHWM, reset before
// each run, against VmRSS at rest), how long the hostile requests took to
// be answered and how, and the slowest normal request.
//
//	go test -run '^$' -bench Hostile -benchtime 1x -timeout 30m ./internal/server/
//
// TASKSCOPE_HOSTILE_BASE names another server binary (one built from an
// older commit: go build -o /tmp/base/taskscope ./cmd/taskscope there),
// which is measured in turn with this one, each kind of request on the
// base first, then on this build.
func BenchmarkHostile(b *testing.B) {
	bins := []struct{ name, path string }{}
	if base := os.Getenv("TASKSCOPE_HOSTILE_BASE"); base != "" {
		bins = append(bins, struct{ name, path string }{"base", base})
	}
	bins = append(bins, struct{ name, path string }{"new", taskscope(b)})
	gz, zs := hostileGzip(b), hostileZstd(b)
	b.Logf("a gzip bomb of %d bytes (300 MiB of zeros), a zstd bomb of %d bytes (1 GiB, no content size)", len(gz), len(zs))
	for _, h := range []hostile{
		{"metrics-10000", 4, func(r *rig) (int, string) {
			return r.get("/api/v1/jobs/" + r.job + "/series?metrics=" + strings.TrimSuffix(strings.Repeat("rss_bytes,", 10000), ","))
		}},
		{"gzip-bomb", 1, func(r *rig) (int, string) { return r.post(gz, "gzip") }},
		{"gzip-bombs-8", 8, func(r *rig) (int, string) { return r.post(gz, "gzip") }},
		{"zstd-bomb", 1, func(r *rig) (int, string) { return r.post(zs, "zstd") }},
		{"zstd-bombs-8", 8, func(r *rig) (int, string) { return r.post(zs, "zstd") }},
		{"slow-uploads-50", 50, func(r *rig) (int, string) { return r.slowUpload(40 * time.Second) }},
		{"live-2000", 2000, func(r *rig) (int, string) { return r.live(20 * time.Second) }},
		{"process-end-2^62", 1, func(r *rig) (int, string) {
			bt := r.batch()
			bt.Processes = append(bt.Processes, wire.Process{Key: 7, PID: 7, StartMs: bt.SentMs, EndMs: 1 << 62, Cmdline: "x"})
			return r.post(zstdOf(wire.Marshal(nil, bt)), "zstd")
		}},
		{"duplicate-broken", 1, func(r *rig) (int, string) {
			// A stored (agent, seq) again, its body cut short.
			data := wire.Marshal(nil, r.stored)
			return r.post(zstdOf(data[:len(data)-7]), "zstd")
		}},
	} {
		for _, bin := range bins {
			b.Run(h.name+"/"+bin.name, func(b *testing.B) {
				for range b.N {
					runHostile(b, bin.path, h)
				}
			})
		}
	}
}

type hostile struct {
	name string
	n    int // requests at once
	do   func(r *rig) (int, string)
}

// rig is a server process and what a client needs of it.
type rig struct {
	b      *testing.B
	srv    *serverProc
	job    string
	token  string
	c      *http.Client
	mu     sync.Mutex
	seq    uint64
	stored *wire.Batch // a batch stored before the run
	gen    *loadgen.Generator
}

func runHostile(b *testing.B, bin string, h hostile) {
	dir := b.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("bench-token\n"), 0o600)
	addr := testsrv.FreeAddr(b)
	c := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	srv := startServerBin(b, bin, addr, filepath.Join(dir, "data"), c, "http", "--ingest-token-file", tokens)
	defer srv.stop(b)
	r := &rig{b: b, srv: srv, token: "bench-token", c: c,
		gen: loadgen.NewGenerator(loadgen.Config{Nodes: 2, Slots: 2, BatchTicks: 5, Seed: 11, Start: time.Now().Add(-time.Hour)})}
	// Data to read: 4 nodes, 20 minutes.
	if _, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.url, Token: r.token, Nodes: 4, Slots: 4, Duration: 20 * time.Minute,
		Seed: 5, Concurrency: 4, Client: c}); err != nil {
		b.Fatal(err)
	}
	var page struct {
		Jobs []struct {
			JobID string `json:"job_id"`
		} `json:"jobs"`
	}
	if code, body := r.get("/api/v1/jobs?limit=1"); code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Jobs) == 0 {
		b.Fatalf("jobs: %d %s", code, body)
	}
	r.job = page.Jobs[0].JobID
	r.stored = r.batch()
	if code, body := r.post(zstdOf(wire.Marshal(nil, r.stored)), "zstd"); code != 200 {
		b.Fatalf("a batch: %d %s", code, body)
	}
	time.Sleep(2 * time.Second) // at rest
	idle := procStatus(b, srv.cmd.Process.Pid, "VmRSS")
	os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", srv.cmd.Process.Pid), []byte("5"), 0) // VmHWM := VmRSS

	// The normal client, beside.
	stop := make(chan struct{})
	var normal []time.Duration
	var normalErrs []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, f := range []func() (int, string){
				func() (int, string) { return r.post(zstdOf(wire.Marshal(nil, r.batch())), "zstd") },
				func() (int, string) { return r.get("/api/v1/jobs?limit=20") },
				func() (int, string) { return r.get("/api/v1/jobs/" + r.job) },
				func() (int, string) { return r.get("/api/v1/jobs/" + r.job + "/series?metrics=cpu_percent,rss_bytes") },
			} {
				s := time.Now()
				code, body := f()
				normal = append(normal, time.Since(s))
				if code != 200 {
					normalErrs = append(normalErrs, fmt.Sprintf("%d %.80s", code, body))
				}
			}
		}
	}()
	// Each of the n hostile clients sends its request again until 10 s
	// have passed, so that the normal client runs beside them.
	start := time.Now()
	var amu sync.Mutex
	kinds := map[string]int{}
	var took []time.Duration
	var hw sync.WaitGroup
	for range h.n {
		hw.Add(1)
		go func() {
			defer hw.Done()
			for time.Since(start) < 10*time.Second {
				s := time.Now()
				code, body := h.do(r)
				d := time.Since(s)
				amu.Lock()
				took = append(took, d)
				kinds[fmt.Sprintf("%d %.90s", code, strings.TrimSpace(body))]++
				amu.Unlock()
			}
		}()
	}
	hw.Wait()
	hostileTime := time.Since(start)
	close(stop)
	wg.Wait()
	peak := procStatus(b, srv.cmd.Process.Pid, "VmHWM")
	slices.Sort(normal)
	slices.Sort(took)
	var maxNormal time.Duration
	if len(normal) > 0 {
		maxNormal = normal[len(normal)-1]
	}
	b.Logf("%s: idle RSS %d MiB, peak %d MiB (+%d MiB); %d hostile requests in %v (median %v, slowest %v): %v; normal requests: %d, slowest %v, median %v, errors %d %v",
		h.name, idle>>20, peak>>20, (peak-idle)>>20, len(took), hostileTime.Round(time.Millisecond), median(took).Round(time.Millisecond), slices.Max(took).Round(time.Millisecond), kinds,
		len(normal), maxNormal.Round(time.Millisecond), median(normal).Round(time.Millisecond), len(normalErrs), firstN(normalErrs, 3))
	b.ReportMetric(float64(peak-idle)/(1<<20), "peak-MiB-over-idle")
	b.ReportMetric(float64(slices.Max(took))/1e6, "hostile-max-ms")
	b.ReportMetric(float64(maxNormal)/1e6, "normal-max-ms")
	b.ReportMetric(float64(len(normalErrs)), "normal-errors")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2]
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

// procStatus reads a "kB" line of /proc/PID/status, in bytes.
func procStatus(b testing.TB, pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// batch is the normal agent's next batch (now-ish times, its own agent).
func (r *rig) batch() *wire.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for _, bt := range r.gen.Next() {
			if bt.Host == "node001.sim" || strings.HasPrefix(bt.Host, "node001") {
				r.seq++
				bt.AgentID, bt.Seq = "bench-normal", r.seq
				return bt
			}
		}
	}
}

func (r *rig) get(path string) (int, string) {
	resp, err := r.c.Get(r.srv.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, string(body)
}

func (r *rig) post(body []byte, enc string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, r.srv.url+"/api/v1/ingest", bytes.NewReader(body))
	req.Header.Set("Content-Type", wire.ContentType)
	req.Header.Set("Content-Encoding", enc)
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// slowUpload announces 32 MiB and sends a byte every 2 s, for at most d.
func (r *rig) slowUpload(d time.Duration) (int, string) {
	c, err := net.Dial("tcp", strings.TrimPrefix(r.srv.url, "http://"))
	if err != nil {
		return 0, err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Encoding: identity\r\nAuthorization: Bearer %s\r\nContent-Length: 33554432\r\n\r\n", wire.ContentType, r.token)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Second):
				c.Write([]byte{0})
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "no answer within " + d.String()
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// live holds a /api/v1/live connection open for d.
func (r *rig) live(d time.Duration) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.url+"/api/v1/live", nil)
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	io.Copy(io.Discard, resp.Body)
	return 200, "held"
}

func zstdOf(b []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// hostileGzip is a 300 KB body that expands to 300 MiB.
func hostileGzip(b testing.TB) []byte {
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	return bytes.Repeat(one.Bytes(), 300)
}

// hostileZstd is a 32 KB body that expands to 1 GiB: one frame, written as
// a stream (no content size in its header).
func hostileZstd(b testing.TB) []byte {
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		b.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for range 1024 {
		enc.Write(zeros)
	}
	enc.Close()
	return out.Bytes()
}
