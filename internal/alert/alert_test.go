package alert

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskscope/taskscope/internal/store"
)

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// clock is a settable clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// queued takes what waits in a receiver's queue (the alerter not started).
func queued(t *testing.T, a *Alerter, receiver string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, tg := range a.targets {
		if tg.receiver != receiver {
			continue
		}
		for len(tg.queue) > 0 {
			out = append(out, (<-tg.queue).body)
		}
	}
	return out
}

func amAlerts(t *testing.T, bodies [][]byte) []Alert {
	t.Helper()
	var out []Alert
	for _, b := range bodies {
		var as []Alert
		if err := json.Unmarshal(b, &as); err != nil {
			t.Fatal(err)
		}
		out = append(out, as...)
	}
	return out
}

func hooks(t *testing.T, bodies [][]byte) []webhookMessage {
	t.Helper()
	var out []webhookMessage
	for _, b := range bodies {
		var m webhookMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func testJob(findings ...Finding) Job {
	return Job{ID: "job_1700000000000_0001", Name: "nightly", User: "alice", Queue: "etl", Findings: findings}
}

var (
	gcSevere = Finding{Alert: AlertFinding, Heuristic: "gc_pressure", Severity: store.SeveritySevere, Host: "h1",
		Summary: "gc_pressure is severe", Description: "map JVMs spent 23% of their runnable time in garbage collection."}
	stragglerLow = Finding{Alert: AlertFinding, Heuristic: "straggler", Severity: store.SeverityModerate, Summary: "below the minimum"}
	lostJVM      = Finding{Alert: AlertLostTaskJVM, Heuristic: "lost_processes", Severity: store.SeveritySevere, Host: "h2", Summary: "a task JVM lost on h2"}
	orphanLow    = Finding{Alert: AlertOrphanedProcess, Heuristic: "lost_processes", Severity: store.SeverityModerate, Host: "h3", Summary: "an orphan on h3"}
)

// The life of a job's alerts, on a clock: they start with the analysis
// that first shows them, are re-sent ending three re-sends later, end when
// the finding goes away or the job ends; the webhook hears each change of
// the job's alerts. Findings below the minimum severity do not alert; lost
// and orphaned processes do whatever their severity.
func TestLifecycle(t *testing.T) {
	c := &clock{now: t0}
	a, err := New(Options{Alertmanagers: []string{"http://am:9093/"}, Webhook: "http://hook/x", ExternalURL: "https://taskscope.example/",
		Resend: time.Minute, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	a.Update(testJob(gcSevere, stragglerLow, lostJVM, orphanLow))
	got := amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 3 {
		t.Fatalf("%d alerts, want 3 (not the moderate straggler): %+v", len(got), got)
	}
	names := map[string]bool{}
	for _, al := range got {
		names[al.Labels[LabelAlertname]+"/"+al.Labels[LabelHost]] = true
		if !al.StartsAt.Equal(t0) || !al.EndsAt.Equal(t0.Add(3*time.Minute)) {
			t.Errorf("%v: starts %v ends %v, want now and three re-sends on", al.Labels, al.StartsAt, al.EndsAt)
		}
		if al.GeneratorURL != "https://taskscope.example/jobs/job_1700000000000_0001" {
			t.Errorf("generatorURL %q", al.GeneratorURL)
		}
		for k := range al.Labels {
			switch k {
			case LabelAlertname, LabelJob, LabelUser, LabelQueue, LabelHost, LabelSeverity, LabelHeuristic:
			default:
				t.Errorf("label %s", k)
			}
		}
		if al.Labels[LabelJob] != "job_1700000000000_0001" || al.Labels[LabelUser] != "alice" || al.Labels[LabelQueue] != "etl" {
			t.Errorf("labels %v", al.Labels)
		}
	}
	if !names[AlertFinding+"/h1"] || !names[AlertLostTaskJVM+"/h2"] || !names[AlertOrphanedProcess+"/h3"] {
		t.Errorf("alerts %v", names)
	}
	ms := hooks(t, queued(t, a, receiverWebhook))
	if len(ms) != 1 || ms[0].Status != "firing" || len(ms[0].Alerts) != 3 || ms[0].Version != "4" || ms[0].GroupKey != `{}:{job_id="job_1700000000000_0001"}` ||
		ms[0].GroupLabels[LabelJob] != "job_1700000000000_0001" || ms[0].CommonLabels[LabelQueue] != "etl" || ms[0].CommonLabels[LabelHost] != "" ||
		ms[0].ExternalURL != "https://taskscope.example/" {
		t.Fatalf("webhook: %+v", ms)
	}
	for _, w := range ms[0].Alerts {
		if w.Status != "firing" || !w.EndsAt.IsZero() || len(w.Fingerprint) != 16 {
			t.Errorf("webhook alert %+v", w)
		}
	}

	// The same analysis a minute on: nothing changed, nothing is told;
	// the re-send carries all three, ending three minutes on.
	c.now = t0.Add(time.Minute)
	a.Update(testJob(gcSevere, stragglerLow, lostJVM, orphanLow))
	if q := queued(t, a, receiverAlertmanager); len(q) != 0 {
		t.Errorf("an unchanged analysis sent %s", q)
	}
	a.Resend()
	got = amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 3 || !got[0].EndsAt.Equal(c.now.Add(3*time.Minute)) || !got[0].StartsAt.Equal(t0) {
		t.Errorf("re-sent %+v", got)
	}
	if ms := queued(t, a, receiverWebhook); len(ms) != 0 {
		t.Errorf("the webhook is told again before WebhookRepeat: %s", ms)
	}

	// The GC finding goes away: its alert ends now; the webhook hears the
	// job's alerts, that one resolved.
	c.now = t0.Add(2 * time.Minute)
	a.Update(testJob(lostJVM, orphanLow))
	got = amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 1 || got[0].Labels[LabelHeuristic] != "gc_pressure" || !got[0].EndsAt.Equal(c.now) {
		t.Errorf("ended %+v", got)
	}
	ms = hooks(t, queued(t, a, receiverWebhook))
	if len(ms) != 1 || ms[0].Status != "firing" || len(ms[0].Alerts) != 3 {
		t.Fatalf("webhook after the GC finding went away: %+v", ms)
	}
	for _, w := range ms[0].Alerts {
		if (w.Labels[LabelHeuristic] == "gc_pressure") != (w.Status == "resolved") || w.Status == "resolved" && !w.EndsAt.Equal(c.now) {
			t.Errorf("webhook alert %v %s %v", w.Labels, w.Status, w.EndsAt)
		}
	}
	if len(a.alerts) != 2 {
		t.Errorf("%d alerts kept, want the 2 that fire", len(a.alerts))
	}

	// The job ends: all its alerts end.
	c.now = t0.Add(3 * time.Minute)
	j := testJob(lostJVM, orphanLow)
	j.Ended = true
	a.Update(j)
	got = amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 2 || !got[0].EndsAt.Equal(c.now) || !got[1].EndsAt.Equal(c.now) {
		t.Errorf("at the job's end: %+v", got)
	}
	ms = hooks(t, queued(t, a, receiverWebhook))
	if len(ms) != 1 || ms[0].Status != "resolved" || len(ms[0].Alerts) != 2 {
		t.Errorf("webhook at the job's end: %+v", ms)
	}
	if len(a.alerts) != 0 || len(a.byJob) != 0 {
		t.Errorf("%d alerts of %d jobs kept after the end", len(a.alerts), len(a.byJob))
	}
}

// A job found wrong only at its end alerts all the same: for EndedFor,
// then its alert ends (and the webhook hears it). An alert no analysis
// names for Stale ends.
func TestEndedAndStale(t *testing.T) {
	c := &clock{now: t0}
	a, err := New(Options{Alertmanagers: []string{"http://am:9093"}, Webhook: "http://hook/", Resend: time.Minute, EndedFor: 10 * time.Minute,
		Stale: 30 * time.Minute, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	ended := testJob(gcSevere)
	ended.Ended = true
	a.Update(ended)
	got := amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 1 || !got[0].EndsAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("found at the end: %+v", got)
	}
	if ms := hooks(t, queued(t, a, receiverWebhook)); len(ms) != 1 || ms[0].Status != "firing" {
		t.Fatalf("webhook: %+v", ms)
	}
	// Analysed again (ended): nothing new; re-sent with its end.
	c.now = t0.Add(time.Minute)
	a.Update(ended)
	a.Resend()
	if got := amAlerts(t, queued(t, a, receiverAlertmanager)); len(got) != 1 || !got[0].EndsAt.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("re-sent %+v", got)
	}
	queued(t, a, receiverWebhook)
	c.now = t0.Add(10 * time.Minute)
	a.Resend()
	if ms := hooks(t, queued(t, a, receiverWebhook)); len(ms) != 1 || ms[0].Status != "resolved" {
		t.Errorf("webhook when it lapsed: %+v", ms)
	}
	if len(a.alerts) != 0 {
		t.Errorf("%d alerts kept", len(a.alerts))
	}

	// Stale: a running job no analysis names again.
	a.Update(testJob(lostJVM))
	queued(t, a, receiverAlertmanager)
	queued(t, a, receiverWebhook)
	c.now = c.now.Add(31 * time.Minute)
	a.Resend()
	if got := amAlerts(t, queued(t, a, receiverAlertmanager)); len(got) != 1 || !got[0].EndsAt.Equal(c.now) {
		t.Errorf("stale: %+v", got)
	}
	if len(a.alerts) != 0 {
		t.Errorf("%d alerts kept after it went stale", len(a.alerts))
	}
}

// Annotations carry what the analysis says, its secrets' values masked
// and bounded; labels are bounded; findings with the same labels make one
// alert; a severity change is another alert (severity is a label).
func TestAlertTexts(t *testing.T) {
	a, err := New(Options{Alertmanagers: []string{"http://am:9093"}, Now: (&clock{now: t0}).Now})
	if err != nil {
		t.Fatal(err)
	}
	secret := gcSevere
	secret.Description = "the JVM ran java -Dtrustore.password=hunter2 -Xmx1g and " + strings.Repeat("x", 10_000)
	other := gcSevere
	other.Description = "a second finding with the same labels"
	long := lostJVM
	long.Host = strings.Repeat("h", 1000)
	a.Update(testJob(secret, other, long))
	got := amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 2 {
		t.Fatalf("%d alerts, want 2", len(got))
	}
	for _, al := range got {
		d := al.Annotations["description"]
		if strings.Contains(d, "hunter2") || len(d) > maxDescription || len(al.Labels[LabelHost]) > maxLabel {
			t.Errorf("description %d bytes, host %d bytes: %.80q", len(d), len(al.Labels[LabelHost]), d)
		}
		for k := range al.Annotations {
			if k != "summary" && k != "description" {
				t.Errorf("annotation %s", k)
			}
		}
	}
	worse := gcSevere
	worse.Severity = store.SeverityCritical
	a.Update(testJob(worse, long))
	got = amAlerts(t, queued(t, a, receiverAlertmanager))
	if len(got) != 2 {
		t.Fatalf("severe to critical: %+v", got)
	}
	for _, al := range got {
		if ended := !al.EndsAt.IsZero() && !al.EndsAt.After(t0); ended != (al.Labels[LabelSeverity] == "severe") {
			t.Errorf("%v ends %v", al.Labels, al.EndsAt)
		}
	}
}

// What is kept and queued is bounded, and what does not fit is counted.
func TestBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Options{Alertmanagers: []string{"http://am:9093"}, MaxAlerts: 2, Queue: 1, Registerer: reg, Now: (&clock{now: t0}).Now})
	if err != nil {
		t.Fatal(err)
	}
	a.Update(testJob(gcSevere, lostJVM, Finding{Alert: AlertLostTaskJVM, Heuristic: "lost_processes", Severity: store.SeveritySevere, Host: "h9"}))
	if len(a.alerts) != 2 || testutil.ToFloat64(a.m.dropped.WithLabelValues("too_many_alerts")) != 1 {
		t.Errorf("%d alerts kept, dropped %v", len(a.alerts), testutil.ToFloat64(a.m.dropped.WithLabelValues("too_many_alerts")))
	}
	a.Resend() // the queue holds one post: this one does not fit
	if n := testutil.ToFloat64(a.m.dropped.WithLabelValues("queue_full")); n != 2 {
		t.Errorf("dropped from the full queue: %v alerts, want 2", n)
	}
	if n, err := testutil.GatherAndCount(reg, "taskscope_alerts_active"); err != nil || n != 1 {
		t.Errorf("taskscope_alerts_active: %d series, %v", n, err)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{{}, {Alertmanagers: []string{"am:9093"}}, {Webhook: "ftp://x/"}, {Alertmanagers: []string{"http://am"}, ExternalURL: "::"},
		{Alertmanagers: []string{"http://am"}, MinSeverity: 9}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
