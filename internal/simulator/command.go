package simulator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Command implements `taskscope simulate`:
//
//	taskscope simulate [--dir D] [--nodes N] [--kind yarn|hadoop1|mixed] [--jobs N | --forever]
//	                   [--job-kind K] [--scale F] [--concurrency N] [--cgroups] [--seed S] [-v]
//
// It starts a cluster, prints its nodes, the jobs it submits and the root
// of every process tree it starts, and stops everything when the jobs are
// done or ctx is (Ctrl-C). Without --job-kind the jobs are RunStream's mix.
// The binary's main must call RunDaemonIfRequested first.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "cluster directory (default: a temporary directory, removed at the end)")
	nodes := fs.Int("nodes", 2, "worker nodes")
	kind := fs.String("kind", "yarn", "node kind: yarn, hadoop1 or mixed")
	jobs := fs.Int("jobs", 1, "jobs to run before stopping")
	forever := fs.Bool("forever", false, "submit jobs until interrupted")
	jobKind := fs.String("job-kind", "", "job kind: "+strings.Join(jobKindNames[:], ", ")+" (default: a mix)")
	scale := fs.Float64("scale", 1, "multiply CPU amounts and durations by this")
	conc := fs.Int("concurrency", 0, "jobs at a time (default: one per node)")
	cgroups := fs.Bool("cgroups", false, "put YARN containers into cgroups (root, cgroup v1)")
	seed := fs.Int64("seed", 0, "seed of the job mix (default: the clock)")
	verbose := fs.Bool("v", false, "log the simulator's own work to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: taskscope simulate [flags]\n\nStarts a simulated Hadoop cluster of real processes and runs jobs on it.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	nk, err := ParseNodeKind(*kind)
	if err != nil {
		return err
	}
	var kinds []JobKind
	if *jobKind != "" {
		k, err := ParseJobKind(*jobKind)
		if err != nil {
			return err
		}
		kinds = []JobKind{k}
	}
	var outMu sync.Mutex
	printf := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(stdout, format, a...)
	}
	o := Options{Dir: *dir, Nodes: *nodes, Kind: nk, Scale: *scale, Cgroups: *cgroups}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	o.Notify = func(ev Event) { printEvent(printf, ev) }
	c, err := Start(ctx, o)
	if err != nil {
		return err
	}
	printf("cluster %s in %s, started in %v\n", c.ID(), c.Dir(), c.StartupTime().Round(time.Millisecond))
	for _, n := range c.Nodes() {
		addr := n.WebAddress
		if n.Kind == NodeHadoop1 {
			addr = n.UmbilicalAddress
		}
		printf("node %s %s pid %d %s conf %s\n", n.Name, n.Kind, n.PID, addr, n.ConfDir)
	}
	so := StreamOptions{Concurrency: *conc, Kinds: kinds, Seed: *seed}
	if !*forever {
		so.MaxJobs = *jobs
	}
	runErr := c.RunStream(ctx, so)
	closeErr := c.Close()
	if closeErr == nil {
		printf("stopped; no process left\n")
	}
	return errors.Join(runErr, closeErr)
}

func printEvent(printf func(string, ...any), ev Event) {
	p := ev.Process
	switch ev.Kind {
	case EventJobSubmitted:
		printf("job %s submitted\n", ev.JobID)
	case EventJobFinished:
		if ev.Err != nil {
			printf("job %s failed: %v\n", ev.JobID, ev.Err)
		} else {
			printf("job %s finished\n", ev.JobID)
		}
	case EventProcessStarted:
		printf("started %s on %s: root %d jvm %d %s (%s)\n", p.Unit, ev.Node, p.RootPID, p.JVMPID, shortClass(p.MainClass), p.Type)
	case EventAttemptStarted:
		if len(p.Switches) > 1 {
			printf("jvm %d of %s began %s\n", p.JVMPID, p.Unit, p.Switches[len(p.Switches)-1].AttemptID)
		}
	case EventProcessExited:
		printf("exited %s: code %d cpu %v maxrss %d MB\n", p.Unit, p.ExitCode, p.CPU.Round(time.Millisecond), p.MaxRSSBytes>>20)
	case EventProcessLost:
		if p.Lost {
			printf("lost %s: jvm %d removed by its TaskTracker, still running\n", p.Unit, p.JVMPID)
		} else {
			printf("orphaned %s: root %d, its daemon on %s is gone\n", p.Unit, p.RootPID, ev.Node)
		}
	case EventNodeLost:
		printf("node %s lost\n", ev.Node)
	}
}

func shortClass(c string) string {
	if i := strings.LastIndexByte(c, '.'); i >= 0 {
		return c[i+1:]
	}
	return c
}
