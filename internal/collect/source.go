// Package collect is the agent's extension point for metrics: a Source reads
// some metrics of a tracked process each tick. A new metric source is one
// file that calls Register from init().
package collect

import (
	"fmt"
	"sort"
	"sync"

	"github.com/taskscope/taskscope/internal/procfs"
)

// Config is what sources may consult to decide whether they run and how.
type Config struct {
	FS       *procfs.FS
	PSSEvery int // read smaps_rollup every N ticks; 0 disables PSS
	// StatusEvery reads /proc/PID/status (context switches) every N ticks
	// of a process's life, its first included; 0 or 1: every tick. The
	// kernel formats some fifty lines for it: it costs more than stat.
	StatusEvery int
	FDs         bool // count open file descriptors
	JVM         bool // read hsperfdata of task JVMs
	// HsperfRoot is where JVMs write hsperfdata_<user>/<pid> (default /tmp),
	// seen from the agent. Empty means "<procfs>/<pid>/root/tmp".
	HsperfRoot string
}

// Target is the process a source samples. Sources must not retain pointers
// into Stat or Buf after Sample returns.
type Target struct {
	PID  int32
	Tick uint64       // the tracker's tick number
	Age  uint64       // ticks since the process was first sampled (0 the first time)
	Proc *procfs.Proc // held-open files of the process
	Stat *procfs.Stat // this tick's /proc/PID/stat, already read
	// Sched is this tick's time on a CPU and waiting for one, already read
	// (the thread group's where the tracker can have it); nil if unreadable.
	Sched *procfs.Schedstat
	// Ctx, when set, is the context switches (voluntary, involuntary) of
	// all the process's threads, already read with Sched (status has the
	// leader thread's only).
	Ctx   *[2]uint64
	IsJVM bool // a task JVM (hsperfdata is worth looking for)
	User  string
	Buf   *[]byte // scratch buffer shared by sources (reuse it)
	State []any   // per-source state of this process, indexed by source index
	// Status, when set, asks the status source to read status this tick
	// and to leave what it parsed there (the tracker takes the owner from
	// a process's first one).
	Status *procfs.Status
}

// Values receives a source's metrics for one process at one tick.
type Values interface {
	// Set stores the value of metric i of the source (index into its Metrics()).
	Set(i int, v int64)
}

// A Source reads some metrics of a process.
type Source interface {
	// Name is the source's name, for metrics and logs.
	Name() string
	// Metrics are the names of the metrics the source sets, in index order.
	Metrics() []string
	// Enabled reports whether the source runs under cfg.
	Enabled(cfg *Config) bool
	// Sample reads the target's metrics and sets those it could read. An
	// error means the source could not read this time; the tracker counts it
	// and goes on. It must be cheap: it runs every tick for every tracked process.
	Sample(cfg *Config, t *Target, slot int, out Values) error
}

// Forgetter is implemented by sources that keep per-process state in
// Target.State and must release it when the process is gone.
type Forgetter interface {
	Forget(state any)
}

var (
	mu       sync.Mutex
	registry = map[string]Source{}
)

// Register adds a source. It panics on a duplicate name (a programming error).
func Register(s Source) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[s.Name()]; dup {
		panic(fmt.Sprintf("collect: source %q registered twice", s.Name()))
	}
	registry[s.Name()] = s
}

// Enabled returns the registered sources enabled under cfg, sorted by name
// so that the metric order is stable.
func Enabled(cfg *Config) []Source {
	mu.Lock()
	defer mu.Unlock()
	var out []Source
	for _, s := range registry {
		if s.Enabled(cfg) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Names lists all registered sources.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
