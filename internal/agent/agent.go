// Package agent is taskscope-agent: every interval it has the tracker
// sample the node's task processes, gathers the samples into batches, and
// hands them to the shipper. It serves its own metrics in Prometheus format.
package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/reaper"
	"github.com/taskscope/taskscope/internal/redact"
	"github.com/taskscope/taskscope/internal/sampler"
	"github.com/taskscope/taskscope/internal/ship"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/tracker"
	"github.com/taskscope/taskscope/internal/wire"
)

// Config is the agent's configuration (the flags of `taskscope-agent run`).
type Config struct {
	Servers         []string
	Token           string
	Interval        time.Duration
	FlushInterval   time.Duration // how often a batch is cut (default flushEvery(Interval))
	MaxBatchSamples int           // cut a batch early beyond this many process samples
	ProcFS          string
	Host            string
	SpoolDir        string
	MaxSpoolBytes   int64
	MaxMemoryBytes  int64 // bound of the batches held in memory, without a spool or while it cannot be written (default 16 MiB)
	Listen          string
	MaxTicks        int // <0: run until stopped
	PSSEvery        int // read PSS every N ticks (0: never)
	StatusEvery     int // read status (context switches) every N ticks (0, 1: every tick)
	FDs             bool
	Exits           string // "auto" (taskstats when permitted), "taskstats", "off"
	CgroupPrefix    string
	Log             *slog.Logger
	// Ready, when set, is called once the agent is ticking, with the address
	// its metrics listener is bound to (empty without --listen).
	Ready func(metricsAddr string)
	// Lost task processes: the tracker's checks (always on; tests set
	// their timing and the NodeManager's URL here), and the reaper
	// (--reap-orphans AFTER, off when 0; --reap-dry-run). ReapAllow, when
	// set, limits the reaper to the processes it accepts.
	Lost tracker.LostConfig
	// NM is how NodeManagers are reached: HTTPS roots, SPNEGO with the
	// agent's keytab (--nm-ca-file, --nm-keytab, --nm-principal,
	// --krb5-conf). Its Log defaults to Log.
	NM         nodemanager.ClientConfig
	ReapAfter  time.Duration
	ReapDryRun bool
	ReapGrace  time.Duration
	ReapAllow  func(pid int32) bool
	// Scope limits the agent to one daemon's tasks (--daemon-pid,
	// --daemon-pidfile): one agent per NodeManager or TaskTracker where a
	// host runs several, each with its own Host.
	Scope tracker.Scope
	// Redact masks the values of secrets in every batch before it is
	// spooled or sent (nil: redact.Default()).
	Redact *redact.Masker
	// Profiling says which profiles of task JVMs the agent takes when the
	// server orders them (ParseProfiling: "" is "on-demand,auto"; "off");
	// ProfileBudget is the time each JVM may be stopped for thread dumps
	// in all (default sampler.DefaultPauseBudget).
	Profiling     string
	ProfileBudget time.Duration
}

// Result is what a finished run reports.
type Result struct {
	Ticks   uint64
	Tracked int
	Stats   ship.Stats
}

// Run runs the agent until ctx is done or MaxTicks ticks have been taken,
// then ships what it has (waiting up to 10 s for the server).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = flushEvery(cfg.Interval)
	}
	if cfg.MaxBatchSamples <= 0 {
		cfg.MaxBatchSamples = 50000
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Redact == nil {
		cfg.Redact = redact.Default()
	}
	fs := procfs.NewFS(cfg.ProcFS)
	tcfg := tracker.Config{
		FS: &fs, Host: cfg.Host, CgroupPrefix: cfg.CgroupPrefix, Log: cfg.Log, Scope: cfg.Scope,
		Collect: collect.Config{FS: &fs, PSSEvery: cfg.PSSEvery, StatusEvery: cfg.StatusEvery, FDs: cfg.FDs, JVM: true},
	}
	switch cfg.Exits {
	case "", "auto", "taskstats":
		l, err := taskstats.Listen()
		if err != nil {
			if cfg.Exits == "taskstats" {
				return Result{}, fmt.Errorf("cannot receive exit records (--exits taskstats): %w", err)
			}
			cfg.Log.Info("exit accounting from cutime/cstime (taskstats unavailable)", "err", err)
		} else {
			tcfg.Exits = l
			cfg.Log.Info("exit accounting from taskstats")
		}
	case "off":
	default:
		return Result{}, fmt.Errorf("--exits must be auto, taskstats or off, not %q", cfg.Exits)
	}
	// A JVM's scheduler figures over all its threads: taskstats answers
	// with the pids of this namespace, which must be the procfs tree's.
	if fs.OwnPIDNamespace() {
		if q, err := taskstats.NewQuerier(); err != nil {
			cfg.Log.Info("scheduler figures of multi-threaded processes are their leader thread's (taskstats unavailable)", "err", err)
		} else {
			tcfg.Groups = q
			defer q.Close()
		}
	}
	var tr *tracker.Tracker
	tcfg.Lost = cfg.Lost
	tcfg.Lost.Enabled = true
	nm, err := newNMClient(cfg.NM, cfg.Log)
	if err != nil {
		return Result{}, err
	}
	defer nm.Close()
	tcfg.Lost.NMClient = nm
	if tcfg.Lost.Context == nil {
		tcfg.Lost.Context = ctx // the NodeManager pollers stop with the agent
	}
	if cfg.ReapAfter > 0 {
		tcfg.Lost.Reaper = reaper.New(reaper.Config{After: cfg.ReapAfter, Grace: cfg.ReapGrace, DryRun: cfg.ReapDryRun, Log: cfg.Log,
			Protect: func(pid int32) bool { return tr.IsDaemon(pid) }, Allow: cfg.ReapAllow})
		cfg.Log.Info("reaping lost task processes", "after", cfg.ReapAfter, "dry_run", cfg.ReapDryRun)
	}
	mode, err := ParseProfiling(cfg.Profiling)
	if err != nil {
		return Result{}, err
	}
	if cfg.ProfileBudget <= 0 {
		cfg.ProfileBudget = sampler.DefaultPauseBudget
	}
	tr, err = tracker.New(tcfg)
	if err != nil {
		return Result{}, fmt.Errorf("cannot start the agent: %w", err)
	}
	defer tr.Close()

	prof := newProfiler(mode, cfg.ProcFS, cfg.ProfileBudget, cfg.Log)
	sh, err := ship.New(ship.Config{URLs: cfg.Servers, Token: cfg.Token, SpoolDir: cfg.SpoolDir,
		MaxSpoolBytes: cfg.MaxSpoolBytes, MaxMemoryBytes: cfg.MaxMemoryBytes, Log: cfg.Log, Host: cfg.Host, OnOrders: prof.take})
	if err != nil {
		return Result{}, fmt.Errorf("cannot start the agent's sender: %w", err)
	}
	shipCtx, stopShip := context.WithCancel(context.WithoutCancel(ctx))
	var shipWG sync.WaitGroup
	shipWG.Add(1)
	go func() { defer shipWG.Done(); sh.Run(shipCtx) }()
	// The sender stops; what it holds in memory goes to the spool, or is
	// said to be lost.
	defer func() { stopShip(); shipWG.Wait(); sh.Close() }()

	a := &loop{cfg: cfg, tr: tr, sh: sh, nm: nm, b: newBuilder(tr.ProcessMetrics(), tr.AttemptMetrics()), tickSet: metrics.NewSet(), prof: prof}
	a.sink = jvmSink{Sink: a.b, j: prof.jvms}
	// Profiles are taken beside the ticks, one session at a time; a
	// profile under way when the agent stops is cut short and shipped.
	profCtx, stopProf := context.WithCancel(ctx)
	var profWG sync.WaitGroup
	profWG.Add(1)
	go func() { defer profWG.Done(); prof.run(profCtx) }()
	defer func() { stopProf(); profWG.Wait() }()
	a.tickDur = a.tickSet.NewPrometheusHistogramExt(tickSecondsName, []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5})
	metricsAddr := ""
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return Result{}, fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)
		}
		metricsAddr = ln.Addr().String()
		srv := &http.Server{Handler: a.metricsHandler(), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	cfg.Log.Info("agent started", "host", cfg.Host, "agent_id", sh.AgentID(), "servers", strings.Join(cfg.Servers, ","),
		"interval", cfg.Interval, "sources", sourceNames(tr.Sources()), "exact_exits", tr.Exact())
	if cfg.Ready != nil {
		cfg.Ready(metricsAddr)
	}
	err = a.run(ctx)
	// Ship what is left, whatever stopped us: a profile under way too.
	stopProf()
	profWG.Wait()
	a.cut()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	ferr := sh.Flush(fctx)
	cancel()
	res := Result{Ticks: tr.Stats().Ticks, Tracked: tr.Stats().Tracked, Stats: sh.Stats()}
	if err == nil && ferr != nil && cfg.MaxTicks >= 0 {
		err = fmt.Errorf("cannot ship the last batches: %w", ferr)
	}
	return res, err
}

// flushEvery is the default time between two batches: 5 intervals, at
// least 5 s and at most 10 s. A batch costs the agent a request, its
// compression and its spool file whatever it holds: at 250 ms, one every
// 1.25 s was a quarter of what the agent spent beyond its reads.
func flushEvery(interval time.Duration) time.Duration {
	return min(max(5*interval, 5*time.Second), 10*time.Second)
}

func sourceNames(ss []collect.Source) string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Name())
	}
	return strings.Join(n, ",")
}

type loop struct {
	cfg     Config
	tr      *tracker.Tracker
	sh      *ship.Shipper
	b       *builder
	sink    tracker.Sink // b, and the profiler's view of the JVMs
	prof    *profiler
	lastCut time.Time

	mu       sync.Mutex // guards what the metrics handler reads
	stats    tracker.Stats
	srcErrs  map[string]uint64
	overruns uint64
	tickSet  *metrics.Set // holds tickDur alone
	tickDur  *metrics.PrometheusHistogram
	nm       *nodemanager.Client
}

func (a *loop) run(ctx context.Context) error {
	if a.cfg.MaxTicks == 0 {
		return nil
	}
	// A random phase keeps the agents of a cluster from ticking in step.
	phase := time.Duration(rand.Int64N(int64(a.cfg.Interval)/10 + 1))
	next := time.Now().Add(phase)
	a.lastCut = time.Now()
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for n := 0; a.cfg.MaxTicks < 0 || n < a.cfg.MaxTicks; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		start := time.Now()
		if err := a.tr.Tick(start, a.sink); err != nil {
			return fmt.Errorf("cannot take tick %d: %w", n+1, err)
		}
		took := time.Since(start)
		a.tickDur.Update(took.Seconds())
		// A finished profile goes at once: it was waited for.
		if time.Since(a.lastCut) >= a.cfg.FlushInterval || a.b.samples >= a.cfg.MaxBatchSamples || a.prof.ready() {
			a.cut()
		}
		st := a.tr.Stats()
		a.mu.Lock()
		if a.srcErrs == nil || st.ReadErrors != a.stats.ReadErrors {
			// (Each read error by source counts in ReadErrors too.)
			a.srcErrs = copyMap(a.tr.SourceErrors())
		}
		a.stats = st
		a.mu.Unlock()
		// The next tick is one interval after this one was due; a tick that
		// overran skips the ticks it missed and counts them.
		next = next.Add(a.cfg.Interval)
		if now := time.Now(); next.Before(now) {
			missed := now.Sub(next)/a.cfg.Interval + 1
			next = next.Add(missed * a.cfg.Interval)
			a.mu.Lock()
			a.overruns += uint64(missed)
			a.mu.Unlock()
		}
		if a.cfg.MaxTicks >= 0 && n+1 >= a.cfg.MaxTicks {
			break
		}
		timer.Reset(time.Until(next))
	}
	return nil
}

// cut turns what the builder holds into a batch for the shipper.
func (a *loop) cut() {
	a.lastCut = time.Now()
	profiles := a.prof.profiles()
	if a.b.empty() && len(profiles) == 0 {
		return
	}
	st := a.tr.Stats()
	ss := a.sh.Stats()
	a.mu.Lock()
	overruns := a.overruns
	a.mu.Unlock()
	b := a.b.take(a.cfg.Host, wire.AgentStats{
		DroppedSamples: ss.DroppedSamples, DroppedBatches: ss.DroppedBatches, SpoolBytes: uint64(ss.QueuedBytes),
		Ticks: st.Ticks, Overruns: overruns, ReadErrors: st.ReadErrors,
	})
	b.KeyStartOffsetMs = a.tr.KeyStartOffsetMs()
	b.Profiles = profiles
	// Secrets never leave the node: masked before the spool or the wire.
	a.cfg.Redact.Batch(b)
	if err := a.sh.Enqueue(b); err != nil {
		a.cfg.Log.Error("cannot queue batch", "err", err)
	}
}

func copyMap(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// metricsHandler serves the agent's own metrics at /metrics in Prometheus'
// text format: its own with their help texts, then the Go runtime's and
// the process's (github.com/VictoriaMetrics/metrics: a fraction of the
// Prometheus client's start and memory).
func (a *loop) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		a.writeMetrics(bw)
		metrics.WriteProcessMetrics(bw)
		metrics.WriteFDMetrics(bw)
		bw.Flush()
	})
	return mux
}

const tickSecondsName = "taskscope_agent_tick_seconds"

// agentMetric is one of the agent's own metrics: a counter (its name ends
// in _total) or a gauge.
type agentMetric struct {
	name, help string
	value      func(a *loop, t *tracker.Stats, s *ship.Stats) uint64
}

// agentMetrics are the agent's metrics besides the tick histogram and the
// read errors by source (CONTRACT.md, docs/operations.md).
var agentMetrics = []agentMetric{
	{"taskscope_agent_ticks_total", "Ticks taken.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.Ticks }},
	{"taskscope_agent_overruns_total", "Ticks skipped because a tick took longer than the interval.", func(a *loop, _ *tracker.Stats, _ *ship.Stats) uint64 { return a.overruns }},
	{"taskscope_agent_processes_scanned", "Processes listed in /proc at the last tick.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return uint64(t.Scanned) }},
	{"taskscope_agent_processes_tracked", "Task processes sampled at the last tick.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return uint64(t.Tracked) }},
	{"taskscope_agent_units", "Containers and task JVMs being tracked.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return uint64(t.Units) }},
	{"taskscope_agent_processes_classified_total", "New processes looked at.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.New }},
	{"taskscope_agent_processes_attributed_total", "Processes attributed to a task attempt.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.Attributed }},
	{"taskscope_agent_short_lived_processes_total", "Processes that lived less than one tick, charged from exit records.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.ShortLived }},
	{"taskscope_agent_vanished_reads_total", "Reads that failed because the process had just exited.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.Vanished }},
	{"taskscope_agent_idle_samples_total", "Samples of processes that had not run since the last, kept after reading their scheduler runtime only.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.IdleSkips }},
	{"taskscope_agent_listings_reused_total", "Ticks whose /proc listing was the last one again (no task created or reaped since, by /proc/loadavg).", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.ListingsReused }},
	{"taskscope_agent_exit_records_total", "Taskstats exit records received.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.ExitRecords }},
	{"taskscope_agent_exit_records_unclaimed_total", "Exit records of processes that were no task's, or whose ancestry was lost.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.Unclaimed }},
	{"taskscope_agent_exit_records_lost_total", "Times the kernel's exit records overflowed the agent's socket (records lost).", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.ExitOverflows }},
	{"taskscope_agent_exit_records_dropped_total", "Exit records the kernel dropped because the agent's socket was full.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.ExitRecordsDropped }},
	{"taskscope_agent_exits_without_record_total", "Task processes that exited without their exit record (dropped): their CPU after their last sample was estimated.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.ExitsWithoutRecord }},
	{"taskscope_agent_cpu_split_guesses_total", "Growths of a reaper's CPU of reaped children (the NodeManager's) split between attempts by a guess, an exit record lost: their CPU is told as an estimate (cpu_doubt_ms).", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.SplitGuesses }},
	{"taskscope_agent_cpu_standing_guesses_total", "Attempts whose CPU holds a guess, an exit record lost, that no reaper's CPU of reaped children settled: told as an estimate (cpu_doubt_ms).", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.StandingGuesses }},
	{"taskscope_agent_nodemanager_poll_errors_total", "Polls of the node's NodeManager REST API that failed.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.NMPollErrors }},
	{"taskscope_agent_processes_exited_total", "Task processes that exited.", func(_ *loop, t *tracker.Stats, _ *ship.Stats) uint64 { return t.Exited }},
	{"taskscope_agent_queue_batches", "Batches waiting for the server (memory and spool).", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return uint64(s.QueuedBatches) }},
	{"taskscope_agent_queue_bytes", "Compressed bytes waiting for the server.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return uint64(s.QueuedBytes) }},
	{"taskscope_agent_spool_batches", "Batches waiting in the spool directory.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return uint64(s.SpooledBatches) }},
	{"taskscope_agent_spool_bytes", "Compressed bytes waiting in the spool directory.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return uint64(s.SpooledBytes) }},
	{"taskscope_agent_batches_sent_total", "Batches the server acknowledged.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.Sent }},
	{"taskscope_agent_samples_sent_total", "Process samples the server acknowledged.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.SentSamples }},
	{"taskscope_agent_send_retries_total", "Failed deliveries that will be retried.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.Retries }},
	{"taskscope_agent_batches_rejected_total", "Batches the server refused as invalid.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.Rejected }},
	{"taskscope_agent_dropped_samples_total", "Samples dropped because the queue or spool was full.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.DroppedSamples }},
	{"taskscope_agent_dropped_batches_total", "Batches dropped because the queue or spool was full.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.DroppedBatches }},
	{"taskscope_agent_spool_errors_total", "Batches that could not be written to the spool.", func(_ *loop, _ *tracker.Stats, s *ship.Stats) uint64 { return s.SpoolErrors }},
	{"taskscope_agent_profiles_running", "JVMs being profiled now (thread dumps).", func(a *loop, _ *tracker.Stats, _ *ship.Stats) uint64 { return uint64(a.prof.busy()) }},
	{"taskscope_agent_profiles_total", "Profiles the server ordered and the agent answered (taken, cut short, failed or refused).", func(a *loop, _ *tracker.Stats, _ *ship.Stats) uint64 { return a.prof.answered() }},
	{"taskscope_agent_profile_paused_microseconds_total", "Time the JVMs' threads were stopped for the profiles' thread dumps.", func(a *loop, _ *tracker.Stats, _ *ship.Stats) uint64 { return a.prof.pausedUs() }},
}

const readErrorsName, readErrorsHelp = "taskscope_agent_read_errors_total",
	"Reads of optional /proc and job files that failed, by source (vanished processes not counted)."

// writeMetrics writes the agent's own metrics, each with its HELP and TYPE.
func (a *loop) writeMetrics(w io.Writer) {
	ss := a.sh.Stats()
	a.mu.Lock()
	st := a.stats
	srcs := make([]string, 0, len(a.srcErrs))
	for src := range a.srcErrs {
		srcs = append(srcs, src)
	}
	slices.Sort(srcs)
	errs := make([]uint64, len(srcs))
	for i, src := range srcs {
		errs[i] = a.srcErrs[src]
	}
	vals := make([]uint64, len(agentMetrics))
	for i, m := range agentMetrics {
		vals[i] = m.value(a, &st, &ss)
	}
	a.mu.Unlock()

	for i, m := range agentMetrics {
		typ := "gauge"
		if strings.HasSuffix(m.name, "_total") {
			typ = "counter"
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, typ)
		if typ == "counter" {
			metrics.WriteCounterUint64(w, m.name, vals[i])
		} else {
			metrics.WriteGaugeUint64(w, m.name, vals[i])
		}
	}
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", tickSecondsName, "Time taken by one tick (list, classify, sample).", tickSecondsName)
	a.tickSet.WritePrometheus(w)
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", readErrorsName, readErrorsHelp, readErrorsName)
	for i, src := range srcs {
		metrics.WriteCounterUint64(w, fmt.Sprintf("%s{source=%q}", readErrorsName, src), errs[i])
	}
	writeNMMetrics(w, a.nm)
}

// ErrNoServer is returned by the command line when no --server is given.
var ErrNoServer = errors.New("--server is required")
