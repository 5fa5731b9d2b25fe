// Package cli is the `taskscope` command line: server, demo, simulate,
// report, loadgen.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// Version is set at build time.
var Version = "dev"

const usage = `taskscope: fine-grained monitoring and analysis of Hadoop jobs.

Commands:
  server    store what agents send; serve the REST API and the web UI
  demo      a server, a local agent and a simulated Hadoop cluster: UI on http://localhost:8080
  simulate  start simulated Hadoop task processes (for trying the agent)
  report    print a job (or an attempt) as tables
  loadgen   send realistic agent batches from many simulated nodes
  token     make a random token and the line that stands for it in a token file
  version   print the version

Run 'taskscope <command> -h' for the flags of a command.
`

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "server":
		err = serverCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		err = demoCmd(ctx, args[1:], stdout, stderr)
	case "simulate":
		err = simulateCmd(ctx, args[1:], stdout, stderr)
	case "report":
		err = reportCmd(ctx, args[1:], stdout, stderr)
	case "loadgen":
		err = loadgenCmd(ctx, args[1:], stdout, stderr)
	case "token":
		err = tokenCmd(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "taskscope", Version)
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
		fmt.Fprintln(stderr, "taskscope:", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

func splitHostPort(addr string) (string, string, error) { return net.SplitHostPort(addr) }
