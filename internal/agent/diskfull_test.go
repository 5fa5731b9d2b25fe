package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testfs"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestSpoolDiskFull: the agent's spool directory is on a filesystem that is
// really full while the server is down. Its metrics say so: spool errors,
// batches held in memory (within MaxMemoryBytes), and the batches and
// samples it had to drop. When room is made the batches held in memory go
// to the spool, and once the server is back every batch not dropped
// arrives, and the last one reports the drops.
func TestSpoolDiskFull(t *testing.T) {
	testfs.Run(t, 1<<20, func(t *testing.T, dir string) {
		root := writeNode(t)
		srv, hs := newFakeServer(t)
		srv.setDown(true)
		ballast := testfs.Fill(t, dir, 2*4096)
		ready := make(chan string, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan Result, 1)
		go func() {
			r, _ := Run(ctx, Config{Servers: []string{hs.URL}, Interval: 5 * time.Millisecond, FlushInterval: 10 * time.Millisecond,
				ProcFS: root, Host: "node1", Listen: "127.0.0.1:0", MaxTicks: -1, Exits: "off", SpoolDir: filepath.Join(dir, "spool"),
				MaxMemoryBytes: 8 << 10, Ready: func(addr string) { ready <- addr }})
			res <- r
		}()
		addr := <-ready
		var m map[string]float64
		waitMetrics := func(what string, cond func() bool) {
			t.Helper()
			if !testsrv.Poll(20*time.Second, func() bool { m = scrape(t, addr); return cond() }) {
				t.Fatalf("timed out waiting for %s: %v", what, m)
			}
		}
		waitMetrics("drops", func() bool { return m["taskscope_agent_dropped_batches_total"] >= 3 })
		held := m["taskscope_agent_queue_bytes"] - m["taskscope_agent_spool_bytes"]
		t.Logf("spool full: %v spool errors, %v batches queued (%v spooled, %v bytes in memory), %v batches and %v samples dropped",
			m["taskscope_agent_spool_errors_total"], m["taskscope_agent_queue_batches"], m["taskscope_agent_spool_batches"], held,
			m["taskscope_agent_dropped_batches_total"], m["taskscope_agent_dropped_samples_total"])
		if m["taskscope_agent_spool_errors_total"] == 0 || m["taskscope_agent_dropped_samples_total"] == 0 || held > 16<<10 {
			t.Errorf("metrics on a full spool: %v", m)
		}
		// Room again: what is held in memory goes to the spool.
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		waitMetrics("the spool to hold what was in memory", func() bool {
			return m["taskscope_agent_spool_batches"] >= m["taskscope_agent_queue_batches"]-1 && m["taskscope_agent_queue_batches"] > 5
		})
		srv.setDown(false)
		waitMetrics("the queue to drain", func() bool { return m["taskscope_agent_queue_batches"] <= 1 })
		cancel()
		r := <-res
		got := srv.got()
		// Every batch not dropped arrived, once.
		seen := map[uint64]bool{}
		for _, b := range got {
			if seen[b.Seq] {
				t.Errorf("batch %d received twice", b.Seq)
			}
			seen[b.Seq] = true
		}
		if uint64(len(seen))+r.Stats.DroppedBatches != r.Stats.Enqueued {
			t.Errorf("%d batches received and %d dropped, %d made", len(seen), r.Stats.DroppedBatches, r.Stats.Enqueued)
		}
		last := got[len(got)-1].Stats
		if last.DroppedBatches != r.Stats.DroppedBatches || last.DroppedSamples != r.Stats.DroppedSamples {
			t.Errorf("the last batch reports %d batches and %d samples dropped, the agent dropped %d and %d", last.DroppedBatches,
				last.DroppedSamples, r.Stats.DroppedBatches, r.Stats.DroppedSamples)
		}
	})
}
