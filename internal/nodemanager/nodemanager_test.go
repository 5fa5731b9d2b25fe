package nodemanager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

func writeSite(t *testing.T, props string) string {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "yarn-site.xml"), []byte(`<?xml version="1.0"?><configuration>`+props+`</configuration>`), 0o644)
	return dir
}

func prop(k, v string) string {
	return "<property><name>" + k + "</name><value>" + v + "</value></property>"
}

// nm serves the documented answers of NMWebServices.
func nm(t *testing.T, containers, apps *atomic.Value) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws/v1/node/containers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(containers.Load().(string)))
	})
	mux.HandleFunc("GET /ws/v1/node/apps", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(apps.Load().(string)))
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestContainersAndApps(t *testing.T) {
	var cs, as atomic.Value
	cs.Store(`{"containers":{"container":[{"id":"container_e01_1700000000000_0001_01_000002","state":"RUNNING","exitCode":-1000,
		"diagnostics":"","user":"hadoop","totalMemoryNeededMB":1024,"totalVCoresNeeded":1,"containerLogsLink":"http://x/","nodeId":"n:1"},
		{"id":"container_e01_1700000000000_0001_01_000003","state":"NEW"}]}}`)
	as.Store(`{"apps":{"app":[{"id":"application_1700000000000_0001","state":"RUNNING","user":"hadoop",
		"containerids":["container_e01_1700000000000_0001_01_000002"]}]}}`)
	s := nm(t, &cs, &as)
	ctx := context.Background()
	c, _ := NewClient(ClientConfig{})
	ep := Endpoint{URL: s.URL}
	got, err := c.Containers(ctx, ep)
	if err != nil || len(got) != 2 || got[0].State != "RUNNING" || got[1].ID != "container_e01_1700000000000_0001_01_000003" ||
		got[0].TotalMemoryNeededMB != 1024 || got[1].TotalMemoryNeededMB != 0 {
		t.Fatalf("%+v %v", got, err)
	}
	apps, err := c.Apps(ctx, ep)
	if err != nil || len(apps) != 1 || len(apps[0].ContainerIDs) != 1 {
		t.Fatalf("%+v %v", apps, err)
	}
	// Empty lists, as the NodeManager writes them.
	for _, empty := range []string{`{"containers":{}}`, `{"containers":null}`} {
		cs.Store(empty)
		if got, err := c.Containers(ctx, ep); err != nil || len(got) != 0 {
			t.Errorf("%s: %+v %v", empty, got, err)
		}
	}
	cs.Store(`<html>`)
	if _, err := c.Containers(ctx, ep); err == nil || !strings.Contains(err.Error(), "parse") {
		t.Errorf("bad answer: %v", err)
	}
}

func TestWatcher(t *testing.T) {
	var cs, as atomic.Value
	cs.Store(`{"containers":{"container":[{"id":"c1","state":"RUNNING","totalMemoryNeededMB":3072,"totalVCoresNeeded":2},{"id":"c2","state":"NEW"}]}}`)
	as.Store(`{"apps":{}}`)
	s := nm(t, &cs, &as)
	w := NewWatcher(20*time.Millisecond, nil)
	if l, _ := w.Latest(); l != nil {
		t.Fatal("a listing before any poll")
	}
	w.SetURL(s.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.StartContext(ctx)
	defer w.Stop()
	testsrv.WaitUntil(t, "two polls", 5*time.Second, func() bool { last, prev := w.Latest(); return last != nil && prev != nil })
	if last, prev := w.Latest(); last.Containers["c1"] != "RUNNING" || last.Apps == nil || last.Polls < 2 || !last.At.After(prev.At) ||
		len(last.Memory) != 1 || last.Memory["c1"] != 3072 || len(last.VCores) != 1 || last.VCores["c1"] != 2 {
		t.Fatalf("%+v %+v", last, prev)
	}
	if n := w.Errors(); n != 0 {
		t.Errorf("%d errors polling a NodeManager that answers", n)
	}
	// An unreachable NodeManager: its polls fail and are counted, the old
	// listings stay, no new ones.
	s.Close()
	last, _ := w.Latest()
	testsrv.WaitUntil(t, "failed polls counted", 5*time.Second, func() bool { return w.Errors() >= 2 })
	if l2, _ := w.Latest(); l2.Polls > last.Polls+1 {
		t.Errorf("polls went on: %d -> %d", last.Polls, l2.Polls)
	}
	// It stops with its context.
	cancel()
	testsrv.WaitUntil(t, "the watcher stops with its context", 5*time.Second, func() bool {
		select {
		case <-w.Done():
			return true
		default:
			return false
		}
	})
	w.SetURL("http://127.0.0.1:1")
	if l, _ := w.Latest(); l != nil {
		t.Error("a new URL kept the old listing")
	}
}
