// Command taskscope-agent runs on every Hadoop worker node: it finds every
// process of every task attempt and ships their samples to the server.
package main

import (
	"os"

	"github.com/taskscope/taskscope/internal/agent"
)

func main() {
	os.Exit(agent.Main(os.Args[1:], os.Stdout, os.Stderr))
}
