package tracker

import "github.com/taskscope/taskscope/internal/taskstats"

// ExitSource delivers exit records (taskstats.Listener). Drain calls fn for
// every record that arrived since the last call, without blocking. Every
// thread of a process that was reaped before Drain was called must have been
// reported (the kernel sends the records before the process leaves /proc).
type ExitSource interface {
	Drain(fn func(*taskstats.Record)) error
	Close() error
}
