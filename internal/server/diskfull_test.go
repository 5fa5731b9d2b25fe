package server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/testfs"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// scrapeServer reads the server's /metrics into name{labels} -> value.
func scrapeServer(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := plainClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// healthz is /healthz's status and text.
func healthz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := plainClient.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestServerDiskFull: the server's data directory is on a small filesystem
// that fills up for real while agents ship to the `taskscope server`
// binary. The server does not crash: it answers the agents 503 with
// Retry-After (they keep their batches in their spools), /healthz and
// /metrics say the disk is full, its log says so once. When room is made
// (a ballast file is removed) the agents catch up; the server is then
// killed and started again, and the store holds every sample sent exactly
// once.
func TestServerDiskFull(t *testing.T) {
	testfs.Run(t, 48<<20, func(t *testing.T, dir string) {
		addr := testsrv.FreeAddr(t)
		srv := startServer(t, addr, dir, plainClient, "http", "--maintain-every", "1s")
		const nodes = 4
		g := source(nodes)
		sh := newShippers(t, nodes, srv.url, plainClient, t.TempDir(), "")
		var exp expected
		rounds := 0
		feed := func() {
			sh.enqueue(t, &exp, g)
			rounds++
		}
		for range 10 {
			feed()
		}
		sh.flush(t, 20*time.Second)
		if code, msg := healthz(t, srv.url); code != http.StatusOK || msg != "ok" {
			t.Errorf("/healthz before the disk is full: %d %q", code, msg)
		}

		// fillUp fills the disk: the agents' batches go on arriving until
		// the server cannot store them.
		fillUp := func() []string {
			t.Helper()
			ballast := testfs.Fill(t, dir, 1<<20)
			t0, from := time.Now(), rounds
			for {
				code, _ := healthz(t, srv.url)
				if code == http.StatusServiceUnavailable {
					break
				}
				if time.Since(t0) > 60*time.Second {
					t.Fatalf("the server still stores after 60 s and %d rounds, %d bytes free", rounds, testfs.Free(t, dir))
				}
				feed()
				time.Sleep(20 * time.Millisecond) // the agents' pace: a round every 20 ms until the disk is full
			}
			t.Logf("the disk was full after %d rounds (%s), %d batches acknowledged", rounds-from,
				time.Since(t0).Round(time.Millisecond), sh.sent())
			// Full to the last byte, and kept full: a checkpoint that failed
			// leaves blocks that the store frees when it reopens its
			// database, and it writes a little again.
			ballasts := []string{ballast}
			for still := 0; still < 5; {
				if time.Since(t0) > 60*time.Second {
					t.Fatalf("the disk does not stay full")
				}
				if testfs.Free(t, dir) > 0 {
					ballasts = append(ballasts, testfs.Fill(t, dir, 0))
					still = 0
				} else {
					still++
				}
				time.Sleep(200 * time.Millisecond) // full for 5 looks in a row, 1 s: it stays full
			}
			return ballasts
		}
		makeRoom := func(ballast []string) {
			t.Helper()
			for _, b := range ballast {
				if err := os.Remove(b); err != nil {
					t.Fatal(err)
				}
			}
		}
		ballast := fillUp()
		// A while on a full disk: more batches, maintenance every second
		// (compaction, checkpoints).
		for range 60 {
			feed()
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case <-srv.done:
			t.Fatalf("the server exited on a full disk:\n%s", srv.output())
		default:
		}
		code, msg := healthz(t, srv.url)
		if code != http.StatusServiceUnavailable || !strings.HasPrefix(msg, "disk full: the store cannot write since") ||
			!strings.Contains(strings.ToLower(msg), "no space left on device") {
			t.Errorf("/healthz on a full disk: %d %q", code, msg)
		}
		m := scrapeServer(t, srv.url)
		if m["taskscope_store_disk_full"] != 1 || m["taskscope_store_writable"] != 0 || m["taskscope_store_write_failing_seconds"] <= 0 ||
			m[`taskscope_ingest_rejected_total{reason="disk_full"}`] == 0 || m["taskscope_store_disk_free_bytes"] > 2<<20 {
			t.Errorf("metrics on a full disk: disk_full %v, writable %v, failing %v s, rejected for a full disk %v, free %v bytes",
				m["taskscope_store_disk_full"], m["taskscope_store_writable"], m["taskscope_store_write_failing_seconds"],
				m[`taskscope_ingest_rejected_total{reason="disk_full"}`], m["taskscope_store_disk_free_bytes"])
		}
		// What an agent gets: 503 with Retry-After, never a 4xx that would
		// make it set the batch aside. (A full disk may still take a small
		// batch: the last page of the WAL has room. Then it is stored.)
		pg := loadgen.NewGenerator(loadgen.Config{Nodes: 1, Slots: 1, BatchTicks: 5, Seed: 99,
			Start: time.Now().Add(-90 * time.Minute).Truncate(time.Second)})
		enc := loadgen.NewEncoder()
		for seq := uint64(1); ; seq++ {
			probe := pg.Next()[0]
			probe.AgentID, probe.Seq, probe.SentMs = "probe-1", seq, time.Now().UnixMilli()
			body := enc.Encode(probe)
			req, _ := http.NewRequest(http.MethodPost, srv.url+"/api/v1/ingest", bytes.NewReader(body.Data))
			req.Header.Set("Content-Type", wire.ContentType)
			req.Header.Set("Content-Encoding", "zstd")
			resp, err := plainClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && seq < 10 {
				exp.add(probe)
				time.Sleep(200 * time.Millisecond) // stored in the WAL's last page: the next a while later
				continue
			}
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(rb), "disk is full") {
				t.Errorf("a batch on a full disk: %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), rb)
			}
			break
		}
		var retries uint64
		spooled := 0
		for i, s := range sh.list {
			st := s.Stats()
			retries += st.Retries
			spooled += st.SpooledBatches
			if st.Rejected != 0 || st.DroppedBatches != 0 || st.SpooledBatches != st.QueuedBatches {
				t.Errorf("shipper %d on a full disk: %+v", i, st)
			}
		}
		if sent := sh.sent(); sent+uint64(spooled) != uint64(rounds*nodes) || spooled == 0 {
			t.Errorf("%d batches acknowledged and %d spooled, %d sent", sent, spooled, rounds*nodes)
		}
		out := srv.output()
		// Once, or once more each time it wrote a little in between (the
		// file's free blocks take a commit or two on a full disk): each
		// "writes again" follows one "cannot write", and the last may be
		// either (a run failed when the last commit before this check had
		// gone through).
		again := strings.Count(out, "the store writes again")
		if n := strings.Count(out, "disk full: the store cannot write"); n == 0 || n < again || n > again+1 {
			t.Errorf("the server's log says %d times that the disk is full:\n%s", n, out)
		}
		t.Logf("on a full disk: %d batches spooled by the agents, %d retries; the server's log:\n%s", spooled, retries, out)

		// Room again: the agents catch up.
		makeRoom(ballast)
		t1 := time.Now()
		sh.flush(t, 90*time.Second)
		catchUp := time.Since(t1)
		testsrv.WaitUntil(t, "/healthz ok", 10*time.Second, func() bool { code, _ := healthz(t, srv.url); return code == http.StatusOK })
		testsrv.WaitUntil(t, "metrics of a store that writes", 10*time.Second, func() bool {
			m = scrapeServer(t, srv.url)
			return m["taskscope_store_disk_full"] == 0 && m["taskscope_store_writable"] == 1
		})
		if !strings.Contains(srv.output(), "the store writes again") {
			t.Errorf("the server's log does not say that it writes again:\n%s", srv.output())
		}
		for range 10 {
			feed()
		}
		sh.flush(t, 20*time.Second)
		t.Logf("caught up %s after making room: %d spooled batches; %d rounds of %d batches, %d samples in all",
			catchUp.Round(time.Millisecond), spooled, rounds, nodes, exp.samples)
		for i, s := range sh.list {
			if st := s.Stats(); st.Rejected != 0 || st.DroppedBatches != 0 {
				t.Errorf("shipper %d: %+v", i, st)
			}
		}
		// Full again, and the server is stopped meanwhile: it stops
		// cleanly; started on the full disk it exits, saying why (it writes
		// at open); started once there is room, it takes what the agents
		// spooled meanwhile.
		ballast = fillUp()
		srv.stop(t)
		ballast = append(ballast, testfs.Fill(t, dir, 0)) // what stopping freed
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		said, err := exec.CommandContext(ctx, taskscope(t), "server", "--listen", addr, "--data-dir", dir).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(strings.ToLower(string(said)), "no space left on device") {
			t.Errorf("the server started on a full disk: %v\n%s", err, said)
		}
		for range 10 {
			feed()
		}
		makeRoom(ballast)
		srv = startServer(t, addr, dir, plainClient, "http")
		t2 := time.Now()
		sh.flush(t, 90*time.Second)
		t.Logf("started again after making room, caught up in %s; %d rounds in all, %d samples",
			time.Since(t2).Round(time.Millisecond), rounds, exp.samples)
		sh.stop()
		// A crash now loses nothing: what was acknowledged is durable.
		srv.kill()
		srv = startServer(t, addr, dir, plainClient, "http")
		srv.stop(t)
		exp.check(t, dir)
	})
}

// TestSpoolDiskFull: the agents' spool directories are on a filesystem that
// is really full while the server is down. The batches the spools cannot
// take are held in memory (none is dropped: they are within the memory's
// bound); when room is made they move to the spool, in their place. The
// agents then restart (their new incarnations replay the spools: a batch
// out of order would be taken by the server for a duplicate, and lost), the
// server comes back, and the store holds every sample once.
func TestSpoolDiskFull(t *testing.T) {
	testfs.Run(t, 1<<20, func(t *testing.T, spool string) {
		addr, dir := testsrv.FreeAddr(t), t.TempDir()
		srv := startServer(t, addr, dir, plainClient, "http")
		const nodes = 3
		g := source(nodes)
		sh := newShippers(t, nodes, srv.url, plainClient, spool, "")
		var exp expected
		for range 5 {
			sh.enqueue(t, &exp, g)
		}
		sh.flush(t, 20*time.Second)
		srv.kill()
		// A few pages left: each spool takes a batch or two, then none.
		ballast := testfs.Fill(t, spool, 4*4096)
		for range 20 {
			sh.enqueue(t, &exp, g)
			time.Sleep(10 * time.Millisecond)
		}
		var errs uint64
		spooled, queued := 0, 0
		for i, s := range sh.list {
			st := s.Stats()
			errs += st.SpoolErrors
			spooled += st.SpooledBatches
			queued += st.QueuedBatches
			if st.DroppedBatches != 0 || st.Rejected != 0 {
				t.Errorf("shipper %d on a full spool: %+v", i, st)
			}
		}
		t.Logf("spools full: %d batches queued, %d of them spooled, %d spool errors", queued, spooled, errs)
		if errs == 0 || queued != 20*nodes || spooled >= queued/2 {
			t.Errorf("%d batches queued, %d spooled, %d spool errors: want %d queued, most in memory", queued, spooled, errs, 20*nodes)
		}
		// Room again: the next batch of each agent is spooled, and what was
		// held in memory follows it.
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		sh.enqueue(t, &exp, g)
		spooled = 0
		for _, s := range sh.list {
			spooled += s.Stats().SpooledBatches
		}
		if spooled < 21*nodes-nodes { // the one each sends may stay in memory
			t.Errorf("%d of %d batches spooled after making room", spooled, 21*nodes)
		}
		// The agents restart with their spools (what is still in memory is
		// spooled as they stop), and the server comes back.
		sh.stop()
		for _, s := range sh.list {
			if lost := s.Close(); lost != 0 {
				t.Errorf("%d batches lost as an agent stopped", lost)
			}
		}
		srv = startServer(t, addr, dir, plainClient, "http")
		again := newShippers(t, nodes, srv.url, plainClient, spool, "")
		for range 3 {
			again.enqueue(t, &exp, g)
		}
		t0 := time.Now()
		again.flush(t, 30*time.Second)
		var dups uint64
		for _, s := range again.list {
			dups += s.Stats().Duplicates
		}
		t.Logf("%d rounds of %d batches, %d samples; the restarted agents delivered their spools in %s (%d duplicates)",
			5+20+1+3, nodes, exp.samples, time.Since(t0).Round(time.Millisecond), dups)
		again.stop()
		srv.stop(t)
		exp.check(t, dir)
	})
}
