package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/alert/amtest"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestAlertsAtAlertmanager: the whole path to Debian's Alertmanager,
// started on loopback. A Hadoop 1 job on the simulated cluster asks for
// slots four times larger than its tasks use (a critical memory_headroom
// finding) and loses a task JVM that outlives it (map 0's first Child,
// "just removed" by its TaskTracker). The server's background analyser
// finds both, and Alertmanager's GET /api/v2/alerts holds the two alerts
// with the documented labels. Then the JVM goes (killed here, as the
// agent's reaper would): its attempt ends, and so does the job, and
// both alerts end: they are no longer active there (without it the job
// runs on, and so do its alerts).
func TestAlertsAtAlertmanager(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	am := amtest.Start(t)
	h := newHarness(t, func(cfg *server.Config) {
		cfg.Analyzer = analysis.NewWith(cfg.Store, analysis.Options{Poll: 500 * time.Millisecond, Every: 2 * time.Second,
			Settle: 2 * time.Second})
		cfg.Alerts = &alert.Options{Alertmanagers: []string{am.URL()}, ExternalURL: "http://taskscope.example:8080",
			Resend: 2 * time.Second, EndedFor: 20 * time.Second}
	})
	c := startCluster(t, simulator.NodeHadoop1)
	h.startAgent("e2e-h1", func(cfg *agent.Config) {})

	res := run(t, c, simulator.JobSpec{Kind: simulator.JobHadoop1, Name: "lost-and-oversized", User: "alice", Queue: "etl",
		Maps: 3, Reduces: 1, TaskCPU: 1500 * time.Millisecond, MemoryMB: 4096, Oversized: true, LostChild: true})
	lostPID := 0
	for _, a := range res.Attempts {
		if a.Lost {
			lostPID = a.JVMPID
		}
	}
	if lostPID == 0 {
		t.Fatalf("no lost Child in %+v", res.Attempts)
	}
	t.Cleanup(func() { syscall.Kill(lostPID, syscall.SIGKILL) })

	ctx := context.Background()
	want := map[string]map[string]string{
		"finding": {"alertname": alert.AlertFinding, "job_id": res.JobID, "user": "alice", "queue": "etl",
			"heuristic": "memory_headroom", "severity": "critical"},
		"lost JVM": {"alertname": alert.AlertLostTaskJVM, "job_id": res.JobID, "user": "alice", "queue": "etl",
			"heuristic": "lost_processes", "host": "e2e-h1"},
	}
	var alerts []amtest.Alert
	if !testsrv.Poll(2*time.Minute, func() bool {
		var err error
		alerts, err = am.Alerts(ctx)
		if err != nil {
			return false
		}
		for _, labels := range want {
			if _, ok := amtest.Find(alerts, labels); !ok {
				return false
			}
		}
		return true
	}) {
		for _, a := range alerts {
			t.Logf("at Alertmanager: %v %v", a.Labels, a.Annotations)
		}
		logReport(t, "lost-and-oversized", h.findings(res.JobID))
		t.Fatalf("the job's alerts did not reach Alertmanager: %s", am.Log())
	}
	for what, labels := range want {
		a, _ := amtest.Find(alerts, labels)
		t.Logf("%s: %v; %s", what, a.Labels, a.Annotations["summary"])
		if a.GeneratorURL != "http://taskscope.example:8080/jobs/"+res.JobID || a.Annotations["summary"] == "" ||
			a.Status.State != "active" || !a.EndsAt.After(time.Now()) {
			t.Errorf("%s: %+v", what, a)
		}
		for k := range a.Labels {
			switch k {
			case "alertname", "job_id", "user", "queue", "host", "severity", "heuristic":
			default:
				t.Errorf("%s: label %s is not one of the documented ones", what, k)
			}
		}
	}

	// The lost JVM goes: the job ends, and its alerts.
	if err := syscall.Kill(lostPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testsrv.WaitUntil(t, "the job's alerts ended at Alertmanager", 2*time.Minute, func() bool {
		alerts, err := am.Alerts(ctx)
		if err != nil {
			return false
		}
		for _, labels := range want {
			if a, ok := amtest.Find(alerts, labels); ok && a.EndsAt.After(time.Now()) {
				return false
			}
		}
		return true
	})
}
