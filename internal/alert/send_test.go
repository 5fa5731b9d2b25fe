package alert

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskscope/taskscope/internal/alert/amtest"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

func startAlerter(t *testing.T, o Options) *Alerter {
	t.Helper()
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return a
}

// TestAlertmanager sends to Debian's Alertmanager, started on loopback,
// and reads the alerts back from its API: a finding at the minimum
// severity, a lost task JVM and an orphaned process, with their labels,
// the job's page and the analysis's text; re-sent while they last (their
// end moves on); the finding's ending when it goes away, the others' when
// the job ends; a job found wrong only at its end alerts for a while.
func TestAlertmanager(t *testing.T) {
	am := amtest.Start(t)
	reg := prometheus.NewRegistry()
	a := startAlerter(t, Options{Alertmanagers: []string{am.URL()}, ExternalURL: "http://taskscope.example:8080", Resend: time.Second,
		Registerer: reg, backoff: 10 * time.Millisecond})
	ctx := context.Background()
	list := func(n int) []amtest.Alert {
		t.Helper()
		var got []amtest.Alert
		var err error
		if !testsrv.Poll(30*time.Second, func() bool { got, err = am.Alerts(ctx); return err == nil && len(got) == n }) {
			t.Fatalf("Alertmanager holds %d alerts, want %d (%v): %+v\n%s", len(got), n, err, got, am.Log())
		}
		return got
	}
	secret := gcSevere
	secret.Description += " (its JVM ran with -Dssl.keystore.password=hunter2)"
	a.Update(testJob(secret, stragglerLow, lostJVM, orphanLow))
	got := list(3)
	want := map[string]map[string]string{
		AlertFinding:         {LabelHost: "h1", LabelSeverity: "severe", LabelHeuristic: "gc_pressure"},
		AlertLostTaskJVM:     {LabelHost: "h2", LabelSeverity: "severe", LabelHeuristic: "lost_processes"},
		AlertOrphanedProcess: {LabelHost: "h3", LabelSeverity: "moderate", LabelHeuristic: "lost_processes"},
	}
	for name, labels := range want {
		labels[LabelAlertname], labels[LabelJob], labels[LabelUser], labels[LabelQueue] = name, "job_1700000000000_0001", "alice", "etl"
		al, ok := amtest.Find(got, labels)
		if !ok || len(al.Labels) != 7 {
			t.Errorf("no alert %v: %+v", labels, got)
			continue
		}
		if al.GeneratorURL != "http://taskscope.example:8080/jobs/job_1700000000000_0001" || al.Annotations["summary"] == "" ||
			al.Status.State != "active" {
			t.Errorf("%s: %+v", name, al)
		}
		for _, v := range al.Annotations {
			if strings.Contains(v, "hunter2") {
				t.Errorf("%s: a secret in %q", name, v)
			}
		}
	}
	// Re-sent: Alertmanager's end of the alert moves on.
	first, _ := amtest.Find(got, want[AlertLostTaskJVM])
	testsrv.WaitUntil(t, "a re-send", 30*time.Second, func() bool {
		got, err := am.Alerts(ctx)
		al, ok := amtest.Find(got, want[AlertLostTaskJVM])
		return err == nil && ok && al.EndsAt.After(first.EndsAt.Add(time.Second))
	})
	// The GC finding goes away; then the job ends.
	a.Update(testJob(stragglerLow, lostJVM, orphanLow))
	got = list(2)
	if _, ok := amtest.Find(got, want[AlertFinding]); ok {
		t.Errorf("the GC alert did not end: %+v", got)
	}
	j := testJob(lostJVM, orphanLow)
	j.Ended = true
	a.Update(j)
	list(0)
	// Found wrong only at its end.
	late := Job{ID: "job_1700000000000_0002", User: "bob", Queue: "adhoc", Ended: true,
		Findings: []Finding{{Alert: AlertFinding, Heuristic: "memory_headroom", Severity: store.SeverityCritical, Summary: "reduce attempts peak at 98%"}}}
	a.Update(late)
	got = list(1)
	if got[0].Labels[LabelJob] != late.ID || got[0].EndsAt.Before(time.Now().Add(5*time.Minute)) {
		t.Errorf("found at its end: %+v", got[0])
	}
	if n := testutil.ToFloat64(a.m.sent.WithLabelValues(receiverAlertmanager)); n < 7 {
		t.Errorf("%v alerts sent", n)
	}
	if n := testutil.ToFloat64(a.m.failed.WithLabelValues(receiverAlertmanager)); n != 0 {
		t.Errorf("%v alerts failed", n)
	}
}

// A post that fails is tried again with a backoff; one refused (4xx) is
// not; both are counted.
func TestRetries(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	var calls atomic.Int32
	fail := atomic.Int32{}
	fail.Store(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/prefix/api/v2/alerts" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "wrong path or type", http.StatusNotFound)
			return
		}
		if strings.Contains(string(b), "refuse-me") {
			http.Error(w, "bad alert", http.StatusBadRequest)
			return
		}
		if fail.Add(-1) >= 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	a := startAlerter(t, Options{Alertmanagers: []string{srv.URL + "/prefix/"}, Resend: time.Hour, backoff: time.Millisecond})
	a.Update(testJob(gcSevere))
	testsrv.WaitUntil(t, "the alert sent", 10*time.Second, func() bool {
		return testutil.ToFloat64(a.m.sent.WithLabelValues(receiverAlertmanager)) == 1
	})
	if n := testutil.ToFloat64(a.m.retries.WithLabelValues(receiverAlertmanager)); n != 2 || calls.Load() != 3 {
		t.Errorf("%v retries, %d posts; want 2 and 3", n, calls.Load())
	}
	refused := lostJVM
	refused.Summary = "refuse-me"
	a.Update(testJob(gcSevere, refused))
	testsrv.WaitUntil(t, "the refused alert counted", 10*time.Second, func() bool {
		return testutil.ToFloat64(a.m.failed.WithLabelValues(receiverAlertmanager)) == 1
	})
	if calls.Load() != 4 {
		t.Errorf("%d posts: a refused one was tried again", calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	var as []Alert
	if len(bodies) != 1 || json.Unmarshal([]byte(bodies[0]), &as) != nil || len(as) != 1 {
		t.Errorf("bodies %q", bodies)
	}
}

// The webhook gets Alertmanager's webhook payload over HTTP.
func TestWebhook(t *testing.T) {
	got := make(chan webhookMessage, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m webhookMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- m
	}))
	defer srv.Close()
	a := startAlerter(t, Options{Webhook: srv.URL + "/hook", Resend: time.Hour})
	a.Update(testJob(gcSevere))
	m := <-got
	if m.Version != "4" || m.Status != "firing" || len(m.Alerts) != 1 || m.Alerts[0].Labels[LabelAlertname] != AlertFinding {
		t.Errorf("firing: %+v", m)
	}
	j := testJob(gcSevere)
	j.Ended = true
	a.Update(j)
	m = <-got
	if m.Status != "resolved" || len(m.Alerts) != 1 || m.Alerts[0].Status != "resolved" || m.Alerts[0].EndsAt.IsZero() {
		t.Errorf("resolved: %+v", m)
	}
	testsrv.WaitUntil(t, "both messages counted", 10*time.Second, func() bool {
		return testutil.ToFloat64(a.m.sent.WithLabelValues(receiverWebhook)) == 2
	})
}

// Close sends what is queued, and Update after it is a no-op.
func TestClose(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posts.Add(1) }))
	defer srv.Close()
	a, err := New(Options{Alertmanagers: []string{srv.URL}, Resend: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.Update(testJob(gcSevere)) // queued before Start
	a.Start()
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() != 1 {
		t.Errorf("%d posts at Close, want the one queued", posts.Load())
	}
	a.Update(testJob(lostJVM))
	a.Resend()
}
