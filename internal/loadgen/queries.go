package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// QueryConfig configures a query loop.
type QueryConfig struct {
	URL    string
	Client *http.Client
	// Pause between two rounds of queries (default none: one round after
	// the other, as a busy UI with many users would).
	Pause time.Duration
	Seed  uint64
	// Findings: ask what an operator asks of the stored analyses instead
	// (FindingsLoop's round).
	Findings bool
}

// Latencies are one endpoint's answer times.
type Latencies struct {
	Endpoint string
	N        int
	Errors   int
	P50, P90 time.Duration
	P99, Max time.Duration
}

func (l Latencies) String() string {
	return fmt.Sprintf("%-18s n=%-5d p50=%-8s p90=%-8s p99=%-8s max=%-8s errors=%d", l.Endpoint, l.N,
		l.P50.Round(10*time.Microsecond), l.P90.Round(10*time.Microsecond), l.P99.Round(10*time.Microsecond),
		l.Max.Round(10*time.Microsecond), l.Errors)
}

// QueryStats collects latencies by endpoint.
type QueryStats struct {
	mu   sync.Mutex
	durs map[string][]time.Duration
	errs map[string]int
	last map[string]string
}

func (s *QueryStats) add(ep string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.durs == nil {
		s.durs, s.errs, s.last = map[string][]time.Duration{}, map[string]int{}, map[string]string{}
	}
	if err != nil {
		s.errs[ep]++
		s.last[ep] = err.Error()
		return
	}
	s.durs[ep] = append(s.durs[ep], d)
}

// Summary returns each endpoint's percentiles, by name.
func (s *QueryStats) Summary() []Latencies {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Latencies
	names := map[string]bool{}
	for k := range s.durs {
		names[k] = true
	}
	for k := range s.errs {
		names[k] = true
	}
	for ep := range names {
		out = append(out, percentiles(ep, append([]time.Duration(nil), s.durs[ep]...), s.errs[ep]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out
}

// All is the percentiles of every answer, whatever its endpoint.
func (s *QueryStats) All() Latencies {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d []time.Duration
	errs := 0
	for _, v := range s.durs {
		d = append(d, v...)
	}
	for _, n := range s.errs {
		errs += n
	}
	return percentiles("all", d, errs)
}

// percentiles sorts d and makes its Latencies.
func percentiles(ep string, d []time.Duration, errs int) Latencies {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	l := Latencies{Endpoint: ep, N: len(d), Errors: errs}
	if len(d) > 0 {
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		l.P50, l.P90, l.P99, l.Max = q(0.5), q(0.9), q(0.99), d[len(d)-1]
	}
	return l
}

// LastErrors returns the last error of each endpoint that had one.
func (s *QueryStats) LastErrors() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.last {
		out[k] = v
	}
	return out
}

// QueryLoop asks what a user of the UI asks, over and over, until ctx ends:
// the running jobs, one of them with its attempts, an attempt with its
// processes, the attempt's series, a process's series, the job's series,
// the job's findings (with cfg.Findings, what an operator asks of the
// analyses: the jobs of a severity or worse, sorted by it, one of them,
// and the findings across jobs of that severity). It records every
// answer's latency in stats.
func QueryLoop(ctx context.Context, cfg QueryConfig, stats *QueryStats) {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 99))
	get := func(ep, path string, v any) bool {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+path, nil)
		if err != nil {
			return false
		}
		resp, err := cfg.Client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				stats.add(ep, 0, err)
			}
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		d := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s: %.200s", path, resp.Status, body)
		}
		if err == nil && v != nil {
			err = json.Unmarshal(body, v)
		}
		if ctx.Err() != nil {
			return false
		}
		stats.add(ep, d, err)
		return err == nil
	}
	if cfg.Findings {
		findingsLoop(ctx, cfg, r, get)
		return
	}
	for ctx.Err() == nil {
		var jobs struct {
			Jobs []struct {
				JobID string `json:"job_id"`
			} `json:"jobs"`
		}
		state := []string{"running", "", "finished"}[r.IntN(3)]
		if !get("jobs", "/api/v1/jobs?limit=50&state="+state, &jobs) || len(jobs.Jobs) == 0 {
			pause(ctx, 200*time.Millisecond)
			continue
		}
		job := jobs.Jobs[r.IntN(len(jobs.Jobs))].JobID
		var jd struct {
			Attempts []struct {
				AttemptID string `json:"attempt_id"`
			} `json:"attempt_list"`
		}
		jp := "/api/v1/jobs/" + url.PathEscape(job)
		if !get("job", jp, &jd) || len(jd.Attempts) == 0 {
			continue
		}
		att := jd.Attempts[r.IntN(len(jd.Attempts))].AttemptID
		ap := jp + "/attempts/" + url.PathEscape(att)
		var ad struct {
			Processes []struct {
				Key string `json:"key"`
			} `json:"process_list"`
		}
		if !get("attempt", ap, &ad) {
			continue
		}
		get("attempt_series", ap+"/series?metrics=cpu_percent,rss_bytes,read_bytes_per_s", nil)
		if len(ad.Processes) > 0 {
			k := ad.Processes[r.IntN(len(ad.Processes))].Key
			get("process_series", "/api/v1/processes/"+k+"/series?attempt="+url.QueryEscape(att)+
				"&metrics="+strings.Join([]string{"cpu_percent", "rss_bytes", "heap_used_bytes", "gc_percent"}, ","), nil)
		}
		get("job_series", jp+"/series?metrics=cpu_percent,rss_bytes,attempts", nil)
		get("findings", jp+"/findings", nil)
		pause(ctx, cfg.Pause)
	}
}

// findingsLoop is QueryLoop's round of cfg.Findings: the jobs of a
// severity or worse, worst first, one of them (its page), and the
// findings of that severity or worse across jobs.
func findingsLoop(ctx context.Context, cfg QueryConfig, r *rand.Rand, get func(ep, path string, v any) bool) {
	for ctx.Err() == nil {
		sev := []string{"low", "moderate", "severe"}[r.IntN(3)]
		var jobs struct {
			Jobs []struct {
				JobID string `json:"job_id"`
			} `json:"jobs"`
		}
		if get("jobs_by_severity", "/api/v1/jobs?limit=50&sort=severity&min_severity="+sev, &jobs) && len(jobs.Jobs) > 0 {
			get("job", "/api/v1/jobs/"+url.PathEscape(jobs.Jobs[r.IntN(len(jobs.Jobs))].JobID), nil)
		}
		get("findings_across", "/api/v1/findings?limit=50&min_severity="+sev, nil)
		pause(ctx, cfg.Pause)
	}
}

func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
