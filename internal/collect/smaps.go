package collect

import (
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// smapsSource reads PSS from /proc/PID/smaps_rollup every Config.PSSEvery
// ticks of a process's life: the kernel walks every mapping to produce it,
// which costs about 0.7 ms for a JVM. A process gets its first PSS at its
// second sample, not at its first (with PSSEvery 1, every sample has it):
// under churn most new processes are seen once, and reading their PSS was
// a quarter of the agent's CPU; a process seen at one tick only has no PSS,
// and an attempt's PSS leaves out, at the tick it is first seen, a process
// that was not there at the last. A process that was there when the agent
// started (sampled at its first tick) gets its first PSS at its second
// period: the agent's first tick reads every task process of the node at
// once, and their page tables' walks were most of its start's CPU. A process whose
// RSS (from the stat read anyway) moved by less than 1/16 since the last read
// keeps the PSS of that read, re-read at least every PSSStaleEvery × PSSEvery
// ticks (the PSS of a process whose RSS holds still changes only as the
// processes that share its pages come and go).
type smapsSource struct{}

// PSSStaleEvery bounds how many PSS periods a value read is kept for a
// process whose RSS holds still.
const PSSStaleEvery = 6

func init() { Register(smapsSource{}) }

func (smapsSource) Name() string { return "smaps_rollup" }

func (smapsSource) Metrics() []string { return []string{wire.PSSBytes} }

func (smapsSource) Enabled(cfg *Config) bool { return cfg.PSSEvery > 0 }

// smapsState is a process's last read: its RSS (pages) then, the PSS read,
// and the Age of the read.
type smapsState struct {
	rss, pss int64
	age      uint64
}

func (smapsSource) Sample(cfg *Config, t *Target, slot int, out Values) error {
	if !pssDue(uint64(cfg.PSSEvery), t.Tick, t.Age) {
		return nil
	}
	every := uint64(cfg.PSSEvery)
	st, _ := t.State[slot].(*smapsState)
	if st != nil && t.Stat != nil && t.Age-st.age < PSSStaleEvery*every {
		if d := t.Stat.RSS - st.rss; d*16 <= st.rss && -d*16 <= st.rss {
			out.Set(0, st.pss)
			return nil
		}
	}
	b, err := t.Proc.Read(procfs.FileSmapsRollup, *t.Buf)
	*t.Buf = b
	if err != nil {
		return err
	}
	var s procfs.SmapsRollup
	if err := procfs.ParseSmapsRollup(b, &s); err != nil {
		return err
	}
	if st == nil {
		st = &smapsState{}
		t.State[slot] = st
	}
	st.pss, st.age = int64(s.PSSBytes), t.Age
	if t.Stat != nil {
		st.rss = t.Stat.RSS
	}
	out.Set(0, st.pss)
	return nil
}

// pssDue reports whether a process sampled for the age-th time (0: its
// first sample) at the agent's tick-th tick has its PSS read: every
// period's tick of its life, and at its second sample; never at its first,
// nor at its second if it was there at the agent's first tick (its first
// then comes at its second period). With every 1: at every sample.
func pssDue(every, tick, age uint64) bool {
	switch {
	case every <= 1:
		return true
	case age == 0:
		return false
	case age == 1:
		return tick != 2 // sampled at every tick since; not there at the first
	}
	return age%every == 0
}
