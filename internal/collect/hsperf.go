package collect

import (
	"errors"
	"io/fs"
	"sync"

	"github.com/taskscope/taskscope/internal/hsperf"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// hsperfSource reads a JVM's heap, GC and thread counters from its
// hsperfdata file (package hsperf), without attaching to it. The file is
// found once (by the pid the JVM has in its own pid namespace, NSpid, under
// the JVM's /tmp as <procfs>/<pid>/root/tmp shows it), opened and parsed
// once, then each tick costs one pread of its first few KiB. A JVM without
// the file (-XX:-UsePerfData, -XX:+PerfDisableSharedMem, or not yet
// written) is looked for again at growing intervals, and yields no values
// and no errors.
type hsperfSource struct{}

func init() { Register(hsperfSource{}) }

func (hsperfSource) Name() string { return "hsperfdata" }

func (hsperfSource) Metrics() []string {
	return []string{wire.HeapUsedBytes, wire.HeapCommitBytes, wire.HeapMaxBytes, wire.GCCount, wire.GCTimeMs, wire.JVMThreads}
}

func (hsperfSource) Enabled(cfg *Config) bool { return cfg.JVM }

// hsperfState is one JVM's: its open file, or when to look for it again.
type hsperfState struct {
	r     *hsperf.Reader
	next  uint64 // the Age at which to look again
	tries int
	snap  hsperf.Snapshot
}

// hsperfMaxTries bounds the looks at growing intervals (its first 255
// ticks: a JVM writes its file as it starts); after them the file is
// looked for every hsperfSlowEvery ticks. A look costs a read of the JVM's
// status, of its /tmp's directory and the stats of what it finds there (a
// JVM run with -XX:+PerfDisableSharedMem has no file ever: every 64 ticks,
// eight such JVMs cost 3% of an agent's CPU at work).
const (
	hsperfMaxTries  = 8
	hsperfSlowEvery = 1024
)

func (s hsperfSource) Sample(cfg *Config, t *Target, slot int, out Values) error {
	if !t.IsJVM && string(t.Stat.Comm) != "java" {
		return nil
	}
	st, _ := t.State[slot].(*hsperfState)
	if st == nil {
		st = &hsperfState{}
		t.State[slot] = st
	}
	if st.r == nil {
		if t.Age < st.next {
			return nil
		}
		st.tries++
		if st.tries < hsperfMaxTries {
			st.next = t.Age + 1<<uint(st.tries-1)
		} else {
			st.next = t.Age + hsperfSlowEvery
		}
		r, err := s.open(cfg, t)
		if err != nil {
			return quiet(err)
		}
		st.r = r
	}
	if err := st.r.Read(&st.snap); err != nil {
		// The file went bad (or away): start over.
		st.r.Close()
		st.r = nil
		return quiet(err)
	}
	v := &st.snap
	if v.Has&hsperf.HasHeap != 0 {
		out.Set(0, v.HeapUsed)
		out.Set(1, v.HeapCommitted)
		out.Set(2, v.HeapMax)
	}
	if v.Has&hsperf.HasGC != 0 {
		out.Set(3, v.GCCount)
		out.Set(4, v.GCTimeMs)
	}
	if v.Has&hsperf.HasThreads != 0 {
		out.Set(5, v.Threads)
	}
	return nil
}

// quiet drops the errors that only say a JVM has no usable file.
func quiet(err error) error {
	if errors.Is(err, hsperf.ErrNoFile) || errors.Is(err, hsperf.ErrFormat) || errors.Is(err, fs.ErrNotExist) ||
		errors.Is(err, fs.ErrPermission) || procfs.IsGone(err) {
		return nil
	}
	return err
}

// open finds and opens the target's file, and checks that it is this
// process's: owned by its effective user, and written by a JVM that started
// no earlier than the process (a JVM killed with SIGKILL leaves its file
// behind, and pids are reused).
func (hsperfSource) open(cfg *Config, t *Target) (*hsperf.Reader, error) {
	b, err := t.Proc.Read(procfs.FileStatus, *t.Buf)
	*t.Buf = b
	if err != nil {
		return nil, err
	}
	owner, err := hsperf.ParseStatus(b, t.PID)
	if err != nil {
		return nil, err
	}
	tmp := cfg.HsperfRoot
	if tmp == "" {
		tmp = cfg.FS.PidPath(t.PID, "root") + "/tmp"
	}
	path, err := hsperf.Locate(tmp, owner.NSPID, t.User)
	if err != nil {
		return nil, err
	}
	r, err := hsperf.Open(path, hsperf.OpenOptions{UID: owner.EUID, CheckUID: cfg.HsperfRoot == ""})
	if err != nil {
		return nil, err
	}
	if vm := r.Layout().VMStartMs(); vm > 0 && t.Stat != nil {
		if boot, ok := bootMs(cfg.FS); ok {
			// btime has a resolution of one second.
			if start := boot + TicksToMs(t.Stat.StartTime); vm < start-2000 {
				r.Close()
				return nil, hsperf.ErrNoFile // a file left by an earlier JVM of the same pid
			}
		}
	}
	return r, nil
}

// Forget closes the JVM's file.
func (hsperfSource) Forget(state any) {
	if st, ok := state.(*hsperfState); ok && st.r != nil {
		st.r.Close()
		st.r = nil
	}
}

var (
	bootMu    sync.Mutex
	bootTimes = map[string]int64{}
)

// bootMs is the boot time of the /proc tree, read once.
func bootMs(f *procfs.FS) (int64, bool) {
	bootMu.Lock()
	defer bootMu.Unlock()
	if v, ok := bootTimes[f.Root()]; ok {
		return v, v > 0
	}
	s, err := f.BootTime()
	v := s * 1000
	if err != nil {
		v = 0
	}
	bootTimes[f.Root()] = v
	return v, v > 0
}
