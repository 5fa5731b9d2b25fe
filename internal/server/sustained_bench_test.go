package server

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

var (
	benchMaintain = flag.Duration("bench.maintain", 5*time.Second,
		"BenchmarkHTTPIngestSustained: how often the server runs maintenance")
	benchUsers = flag.Int("bench.users", 10,
		"BenchmarkHTTPIngestSustained/http+ui: people using the web UI (loadgen.Users)")
	benchMaintainClock = flag.String("bench.maintain-clock", "data",
		"BenchmarkHTTPIngestSustained: the time maintenance is given: data (the data's clock, as live) or wall")
	benchThreads = flag.Int("bench.duckdb-threads", 0,
		"BenchmarkHTTPIngestSustained, BenchmarkStoresIngest: the embedded store's DuckDB threads (duckdb.Options.Threads; 0: the store's default, 1; -1: DuckDB's, one a core)")
	benchProfile = flag.String("bench.cpuprofile", "",
		"BenchmarkHTTPIngestSustained, BenchmarkStoresIngest: write a CPU profile of each run's timed part to this file, suffixed with the run's name")
	benchPermissions = flag.Bool("bench.permissions", true,
		"BenchmarkHTTPIngestSustained: ingest takes a token, and the UI's users log in through an SSO proxy under an access policy (benchAccess)")
)

// BenchmarkHTTPIngestSustained is BenchmarkHTTPIngest's http run with
// maintenance every 5 s of wall time instead of 30, given the data's
// clock (Config.MaintainNow): the batches replay simulated time some 40
// times faster than it passes, so the store compacts once its oldest
// fresh chunk is CompactAge old in the data's time, every 10 minutes of
// data as a live server taking this rate would (checked every 200 s or
// so of data here, every 30 s live). (Until 2026-12-07 maintenance was
// given the wall's time, an hour past the data: every Maintain compacted,
// every 5 s of wall time, some three times the pace CompactAge asks at
// this rate; -bench.maintain-clock=wall does that still.) A run of 20
// minutes of data thus leaves its last 10 fresh: after it, the server
// stopped, one more maintenance compacts them, and its CPU a sample is
// reported apart (final-maintain-cpu-ns/sample): with it, every sample is
// compacted once, as in a live server's steady state.
//
// With -bench.cpuprofile the process's CPU is split between the server
// and the benchmark's clients (the sender, the UI's users), whose
// goroutines carry a profile label (clientShare): server-cpu-ns/sample
// and client-cpu-ns/sample.
//
// The sub-benchmark victoria-metrics is the baseline: the same data sent
// to VictoriaMetrics (victoriaMetrics). The others send it to a taskscope
// server with, beside the load:
//
//   - http: nothing (ingest alone);
//   - http+ui: -bench.users people using the web UI (loadgen.Users: each
//     goes from the jobs list to a job to one of its attempts, staying
//     5, 20 and 10 s on average, and refetches what the open page shows
//     at each live update, as web/src does): the query load the ingest
//     target is judged with;
//   - http+stress: -bench.queriers loops asking what a page asks, back to
//     back with no pause (loadgen.QueryLoop): they take whatever CPU the
//     scheduler gives them, a stress figure, not a model of use.
//
// The store's clock follows the data (the newest batch acknowledged), so
// that the jobs the cluster runs at that moment are running ones to the
// API and the UI, as they would be live.
//
// Every feature is on, as issue 25 asks the target to be met with:
// redaction (the ingest handler's default), the background analysis, and
// permissions (-bench.permissions, default true; benchAccess): the sender
// gives an ingest token with every request, which the server looks up
// among its tokens; the UI's users come through an SSO proxy as a user
// who is not an operator, whose group an access policy grants the
// cluster's queues, so that every answer is filtered by what they see.
//
//	go test -run '^$' -bench HTTPIngestSustained -benchtime 1x -timeout 30m ./internal/server/ -bench.minutes=40
//
// The target is judged by the ratio of http+ui's samples/s to
// victoria-metrics' in the same run (at least 2.5).
func BenchmarkHTTPIngestSustained(b *testing.B) {
	start := time.Now().Add(-time.Duration(*benchMinutes+60) * time.Minute)
	cfg := loadgen.Config{Nodes: *benchNodes, Slots: 8, BatchTicks: 5, Seed: 3, Start: start,
		Duration: time.Duration(*benchMinutes) * time.Minute, Concurrency: *benchNodes}
	bodies := prepareBodies(b, cfg)
	b.Run("victoria-metrics", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			victoriaMetrics(b, cfg)
		}
	})
	for _, mode := range []struct {
		name            string
		users, queriers int
	}{{"http", 0, 0}, {"http+ui", *benchUsers, 0}, {"http+stress", 0, *benchQueries}} {
		b.Run(mode.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sustained(b, cfg, bodies, mode.users, mode.queriers)
			}
		})
	}
}

func sustained(b *testing.B, cfg loadgen.Config, bodies string, users, queriers int) {
	var ackedMs atomic.Int64
	ackedMs.Store(cfg.Start.UnixMilli())
	dataNow := func() time.Time { return time.UnixMilli(ackedMs.Load()) }
	logged := &errorCount{}
	st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir(), Clock: store.Clock{Now: dataNow}, Log: slog.New(logged),
		Threads: *benchThreads})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	// The background analysis on the data's clock too: on the wall's, the
	// jobs (an hour old) were never seen lately, and none was analysed.
	an := analysis.NewWith(st, analysis.Options{Now: dataNow})
	maintainNow := dataNow
	if *benchMaintainClock == "wall" {
		maintainNow = time.Now
	}
	scfg := Config{Listen: "127.0.0.1:0", Store: st, Analyzer: an, MaintainEvery: *benchMaintain,
		MaintainNow: maintainNow, Log: slog.New(logged)}
	var access *benchAccess
	if *benchPermissions {
		access = newBenchAccess(b)
		scfg.Tokens, scfg.Auth = access.tokens, access.auth
	}
	srv, err := Start(scfg)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	cfg.URL, cfg.AckedMs = srv.URL(), &ackedMs
	cfg.Client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	usersClient := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if access != nil {
		cfg.Token = access.token
		usersClient.Transport = access.login(usersClient.Transport)
	}
	stats := &loadgen.QueryStats{}
	qctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for q := 0; q < queriers; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loadgen.QueryLoop(qctx, loadgen.QueryConfig{URL: srv.URL(), Seed: uint64(q + 1)}, stats)
		}()
	}
	var pages loadgen.UsersResult
	if users > 0 {
		wg.Add(1)
		go pprof.Do(qctx, clientLabels, func(qctx context.Context) {
			defer wg.Done()
			pages = loadgen.Users(qctx, loadgen.UsersConfig{URL: srv.URL(), Client: usersClient, Users: users, Seed: 1}, stats)
		})
	}
	var profile string
	if *benchProfile != "" {
		profile = *benchProfile + "." + strings.ReplaceAll(b.Name()[strings.LastIndex(b.Name(), "/")+1:], "+", "-")
		f, err := os.Create(profile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	// The WAL's largest size over the run, every 250 ms: what the
	// checkpoints after each compaction leave it.
	var walPeak atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-qctx.Done():
				return
			case <-t.C:
				if fi, err := os.Stat(st.Path() + ".wal"); err == nil && fi.Size() > walPeak.Load() {
					walPeak.Store(fi.Size())
				}
			}
		}
	}()
	cpu0 := cpuTime()
	b.ResetTimer()
	t0 := time.Now()
	var res loadgen.Result
	pprof.Do(context.Background(), clientLabels, func(ctx context.Context) {
		res, err = loadgen.SendFile(ctx, cfg, bodies)
	})
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if *benchProfile != "" {
		pprof.StopCPUProfile()
	}
	stop()
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	rate := float64(res.Samples) / elapsed.Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(res.Samples), "cpu-ns/sample")
	if profile != "" {
		// The process's CPU split by the profile's share of the clients.
		share, err := clientShare(profile)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric((1-share)*float64(cpu.Nanoseconds())/float64(res.Samples), "server-cpu-ns/sample")
		b.ReportMetric(share*float64(cpu.Nanoseconds())/float64(res.Samples), "client-cpu-ns/sample")
	}
	var operator http.Header
	if access != nil {
		operator = http.Header{"X-Forwarded-User": {"ops"}}
	}
	if m, err := metricSumsAs(operator, srv.URL(), "taskscope_analysis_jobs_total"); err != nil {
		b.Logf("cannot read the analyser's metrics: %v", err)
	} else {
		b.ReportMetric(m["taskscope_analysis_jobs_total"], "jobs-analysed")
	}
	// The analyses' CPU on their workers' threads (and their reads'), by
	// the state of the jobs analysed.
	for _, state := range []string{"ended", "running"} {
		name := `taskscope_analysis_cpu_seconds_total{state="` + state + `"}`
		if m, err := metricSumsAs(operator, srv.URL(), name); err == nil {
			b.ReportMetric(m[name]*1e9/float64(res.Samples), "analysis-"+state+"-cpu-ns/sample")
		}
	}
	// The running attempts' gauges the passes read: the share read
	// incrementally (only what came since), and those read from the
	// start again as samples came late, or dropped for room.
	lr := an.LiveReads()
	b.ReportMetric(float64(lr.Incremental)/float64(max(1, lr.First+lr.Incremental+lr.Again+lr.Whole)), "gauges-incremental")
	b.ReportMetric(float64(lr.Again), "gauges-again")
	b.ReportMetric(float64(lr.Evicted), "gauges-evicted")
	u, _ := st.Usage(context.Background())
	b.ReportMetric(float64(u.Bytes)/float64(max(u.Samples, 1)), "bytes/sample")
	// Failed maintenances (a checkpoint refused) among them.
	b.ReportMetric(float64(logged.n.Load()), "errors-logged")
	if sp, err := st.Space(context.Background()); err == nil {
		b.ReportMetric(float64(sp.WALBytes)/(1<<20), "wal-MiB")
		b.ReportMetric(float64(max(walPeak.Load(), sp.WALBytes))/(1<<20), "wal-peak-MiB")
		b.Logf("before a checkpoint: %s", sp)
	}
	if err := st.Checkpoint(context.Background()); err == nil {
		if sp, err := st.Space(context.Background()); err == nil {
			b.Logf("after a checkpoint: %s", sp)
		}
	}
	// At a live server's pace a run this short leaves about the last
	// CompactAge of its data fresh: the maintenance that would compact
	// it, after the run, the server stopped (its analysis too), so that
	// with it every sample is compacted once, as in a live server's
	// steady state.
	srv.Shutdown(context.Background())
	c0 := cpuTime()
	// (Its checkpoint may meet a transaction of the store's still open,
	// and fail after its retries: the compaction is counted all the same.)
	if err := st.Maintain(context.Background(), time.Now()); err != nil {
		b.Logf("the last maintenance: %v", err)
	}
	final := cpuTime() - c0
	b.ReportMetric(float64(final.Nanoseconds())/float64(res.Samples), "final-maintain-cpu-ns/sample")
	b.Logf("%d samples in %s: %.0f samples/s, CPU %.0f%% of 2 cores, maintenance every %s, %d sends retried (503); database %.2f B/sample",
		res.Samples, elapsed.Round(time.Millisecond), rate, 100*cpu.Seconds()/elapsed.Seconds()/2, *benchMaintain,
		res.Retries, float64(u.Bytes)/float64(max(u.Samples, 1)))
	if users+queriers > 0 {
		all := stats.All()
		b.ReportMetric(float64(all.N)/elapsed.Seconds(), "queries/s")
		b.ReportMetric(float64(all.P50.Microseconds())/1000, "query-p50-ms")
		b.ReportMetric(float64(all.P99.Microseconds())/1000, "query-p99-ms")
		b.Logf("queries: %.1f answered a second; %s", float64(all.N)/elapsed.Seconds(), all)
		if users > 0 {
			b.Logf("%d users opened %d pages and refetched them %d times at live updates", users, pages.Opened, pages.Refreshed)
		}
	}
	for _, l := range stats.Summary() {
		if l.Endpoint == "findings" {
			b.ReportMetric(float64(l.P50.Microseconds())/1000, "findings-p50-ms")
			b.ReportMetric(float64(l.P99.Microseconds())/1000, "findings-p99-ms")
		}
		b.Logf("query %s", l)
	}
	for ep, e := range stats.LastErrors() {
		b.Logf("query %s: last error %s", ep, e)
	}
	if res.Rejected > 0 {
		b.Fatalf("%d batches rejected", res.Rejected)
	}
	if access != nil {
		// (Every request gave a login or a token the server knows.)
		if n := access.auth.Refused(); n > 0 {
			b.Fatalf("%d requests refused by the access check", n)
		}
	}
}

// benchAccess is the benchmark's permissions: an ingest token, and the
// UI's users' login through an SSO proxy (on 127.0.0.1) as a user who is
// not an operator, granted the queues of loadgen's cluster (default, etl,
// adhoc) through a group.
type benchAccess struct {
	token  string
	tokens *auth.Tokens
	auth   *auth.Authenticator
}

func newBenchAccess(b *testing.B) *benchAccess {
	token := auth.NewToken()
	tokens, err := auth.ParseTokens(strings.NewReader(auth.Hash(token)+"\n"), 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	policy, err := auth.ParsePolicy(strings.NewReader("operator ops\nqueue default @analysts\nqueue etl @analysts\nqueue adhoc @analysts\n"))
	if err != nil {
		b.Fatal(err)
	}
	proxies, err := auth.ParseProxies("127.0.0.1, ::1")
	if err != nil {
		b.Fatal(err)
	}
	return &benchAccess{token: token, tokens: tokens, auth: auth.New(auth.Options{UserHeader: "X-Forwarded-User",
		GroupsHeader: "X-Forwarded-Groups", Proxies: proxies, Policy: policy})}
}

// login is next with the SSO proxy's headers of the users' login.
func (*benchAccess) login(next http.RoundTripper) http.RoundTripper { return ssoLogin{next} }

type ssoLogin struct{ next http.RoundTripper }

func (l ssoLogin) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-User", "ana")
	r.Header.Set("X-Forwarded-Groups", "analysts")
	return l.next.RoundTrip(r)
}

// clientLabels mark the goroutines of the benchmark's clients in its CPU
// profile (the sender, the UI's users, and what they start: the HTTP
// client's connections), so that the server's CPU is told from theirs
// (clientShare). The server's goroutines are started by its own, which
// carry none. (The collector's background work is not any goroutine's:
// it counts as the server's, whoever allocated.)
var clientLabels = pprof.Labels("part", "client")

// clientShare is the share of a CPU profile's time spent by goroutines
// labelled clientLabels.
func clientShare(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return 0, fmt.Errorf("cannot read the CPU profile %s: %w", path, err)
	}
	var all, client int64
	for _, s := range p.Sample {
		v := s.Value[len(s.Value)-1]
		all += v
		if slices.Contains(s.Label["part"], "client") {
			client += v
		}
	}
	if all == 0 {
		return 0, nil
	}
	return float64(client) / float64(all), nil
}

// errorCount counts the records at level Error a server and its store log.
type errorCount struct{ n atomic.Int64 }

func (h *errorCount) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *errorCount) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *errorCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorCount) WithGroup(string) slog.Handler      { return h }
