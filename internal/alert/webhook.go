package alert

import (
	"encoding/json"
	"sort"
	"strconv"
	"time"
)

// webhookMessage is Alertmanager's webhook payload (version 4), as its
// webhook_config receivers post it.
type webhookMessage struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"` // firing or resolved
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []webhookAlert    `json:"alerts"`
}

type webhookAlert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"` // zero while it fires, as Alertmanager sends it
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// The most alerts in one webhook message (more are counted in
// truncatedAlerts, as Alertmanager's max_alerts does).
const maxWebhookAlerts = 100

// firing reports whether k fires at now.
func firing(k *kept, now time.Time) bool { return !k.ended || k.EndsAt.After(now) }

// hook tells the webhook of the jobs whose alerts changed (one message a
// job, grouped by job_id as an Alertmanager route with group_by: [job_id]
// does: the job's firing alerts and those that ended now), and, with
// repeat, of the jobs whose alerts still fire and were last told
// WebhookRepeat ago. Alerts whose end has passed are resolved then (a.mu
// held).
func (a *Alerter) hook(changed []*kept, now time.Time, repeat bool) {
	var wh *target
	for _, t := range a.targets {
		if t.receiver == receiverWebhook {
			wh = t
		}
	}
	ending := map[*kept]bool{}
	jobs := map[string]bool{}
	for _, k := range changed {
		jobs[k.job] = true
		if !firing(k, now) {
			ending[k] = true
		}
	}
	defer func() {
		for k := range ending {
			k.resolved = true
		}
	}()
	if wh == nil {
		return
	}
	if repeat {
		for job, fps := range a.byJob {
			for fp := range fps {
				if k := a.alerts[fp]; k != nil && firing(k, now) && now.Sub(a.hooked[job]) >= a.o.WebhookRepeat {
					jobs[job] = true
				}
			}
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []batch
	for _, id := range ids {
		var ks []*kept
		for fp := range a.byJob[id] {
			if k := a.alerts[fp]; k != nil && (firing(k, now) || ending[k]) {
				ks = append(ks, k)
			}
		}
		if len(ks) == 0 {
			continue
		}
		sortKept(ks)
		body, n := a.webhookBody(id, ks, now)
		if body != nil {
			out = append(out, batch{body: body, n: n})
			a.hooked[id] = now
		}
	}
	wh.enqueue(out)
}

// webhookBody renders one job's message; n is the alerts it carries.
func (a *Alerter) webhookBody(job string, ks []*kept, now time.Time) ([]byte, int) {
	m := webhookMessage{Version: "4", GroupKey: "{}:{job_id=" + strconv.Quote(job) + "}", Status: "resolved", Receiver: "taskscope",
		GroupLabels: map[string]string{LabelJob: job}, ExternalURL: a.o.ExternalURL, Alerts: []webhookAlert{}}
	for i, k := range ks {
		if i == maxWebhookAlerts {
			m.TruncatedAlerts = len(ks) - i
			break
		}
		w := webhookAlert{Status: "resolved", Labels: k.Labels, Annotations: k.Annotations, StartsAt: k.StartsAt, EndsAt: k.EndsAt,
			GeneratorURL: k.GeneratorURL, Fingerprint: k.fp}
		if firing(k, now) {
			w.Status, w.EndsAt, m.Status = "firing", time.Time{}, "firing"
		}
		if w.Annotations == nil {
			w.Annotations = map[string]string{}
		}
		m.Alerts = append(m.Alerts, w)
	}
	m.CommonLabels = common(m.Alerts, func(w webhookAlert) map[string]string { return w.Labels })
	m.CommonAnnotations = common(m.Alerts, func(w webhookAlert) map[string]string { return w.Annotations })
	body, err := json.Marshal(m)
	if err != nil {
		a.o.Log.Error("cannot encode a webhook message", "err", err)
		return nil, 0
	}
	return body, len(m.Alerts)
}

// common are the pairs every alert has.
func common(ws []webhookAlert, of func(webhookAlert) map[string]string) map[string]string {
	out := map[string]string{}
	if len(ws) == 0 {
		return out
	}
	for k, v := range of(ws[0]) {
		all := true
		for _, w := range ws[1:] {
			if of(w)[k] != v {
				all = false
				break
			}
		}
		if all {
			out[k] = v
		}
	}
	return out
}
