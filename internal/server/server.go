// Package server is `taskscope server`: the store, the ingest endpoint, the
// REST API, the web UI and the server's own metrics on one HTTP listener.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/api"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/ingest"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/web"
)

// Config configures a server.
type Config struct {
	Listen string // ":8080"
	Store  store.Store
	Tokens *auth.Tokens // ingest bearer tokens, each bound to a host or not; none: ingest is open
	// Auth identifies readers of the API, the UI's data and /metrics
	// (nil, or without a login configured: everyone reads everything).
	Auth          *auth.Authenticator
	TLSCert       string
	TLSKey        string
	Analyzer      api.Analyzer
	MaintainEvery time.Duration // default 30 s
	// MaintainNow is the time maintenance is given (store.Store.Maintain:
	// what compaction's age and the retentions are counted from; nil:
	// time.Now). A benchmark that replays data faster than it passes gives
	// the data's clock, so that the store compacts at the pace the data
	// calls for, as a live server would.
	MaintainNow func() time.Time
	Log         *slog.Logger
	Ingest      ingest.HandlerOptions
	Pipeline    ingest.PipelineOptions
	Live        api.LiveOptions
	// ClientConns bounds the open connections of one client address
	// (0: unbounded). Behind a load balancer every client comes from its
	// address: leave it 0 there and bound clients at the balancer.
	ClientConns int
	// Alerts, when set, push each analysed job's alerts to Alertmanager
	// and/or a webhook (package alert; the server sets its metrics and
	// log).
	Alerts *alert.Options
	// Profiles are the profile requests of the task JVMs, handed to the
	// agents in the answers to their batches (nil: none are asked for).
	Profiles *profiling.Control
}

// Server is a running server.
type Server struct {
	cfg      Config
	ln       net.Listener
	http     *http.Server
	pipeline *ingest.Pipeline
	stopMnt  context.CancelFunc
	mntDone  chan struct{}
	bgDone   chan struct{} // closed when the background analysis has stopped
	serveErr chan error
	live     *api.Live
	health   *writeHealth
	alerts   *alertFeed // nil without Config.Alerts
	routes   *routeMux
	// committed is set by each ingest commit and cleared by the summary
	// flush after it, which then tells the browsers again: summaries are
	// written up to a second after the commit, and a page that refetched
	// at the commit still saw the old ones.
	committed atomic.Bool
}

// Start listens and serves in the background.
func Start(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaintainEvery <= 0 {
		cfg.MaintainEvery = 30 * time.Second
	}
	if cfg.MaintainNow == nil {
		cfg.MaintainNow = time.Now
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	lo := cfg.Live
	if lo.Store == nil {
		lo.Store = cfg.Store
	}
	live := api.NewLive(time.Second, lo)
	health := &writeHealth{log: cfg.Log, dir: store.DataDirOf(cfg.Store)}
	s := &Server{live: live, health: health}
	po := cfg.Pipeline
	po.Log, po.Registry = cfg.Log, reg
	po.OnStored = live.Stored
	po.OnCommit = func() {
		health.ok()
		s.committed.Store(true)
		live.Committed()
	}
	po.OnError = health.failed
	pl := ingest.NewPipeline(cfg.Store, po)
	io := cfg.Ingest
	io.Tokens, io.Registry = cfg.Tokens, reg
	if cfg.Profiles != nil {
		io.Orders = cfg.Profiles.Orders
	}
	ih := ingest.NewHandler(pl, io)
	reg.MustRegister(usageCollector{cfg.Store}, health)

	if cfg.Alerts != nil {
		o := *cfg.Alerts
		o.Registerer, o.Log = reg, cfg.Log
		al, err := alert.New(o)
		if err != nil {
			pl.Close()
			return nil, fmt.Errorf("cannot send alerts: %w", err)
		}
		s.alerts = &alertFeed{al: al, st: cfg.Store}
	}
	if l, ok := cfg.Analyzer.(Listening); ok {
		// Told of every job's analysis: the alerts, and the profiles of
		// the stragglers of running jobs.
		if s.alerts != nil {
			l.Listen(s.alerts.listener(cfg.Log))
		}
		if cfg.Profiles != nil {
			l.Listen(autoProfiles(cfg.Profiles, cfg.Log))
		}
	}

	mux := &routeMux{ServeMux: http.NewServeMux()}
	s.routes = mux
	mux.Handle("POST /api/v1/ingest", ih)
	if cfg.Auth == nil {
		cfg.Auth = auth.New(auth.Options{})
	}
	api.New(cfg.Store, cfg.Analyzer, live, cfg.Auth).WithProfiles(cfg.Profiles).Register(mux)
	// The server's own metrics are operators'.
	mux.Handle("GET /metrics", cfg.Auth.Require(true, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.Handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if msg := health.message(); msg != "" {
			// Serving, but not storing: a balancer sends agents elsewhere.
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(msg + "\n"))
			return
		}
		w.Write([]byte("ok\n"))
	}))
	mux.Handle("/", web.Handler())
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		web.SecurityHeaders(w.Header())
		mux.ServeHTTP(w, r)
	})

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		pl.Close()
		return nil, fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)
	}
	if s.alerts != nil {
		s.alerts.al.Start()
	}
	s.cfg, s.ln, s.pipeline, s.mntDone, s.serveErr = cfg, ln, pl, make(chan struct{}), make(chan error, 1)
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if cfg.ClientConns > 0 {
		cc := newClientConns(cfg.ClientConns)
		s.http.ConnState = cc.state
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "taskscope_server_connections_refused_total",
			Help: "Connections closed at once: their client address had --max-client-conns open already."},
			func() float64 { return float64(cc.refused.Load()) }))
	}
	go func() {
		var err error
		if cfg.TLSCert != "" {
			err = s.http.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
		} else {
			err = s.http.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			s.serveErr <- err
		}
		close(s.serveErr)
	}()
	mctx, cancel := context.WithCancel(context.Background())
	s.stopMnt = cancel
	go s.maintain(mctx)
	s.bgDone = make(chan struct{})
	go func() {
		defer close(s.bgDone)
		if bg, ok := cfg.Analyzer.(Background); ok {
			if err := bg.Run(mctx, reg); err != nil {
				cfg.Log.Error("the background analysis stopped", "err", err)
			}
		}
	}()
	if cfg.Profiles != nil {
		go cfg.Profiles.Run(mctx)
	}
	cfg.Log.Info("server listening", "addr", ln.Addr().String(), "tls", cfg.TLSCert != "", "ingest_auth", cfg.Tokens.Len() > 0, "read_auth", cfg.Auth.Enabled())
	return s, nil
}

// routeMux is the server's mux, which records the pattern of every route
// added to it (Routes).
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc is Handle of a function.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Routes are the patterns of every route the server serves (those of
// package api, ingest, /metrics, /healthz, the UI), as its mux has them:
// the tests that walk every route walk these.
func (s *Server) Routes() []string { return slices.Clone(s.routes.patterns) }

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string {
	scheme := "http"
	if s.cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + s.Addr()
}

// Err delivers a serving error, if serving stops on its own.
func (s *Server) Err() <-chan error { return s.serveErr }

func (s *Server) maintain(ctx context.Context) {
	defer close(s.mntDone)
	t := time.NewTicker(s.cfg.MaintainEvery)
	defer t.Stop()
	// Summaries are written at most every second by ingest; this writes
	// them when ingest goes quiet.
	f := time.NewTicker(time.Second)
	defer f.Stop()
	// A store that other servers write too (ClickHouse behind several
	// replicas) says when anything was stored, by anyone: the browsers of
	// this server are told of the others' commits as of its own.
	changes, shared := store.ChangesOf(s.cfg.Store)
	var seen uint64
	active := map[string]seenJob{}
	// waited: summaries waited at the last flush (a store that writes a
	// job's at most every few seconds, store.PacedFlusher): the browsers
	// are told again at the next.
	waited := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.C:
			committed := s.committed.Swap(false)
			waiting, err := store.FlushDue(ctx, s.cfg.Store)
			if err != nil && ctx.Err() == nil {
				// The health logs it, once (and a reminder every minute).
				s.health.failed(err, 0)
				s.cfg.Log.Debug("cannot write summaries", "err", err)
			} else if committed || waited {
				s.live.Flushed()
			}
			waited = waiting
			if shared {
				if v, err := changes(ctx); err == nil && v != seen {
					if seen != 0 {
						s.live.Changed(s.othersChanged(ctx, active)...)
					}
					seen = v
				}
			}
		case <-t.C:
			if err := s.cfg.Store.Maintain(ctx, s.cfg.MaintainNow()); err != nil && ctx.Err() == nil {
				// A full disk is the health's to say; another failure
				// (a checkpoint that met a transaction) is tried again.
				if errors.Is(err, store.ErrDiskFull) {
					s.health.failed(err, 0)
				} else {
					s.cfg.Log.Error("maintenance failed", "err", err)
				}
			}
		}
	}
}

// Listening is an Analyzer that tells listeners of each job's analysis
// it stores (package analysis).
type Listening interface {
	Listen(l analysis.Listener)
}

// Background is an Analyzer that also analyses jobs in the background
// (package analysis: every job when it ends, running ones as they run):
// the server runs it from Start to Shutdown, its metrics among its own.
type Background interface {
	Run(ctx context.Context, reg prometheus.Registerer) error
}

// othersChanged is whose jobs changed since the last call, as the jobs
// list says them: the running jobs (the newest 1000) whose figures differ
// from those active had, and those that ran then and no longer do
// (active becomes the running jobs). Another replica's commits, which
// this server did not see, move its browsers' live counters so: for a
// user, only when one of the jobs they see changed.
func (s *Server) othersChanged(ctx context.Context, active map[string]seenJob) []store.Owner {
	page, err := s.cfg.Store.Jobs(ctx, store.JobFilter{State: store.StateRunning, Limit: 1000})
	if err != nil {
		return nil
	}
	var out []store.Owner
	now := make(map[string]seenJob, len(page.Jobs))
	for _, j := range page.Jobs {
		sj := seenJob{fmt.Sprint(j.LastSeen, j.Attempts, j.Running, j.CPUMs), store.Owner{User: j.User, Queue: j.Queue}}
		now[j.JobID] = sj
		if active[j.JobID] != sj {
			out = append(out, sj.owner)
		}
	}
	for id, sj := range active {
		if _, ok := now[id]; !ok {
			out = append(out, sj.owner) // ended
		}
	}
	clear(active)
	maps.Copy(active, now)
	return out
}

// seenJob is what othersChanged saw of a running job.
type seenJob struct {
	figures string
	owner   store.Owner
}

// Shutdown stops in a fixed order: no new requests, the writer drains its
// queue, maintenance and the background analysis stop. The caller closes
// the store.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	s.pipeline.Close()
	s.stopMnt()
	<-s.mntDone
	<-s.bgDone // (no analysis tells the alerts of a job after this)
	if s.alerts != nil {
		// The posts queued go out while ctx lasts; the alerts that fire
		// lapse by themselves (their end is a few re-sends on).
		if aerr := s.alerts.al.Close(ctx); err == nil {
			err = aerr
		}
	}
	return err
}

// usageCollector exports the store's size.
type usageCollector struct{ st store.Store }

var (
	usageSamples = prometheus.NewDesc("taskscope_store_samples", "Process samples stored.", nil, nil)
	usageBytes   = prometheus.NewDesc("taskscope_store_bytes", "Bytes the store takes on disk.", nil, nil)
	usageJobs    = prometheus.NewDesc("taskscope_store_jobs", "Jobs stored.", nil, nil)
)

func (u usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- usageSamples
	ch <- usageBytes
	ch <- usageJobs
}

func (u usageCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	us, err := u.st.Usage(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(usageSamples, prometheus.GaugeValue, float64(us.Samples))
	ch <- prometheus.MustNewConstMetric(usageBytes, prometheus.GaugeValue, float64(us.Bytes))
	ch <- prometheus.MustNewConstMetric(usageJobs, prometheus.GaugeValue, float64(us.Jobs))
}
