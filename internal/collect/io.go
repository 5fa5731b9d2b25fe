package collect

import (
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// ioSource reads /proc/PID/io. It needs ptrace access to the process (root,
// CAP_SYS_PTRACE, or the same user); without it the metrics are absent.
type ioSource struct{}

func init() { Register(ioSource{}) }

func (ioSource) Name() string { return "io" }

func (ioSource) Metrics() []string {
	return []string{wire.ReadBytes, wire.WriteBytes, wire.ReadChars, wire.WriteChars}
}

func (ioSource) Enabled(*Config) bool { return true }

func (ioSource) Sample(_ *Config, t *Target, _ int, out Values) error {
	b, err := t.Proc.Read(procfs.FileIO, *t.Buf)
	*t.Buf = b
	if err != nil {
		return err
	}
	var io procfs.IO
	if err := procfs.ParseIO(b, &io); err != nil {
		return err
	}
	out.Set(0, int64(io.ReadBytes))
	out.Set(1, int64(io.WriteBytes))
	out.Set(2, int64(io.RChar))
	out.Set(3, int64(io.WChar))
	return nil
}
