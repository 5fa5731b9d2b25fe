// Package agent is taskscope-agent: every interval it has the tracker
// sample the node's task processes, gathers the samples into batches, and
// hands them to the shipper. It serves its own metrics in Prometheus format.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/reaper"
	"github.com/taskscope/taskscope/internal/redact"
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
	FlushInterval   time.Duration // how often a batch is cut (default 5 × Interval, at most 10 s)
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
	Lost       tracker.LostConfig
	ReapAfter  time.Duration
	ReapDryRun bool
	ReapGrace  time.Duration
	ReapAllow  func(pid int32) bool
	// Redact masks the values of secrets in every batch before it is
	// spooled or sent (nil: redact.Default()).
	Redact *redact.Masker
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
		cfg.FlushInterval = min(5*cfg.Interval, 10*time.Second)
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
		FS: &fs, Host: cfg.Host, CgroupPrefix: cfg.CgroupPrefix, Log: cfg.Log,
		Collect: collect.Config{FS: &fs, PSSEvery: cfg.PSSEvery, StatusEvery: cfg.StatusEvery, FDs: cfg.FDs, JVM: true},
	}
	switch cfg.Exits {
	case "", "auto", "taskstats":
		l, err := taskstats.Listen()
		if err != nil {
			if cfg.Exits == "taskstats" {
				return Result{}, err
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
	if cfg.ReapAfter > 0 {
		tcfg.Lost.Reaper = reaper.New(reaper.Config{After: cfg.ReapAfter, Grace: cfg.ReapGrace, DryRun: cfg.ReapDryRun, Log: cfg.Log,
			Protect: func(pid int32) bool { return tr.IsDaemon(pid) }, Allow: cfg.ReapAllow})
		cfg.Log.Info("reaping lost task processes", "after", cfg.ReapAfter, "dry_run", cfg.ReapDryRun)
	}
	tr, err := tracker.New(tcfg)
	if err != nil {
		return Result{}, err
	}
	defer tr.Close()

	sh, err := ship.New(ship.Config{URLs: cfg.Servers, Token: cfg.Token, SpoolDir: cfg.SpoolDir,
		MaxSpoolBytes: cfg.MaxSpoolBytes, MaxMemoryBytes: cfg.MaxMemoryBytes, Log: cfg.Log, Host: cfg.Host})
	if err != nil {
		return Result{}, err
	}
	shipCtx, stopShip := context.WithCancel(context.WithoutCancel(ctx))
	var shipWG sync.WaitGroup
	shipWG.Add(1)
	go func() { defer shipWG.Done(); sh.Run(shipCtx) }()
	// The sender stops; what it holds in memory goes to the spool, or is
	// said to be lost.
	defer func() { stopShip(); shipWG.Wait(); sh.Close() }()

	a := &loop{cfg: cfg, tr: tr, sh: sh, b: newBuilder(tr.ProcessMetrics(), tr.AttemptMetrics()),
		tickDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "taskscope_agent_tick_seconds", Help: "Time taken by one tick (list, classify, sample).",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5},
		})}
	if l, ok := tcfg.Exits.(*taskstats.Listener); ok {
		a.exits = l
	}
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
	// Ship what is left, whatever stopped us.
	a.cut()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	ferr := sh.Flush(fctx)
	cancel()
	res := Result{Ticks: tr.Stats().Ticks, Tracked: tr.Stats().Tracked, Stats: sh.Stats()}
	if err == nil && ferr != nil && cfg.MaxTicks >= 0 {
		err = ferr
	}
	return res, err
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
	lastCut time.Time

	mu       sync.Mutex // guards what the metrics handler reads
	stats    tracker.Stats
	srcErrs  map[string]uint64
	overruns uint64
	tickDur  prometheus.Histogram
	exits    *taskstats.Listener // nil without exit records
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
		if err := a.tr.Tick(start, a.b); err != nil {
			return fmt.Errorf("tick: %w", err)
		}
		took := time.Since(start)
		a.tickDur.Observe(took.Seconds())
		if time.Since(a.lastCut) >= a.cfg.FlushInterval || a.b.samples >= a.cfg.MaxBatchSamples {
			a.cut()
		}
		a.mu.Lock()
		a.stats = a.tr.Stats()
		a.srcErrs = copyMap(a.tr.SourceErrors())
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
	if a.b.empty() {
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

func (a *loop) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	reg.MustRegister(a.tickDur)
	read := func(f func(s *tracker.Stats) float64) func() float64 {
		return func() float64 { a.mu.Lock(); defer a.mu.Unlock(); return f(&a.stats) }
	}
	shipped := func(f func(s ship.Stats) float64) func() float64 {
		return func() float64 { return f(a.sh.Stats()) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_ticks_total", Help: "Ticks taken."}, read(func(s *tracker.Stats) float64 { return float64(s.Ticks) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_overruns_total", Help: "Ticks skipped because a tick took longer than the interval."}, func() float64 { a.mu.Lock(); defer a.mu.Unlock(); return float64(a.overruns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_processes_scanned", Help: "Processes listed in /proc at the last tick."}, read(func(s *tracker.Stats) float64 { return float64(s.Scanned) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_processes_tracked", Help: "Task processes sampled at the last tick."}, read(func(s *tracker.Stats) float64 { return float64(s.Tracked) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_units", Help: "Containers and task JVMs being tracked."}, read(func(s *tracker.Stats) float64 { return float64(s.Units) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_processes_classified_total", Help: "New processes looked at."}, read(func(s *tracker.Stats) float64 { return float64(s.New) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_processes_attributed_total", Help: "Processes attributed to a task attempt."}, read(func(s *tracker.Stats) float64 { return float64(s.Attributed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_short_lived_processes_total", Help: "Processes that lived less than one tick, charged from exit records."}, read(func(s *tracker.Stats) float64 { return float64(s.ShortLived) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_vanished_reads_total", Help: "Reads that failed because the process had just exited."}, read(func(s *tracker.Stats) float64 { return float64(s.Vanished) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_idle_samples_total", Help: "Samples of processes that had not run since the last, kept after reading their scheduler runtime only."}, read(func(s *tracker.Stats) float64 { return float64(s.IdleSkips) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_listings_reused_total", Help: "Ticks whose /proc listing was the last one again (no task created or reaped since, by /proc/loadavg)."}, read(func(s *tracker.Stats) float64 { return float64(s.ListingsReused) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_exit_records_total", Help: "Taskstats exit records received."}, read(func(s *tracker.Stats) float64 { return float64(s.ExitRecords) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_exit_records_unclaimed_total", Help: "Exit records of processes that were no task's, or whose ancestry was lost."}, read(func(s *tracker.Stats) float64 { return float64(s.Unclaimed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_exit_records_lost_total", Help: "Times the kernel's exit records overflowed the agent's socket (records lost)."}, func() float64 {
			if a.exits == nil {
				return 0
			}
			return float64(a.exits.Lost())
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_processes_exited_total", Help: "Task processes that exited."}, read(func(s *tracker.Stats) float64 { return float64(s.Exited) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_queue_batches", Help: "Batches waiting for the server (memory and spool)."}, shipped(func(s ship.Stats) float64 { return float64(s.QueuedBatches) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_queue_bytes", Help: "Compressed bytes waiting for the server."}, shipped(func(s ship.Stats) float64 { return float64(s.QueuedBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_spool_batches", Help: "Batches waiting in the spool directory."}, shipped(func(s ship.Stats) float64 { return float64(s.SpooledBatches) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_agent_spool_bytes", Help: "Compressed bytes waiting in the spool directory."}, shipped(func(s ship.Stats) float64 { return float64(s.SpooledBytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_batches_sent_total", Help: "Batches the server acknowledged."}, shipped(func(s ship.Stats) float64 { return float64(s.Sent) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_samples_sent_total", Help: "Process samples the server acknowledged."}, shipped(func(s ship.Stats) float64 { return float64(s.SentSamples) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_send_retries_total", Help: "Failed deliveries that will be retried."}, shipped(func(s ship.Stats) float64 { return float64(s.Retries) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_batches_rejected_total", Help: "Batches the server refused as invalid."}, shipped(func(s ship.Stats) float64 { return float64(s.Rejected) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_dropped_samples_total", Help: "Samples dropped because the queue or spool was full."}, shipped(func(s ship.Stats) float64 { return float64(s.DroppedSamples) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_dropped_batches_total", Help: "Batches dropped because the queue or spool was full."}, shipped(func(s ship.Stats) float64 { return float64(s.DroppedBatches) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_agent_spool_errors_total", Help: "Batches that could not be written to the spool."}, shipped(func(s ship.Stats) float64 { return float64(s.SpoolErrors) })),
	)
	reg.MustRegister(readErrCollector{a})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

var readErrDesc = prometheus.NewDesc("taskscope_agent_read_errors_total",
	"Reads of optional /proc and job files that failed, by source (vanished processes not counted).", []string{"source"}, nil)

type readErrCollector struct{ a *loop }

func (c readErrCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readErrDesc }

func (c readErrCollector) Collect(ch chan<- prometheus.Metric) {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	for src, n := range c.a.srcErrs {
		ch <- prometheus.MustNewConstMetric(readErrDesc, prometheus.CounterValue, float64(n), src)
	}
}

// ErrNoServer is returned by the command line when no --server is given.
var ErrNoServer = errors.New("--server is required")
