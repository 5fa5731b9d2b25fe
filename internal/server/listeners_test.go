package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// fakeAlertmanager records the alerts posted to its /api/v2/alerts.
type fakeAlertmanager struct {
	mu     sync.Mutex
	alerts []map[string]any
}

func (f *fakeAlertmanager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/api/v2/alerts" {
		http.NotFound(w, r)
		return
	}
	var as []map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&as); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.alerts = append(f.alerts, as...)
	f.mu.Unlock()
}

// find is the first alert posted whose labels have every value of want.
func (f *fakeAlertmanager) find(want map[string]string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
next:
	for _, a := range f.alerts {
		labels, _ := a["labels"].(map[string]any)
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		return a
	}
	return nil
}

// TestAnalysedListeners: the background analyser tells the server's
// listeners of a running job whose map straggles (80 s against its
// siblings' 10): the straggler's profile is asked for, and its node's
// agent finds the order in the answer to its next batch; the finding,
// critical, reaches Alertmanager with the job's labels.
func TestAnalysedListeners(t *testing.T) {
	const (
		job      = "job_1700000000000_0042"
		straggle = "attempt_1700000000000_0042_m_000000_0"
	)
	t0 := storetest.T0
	now := func() time.Time { return t0.Add(81 * time.Second) }
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: now, StaleAfter: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	spec := func(i string, start time.Time, pid int32) *storetest.AttemptSpec {
		return &storetest.AttemptSpec{ID: "attempt_1700000000000_0042_m_00000" + i + "_0", JobID: job, Type: "map", JobName: "slow-join",
			User: "zoe", Queue: "etl", MemoryMB: 1024, Start: start,
			Procs: []storetest.ProcSpec{{PID: pid, Role: wire.RoleTaskJVM, Cmdline: "java YarnChild", CPUPerS: 900, RSS: 100 << 20}}}
	}
	g1 := &storetest.Gen{Agent: "node1-a", Host: "node1"}
	g2 := &storetest.Gen{Agent: "node2-a", Host: "node2"}
	later := t0.Add(65 * time.Second)
	// The straggler on node1, from t0 on; three maps of 10 s on node2,
	// ended, and one that runs there (a sibling for the profile).
	storetest.Ingest(t, st, g1.Batch([]*storetest.AttemptSpec{spec("0", t0, 101)}, 0, 80, false),
		g2.Batch([]*storetest.AttemptSpec{spec("1", later, 201), spec("2", later, 202), spec("3", later, 203)}, 0, 10, true),
		g2.Batch([]*storetest.AttemptSpec{spec("4", later.Add(5*time.Second), 204)}, 0, 10, false))

	am := &fakeAlertmanager{}
	amSrv := httptest.NewServer(am)
	defer amSrv.Close()
	an := analysis.NewWith(st, analysis.Options{Poll: 100 * time.Millisecond, Every: time.Second, Now: now})
	prof := profiling.New(st, profiling.Config{Auto: true, Now: now})
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: an, Profiles: prof, MaintainEvery: time.Hour,
		Alerts: &alert.Options{Alertmanagers: []string{amSrv.URL}, MinSeverity: store.SeveritySevere, ExternalURL: "http://taskscope.example"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	// node1's agent sends its (empty) batches until an order comes back.
	var orders []wire.ProfileOrder
	testsrv.WaitUntil(t, "a profile order for the straggler in node1's answer", time.Minute, func() bool {
		data := wire.Marshal(nil, g1.Batch(nil, 80, 80, false))
		resp, err := http.Post(srv.URL()+"/api/v1/ingest", wire.ContentType, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rep wire.Answer
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("ingest: %d %v", resp.StatusCode, err)
		}
		orders = rep.Profiles
		return len(orders) > 0
	})
	if len(orders) != 1 || orders[0].AttemptID != straggle || orders[0].PID != 101 || orders[0].Trigger != store.TriggerStraggler {
		t.Errorf("node1's orders: %+v", orders)
	}
	// Its sibling's order goes to node2.
	if o := prof.Orders("node2"); len(o) != 1 || o[0].Trigger != store.TriggerSibling {
		t.Errorf("node2's orders: %+v", o)
	}

	want := map[string]string{"alertname": alert.AlertFinding, "job_id": job, "user": "zoe", "queue": "etl", "host": "node1",
		"heuristic": "straggler", "severity": "critical"}
	testsrv.WaitUntil(t, "the straggler's alert at Alertmanager", time.Minute, func() bool { return am.find(want) != nil })
	if a := am.find(want); a["generatorURL"] != "http://taskscope.example/jobs/"+job {
		t.Errorf("alert %v", a)
	}
}
