package loadgen

import (
	"bufio"
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

// UsersConfig describes the people using the web UI whose requests Users
// makes.
type UsersConfig struct {
	URL    string
	Client *http.Client
	// Users is how many people have a page of the UI open (default 10).
	Users int
	// The mean time a user stays on each page before going to the next
	// (each stay is drawn uniformly from half to one and a half times it):
	// the jobs list (default 5 s), a job (20 s), an attempt (10 s).
	JobsStay, JobStay, AttemptStay time.Duration
	// Points is a chart's width in points, which the UI asks for (default
	// 600: a half-width chart on a 1280-pixel window).
	Points int
	Seed   uint64
}

// What the UI (web/src) asks for.
const (
	uiJobsPage = 100 // pages/jobs.ts PAGE
	uiMaxDrawn = 10  // pages/attempt.ts MAX_DRAWN
	// pages/job.ts: a job of more than uiBigJob attempts refreshes at most
	// every uiBigJobGap.
	uiBigJob    = 2000
	uiBigJobGap = 10 * time.Second
	// pages/job.ts SERIES, pages/attempt.ts ATT_METRICS and PROC_METRICS.
	uiJobSeries     = "cpu_percent,rss_bytes,pss_bytes,heap_used_bytes,attempts,read_bytes_per_s,write_bytes_per_s"
	uiAttemptSeries = "cpu_percent,rss_bytes,pss_bytes,vms_bytes,processes,read_bytes_per_s,write_bytes_per_s"
	uiProcSeries    = "cpu_percent,rss_bytes,pss_bytes,vms_bytes,threads,read_bytes_per_s,write_bytes_per_s"
)

// Users runs cfg.Users simulated people using the web UI until ctx ends,
// each making the requests the UI (web/src) makes, and records every
// answer's latency in stats. Each user, over and over:
//
//  1. opens the jobs list (GET /api/v1/jobs?limit=100&offset=0) and stays
//     there JobsStay;
//  2. opens one of its jobs (a running one, 3 times in 4, when the page
//     lists any): GET the job, then its findings beside its series
//     (.../series, the job's life at Points points), and stays JobStay;
//  3. opens one of the job's attempts (a running one 3 times in 4, when
//     there is one): GET the attempt, then beside each other its series
//     and the series of its 10 largest processes, and stays AttemptStay.
//
// Like the UI, each user keeps one connection to /api/v1/live (server-sent
// events: at most one "update" a second while data arrives) and, at each
// update, refetches what the open page shows: the jobs list always; a
// running job's detail and findings, then its series (a job of more than
// 2,000 attempts at most every 10 s); a running attempt's detail, then its
// charts. A refetched chart asks for its new buckets only (liveSeries).
// Refetches run one at a time: updates that arrive meanwhile make it run
// once more right after. Leaving a page cancels its requests in flight, as
// the UI does.
//
// It returns how many pages the users opened and refetched.
func Users(ctx context.Context, cfg UsersConfig, stats *QueryStats) UsersResult {
	if cfg.Users <= 0 {
		cfg.Users = 10
	}
	if cfg.JobsStay <= 0 {
		cfg.JobsStay = 5 * time.Second
	}
	if cfg.JobStay <= 0 {
		cfg.JobStay = 20 * time.Second
	}
	if cfg.AttemptStay <= 0 {
		cfg.AttemptStay = 10 * time.Second
	}
	if cfg.Points <= 0 {
		cfg.Points = 600
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var res UsersResult
	for i := 0; i < cfg.Users; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := &user{cfg: cfg, stats: stats, r: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)), live: make(chan struct{}, 1)}
			u.run(ctx)
			mu.Lock()
			res.Opened += u.res.Opened
			res.Refreshed += u.res.Refreshed
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// UsersResult counts what the users did.
type UsersResult struct {
	Opened    int // pages opened
	Refreshed int // refetches of an open page at a live update
}

type user struct {
	cfg   UsersConfig
	stats *QueryStats
	r     *rand.Rand
	live  chan struct{} // an update arrived (coalesced: one waiting at most)
	res   UsersResult
}

// uiJob and uiAttempt are the parts of the API's answers the UI's
// navigation needs.
type uiJob struct {
	JobID    string    `json:"job_id"`
	State    string    `json:"state"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	LastSeen time.Time `json:"last_seen"`
	Attempts []struct {
		AttemptID  string    `json:"attempt_id"`
		State      string    `json:"state"`
		Start      time.Time `json:"start"`
		End        time.Time `json:"end"`
		LastSeen   time.Time `json:"last_seen"`
		DurationMs int64     `json:"duration_ms"`
	} `json:"attempt_list"`
}

type uiAttempt struct {
	State     string    `json:"state"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	LastSeen  time.Time `json:"last_seen"`
	CPUMs     int64     `json:"cpu_ms"`
	PeakRSS   int64     `json:"peak_rss_bytes"`
	Processes []struct {
		Key     string    `json:"key"`
		PID     int32     `json:"pid"`
		Start   time.Time `json:"start"`
		CPUMs   int64     `json:"cpu_ms"`
		PeakRSS int64     `json:"peak_rss_bytes"`
	} `json:"process_list"`
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func (u *user) run(ctx context.Context) {
	go u.listen(ctx)
	for ctx.Err() == nil {
		job := u.jobsPage(ctx)
		if job == "" {
			continue
		}
		att := u.jobPage(ctx, job)
		if att == "" {
			continue
		}
		u.attemptPage(ctx, job, att)
	}
}

// listen follows /api/v1/live, reconnecting as EventSource does (after 3
// s), and signals each update after the first of a connection (which only
// says the version).
func (u *user) listen(ctx context.Context) {
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.cfg.URL+"/api/v1/live", nil)
		if err != nil {
			return
		}
		cl := &http.Client{Transport: u.cfg.Client.Transport} // no timeout: the stream stays open
		resp, err := cl.Do(req)
		if err == nil {
			sc := bufio.NewScanner(resp.Body)
			first := true
			for sc.Scan() {
				if !strings.HasPrefix(sc.Text(), "event: update") {
					continue
				}
				if first {
					first = false
					continue
				}
				select {
				case u.live <- struct{}{}:
				default:
				}
			}
			resp.Body.Close()
		}
		pause(ctx, 3*time.Second)
	}
}

// stay keeps a page open for about mean, calling refresh at each live
// update (at most every gap()).
func (u *user) stay(ctx context.Context, mean time.Duration, refresh func(context.Context), gap func() time.Duration) {
	d := time.Duration((0.5 + u.r.Float64()) * float64(mean))
	end := time.NewTimer(d)
	defer end.Stop()
	// An update that came while the page loaded is for data it has.
	select {
	case <-u.live:
	default:
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-u.live:
			if g := gap(); g > 0 {
				if wait := time.Until(last.Add(g)); wait > 0 {
					select {
					case <-ctx.Done():
						return
					case <-end.C:
						return
					case <-time.After(wait):
					}
				}
			}
			last = time.Now()
			refresh(ctx)
		}
	}
}

func noGap() time.Duration { return 0 }

// get fetches path and decodes its JSON into v (nil: read and drop). A
// request that a page's end cancelled is not counted.
func (u *user) get(ctx context.Context, ep, path string, v any) bool {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.cfg.URL+path, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "application/json")
	resp, err := u.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			u.stats.add(ep, 0, err)
		}
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if ctx.Err() != nil {
		return false
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s: %.200s", path, resp.Status, body)
	}
	if err == nil && v != nil {
		err = json.Unmarshal(body, v)
	}
	u.stats.add(ep, d, err)
	return err == nil
}

// jobsPage shows the jobs list and returns the job the user opens next.
func (u *user) jobsPage(ctx context.Context) string {
	pctx, leave := context.WithCancel(ctx)
	defer leave()
	var page struct {
		Jobs []uiJob `json:"jobs"`
	}
	load := func(ctx context.Context) {
		var p struct {
			Jobs []uiJob `json:"jobs"`
		}
		if u.get(ctx, "jobs", fmt.Sprintf("/api/v1/jobs?limit=%d&offset=0", uiJobsPage), &p) {
			page = p
		}
	}
	load(pctx)
	u.res.Opened++
	u.stay(pctx, u.cfg.JobsStay, func(ctx context.Context) {
		u.res.Refreshed++
		load(ctx)
	}, noGap)
	ids, states := make([]string, len(page.Jobs)), make([]string, len(page.Jobs))
	for i, j := range page.Jobs {
		ids[i], states[i] = j.JobID, j.State
	}
	return u.pick(ids, states)
}

// pick returns one of ids (states: theirs), a running one 3 times in 4
// when there is one; "" if there is none.
func (u *user) pick(ids, states []string) string {
	if len(ids) == 0 {
		return ""
	}
	var running []string
	for i, id := range ids {
		if states[i] == "running" {
			running = append(running, id)
		}
	}
	if len(running) > 0 && u.r.IntN(4) < 3 {
		return running[u.r.IntN(len(running))]
	}
	return ids[u.r.IntN(len(ids))]
}

// jobPage shows a job and returns the attempt the user opens next.
func (u *user) jobPage(ctx context.Context, id string) string {
	pctx, leave := context.WithCancel(ctx)
	defer leave()
	jp := "/api/v1/jobs/" + url.PathEscape(id)
	var cur uiJob
	if !u.get(pctx, "job", jp, &cur) {
		return ""
	}
	u.res.Opened++
	js := &liveSeries{ep: "job_series", path: fmt.Sprintf("%s/series?metrics=%s", jp, uiJobSeries)}
	series := func(ctx context.Context, live bool) {
		from, to := unixMs(cur.Start), unixMs(cur.End)
		if to == 0 {
			to = unixMs(cur.LastSeen)
		}
		for _, a := range cur.Attempts {
			t0, t1 := unixMs(a.Start), unixMs(a.End)
			if t1 == 0 {
				t1 = unixMs(a.LastSeen)
			}
			if t1 == 0 {
				t1 = t0 + a.DurationMs
			}
			if from == 0 {
				from = t0
			}
			from, to = min(from, t0), max(to, t1)
		}
		to = max(to, from+1000) + 1
		js.fetch(ctx, u, from, to+1, u.cfg.Points, live)
	}
	// The findings come beside the charts; the page does not wait for them.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		u.get(pctx, "findings", jp+"/findings", nil)
	}()
	series(pctx, false)
	refresh := func(ctx context.Context) {
		if cur.State != "running" {
			return
		}
		u.res.Refreshed++
		var j uiJob
		var ok bool
		var fw sync.WaitGroup
		fw.Add(1)
		go func() {
			defer fw.Done()
			u.get(ctx, "findings", jp+"/findings", nil)
		}()
		ok = u.get(ctx, "job", jp, &j)
		fw.Wait()
		if !ok {
			return
		}
		cur = j
		series(ctx, true)
	}
	gap := func() time.Duration {
		if len(cur.Attempts) > uiBigJob {
			return uiBigJobGap
		}
		return 0
	}
	u.stay(pctx, u.cfg.JobStay, refresh, gap)
	leave()
	wg.Wait()
	ids, states := make([]string, len(cur.Attempts)), make([]string, len(cur.Attempts))
	for i, a := range cur.Attempts {
		ids[i], states[i] = a.AttemptID, a.State
	}
	return u.pick(ids, states)
}

// attemptPage shows an attempt: its detail, then its charts (the
// attempt's series and its largest processes' series, side by side).
func (u *user) attemptPage(ctx context.Context, job, id string) {
	pctx, leave := context.WithCancel(ctx)
	defer leave()
	base := "/api/v1/jobs/" + url.PathEscape(job) + "/attempts/" + url.PathEscape(id)
	var d uiAttempt
	if !u.get(pctx, "attempt", base, &d) {
		return
	}
	u.res.Opened++
	as := &liveSeries{ep: "attempt_series", path: base + "/series?metrics=" + uiAttemptSeries}
	procs := map[string]*liveSeries{}
	charts := func(ctx context.Context, live bool) {
		ps := d.Processes
		weight := func(i int) float64 {
			return float64(ps[i].CPUMs)/float64(max(1, d.CPUMs)) + float64(ps[i].PeakRSS)/float64(max(1, d.PeakRSS))
		}
		idx := make([]int, len(ps))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return weight(idx[a]) > weight(idx[b]) })
		if len(idx) > uiMaxDrawn {
			idx = idx[:uiMaxDrawn]
		}
		from, to := unixMs(d.Start), unixMs(d.End)
		if to == 0 {
			to = unixMs(d.LastSeen)
		}
		if to == 0 {
			to = time.Now().UnixMilli()
		}
		to++
		var wg sync.WaitGroup
		wg.Add(1 + len(idx))
		go func() {
			defer wg.Done()
			as.fetch(ctx, u, from, to+1, u.cfg.Points, live)
		}()
		for _, i := range idx {
			l := procs[ps[i].Key]
			if l == nil {
				l = &liveSeries{ep: "process_series", path: "/api/v1/processes/" + url.PathEscape(ps[i].Key) +
					"/series?attempt=" + url.QueryEscape(id) + "&metrics=" + uiProcSeries}
				procs[ps[i].Key] = l
			}
			go func() {
				defer wg.Done()
				l.fetch(ctx, u, from, to+1, u.cfg.Points, live)
			}()
		}
		wg.Wait()
	}
	charts(pctx, false)
	refresh := func(ctx context.Context) {
		if d.State != "running" {
			return
		}
		u.res.Refreshed++
		var nd uiAttempt
		if !u.get(ctx, "attempt", base, &nd) {
			return
		}
		d = nd
		charts(ctx, true)
	}
	u.stay(pctx, u.cfg.AttemptStay, refresh, noGap)
}

// liveSeries is a chart's series that live updates extend, as web/src's
// LiveSeries (api.ts) does it: a live fetch asks for the last bucket
// onwards only, at the width the series has, and not before that width has
// passed since the last fetch; unless the window's start or the point
// budget changed or the window no longer fits the budget at that width:
// then, as for a page's first fetch, the whole window.
type liveSeries struct {
	ep, path string // the endpoint's name in the stats (+"_tail": a live fetch); its path with the metrics
	key      string // the window's start and the budget of the last fetch
	from     int64  // the series' (aligned) start, its width, its last bucket (0: none)
	step     int64
	last     int64
	at       time.Time // when it was fetched
}

func (l *liveSeries) fetch(ctx context.Context, u *user, from, to int64, points int, live bool) {
	key := fmt.Sprintf("%d/%d", from, points)
	var r struct {
		Step  int64   `json:"step_ms"`
		From  int64   `json:"from_ms"`
		Times []int64 `json:"times"`
	}
	if live && l.last != 0 && key == l.key && (to-l.from+l.step-1)/l.step <= int64(points) {
		if time.Since(l.at) < time.Duration(l.step)*time.Millisecond {
			return
		}
		if !u.get(ctx, l.ep+"_tail", fmt.Sprintf("%s&from=%d&to=%d&step=%d", l.path, l.last, to, l.step), &r) {
			return
		}
	} else {
		if !u.get(ctx, l.ep, fmt.Sprintf("%s&from=%d&to=%d&points=%d", l.path, from, to, points), &r) {
			return
		}
		l.from, l.step, l.last = r.From, r.Step, 0
	}
	if len(r.Times) > 0 {
		l.last = r.Times[len(r.Times)-1]
	}
	l.key, l.at = key, time.Now()
}
