// Command taskscope is the server and the user's command line: server,
// demo, simulate, report, loadgen.
package main

import (
	"os"

	"github.com/taskscope/taskscope/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
