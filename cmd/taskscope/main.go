// Command taskscope is the server and the user's command line: server,
// demo, simulate, report, loadgen.
package main

import (
	"os"

	"github.com/taskscope/taskscope/internal/cli"
	"github.com/taskscope/taskscope/internal/simulator"
)

func main() {
	// The simulator re-executes this binary as its node daemons.
	simulator.RunDaemonIfRequested()
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
