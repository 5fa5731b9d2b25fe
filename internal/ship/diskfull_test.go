package ship

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testfs"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// logBuffer is a shipper's log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

var droppedSeq = regexp.MustCompile(`msg="dropped the oldest batch[^"]*".* seq=(\d+) `)

// dropped is the seqs the log says were dropped.
func (l *logBuffer) dropped() map[uint64]bool {
	out := map[uint64]bool{}
	for _, m := range droppedSeq.FindAllStringSubmatch(l.String(), -1) {
		var n uint64
		fmt.Sscan(m[1], &n)
		out[n] = true
	}
	return out
}

// down answers 503 while it is set.
func down(srv *ingestServer, is bool) {
	if is {
		srv.setStatus(func(int, string, uint64) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	} else {
		srv.setStatus(nil)
	}
}

// TestSpoolDiskFull: the spool's filesystem is full for real while the
// server is down. Batches the spool cannot take are held in memory within
// MaxMemoryBytes (not MaxSpoolBytes: the memory would have grown to 256
// MiB); beyond it the oldest are dropped, counted and logged one by one.
// When room is made the batches held in memory move to the spool, and once
// the server is back every batch not dropped arrives, in order, once.
func TestSpoolDiskFull(t *testing.T) {
	testfs.Run(t, 1<<20, func(t *testing.T, dir string) {
		srv := newIngestServer(t)
		down(srv, true)
		hs := httptest.NewServer(srv)
		defer hs.Close()
		var log logBuffer
		one := int64(len(newShipper(t, Config{URLs: []string{hs.URL}}).enc.EncodeAll(wire.Marshal(nil, batch(50)), nil)))
		memory := 10 * one
		spoolDir := filepath.Join(dir, "spool")
		s := start(t, Config{URLs: []string{hs.URL}, SpoolDir: spoolDir, MaxMemoryBytes: memory, Log: log.logger()})
		// Room for a few spool files of a page each.
		ballast := testfs.Fill(t, dir, 5*4096)
		const n = 100
		for range n {
			if err := s.Enqueue(batch(50)); err != nil {
				t.Fatal(err)
			}
		}
		st := s.Stats()
		held := st.QueuedBytes - st.SpooledBytes
		t.Logf("spool full: %d batches spooled, %d held in memory (%d bytes, bound %d), %d dropped, %d spool errors",
			st.SpooledBatches, st.QueuedBatches-st.SpooledBatches, held, memory, st.DroppedBatches, st.SpoolErrors)
		if st.SpoolErrors == 0 || st.SpooledBatches >= 10 {
			t.Errorf("the spool took %d batches on a full disk (%d errors)", st.SpooledBatches, st.SpoolErrors)
		}
		if held > memory+one {
			t.Errorf("%d bytes held in memory, bound %d", held, memory)
		}
		if st.DroppedBatches == 0 || st.DroppedSamples != 50*st.DroppedBatches || uint64(st.QueuedBatches)+st.DroppedBatches != n {
			t.Errorf("stats %+v: %d batches queued and dropped, want %d", st, uint64(st.QueuedBatches)+st.DroppedBatches, n)
		}
		drops := log.dropped()
		if uint64(len(drops)) != st.DroppedBatches {
			t.Errorf("the log names %d dropped batches, the stats %d:\n%s", len(drops), st.DroppedBatches, log.String())
		}
		if c := strings.Count(log.String(), "cannot write to the spool"); c != 1 {
			t.Errorf("the log says %d times that the spool cannot be written, want once:\n%s", c, log.String())
		}

		// Room again: the next batch is spooled, and those held in memory
		// follow it.
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			s.Enqueue(batch(50))
		}
		st = s.Stats()
		if st.SpooledBatches < st.QueuedBatches-1 { // the one being sent may stay in memory
			t.Errorf("after making room %d of %d queued batches are spooled", st.SpooledBatches, st.QueuedBatches)
		}
		if !strings.Contains(log.String(), "the spool takes batches again") {
			t.Errorf("the log does not say the spool works again:\n%s", log.String())
		}
		down(srv, false)
		s.flush(t, 20*time.Second)
		var want []string
		for seq := uint64(1); seq <= n+5; seq++ {
			if !drops[seq] {
				want = append(want, fmt.Sprintf("%s/%d", s.AgentID(), seq))
			}
		}
		wantOrder(t, srv.received(), want...)
		if files := spoolFiles(t, spoolDir); len(files) != 0 {
			t.Errorf("%d files left in the spool", len(files))
		}
	})
}

// TestCloseSpoolsHeldBatches: an agent that stops while batches are held in
// memory (its spool was full) writes them to the spool if it can now, in
// their place, for the next agent to send in order; what it cannot write it
// says is lost.
func TestCloseSpoolsHeldBatches(t *testing.T) {
	testfs.Run(t, 1<<20, func(t *testing.T, dir string) {
		srv := newIngestServer(t)
		down(srv, true)
		hs := httptest.NewServer(srv)
		defer hs.Close()
		spoolDir := filepath.Join(dir, "spool")
		var log logBuffer
		a := start(t, Config{URLs: []string{hs.URL}, SpoolDir: spoolDir, Log: log.logger()})
		ballast := testfs.Fill(t, dir, 3*4096)
		for range 10 {
			a.Enqueue(batch(5))
		}
		testsrv.WaitUntil(t, "a failed delivery", 10*time.Second, func() bool { return a.Stats().Retries > 0 })
		a.stop()
		spooled := a.Stats().SpooledBatches
		if spooled == 0 || spooled == 10 {
			t.Fatalf("%d of 10 batches spooled on a nearly full disk", spooled)
		}
		// Still full: Close says what is lost.
		if lost := a.Close(); lost != 10-spooled {
			t.Errorf("Close on a full spool lost %d batches, want %d", lost, 10-spooled)
		}
		if !strings.Contains(log.String(), "stopping with undelivered batches held in memory: lost") {
			t.Errorf("the log does not say what was lost:\n%s", log.String())
		}
		// With room, Close spools them: a new agent sends all ten in order.
		os.Remove(ballast)
		if lost := a.Close(); lost != 0 {
			t.Errorf("Close with room lost %d batches", lost)
		}
		if files := spoolFiles(t, spoolDir); len(files) != 10 {
			t.Fatalf("%d batches in the spool after Close, want 10", len(files))
		}
		down(srv, false)
		c := start(t, Config{URLs: []string{hs.URL}, SpoolDir: spoolDir})
		c.flush(t, 10*time.Second)
		wantOrder(t, srv.received(), seqs(a.AgentID(), 1, 10)...)
	})
}
