package collect

import (
	"github.com/taskscope/taskscope/internal/wire"
)

// schedstatSource turns the scheduler figures the tracker reads first anyway
// (Target.Sched: /proc/PID/schedstat, or a thread group's totals from
// taskstats) into metrics: time on a CPU, and time spent runnable but
// waiting for one, the sign of a noisy neighbour.
type schedstatSource struct{}

func init() { Register(schedstatSource{}) }

func (schedstatSource) Name() string { return "schedstat" }

func (schedstatSource) Metrics() []string { return []string{wire.SchedRunNs, wire.SchedWaitNs} }

func (schedstatSource) Enabled(*Config) bool { return true }

func (schedstatSource) Sample(_ *Config, t *Target, _ int, out Values) error {
	if s := t.Sched; s != nil {
		out.Set(0, int64(s.RunNs))
		out.Set(1, int64(s.WaitNs))
	}
	return nil
}
