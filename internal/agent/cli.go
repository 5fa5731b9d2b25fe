package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/redact"
	"github.com/taskscope/taskscope/internal/sampler"
	"github.com/taskscope/taskscope/internal/tracker"
)

const usage = `taskscope-agent: samples every process of every Hadoop task attempt on this node.

Commands:
  run       sample every --interval and ship batches to the server
  snapshot  print what the agent sees now
  version   print the version

Run 'taskscope-agent <command> -h' for the flags of a command.
`

// Version is set at build time (-ldflags "-X ...agent.Version=...").
var Version = "dev"

// Main is the agent's command line. It returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "run":
		err = runCmd(ctx, args[1:], stderr)
	case "snapshot":
		err = snapshotCmd(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "taskscope-agent", Version)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "taskscope-agent:", err)
		return 1
	}
	return 0
}

func runCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fl := flag.NewFlagSet("run", flag.ContinueOnError)
	fl.SetOutput(stderr)
	servers := fl.String("server", "", "server URL(s), comma-separated; batches fail over in order")
	tokenFile := fl.String("token-file", "", "file holding the ingest token")
	interval := fl.Duration("interval", time.Second, "sampling interval")
	flush := fl.Duration("flush", 0, "how often a batch is sent (default 5 intervals, at least 5s and at most 10s)")
	procRoot := fl.String("procfs", "/proc", "procfs mount point")
	host := fl.String("host", "", "node name reported to the server (default: hostname)")
	spool := fl.String("spool-dir", "", "directory that keeps batches while no server answers")
	spoolMax := fl.Int64("spool-max-bytes", 256<<20, "bound of the spool; the oldest batches beyond it are dropped and counted")
	listen := fl.String("listen", "", "address to serve the agent's Prometheus metrics at /metrics")
	maxTicks := fl.Int("max-ticks", -1, "sample this many times, ship everything and exit (0: start up and exit)")
	pss := fl.Int("pss-every", 10, "read PSS (smaps_rollup) every N ticks; 0 disables")
	statusEvery := fl.Int("status-every", 5, "read /proc/PID/status (context switches) every N ticks; 1: every tick")
	fds := fl.Bool("fds", false, "count open file descriptors (one directory read per process per tick)")
	exits := fl.String("exits", "auto", "exit accounting: auto (taskstats when permitted), taskstats, off")
	cgroup := fl.String("cgroup-prefix", "hadoop-yarn", "YARN's cgroup hierarchy (yarn.nodemanager.linux-container-executor.cgroups.hierarchy), cgroup v1 or v2; "+
		"each NodeManager's, from its yarn-site.xml, is used beside it")
	daemonPID := fl.Int("daemon-pid", 0, "track only the tasks of this NodeManager or TaskTracker (a host that runs several: one agent each, with --host)")
	daemonPIDFile := fl.String("daemon-pidfile", "", "as --daemon-pid, from the daemon's pid file (read again when it restarts), e.g. /var/run/hadoop-yarn/yarn-yarn-nodemanager.pid")
	logLevel := fl.String("log-level", "info", "debug, info, warn or error")
	reapAfter := fl.Duration("reap-orphans", 0, "end task processes identified as lost (orphaned, unknown to the NodeManager, "+
		"lost Child JVMs, outlived their job) for at least this long: SIGTERM to the process group, SIGKILL after a grace period (0: never)")
	reapDry := fl.Bool("reap-dry-run", false, "with --reap-orphans: log and report what would be signalled, signal nothing")
	profiling := fl.String("profiling", "on-demand,auto", "profiles of task JVMs (thread dumps) the agent takes when the server orders them: "+
		"on-demand (asked for on an attempt's page), auto (stragglers and outliers, by the analysis), both comma-separated, or off")
	profileBudget := fl.Duration("profile-pause-budget", sampler.DefaultPauseBudget, "the time each JVM may be stopped for thread dumps, over all its profiles")
	pattern := redactFlag(fl)
	nm := addNMFlags(fl)
	if err := fl.Parse(args); err != nil {
		return err
	}
	masker, err := redact.New(*pattern)
	if err != nil {
		return fmt.Errorf("--redact-pattern: %w", err)
	}
	if _, err := ParseProfiling(*profiling); err != nil {
		return err
	}
	if *servers == "" {
		return ErrNoServer
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	cfg := Config{
		Servers: strings.Split(*servers, ","), Interval: *interval, FlushInterval: *flush, ProcFS: *procRoot,
		Host: *host, SpoolDir: *spool, MaxSpoolBytes: *spoolMax, Listen: *listen, MaxTicks: *maxTicks,
		PSSEvery: *pss, StatusEvery: *statusEvery, FDs: *fds, Exits: *exits, CgroupPrefix: *cgroup,
		ReapAfter: *reapAfter, ReapDryRun: *reapDry, Redact: masker, Profiling: *profiling, ProfileBudget: *profileBudget,
		Scope: tracker.Scope{DaemonPID: int32(*daemonPID), DaemonPIDFile: *daemonPIDFile},
		Log:   slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})),
		NM:    nm.config(),
		Lost:  tracker.LostConfig{NMURL: *nm.url},
	}
	if *nm.url != "" {
		if _, err := nodemanager.EndpointOf(*nm.url); err != nil {
			return fmt.Errorf("--nm-url: %w", err)
		}
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("cannot read token: %w", err)
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	// One thread runs Go code: the agent's work is one tick after another
	// (the sender mostly waits for the server), and a second P would have
	// the scheduler wake a thread to look for work at every timer, channel
	// send and network event, each a context switch. GOMAXPROCS set in
	// the environment is kept.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	res, err := Run(ctx, cfg)
	if *maxTicks >= 0 {
		fmt.Fprintf(stderr, "ticks=%d tracked=%d\n", res.Ticks, res.Tracked)
	}
	return err
}

// redactFlag is --redact-pattern, of run and snapshot.
func redactFlag(fl *flag.FlagSet) *string {
	return fl.String("redact-pattern", redact.DefaultPattern, "options and environment variables whose names match this regular expression "+
		"have their values masked in everything the agent ships, spools or prints")
}

func snapshotCmd(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fl.SetOutput(stderr)
	procRoot := fl.String("procfs", "/proc", "procfs mount point")
	asJSON := fl.Bool("json", false, "print JSON (see CONTRACT.md) instead of a tree")
	interval := fl.Duration("interval", time.Second, "time between the two samples (for CPU %)")
	host := fl.String("host", "", "node name (default: hostname)")
	daemonPID := fl.Int("daemon-pid", 0, "only the tasks of this NodeManager or TaskTracker")
	daemonPIDFile := fl.String("daemon-pidfile", "", "as --daemon-pid, from the daemon's pid file")
	pattern := redactFlag(fl)
	nm := addNMFlags(fl)
	if err := fl.Parse(args); err != nil {
		return err
	}
	masker, err := redact.New(*pattern)
	if err != nil {
		return fmt.Errorf("--redact-pattern: %w", err)
	}
	if *nm.url != "" {
		if _, err := nodemanager.EndpointOf(*nm.url); err != nil {
			return fmt.Errorf("--nm-url: %w", err)
		}
	}
	s, err := TakeSnapshot(SnapshotConfig{ProcFS: *procRoot, Host: *host, Scope: tracker.Scope{DaemonPID: int32(*daemonPID), DaemonPIDFile: *daemonPIDFile},
		Interval: *interval, Redact: masker, NM: nm.config(), NMURL: *nm.url})
	if err != nil {
		return err
	}
	if *asJSON {
		return s.WriteJSON(stdout)
	}
	return s.WriteText(stdout)
}
