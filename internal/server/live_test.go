package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// A browser that refetches on each live update sees what a batch brought
// once the updates stop: the last update comes after the summaries that
// the batch changed are written (up to a second after its commit).
func TestLiveUpdateAfterSummaries(t *testing.T) {
	srv := startOnDuckDB(t, Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL()+"/api/v1/live", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
		close(events)
	}()
	<-events // the stream's first event: the version now

	g := loadgen.NewGenerator(loadgen.Config{Nodes: 4, Slots: 8, BatchTicks: 5, Seed: 7, Start: time.Now().Add(-time.Minute)})
	job := ""
	for i := 0; job == "" && i < 20; i++ {
		for _, b := range g.Next() {
			post, err := http.Post(srv.URL()+"/api/v1/ingest", wire.ContentType, bytes.NewReader(wire.Marshal(nil, b)))
			if err != nil {
				t.Fatal(err)
			}
			post.Body.Close()
			if post.StatusCode/100 != 2 {
				t.Fatalf("ingest: %s", post.Status)
			}
			for _, a := range b.Attempts {
				job = cmp.Or(job, a.JobID)
			}
		}
	}
	if job == "" {
		t.Fatal("loadgen described no attempt")
	}

	// Refetch at every update, as the job page does, until updates stop.
	var visible bool
	for {
		select {
		case _, ok := <-events:
			if !ok {
				t.Fatal("the live stream ended")
			}
			visible = jobListed(t, srv.URL(), job)
			continue
		case <-time.After(3 * time.Second):
		}
		break
	}
	if !visible {
		t.Errorf("after the last live update, the jobs list lacks %s", job)
	}
}

func jobListed(t *testing.T, base, job string) bool {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Jobs []struct {
			JobID string `json:"job_id"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, j := range out.Jobs {
		if j.JobID == job {
			return true
		}
	}
	return false
}

// startOnDuckDB starts a server of cfg on loopback over a DuckDB store of
// its own; both stop when the test ends.
func startOnDuckDB(t *testing.T, cfg Config) *Server {
	t.Helper()
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Listen, cfg.Store = "127.0.0.1:0", st
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv
}

// Each reader's live stream moves with the data of the jobs they see
// alone: while loadgen's five users' data arrives, an operator's stream
// moves, a user's moves when their jobs' data comes, a queue's reader's
// when its jobs' does; the stream of a user who sees no job, and that of
// the reader of a queue no job ran in, never move from their first event.
func TestLivePerReader(t *testing.T) {
	policy, err := auth.ParsePolicy(strings.NewReader("operator root\nqueue adhoc reader-of-adhoc\nqueue none-q reader-of-none\n"))
	if err != nil {
		t.Fatal(err)
	}
	proxies, _ := auth.ParseProxies("127.0.0.1")
	srv := startOnDuckDB(t, Config{Auth: auth.New(auth.Options{UserHeader: "X-Forwarded-User", Proxies: proxies, Policy: policy})})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type stream struct {
		mu     sync.Mutex
		events []string
	}
	open := func(user string) *stream {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL()+"/api/v1/live", nil)
		req.Header.Set("X-Forwarded-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("live as %s: %v %v", user, resp, err)
		}
		s := &stream{}
		go func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					s.mu.Lock()
					s.events = append(s.events, d)
					s.mu.Unlock()
				}
			}
		}()
		return s
	}
	got := func(s *stream) []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Clone(s.events)
	}
	// loadgen's users are alice, bob, carol, etl and ml; its queues default, etl and adhoc.
	names := []string{"root", "alice", "reader-of-adhoc", "nobody", "reader-of-none"}
	streams := map[string]*stream{}
	for _, u := range names {
		streams[u] = open(u)
	}
	for u, s := range streams {
		testsrv.WaitUntil(t, "the first event of "+u, 10*time.Second, func() bool { return len(got(s)) > 0 })
	}
	cfg := loadgen.Config{URL: srv.URL(), Nodes: 3, Slots: 4, BatchTicks: 5, Seed: 5, Start: time.Now().Add(-20 * time.Minute),
		Duration: 20 * time.Minute}
	if res, err := loadgen.SendAll(ctx, cfg, loadgen.Prepare(cfg)); err != nil || res.Rejected > 0 {
		t.Fatalf("loadgen: %+v %v", res, err)
	}
	// A job's queue is its latest description's (loadgen's attempts of a
	// job name different queues), and the jobs list shows it once the
	// summaries after the last commit are written: wait for them (CI's
	// fresh clone found no adhoc job when it looked at once).
	for _, f := range []store.JobFilter{{User: "alice"}, {Queue: "adhoc"}} {
		var err error
		if !testsrv.Poll(30*time.Second, func() bool {
			var page store.JobPage
			page, err = srv.cfg.Store.Jobs(ctx, f)
			return err == nil && page.Total > 0
		}) {
			t.Fatalf("loadgen sent no job of %+v: %v", f, err)
		}
	}
	for _, u := range names[:3] {
		testsrv.WaitUntil(t, u+"'s stream to move", 30*time.Second, func() bool { return len(got(streams[u])) > 1 })
	}
	// The summaries written after the last commit move the streams once
	// more: wait until the operator's stream shows the last change, then
	// look at the others'.
	testsrv.WaitUntil(t, "the operator's stream to show the last change", 30*time.Second, func() bool {
		e := got(streams["root"])
		return !srv.committed.Load() && e[len(e)-1] == fmt.Sprint(srv.live.Version(auth.Open))
	})
	for _, u := range names[3:] {
		id := policy.Identify(u, nil, "sso")
		if e := got(streams[u]); !slices.Equal(e, []string{"0"}) || srv.live.Version(id) != 0 {
			t.Errorf("the stream of %s, who sees no job, moved: %v (counter %d)", u, e, srv.live.Version(id))
		}
	}
	for _, u := range names {
		t.Logf("%s: %d events", u, len(got(streams[u])))
	}
}
