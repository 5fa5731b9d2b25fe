package alert

import "github.com/prometheus/client_golang/prometheus"

// metrics are the alerter's own (bounded labels: the receiver kind, the
// reason of a drop).
type metrics struct {
	sent, failed, retries, dropped *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, a *Alerter) metrics {
	m := metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_alerts_sent_total",
			Help: "Alerts a receiver (alertmanager: each of --alertmanager-url; webhook) accepted, counted at each post (re-sends included)."}, []string{"receiver"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_alerts_failed_total",
			Help: "Alerts of posts that failed for good (refused, or after their retries)."}, []string{"receiver"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_alert_retries_total",
			Help: "Posts of alerts tried again after a failure."}, []string{"receiver"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_alerts_dropped_total",
			Help: "Alerts not sent: a receiver's queue was full (queue_full), or the most alerts kept (10,000) were active (too_many_alerts)."}, []string{"reason"}),
	}
	for _, r := range []string{receiverAlertmanager, receiverWebhook} {
		m.sent.WithLabelValues(r)
		m.failed.WithLabelValues(r)
		m.retries.WithLabelValues(r)
	}
	m.dropped.WithLabelValues("queue_full")
	m.dropped.WithLabelValues("too_many_alerts")
	if reg == nil {
		return m
	}
	reg.MustRegister(m.sent, m.failed, m.retries, m.dropped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_alerts_active", Help: "Alerts that fire now."},
			func() float64 {
				a.mu.Lock()
				defer a.mu.Unlock()
				n := 0
				now := a.o.Now()
				for _, k := range a.alerts {
					if firing(k, now) {
						n++
					}
				}
				return float64(n)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_alert_queue_posts", Help: "Posts of alerts waiting in the receivers' queues."},
			func() float64 {
				n := 0
				for _, t := range a.targets {
					n += len(t.queue)
				}
				return float64(n)
			}))
	return m
}
