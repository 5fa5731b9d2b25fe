package loadgen

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/wire"
)

func TestMain(m *testing.M) {
	// The simulator re-executes the test binary as its node daemons.
	simulator.RunDaemonIfRequested()
	os.Exit(m.Run())
}

var (
	record    = flag.Bool("record", false, "record testdata/agent-sim.rec.zst from the real agent beside the simulator")
	recordFor = flag.Duration("record-for", 8*time.Minute, "how long to record")
)

const recordingFile = "testdata/agent-sim.rec.zst"

// TestRecordAgent runs taskscope-agent (1 s interval, PSS every 10 ticks,
// fds) beside a simulated mixed cluster running a stream of jobs, captures
// every batch it posts, and writes them as the recording that benchmarks
// replay:
//
//	go test -run TestRecordAgent -record -record-for 8m ./internal/loadgen/
func TestRecordAgent(t *testing.T) {
	if !*record {
		t.Skip("records only with -record")
	}
	var mu sync.Mutex
	var got []*wire.Batch
	zr, _ := zstd.NewReader(nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Encoding") == "zstd" {
			var err error
			if body, err = zr.DecodeAll(body, nil); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		parts, err := wire.Bodies(r.Header.Get("Content-Type"), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var bs []*wire.Batch
		for _, part := range parts {
			b, err := wire.Unmarshal(part, wire.DefaultLimits)
			if err == nil {
				err = wire.Validate(b)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			bs = append(bs, b)
		}
		mu.Lock()
		got = append(got, bs...)
		mu.Unlock()
		w.Write([]byte(`{"status":"stored"}`))
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *recordFor+2*time.Minute)
	defer cancel()
	c, err := simulator.Start(ctx, simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 2, Kind: simulator.NodeMixed,
		Scale: 8, MapSlots: 2, ReduceSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() {
		_, err := agent.Run(actx, agent.Config{Servers: []string{srv.URL}, Interval: time.Second, Host: "sim-node",
			MaxTicks: -1, PSSEvery: 10, FDs: true, Exits: "auto"})
		agentDone <- err
	}()
	sctx, stopJobs := context.WithTimeout(ctx, *recordFor)
	defer stopJobs()
	if err := c.RunStream(sctx, simulator.StreamOptions{Concurrency: 3, Seed: 7, AnomalyRate: 0.3}); err != nil {
		t.Logf("job stream: %v", err)
	}
	// The recording's tail: the agent's ticks that see the last attempts
	// end and ship them (a recording, nothing is asserted of its length).
	time.Sleep(5 * time.Second)
	stopAgent()
	if err := <-agentDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	samples := 0
	for _, b := range got {
		samples += b.SampleCount()
	}
	t.Logf("recorded %d batches, %d process samples", len(got), samples)
	if samples == 0 {
		t.Fatal("the agent sent no samples")
	}
	var buf bytes.Buffer
	if err := WriteRecording(&buf, got); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recordingFile, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %d bytes", recordingFile, buf.Len())
}

func TestRecordingReplays(t *testing.T) {
	rec, err := ReadRecordingFile(recordingFile)
	if err != nil {
		t.Skipf("no recording: %v", err)
	}
	r := NewReplay(rec, 3)
	seen := map[uint64]bool{}
	for pass := 0; pass < 2; pass++ {
		for _, b := range r.Pass(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) {
			if err := wire.Validate(b); err != nil {
				t.Fatal(err)
			}
			for _, p := range b.Processes {
				if p.Key != wire.ProcessKey(b.Host, p.PID, p.StartMs) {
					t.Fatalf("process %d: key not rewritten", p.PID)
				}
				seen[p.Key] = true
			}
			for _, s := range b.ProcSeries {
				if !seen[s.Key] {
					t.Fatalf("series of a process never described (%x)", s.Key)
				}
			}
		}
	}
}
