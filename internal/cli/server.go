package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/ingest"
	"github.com/taskscope/taskscope/internal/redact"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

// storeFlags are the flags that choose and configure the store.
type storeFlags struct {
	kind, dataDir, clickhouseURL, clickhouseCluster string
	retention, rollupRetention                      time.Duration
	residualAttempts                                bool
	duckdbThreads                                   int
}

func (f *storeFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.kind, "store", "duckdb", "store: duckdb (embedded) or clickhouse")
	fl.StringVar(&f.dataDir, "data-dir", "./taskscope-data", "directory of the embedded store")
	fl.StringVar(&f.clickhouseURL, "clickhouse-url", "", "ClickHouse URL, http://HOST:8123/?database=NAME (with --store clickhouse)")
	fl.StringVar(&f.clickhouseCluster, "clickhouse-cluster", "", "ClickHouse cluster (of its remote_servers) to make the tables on, replicated and sharded (with --store clickhouse)")
	fl.DurationVar(&f.retention, "retention", 14*24*time.Hour, "how long raw samples are kept (0: forever)")
	fl.DurationVar(&f.rollupRetention, "rollup-retention", 180*24*time.Hour, "how long per-minute rollups and events are kept (0: forever)")
	fl.IntVar(&f.duckdbThreads, "duckdb-threads", 1, "embedded store: DuckDB's threads (-1: one a core; more than one runs large reads in parallel, but costs every small query and commit CPU while DuckDB's caller waits for its workers; see docs/operations.md)")
	fl.BoolVar(&f.residualAttempts, "residual-attempts", true, "embedded store: compaction keeps an attempt's series as its difference from its processes' (about 20 % fewer bytes a sample; false: as its own samples; see docs/storage.md)")
}

// duckdbOptions are the embedded store's options the flags give.
func (f *storeFlags) duckdbOptions(log *slog.Logger) duckdb.Options {
	return duckdb.Options{Dir: f.dataDir, Retention: f.retention, RollupRetention: f.rollupRetention,
		PlainAttempts: !f.residualAttempts, Threads: f.duckdbThreads, Log: log}
}

func (f *storeFlags) open(log *slog.Logger) (store.Store, error) {
	switch f.kind {
	case "duckdb":
		return duckdb.Open(f.duckdbOptions(log))
	case "clickhouse":
		if f.clickhouseURL == "" {
			return nil, fmt.Errorf("--store clickhouse needs --clickhouse-url http://HOST:8123/?database=NAME")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // (ON CLUSTER DDL waits for every server)
		defer cancel()
		return clickhouse.Open(ctx, clickhouse.Options{URL: f.clickhouseURL, Cluster: f.clickhouseCluster,
			Retention: f.retention, RollupRetention: f.rollupRetention, Log: log})
	}
	return nil, fmt.Errorf("--store must be duckdb or clickhouse, not %q", f.kind)
}

func serverCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("server", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", ":8080", "address to serve on")
	tokenFile := fl.String("ingest-token-file", "", "file of accepted agent tokens, one per line, each optionally followed by the host it writes for (empty: ingest is open)")
	var af authFlags
	af.register(fl)
	redactPattern := fl.String("redact-pattern", redact.DefaultPattern, "options and environment variables whose names match this regular expression have their values masked in what agents send")
	ingestMemory := fl.Int64("ingest-memory", 256<<20, "bytes that request bodies may take together while they are read, decompressed and decoded")
	clientConns := fl.Int("max-client-conns", 1024, "open connections one client address may have; more are closed at once (0: unbounded; behind a load balancer, whose address carries every client, 0 and bound clients there)")
	cert := fl.String("tls-cert", "", "TLS certificate file (serves HTTPS with --tls-key)")
	key := fl.String("tls-key", "", "TLS key file")
	logLevel := fl.String("log-level", "info", "debug, info, warn or error")
	maintainEvery := fl.Duration("maintain-every", 30*time.Second, "how often the store compacts, applies retention and checkpoints")
	var anf analysisFlags
	anf.register(fl)
	var sf storeFlags
	sf.register(fl)
	var alf alertFlags
	alf.register(fl)
	var pf profilingFlags
	pf.register(fl)
	if err := fl.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if _, err := pf.config(log); err != nil {
		return err
	}
	if (*cert == "") != (*key == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	var tokens *auth.Tokens
	if *tokenFile != "" {
		// A token may be followed by the host it writes for.
		if tokens, err = auth.LoadTokens(*tokenFile, 0, 1); err != nil {
			return fmt.Errorf("--ingest-token-file: %w", err)
		}
	}
	authn, err := af.authenticator()
	if err != nil {
		return err
	}
	masker, err := redact.New(*redactPattern)
	if err != nil {
		return fmt.Errorf("--redact-pattern: %w", err)
	}
	if *clientConns < 0 {
		return fmt.Errorf("--max-client-conns must be 0 (unbounded) or more")
	}
	if *ingestMemory < 16<<20 {
		return fmt.Errorf("--ingest-memory must be at least 16 MiB (16777216)")
	}
	anOpts, err := anf.options(log)
	if err != nil {
		return err
	}
	alerts, err := alf.options(*listen, *cert != "")
	if err != nil {
		return err
	}
	warnIfOpen(stderr, log, *listen, authn.Enabled(), tokens.Len() > 0)
	st, err := sf.open(log)
	if err != nil {
		return err
	}
	defer st.Close()
	profiles, err := pf.control(st, log)
	if err != nil {
		return err
	}
	srv, err := server.Start(server.Config{Listen: *listen, Store: st, Tokens: tokens, Auth: authn, TLSCert: *cert, TLSKey: *key,
		Analyzer: analysis.NewWith(st, anOpts), Log: log, MaintainEvery: *maintainEvery, ClientConns: *clientConns, Profiles: profiles, Alerts: alerts,
		Ingest: ingest.HandlerOptions{Redact: masker, Budget: ingest.NewBudget(*ingestMemory)}})
	if err != nil {
		return err
	}
	where := "data in " + sf.dataDir
	if sf.kind == "clickhouse" {
		where = "data in ClickHouse"
	}
	fmt.Fprintf(stdout, "taskscope server on %s (%s)\n", srv.URL(), where)
	select {
	case <-ctx.Done():
	case err := <-srv.Err():
		if err != nil {
			return err
		}
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// analysisFlags are the flags of the analysis (docs/analysis.md).
type analysisFlags struct {
	every   time.Duration
	workers int
	skip    string
}

func (f *analysisFlags) register(fl *flag.FlagSet) {
	fl.DurationVar(&f.every, "analysis-every", time.Minute, "how often a running job is analysed again at most, when new data came (every job is analysed when it ends; 0: no analysis in the background)")
	fl.IntVar(&f.workers, "analysis-workers", 2, "jobs analysed at once in the background")
	fl.StringVar(&f.skip, "analysis-skip", "", "heuristics not to run, comma-separated (their findings are not made)")
}

// options are the analysis' options of the flags (ids of the replica and
// time: the defaults).
func (f *analysisFlags) options(log *slog.Logger) (analysis.Options, error) {
	o := analysis.Options{Every: f.every, Workers: f.workers, Build: Version, Log: log}
	if f.every < 0 || f.workers < 1 {
		return o, fmt.Errorf("--analysis-every must be 0 or more, --analysis-workers 1 or more")
	}
	if f.every == 0 {
		o.Every = -1
	}
	for _, h := range strings.Split(f.skip, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.Settings.Skip = append(o.Settings.Skip, h)
		}
	}
	if err := o.Settings.Check(); err != nil {
		return o, fmt.Errorf("--analysis-skip: %w", err)
	}
	return o, nil
}

// authFlags are the flags of read authentication.
type authFlags struct {
	header, groupsHeader, proxies, tokenFile, accessFile string
}

func (f *authFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.header, "auth-header", "", "header in which the SSO proxy names the user (X-Forwarded-User, ...): reads need a login")
	fl.StringVar(&f.groupsHeader, "auth-groups-header", "", "header in which the SSO proxy names the user's groups, comma-separated")
	fl.StringVar(&f.proxies, "auth-proxy", "", "addresses and networks of the SSO proxies, comma-separated: the user header is believed from these only")
	fl.StringVar(&f.tokenFile, "api-token-file", "", "API tokens for scripts, one per line: TOKEN (or sha256:HASH) USER [GROUP...]; reads need a login")
	fl.StringVar(&f.accessFile, "access-file", "", "who sees what: operator, queue, user and group rules (docs/security.md)")
}

func (f *authFlags) authenticator() (*auth.Authenticator, error) {
	var o auth.Options
	var err error
	if f.header != "" {
		if f.proxies == "" {
			return nil, fmt.Errorf("--auth-header needs --auth-proxy: the header is believed only from the SSO proxies")
		}
		o.UserHeader, o.GroupsHeader = f.header, f.groupsHeader
	}
	if f.proxies != "" {
		if f.header == "" {
			return nil, fmt.Errorf("--auth-proxy goes with --auth-header")
		}
		if o.Proxies, err = auth.ParseProxies(f.proxies); err != nil {
			return nil, fmt.Errorf("--auth-proxy: %w", err)
		}
	}
	if f.groupsHeader != "" && f.header == "" {
		return nil, fmt.Errorf("--auth-groups-header goes with --auth-header")
	}
	if f.tokenFile != "" {
		if o.Tokens, err = auth.LoadTokens(f.tokenFile, 1, 64); err != nil {
			return nil, fmt.Errorf("--api-token-file: %w", err)
		}
	}
	if f.accessFile != "" {
		if o.Policy, err = auth.LoadPolicy(f.accessFile); err != nil {
			return nil, fmt.Errorf("--access-file: %w", err)
		}
	}
	a := auth.New(o)
	if o.Policy != nil && !a.Enabled() {
		return nil, fmt.Errorf("--access-file needs a login: --auth-header or --api-token-file")
	}
	return a, nil
}

// warnIfOpen says loudly, at start, that a server others can reach lets
// anyone read (or write) what it holds.
func warnIfOpen(stderr io.Writer, log *slog.Logger, listen string, readAuth, ingestAuth bool) {
	if loopback(listen) || (readAuth && ingestAuth) {
		return
	}
	var open []string
	if !readAuth {
		open = append(open, "anyone who can reach it reads every job, command line and host it holds (no --auth-header or --api-token-file)")
	}
	if !ingestAuth {
		open = append(open, "anyone who can reach it writes data (no --ingest-token-file)")
	}
	fmt.Fprintf(stderr, "\n*** WARNING: taskscope server on %s, not a loopback address:\n", listen)
	for _, o := range open {
		fmt.Fprintf(stderr, "***   %s\n", o)
	}
	fmt.Fprintf(stderr, "*** See docs/security.md: deploy behind an SSO proxy, give scripts API tokens, give agents tokens.\n\n")
	log.Warn("server reachable without authentication", "listen", listen, "read_auth", readAuth, "ingest_auth", ingestAuth)
}

// loopback reports whether listen (host:port) is bound to a loopback
// address only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
