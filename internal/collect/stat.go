package collect

import (
	"os"

	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// statSource turns the /proc/PID/stat the tracker reads anyway into metrics:
// it costs no read of its own.
type statSource struct{}

var pageSize = int64(os.Getpagesize())

func init() { Register(statSource{}) }

func (statSource) Name() string { return "stat" }

func (statSource) Metrics() []string {
	return []string{wire.CPUUserMs, wire.CPUSysMs, wire.CPUChildUserMs, wire.CPUChildSysMs,
		wire.RSSBytes, wire.VMSBytes, wire.Threads, wire.MinorFaults, wire.MajorFaults}
}

func (statSource) Enabled(*Config) bool { return true }

// TicksToMs converts clock ticks to milliseconds.
func TicksToMs(t uint64) int64 { return int64(t) * 1000 / procfs.UserHZ }

func (statSource) Sample(_ *Config, t *Target, _ int, out Values) error {
	s := t.Stat
	out.Set(0, TicksToMs(s.UTime))
	out.Set(1, TicksToMs(s.STime))
	out.Set(2, TicksToMs(s.CUTime))
	out.Set(3, TicksToMs(s.CSTime))
	out.Set(4, s.RSS*pageSize)
	out.Set(5, int64(s.VSize))
	out.Set(6, s.Threads)
	out.Set(7, int64(s.MinFlt))
	out.Set(8, int64(s.MajFlt))
	return nil
}
