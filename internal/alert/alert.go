// Package alert pushes what is wrong with jobs to Prometheus Alertmanager
// (its v2 API: POST /api/v2/alerts) and/or to a webhook that takes
// Alertmanager's webhook payload (version 4), so that routing to teams,
// Slack or mail is Alertmanager's (or the webhook's) and nothing is
// invented here.
//
// It is told each job's state after each analysis (Update, with a Job of
// its own: the findings at or above the minimum severity, and the task
// processes the job lost or orphaned) and keeps the alerts they make, one
// per label set (alertname, job_id, user, queue, host, severity,
// heuristic). An alert starts when a job's analysis first shows it, is
// re-sent to Alertmanager every Resend while it lasts (each time ending
// three Resends later, so that it lapses by itself if taskscope stops
// sending), and ends (endsAt) when the job ends or the finding goes away.
// An alert first seen in a job that has ended already fires for EndedFor
// and then ends, so that a job that was found wrong only at its end still
// notifies someone.
//
// Posts are retried with a backoff; each receiver has a bounded queue (a
// full one drops, and counts, what does not fit: the next re-send carries
// the alerts again); the alerts kept are bounded too.
package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/taskscope/taskscope/internal/redact"
	"github.com/taskscope/taskscope/internal/store"
)

// The alerts' names (the alertname label).
const (
	// AlertFinding is a finding of a job's analysis at or above the
	// minimum severity.
	AlertFinding = "TaskscopeFinding"
	// AlertLostTaskJVM is a task process its framework lost: a Hadoop 1
	// Child JVM its TaskTracker no longer counts, a container its
	// NodeManager no longer knows, a task that outlived its job.
	AlertLostTaskJVM = "TaskscopeLostTaskJVM"
	// AlertOrphanedProcess is a task process whose launcher (NodeManager
	// or TaskTracker) died.
	AlertOrphanedProcess = "TaskscopeOrphanedProcess"
)

// The labels an alert carries; an empty one is left out.
const (
	LabelAlertname = "alertname"
	LabelJob       = "job_id"
	LabelUser      = "user"
	LabelQueue     = "queue"
	LabelHost      = "host"
	LabelSeverity  = "severity"
	LabelHeuristic = "heuristic"
)

// Job is what the alerter is told of a job after its analysis.
type Job struct {
	ID, Name, User, Queue string
	// Ended: the job has finished; its alerts end.
	Ended bool
	// Findings are what may alert: its analysis's findings (those below
	// the minimum severity are left out here) and its lost or orphaned
	// task processes (one per host and kind, while they last: those
	// alert whatever their severity).
	Findings []Finding
}

// Finding is one thing to alert about in a job.
type Finding struct {
	Alert     string // AlertFinding, AlertLostTaskJVM or AlertOrphanedProcess
	Heuristic string
	Severity  store.Severity
	Host      string // the one host it is about ("" when several or none)
	// Summary and Description are the alert's annotations: what the
	// analysis says, never a command line (secrets' values are masked
	// again, and the texts bounded).
	Summary, Description string
}

// Alert is an alert as Alertmanager's API takes it (postableAlert).
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// Options configure an Alerter.
type Options struct {
	// Alertmanagers are the base URLs of the Alertmanagers (each gets
	// every alert, as Prometheus sends them to every member of an
	// Alertmanager cluster): http://HOST:9093, or with the path prefix
	// of its --web.route-prefix.
	Alertmanagers []string
	// Webhook is a URL that gets Alertmanager's webhook payload (version
	// 4) for each change of a job's alerts.
	Webhook string
	// MinSeverity: findings at this severity or above alert (default
	// severe). Lost and orphaned task processes alert whatever it is.
	MinSeverity store.Severity
	// ExternalURL is taskscope's URL as its users reach it: an alert's
	// generatorURL is its job's page there.
	ExternalURL string
	// Resend is how often active alerts are sent again (default 1
	// minute; Alertmanager's resolve_timeout is 5 minutes by default).
	Resend time.Duration
	// EndedFor is how long an alert first seen in an ended job fires
	// (default 10 minutes).
	EndedFor time.Duration
	// Stale: an alert that no analysis named for this long ends (default
	// 1 hour; a running job is analysed every minute while data comes).
	Stale time.Duration
	// WebhookRepeat is how often a job whose alerts still fire is sent
	// to the webhook again (default 4 hours: Alertmanager's
	// repeat_interval).
	WebhookRepeat time.Duration
	// MaxAlerts bounds the alerts kept at once (default 10,000); Queue the
	// posts waiting for each receiver (default 64); Retries how often a
	// failed post is tried again (default 5, after 1, 2, 4, ... s, at most
	// 30 s apart); Timeout one post (default 10 s).
	MaxAlerts, Queue, Retries int
	Timeout                   time.Duration
	Client                    *http.Client
	// Registerer gets the alerter's metrics (nil: none).
	Registerer prometheus.Registerer
	Log        *slog.Logger
	Now        func() time.Time
	// backoff is the first retry's wait (tests shorten it).
	backoff time.Duration
}

func (o *Options) defaults() {
	if o.MinSeverity == store.SeverityNone {
		o.MinSeverity = store.SeveritySevere
	}
	if o.Resend <= 0 {
		o.Resend = time.Minute
	}
	if o.EndedFor <= 0 {
		o.EndedFor = 10 * time.Minute
	}
	if o.Stale <= 0 {
		o.Stale = time.Hour
	}
	if o.WebhookRepeat <= 0 {
		o.WebhookRepeat = 4 * time.Hour
	}
	if o.MaxAlerts <= 0 {
		o.MaxAlerts = 10_000
	}
	if o.Queue <= 0 {
		o.Queue = 64
	}
	if o.Retries <= 0 {
		o.Retries = 5
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.backoff <= 0 {
		o.backoff = time.Second
	}
}

// kept is an alert the alerter holds.
type kept struct {
	Alert
	fp    string
	job   string
	named time.Time // the last analysis that named it
	ended bool      // its end is set (EndsAt)
	// resolved: its end has passed and has been told (to the webhook's
	// queue, if any): it is forgotten.
	resolved bool
}

// Alerter keeps the alerts and sends them. Its methods are safe for
// concurrent use.
type Alerter struct {
	o       Options
	mask    *redact.Masker
	targets []*target
	m       metrics

	mu     sync.Mutex
	closed bool                       // Close was called: nothing is queued any more
	alerts map[string]*kept           // by fingerprint
	byJob  map[string]map[string]bool // job -> fingerprints
	hooked map[string]time.Time       // job -> when the webhook was last told of it

	stop chan struct{}
	done chan struct{}
}

// New checks the options and makes an alerter; Start sends.
func New(o Options) (*Alerter, error) {
	o.defaults()
	if len(o.Alertmanagers) == 0 && o.Webhook == "" {
		return nil, errors.New("no Alertmanager and no webhook to send alerts to")
	}
	if o.MinSeverity < store.SeverityLow || o.MinSeverity > store.SeverityCritical {
		return nil, fmt.Errorf("the minimum severity must be low, moderate, severe or critical, not %s", o.MinSeverity)
	}
	if o.ExternalURL != "" {
		if _, err := checkURL(o.ExternalURL); err != nil {
			return nil, fmt.Errorf("external URL: %w", err)
		}
	}
	a := &Alerter{o: o, mask: redact.Default(), alerts: map[string]*kept{}, byJob: map[string]map[string]bool{},
		hooked: map[string]time.Time{}}
	a.m = newMetrics(o.Registerer, a)
	for _, u := range o.Alertmanagers {
		base, err := checkURL(u)
		if err != nil {
			return nil, fmt.Errorf("Alertmanager URL: %w", err)
		}
		a.targets = append(a.targets, a.newTarget(receiverAlertmanager, strings.TrimRight(base.String(), "/")+"/api/v2/alerts"))
	}
	if o.Webhook != "" {
		u, err := checkURL(o.Webhook)
		if err != nil {
			return nil, fmt.Errorf("webhook URL: %w", err)
		}
		a.targets = append(a.targets, a.newTarget(receiverWebhook, u.String()))
	}
	return a, nil
}

// checkURL parses an http(s) URL.
func checkURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("cannot parse %q: %w", redact.Default().String(s), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http or https URL", redact.Default().String(s))
	}
	return u, nil
}

// Start sends until Close: the receivers' queues, and the re-sends.
func (a *Alerter) Start() {
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for _, t := range a.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.run()
		}()
	}
	go func() {
		tk := time.NewTicker(a.o.Resend)
		defer tk.Stop()
		for {
			select {
			case <-a.stop:
				for _, t := range a.targets {
					close(t.queue)
				}
				wg.Wait()
				close(a.done)
				return
			case <-tk.C:
				a.Resend()
			}
		}
	}()
}

// Close stops re-sending and waits, until ctx is done, for the posts
// queued to be made; then it gives up on those left.
func (a *Alerter) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	if a.stop == nil {
		return nil
	}
	close(a.stop)
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		for _, t := range a.targets {
			t.cancel()
		}
		<-a.done
		return fmt.Errorf("cannot send the alerts left: %w", ctx.Err())
	}
}

// Update takes a job's state after its analysis: the alerts it makes
// start or go on, those it no longer makes end, all end with the job. It
// queues what changed and returns at once.
func (a *Alerter) Update(j Job) {
	now := a.o.Now()
	want := map[string]*kept{}
	var order []string
	for _, f := range j.Findings {
		if f.Alert == AlertFinding && f.Severity < a.o.MinSeverity || f.Severity == store.SeverityNone || f.Alert == "" {
			continue
		}
		k := a.make(j, f)
		if w, ok := want[k.fp]; ok {
			// Several findings with the same labels (outliers on one
			// host): one alert, the first finding's text and a count.
			w.Annotations["description"] = capText(w.Annotations["description"]+"\n"+k.Annotations["description"], maxDescription)
			continue
		}
		want[k.fp] = k
		order = append(order, k.fp)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	var changed []*kept
	jobs := a.byJob[j.ID]
	for fp := range jobs {
		if _, ok := want[fp]; !ok {
			if k := a.alerts[fp]; k != nil && !k.ended {
				k.ended, k.EndsAt = true, now // the finding went away
				changed = append(changed, k)
			}
		}
	}
	for _, fp := range order {
		w := want[fp]
		k := a.alerts[fp]
		switch {
		case k == nil:
			if len(a.alerts) >= a.o.MaxAlerts {
				a.m.dropped.WithLabelValues("too_many_alerts").Inc()
				continue
			}
			k = w
			k.StartsAt, k.named = now, now
			if j.Ended {
				k.ended, k.EndsAt = true, now.Add(a.o.EndedFor) // found at its end: fires for a while
			}
			a.alerts[fp] = k
			if jobs == nil {
				jobs = map[string]bool{}
				a.byJob[j.ID] = jobs
			}
			jobs[fp] = true
			changed = append(changed, k)
		case j.Ended && !k.ended:
			k.ended, k.EndsAt, k.named = true, now, now // the job ended
			changed = append(changed, k)
		case !j.Ended:
			k.named, k.Annotations = now, w.Annotations
			if k.ended { // found at an end, running again: it lasts with the job
				k.ended, k.EndsAt = false, time.Time{}
				changed = append(changed, k)
			}
		}
	}
	a.send(changed, now)
	a.forgetEnded()
}

// make builds the alert of a finding.
func (a *Alerter) make(j Job, f Finding) *kept {
	labels := map[string]string{}
	for k, v := range map[string]string{LabelAlertname: f.Alert, LabelJob: j.ID, LabelUser: j.User, LabelQueue: j.Queue,
		LabelHost: f.Host, LabelSeverity: f.Severity.String(), LabelHeuristic: f.Heuristic} {
		if v = strings.TrimSpace(v); v != "" {
			labels[k] = capText(v, maxLabel)
		}
	}
	ann := map[string]string{}
	if s := a.text(f.Summary, maxSummary); s != "" {
		ann["summary"] = s
	}
	if d := a.text(f.Description, maxDescription); d != "" {
		ann["description"] = d
	}
	k := &kept{Alert: Alert{Labels: labels, Annotations: ann, GeneratorURL: a.jobURL(j.ID)}, job: j.ID,
		fp: model.LabelSet(toLabelSet(labels)).Fingerprint().String()}
	return k
}

// Bounds of an alert's texts (bytes).
const (
	maxLabel       = 256
	maxSummary     = 512
	maxDescription = 4096
)

// text makes an annotation: secrets' values masked, bounded, valid UTF-8.
func (a *Alerter) text(s string, n int) string {
	return capText(strings.TrimSpace(a.mask.String(s)), n)
}

// capText cuts s to at most n bytes, on a rune boundary, marking the cut.
func capText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func toLabelSet(m map[string]string) model.LabelSet {
	ls := make(model.LabelSet, len(m))
	for k, v := range m {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls
}

// jobURL is the job's page (generatorURL).
func (a *Alerter) jobURL(id string) string {
	if a.o.ExternalURL == "" {
		return ""
	}
	return strings.TrimRight(a.o.ExternalURL, "/") + "/jobs/" + url.PathEscape(id)
}

// forgetEnded drops the alerts whose end has been sent and has passed
// (a.mu held).
func (a *Alerter) forgetEnded() {
	for fp, k := range a.alerts {
		if k.resolved {
			a.drop(fp, k)
		}
	}
}

func (a *Alerter) drop(fp string, k *kept) {
	delete(a.alerts, fp)
	if jobs := a.byJob[k.job]; jobs != nil {
		delete(jobs, fp)
		if len(jobs) == 0 {
			delete(a.byJob, k.job)
			delete(a.hooked, k.job)
		}
	}
}

// Resend sends every alert kept again (Start calls it every Resend):
// alerts no analysis named for Stale end, and those whose end has passed
// are told to the webhook and forgotten.
func (a *Alerter) Resend() {
	now := a.o.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	var changed []*kept
	for _, k := range a.alerts {
		switch {
		case !k.ended && now.Sub(k.named) >= a.o.Stale:
			k.ended, k.EndsAt = true, now
			changed = append(changed, k)
		case k.ended && !k.EndsAt.After(now):
			changed = append(changed, k) // lapsed: the webhook hears it ended
		}
	}
	all := make([]*kept, 0, len(a.alerts))
	for _, k := range a.alerts {
		all = append(all, k)
	}
	sortKept(all)
	for _, t := range a.targets {
		if t.receiver == receiverAlertmanager {
			t.enqueue(a.amBatches(all, now))
		}
	}
	a.hook(changed, now, true)
	a.forgetEnded()
}

// send queues what changed for every receiver (a.mu held).
func (a *Alerter) send(changed []*kept, now time.Time) {
	if len(changed) == 0 {
		return
	}
	sortKept(changed)
	for _, t := range a.targets {
		if t.receiver == receiverAlertmanager {
			t.enqueue(a.amBatches(changed, now))
		}
	}
	a.hook(changed, now, false)
}

// The most alerts in one post to Alertmanager.
const maxBatch = 500

// amBatches renders alerts for Alertmanager: an active one ends three
// re-sends from now unless it is sent again.
func (a *Alerter) amBatches(ks []*kept, now time.Time) []batch {
	var out []batch
	for len(ks) > 0 {
		n := min(len(ks), maxBatch)
		alerts := make([]Alert, n)
		for i, k := range ks[:n] {
			alerts[i] = k.Alert
			if !k.ended {
				alerts[i].EndsAt = now.Add(3 * a.o.Resend)
			}
		}
		body, err := json.Marshal(alerts)
		if err != nil {
			a.o.Log.Error("cannot encode alerts", "err", err)
			return out
		}
		out = append(out, batch{body: body, n: n})
		ks = ks[n:]
	}
	return out
}

func sortKept(ks []*kept) {
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].job != ks[j].job {
			return ks[i].job < ks[j].job
		}
		return ks[i].fp < ks[j].fp
	})
}

// receivers (the metrics' receiver label).
const (
	receiverAlertmanager = "alertmanager"
	receiverWebhook      = "webhook"
)

// batch is one post's body and the alerts it carries.
type batch struct {
	body []byte
	n    int
}

// target is one receiver's URL and its queue of posts.
type target struct {
	a        *Alerter
	receiver string
	url      string
	queue    chan batch
	ctx      context.Context
	cancel   context.CancelFunc
}

func (a *Alerter) newTarget(receiver, u string) *target {
	ctx, cancel := context.WithCancel(context.Background())
	return &target{a: a, receiver: receiver, url: u, queue: make(chan batch, a.o.Queue), ctx: ctx, cancel: cancel}
}

// enqueue queues posts; those that do not fit are dropped and counted.
func (t *target) enqueue(bs []batch) {
	for _, b := range bs {
		select {
		case t.queue <- b:
		default:
			t.a.m.dropped.WithLabelValues("queue_full").Add(float64(b.n))
		}
	}
}

// run posts the queue until it is closed.
func (t *target) run() {
	defer t.cancel()
	for b := range t.queue {
		if err := t.post(b); err != nil {
			t.a.m.failed.WithLabelValues(t.receiver).Add(float64(b.n))
			t.a.o.Log.Warn("cannot send alerts", "receiver", t.receiver, "url", redact.Default().String(t.url), "alerts", b.n, "err", err)
			continue
		}
		t.a.m.sent.WithLabelValues(t.receiver).Add(float64(b.n))
	}
}

// errPermanent marks an answer that trying again cannot change (4xx).
var errPermanent = errors.New("refused")

// post posts a batch, trying again with a backoff.
func (t *target) post(b batch) error {
	wait := t.a.o.backoff
	for try := 0; ; try++ {
		err := t.postOnce(b.body)
		if err == nil {
			return nil
		}
		if errors.Is(err, errPermanent) || try >= t.a.o.Retries {
			return err
		}
		t.a.m.retries.WithLabelValues(t.receiver).Inc()
		tm := time.NewTimer(wait)
		select {
		case <-t.ctx.Done():
			tm.Stop()
			return fmt.Errorf("%w (then stopped)", err)
		case <-tm.C:
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (t *target) postOnce(body []byte) error {
	ctx, cancel := context.WithTimeout(t.ctx, t.a.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("cannot make the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "taskscope")
	resp, err := t.a.o.Client.Do(req)
	if err != nil {
		return fmt.Errorf("cannot post alerts: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		return fmt.Errorf("%w: %s: %s", errPermanent, resp.Status, strings.TrimSpace(string(msg)))
	}
	return fmt.Errorf("cannot post alerts: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}
