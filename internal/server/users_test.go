package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// The UI's users (the sustained benchmark's query model) make every
// request the UI makes, without an error, while a cluster's data arrives,
// and refetch the running jobs and attempts they look at on live updates.
func TestUsers(t *testing.T) {
	start := time.Now().Add(-time.Hour)
	var ackedMs atomic.Int64
	ackedMs.Store(start.UnixMilli())
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: func() time.Time { return time.UnixMilli(ackedMs.Load()) }}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	// Ten nodes' hour, at the wall clock's pace times 60, while the users
	// look: the jobs they open are running ones.
	cfg := loadgen.Config{URL: srv.URL(), Nodes: 10, Slots: 8, BatchTicks: 5, Seed: 9, Start: start,
		Duration: time.Hour, Concurrency: 10, AckedMs: &ackedMs}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		bodies := make(chan loadgen.Body)
		go func() {
			defer close(bodies)
			g := loadgen.NewGenerator(cfg)
			e := loadgen.NewEncoder()
			tick := time.NewTicker(5 * time.Second / 60)
			defer tick.Stop()
			for ctx.Err() == nil {
				for _, b := range g.Next() {
					select {
					case bodies <- e.Encode(b):
					case <-ctx.Done():
						return
					}
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
				}
			}
		}()
		_, err := loadgen.Send(ctx, cfg, bodies)
		sent <- err
	}()
	testsrv.WaitUntil(t, "a running job", 30*time.Second, func() bool {
		resp, err := http.Get(srv.URL() + "/api/v1/jobs?state=running")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var page struct {
			Jobs []struct{} `json:"jobs"`
		}
		return json.NewDecoder(resp.Body).Decode(&page) == nil && len(page.Jobs) > 0
	})

	stats := &loadgen.QueryStats{}
	uctx, stop := context.WithTimeout(ctx, 12*time.Second)
	defer stop()
	res := loadgen.Users(uctx, loadgen.UsersConfig{URL: srv.URL(), Users: 3, JobsStay: time.Second, JobStay: 3 * time.Second,
		AttemptStay: 2 * time.Second, Seed: 1}, stats)
	cancel()
	if err := <-sent; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	for ep, e := range stats.LastErrors() {
		t.Errorf("%s: %s", ep, e)
	}
	got := map[string]int{}
	for _, l := range stats.Summary() {
		got[l.Endpoint] = l.N
		t.Logf("%s", l)
	}
	t.Logf("%+v", res)
	for _, ep := range []string{"jobs", "job", "findings", "job_series", "attempt", "attempt_series", "process_series"} {
		if got[ep] == 0 {
			t.Errorf("no %s request", ep)
		}
	}
	// Charts refetched at live updates ask for their new buckets only.
	if got["job_series_tail"]+got["attempt_series_tail"]+got["process_series_tail"] == 0 {
		t.Error("no chart fetched its new buckets alone")
	}
	if res.Opened < 6 || res.Refreshed == 0 {
		t.Errorf("users opened %d pages and refreshed %d: want at least 6 and some", res.Opened, res.Refreshed)
	}
}
