package collect

import (
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// schedstatSource reads /proc/PID/schedstat: time on a CPU and time spent
// runnable but waiting for one, the sign of a noisy neighbour.
type schedstatSource struct{}

func init() { Register(schedstatSource{}) }

func (schedstatSource) Name() string { return "schedstat" }

func (schedstatSource) Metrics() []string { return []string{wire.SchedRunNs, wire.SchedWaitNs} }

func (schedstatSource) Enabled(*Config) bool { return true }

func (schedstatSource) Sample(_ *Config, t *Target, _ int, out Values) error {
	b, err := t.Proc.Read(procfs.FileSchedstat, *t.Buf)
	*t.Buf = b
	if err != nil {
		return err
	}
	var s procfs.Schedstat
	if err := procfs.ParseSchedstat(b, &s); err != nil {
		return err
	}
	out.Set(0, int64(s.RunNs))
	out.Set(1, int64(s.WaitNs))
	return nil
}
