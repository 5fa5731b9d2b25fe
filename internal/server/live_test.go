package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/duckdb"
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
