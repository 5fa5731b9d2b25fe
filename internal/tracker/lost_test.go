package tracker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/nodemanager"
	orphanreaper "github.com/taskscope/taskscope/internal/reaper"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// fakeLister is a NodeManager whose listings the test sets.
type fakeLister struct {
	last, prev *nodemanager.Listing
	soon       int
	errs       uint64
	stopped    bool
	ctx        context.Context
	url        string
}

func (f *fakeLister) Latest() (last, prev *nodemanager.Listing) { return f.last, f.prev }
func (f *fakeLister) PollSoon()                                 { f.soon++ }
func (f *fakeLister) Errors() uint64                            { return f.errs }
func (f *fakeLister) Stop()                                     { f.stopped = true }
func (f *fakeLister) URL() string                               { return f.url }

// list makes the next listing: these containers, the apps given.
func (f *fakeLister) list(at time.Time, apps []string, containers ...string) {
	l := &nodemanager.Listing{URL: "http://nm", At: at, Containers: map[string]string{}, Apps: map[string]string{}}
	for _, c := range containers {
		l.Containers[c] = "RUNNING"
	}
	for _, a := range apps {
		l.Apps[a] = "RUNNING"
	}
	if f.last != nil {
		l.Polls = f.last.Polls + 1
	} else {
		l.Polls = 1
	}
	f.prev, f.last = f.last, l
}

// fakeReaper records what it is handed.
type fakeReaper struct{ targets []orphanreaper.Target }

func (r *fakeReaper) Update(now time.Time, targets []orphanreaper.Target) []wire.Event {
	r.targets = append(r.targets[:0], targets...)
	return nil
}

// The pollers: one per NodeManager found, the node's only one for units
// whose launcher is not one, stopped when their NodeManager is gone (their
// failed polls still counted), all stopped with their context.
func TestNMPollers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := newNMPollers(&LostConfig{Context: ctx})
	made := map[string]*fakeLister{}
	n.start = func(ctx context.Context, ep nodemanager.Endpoint) poller {
		f := &fakeLister{ctx: ctx, url: ep.URL}
		made[ep.URL] = f
		return f
	}
	n.watch(100, nodemanager.Endpoint{URL: "http://nm1"})
	n.watch(100, nodemanager.Endpoint{URL: "http://nm1"})
	if len(made) != 1 || n.forLauncher(999) != made["http://nm1"] || fmt.Sprint(n.urls()) != "[http://nm1]" {
		t.Fatalf("one NodeManager: pollers %v, for another launcher %v", made, n.forLauncher(999))
	}
	n.watch(110, nodemanager.Endpoint{URL: "http://nm2"})
	if n.forLauncher(110) != made["http://nm2"] || n.forLauncher(999) != nil || len(n.all()) != 2 {
		t.Errorf("two NodeManagers: %v, %v", n.forLauncher(110), n.forLauncher(999))
	}
	made["http://nm1"].errs, made["http://nm2"].errs = 3, 4
	n.keep(func(pid int32) bool { return pid == 110 })
	if !made["http://nm1"].stopped || made["http://nm2"].stopped || n.errors() != 7 || len(n.all()) != 1 {
		t.Errorf("after NodeManager 100 left: stopped %v %v, errors %d", made["http://nm1"].stopped, made["http://nm2"].stopped, n.errors())
	}
	cancel()
	if made["http://nm2"].ctx.Err() == nil {
		t.Error("the pollers' context is not done with its parent")
	}
	// A configured URL is the only NodeManager.
	s := newNMPollers(&LostConfig{NMURL: "http://configured", NMPoll: time.Hour})
	defer s.stop()
	s.watch(100, nodemanager.Endpoint{URL: "http://nm1"})
	if len(s.all()) != 1 || s.forLauncher(100) != s.static {
		t.Errorf("with NMURL: %d pollers", len(s.all()))
	}
}

// A real poller (nodemanager.Watcher) stops with the tracker's context and
// counts the polls that failed.
func TestNMPollerStopsWithContext(t *testing.T) {
	var reqs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	n := newNMPollers(&LostConfig{Context: ctx, NMURL: srv.URL, NMPoll: 10 * time.Millisecond})
	defer n.stop()
	testsrv.WaitUntil(t, "failed polls counted", 5*time.Second, func() bool { return n.errors() >= 3 })
	cancel()
	w := n.static.(*nodemanager.Watcher)
	testsrv.WaitUntil(t, "the poller stops with its context", 5*time.Second, func() bool {
		select {
		case <-w.Done():
			return true
		default:
			return false
		}
	})
}

// A container its NodeManager no longer lists, three listings in a row
// begun after it started, is unknown, and handed to the reaper; listings
// older than a container say nothing of it.
func TestCheckUnknownContainers(t *testing.T) {
	c2, c3 := fxContainer(2), fxContainer(3)
	m0, m1 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	yarnContainer(f, 3001, c3, yarnChild(c3, m1))
	r := f.tracker(false)
	reaper := &fakeReaper{}
	r.tr.cfg.Lost = LostConfig{Enabled: true, NoNM: true, CheckEvery: time.Millisecond, Reaper: reaper}
	nm := &fakeLister{}
	r.tick()
	r.tr.lost.nm.static = nm
	for i := 0; i < 3; i++ {
		if hasEvent(r.sink, wire.EventUnknownContainer, m0) || hasEvent(r.sink, wire.EventOutlived, m1) {
			t.Fatalf("listing %d: reported early", i)
		}
		// Container 2 is no longer listed; its application is.
		nm.list(r.now(), []string{fxApp}, c3)
		r.tick()
	}
	if !hasEvent(r.sink, wire.EventUnknownContainer, m0) || hasEvent(r.sink, wire.EventUnknownContainer, m1) {
		t.Errorf("after three listings without container 2: events %+v", r.sink.events)
	}
	got := map[int32]string{}
	for _, tg := range reaper.targets {
		got[tg.PID] = tg.Reason
	}
	if len(got) != 3 || got[2003] != wire.EventUnknownContainer || got[3003] != "" {
		t.Errorf("reaper targets: %v", got)
	}
	// Listings from before container 3 started say nothing of it.
	for i := 0; i < 4; i++ {
		nm.list(r.now().Add(-time.Hour), nil)
		r.tick()
	}
	if hasEvent(r.sink, wire.EventOutlived, m1) || hasEvent(r.sink, wire.EventUnknownContainer, m1) {
		t.Errorf("judged by a listing older than the container: %+v", r.sink.events)
	}
}
