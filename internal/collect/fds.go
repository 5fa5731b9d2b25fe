package collect

import "github.com/taskscope/taskscope/internal/wire"

// fdSource counts open file descriptors (a directory read per process per
// tick, so it is off unless Config.FDs).
type fdSource struct{}

func init() { Register(fdSource{}) }

func (fdSource) Name() string { return "fds" }

func (fdSource) Metrics() []string { return []string{wire.FDs} }

func (fdSource) Enabled(cfg *Config) bool { return cfg.FDs }

func (fdSource) Sample(cfg *Config, t *Target, _ int, out Values) error {
	n, err := cfg.FS.CountFDs(t.PID)
	if err != nil {
		return err
	}
	out.Set(0, int64(n))
	return nil
}
