package collect

import (
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// statusSource reads context switches from /proc/PID/status, every
// Config.StatusEvery ticks of a process's life (they are counters: read less
// often, they lose time resolution, not counts). Those of status are the
// leader thread's: a process whose threads' are known already (Target.Ctx)
// has them from there, every tick, and status is read only when the tracker
// asks for it (Target.Status).
type statusSource struct{}

func init() { Register(statusSource{}) }

func (statusSource) Name() string { return "status" }

func (statusSource) Metrics() []string { return []string{wire.CtxVoluntary, wire.CtxInvoluntary} }

func (statusSource) Enabled(*Config) bool { return true }

func (statusSource) Sample(cfg *Config, t *Target, _ int, out Values) error {
	if t.Ctx != nil {
		out.Set(0, int64(t.Ctx[0]))
		out.Set(1, int64(t.Ctx[1]))
		if t.Status == nil {
			return nil
		}
	} else if t.Status == nil && cfg.StatusEvery > 1 && t.Age%uint64(cfg.StatusEvery) != 0 {
		return nil
	}
	b, err := t.Proc.Read(procfs.FileStatus, *t.Buf)
	*t.Buf = b
	if err != nil {
		return err
	}
	var local procfs.Status
	st := t.Status
	if st == nil {
		// The context switches alone (the file's last lines).
		st = &local
		if err := procfs.ParseStatusCtx(b, st); err != nil {
			return err
		}
	} else if err := procfs.ParseStatus(b, st); err != nil {
		return err
	}
	if st.HasCtx && t.Ctx == nil {
		out.Set(0, int64(st.VoluntaryCtx))
		out.Set(1, int64(st.InvoluntaryCtx))
	}
	return nil
}
