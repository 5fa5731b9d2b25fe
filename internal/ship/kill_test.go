package ship

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killHelperEnv makes this test binary a shipper that queues batches until
// it is killed (its value: "<spool dir> <server URL>").
const killHelperEnv = "TASKSCOPE_SHIP_KILL_HELPER"

func init() {
	if v := os.Getenv(killHelperEnv); v != "" {
		os.Exit(runKillHelper(v))
	}
}

// runKillHelper queues a batch every millisecond or so and prints
// "queued <agent id> <seq>" once Enqueue has returned: what the shipper
// has acknowledged to itself.
func runKillHelper(v string) int {
	dir, url, _ := strings.Cut(v, " ")
	s, err := New(Config{URLs: []string{url}, SpoolDir: dir, Host: "node1",
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go s.Run(context.Background())
	for {
		b := batch(5)
		if err := s.Enqueue(b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("queued %s %d\n", b.AgentID, b.Seq)
		time.Sleep(time.Millisecond) // a batch a ms until the test kills it
	}
}

// TestSpoolSurvivesSIGKILL: an agent killed with SIGKILL at any moment
// loses no batch it had queued. A shipper with a spool queues batches to a
// server that refuses some (503) and takes the others, and is killed; a
// new one on the same spool sends what is left: the server then has every
// batch the first one said it had queued. Batches sent at once are spooled
// without fsync (only one whose first delivery fails is synced): written,
// they outlive the process; this test holds the spool to that, at kills in
// the middle of sends, of writes, and of syncs.
func TestSpoolSurvivesSIGKILL(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	srv := newIngestServer(t)
	// One batch in five refused (the sender retries it, syncing its file
	// first); the server slow now and then (batches queue up behind).
	srv.setStatus(func(n int, agent string, seq uint64) (int, http.Header) {
		if n%7 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		if n%5 == 0 {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	dir := t.TempDir()
	queued := map[string]bool{}
	for round, after := range []int{3, 40, 17, 120, 1} {
		cmd := exec.Command(self, "-test.run", "^$")
		cmd.Env = append(os.Environ(), killHelperEnv+"="+dir+" "+hs.URL)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "queued" {
				t.Fatalf("helper said %q", sc.Text())
			}
			queued[f[1]+"/"+f[2]] = true
			if n++; n == after {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		cmd.Wait()
		if n < after {
			t.Fatalf("round %d: the helper queued %d batches, then stopped", round, n)
		}
	}
	// A new shipper on the spool, the server taking everything.
	srv.setStatus(nil)
	s := start(t, Config{URLs: []string{hs.URL}, SpoolDir: dir})
	s.flush(t, 20*time.Second)
	got := map[string]bool{}
	for _, r := range srv.received() {
		got[fmt.Sprintf("%s/%d", r.agent, r.seq)] = true
	}
	lost := 0
	for k := range queued {
		if !got[k] {
			lost++
			t.Errorf("batch %s was queued, then lost", k)
		}
	}
	t.Logf("%d batches queued by 5 shippers killed with SIGKILL, %d received, %d lost", len(queued), len(got), lost)
	if n := len(spoolFiles(t, dir)); n != 0 {
		t.Errorf("%d batches left in the spool", n)
	}
}
