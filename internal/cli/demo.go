package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/tracker"
)

// demoCmd runs a server with an embedded store, a local agent and a
// simulated Hadoop cluster running a stream of jobs, until interrupted.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("demo", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", "127.0.0.1:8080", "address of the server and its UI (the demo has no login: keep it on loopback)")
	nodes := fl.Int("nodes", 3, "simulated worker nodes")
	kind := fl.String("kind", "mixed", "simulated nodes: yarn, hadoop1 or mixed")
	dataDir := fl.String("data-dir", "", "keep the store here (default: a temporary directory, removed at exit)")
	interval := fl.Duration("interval", time.Second, "the agent's sampling interval")
	scale := fl.Float64("scale", 1, "multiplies the simulated tasks' CPU and durations")
	jobs := fl.Int("concurrency", 0, "jobs running at once (default: one per node)")
	cgroups := fl.Bool("cgroups", false, "put YARN containers into cgroups (root and cgroup v1 only)")
	reapDelay := fl.Duration("reap-delay", 0, "the simulated NodeManagers and TaskTrackers reap their containers this long after they exited (a busy daemon)")
	logLevel := fl.String("log-level", "warn", "debug, info, warn or error")
	chURL := fl.String("clickhouse-url", "", "keep the store in ClickHouse, http://HOST:8123/?database=NAME (default: the embedded store)")
	secure := fl.Bool("secure", false, "secure the simulated cluster as production ones: NodeManagers on HTTPS only, demanding Kerberos (SPNEGO) "+
		"from a KDC the demo starts on loopback (Debian's krb5-kdc and krb5-admin-server); the agents log in with a keytab")
	var alf alertFlags
	alf.register(fl)
	if err := fl.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	nk, err := simulator.ParseNodeKind(*kind)
	if err != nil {
		return err
	}
	alerts, err := alf.options(*listen, false)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "taskscope-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := *dataDir
	if dir == "" {
		dir = filepath.Join(tmp, "data")
	}
	sf := storeFlags{kind: "duckdb", dataDir: dir}
	if *chURL != "" {
		sf.kind, sf.clickhouseURL = "clickhouse", *chURL
	}
	st, err := sf.open(log)
	if err != nil {
		return err
	}
	defer st.Close()
	warnIfOpen(stderr, log, *listen, false, false)
	// Profiles on demand and automatic, on every node.
	profiles := profiling.New(st, profiling.Config{OnDemand: true, Auto: true, Log: log})
	srv, err := server.Start(server.Config{Listen: *listen, Store: st, Analyzer: analysis.NewWith(st, analysis.Options{Build: Version, Log: log}),
		Log: log, Profiles: profiles, Alerts: alerts})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	var sec *demoSecurity
	if *secure {
		if sec, err = startDemoSecurity(ctx, filepath.Join(tmp, "kdc")); err != nil {
			return err
		}
		defer sec.kdc.Stop()
	}
	cluster, err := simulator.Start(ctx, simulator.Options{Dir: filepath.Join(tmp, "sim"), Nodes: *nodes, Kind: nk,
		Scale: *scale, Cgroups: *cgroups, ReapDelay: *reapDelay, Log: log, Security: sec.simulator()})
	if err != nil {
		return fmt.Errorf("cannot start the simulated cluster: %w", err)
	}
	defer cluster.Close()

	// One agent per node, as on a real cluster: each reports under its
	// node's name and tracks the tasks of its node's daemon only (the
	// simulated nodes share one kernel; a real host is its own hostname).
	agentCtx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var agentMu sync.Mutex
	var agentErrs []error
	for _, n := range cluster.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := agent.Run(agentCtx, agent.Config{Servers: []string{srv.URL()}, Interval: *interval,
				MaxTicks: -1, PSSEvery: 5, Log: log.With("node", n.Name), Host: n.Name,
				Scope: tracker.Scope{DaemonPIDFile: n.PIDFile}, NM: sec.agent()})
			if err != nil {
				agentMu.Lock()
				agentErrs = append(agentErrs, fmt.Errorf("agent of %s: %w", n.Name, err))
				agentMu.Unlock()
			}
		}()
	}
	streamCtx, stopStream := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A straggler whose profile, and its differential against a
		// sibling, come without anyone asking, first.
		var first []simulator.JobSpec
		if nk != simulator.NodeHadoop1 {
			first = append(first, simulator.ProfiledStraggler())
		}
		if err := cluster.RunStream(streamCtx, simulator.StreamOptions{Concurrency: *jobs, First: first}); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("job stream stopped", "err", err)
		}
	}()
	url := srv.URL()
	if h, p, err := splitHostPort(srv.Addr()); err == nil && (h == "::" || h == "0.0.0.0" || h == "") {
		url = "http://localhost:" + p
	}
	fmt.Fprintf(stdout, "taskscope demo: %d simulated %s nodes, an agent on each sampling every %s\n", *nodes, nk, *interval)
	if sec != nil {
		fmt.Fprintf(stdout, "secured: NodeManagers on HTTPS with SPNEGO (HTTP/%s@%s); a KDC on %s; the agents log in as taskscope/_HOST\n",
			sec.host, sec.kdc.Realm, sec.kdc.Addr)
	}
	fmt.Fprintf(stdout, "UI on %s  (Ctrl-C stops everything)\n", url)
	select {
	case <-ctx.Done():
	case err := <-srv.Err():
		if err != nil {
			log.Error("server stopped", "err", err)
		}
	}
	fmt.Fprintln(stdout, "stopping: jobs, simulated cluster, agent, server")
	stopStream()
	cluster.Close()
	// The agent ships what it saw last before it stops.
	time.Sleep(*interval)
	stopAgent()
	wg.Wait()
	if left := cluster.Leftovers(); len(left) > 0 {
		return fmt.Errorf("processes left behind: %v", left)
	}
	return errors.Join(agentErrs...)
}

func simulateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return simulator.Command(ctx, args, stdout, stderr)
}
