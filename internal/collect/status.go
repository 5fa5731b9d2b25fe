package collect

import (
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// statusSource reads context switches from /proc/PID/status.
type statusSource struct{}

func init() { Register(statusSource{}) }

func (statusSource) Name() string { return "status" }

func (statusSource) Metrics() []string { return []string{wire.CtxVoluntary, wire.CtxInvoluntary} }

func (statusSource) Enabled(*Config) bool { return true }

func (statusSource) Sample(_ *Config, t *Target, _ int, out Values) error {
	b, err := t.Proc.Read(procfs.FileStatus, *t.Buf)
	*t.Buf = b
	if err != nil {
		return err
	}
	var st procfs.Status
	if err := procfs.ParseStatus(b, &st); err != nil {
		return err
	}
	if st.HasCtx {
		out.Set(0, int64(st.VoluntaryCtx))
		out.Set(1, int64(st.InvoluntaryCtx))
	}
	return nil
}
