package tracker

import (
	"bytes"
	"time"

	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

// ExitSource delivers exit records (taskstats.Listener). Drain calls fn for
// every record that arrived since the last call, without blocking. Every
// thread of a process that was reaped before Drain was called must have been
// reported (the kernel sends the records before the process leaves /proc).
type ExitSource interface {
	Drain(fn func(*taskstats.Record)) error
	Close() error
}

// exitLosses is an ExitSource that counts what it could not deliver
// (taskstats.Listener): the times its socket overflowed, and the records
// the kernel dropped then.
type exitLosses interface {
	Lost() uint64
	Dropped() uint64
}

// How an attempt ended, as the node shows it (wire.Attempt's exit fields;
// what they mean is the server's to say, store.Outcome):
//
//   - the task JVM's and the unit's top process's wait statuses, from
//     their exit records (taskstats: without them, none);
//   - for a YARN container, the exit-code file its launch script writes
//     (nmPrivate/<app>/<container>/<container>.pid.exitcode, in one of the
//     local dirs its LOCAL_DIRS names), read as soon as its last process
//     is gone: the NodeManager deletes it once it has read it;
//   - the NodeManager's exitCode and diagnostics for the container, from
//     its REST API (the watchers of LostConfig), listed for a while after
//     the container completed: a poll is asked for when the container's
//     last process is gone, and the ended attempt is described again when
//     the verdict comes, for up to closeFor.
//
// The top process is the unit's process whose parent is no member (the
// NodeManager's child default_container_executor.sh, which exits with the
// status of the container's root; a Hadoop 1 Child JVM).

// unitEnd is what a unit keeps to tell how its attempt ends.
type unitEnd struct {
	localDirs []string // the NodeManager's local dirs (LOCAL_DIRS), for the exit-code file
	envTries  int      // reads of a member's environment for them
	oom       *oomWatch
	oomTried  bool
}

// closing is an ended attempt of a YARN container whose exit-code file or
// NodeManager's verdict may still come.
type closing struct {
	info      *wire.Attempt
	container string
	localDirs []string
	untilMs   int64
	file, nm  bool // seen
	fileTries int  // reads of the exit-code file
}

// maxFileTries bounds the reads of an ended container's exit-code file:
// it is written before the launch script exits (before the container's
// last process is gone), so it is there at once or deleted already; a
// few more ticks cover a launch script the agent did not track.
const maxFileTries = 3

// closeFor is how long an ended container's exit-code file and
// NodeManager verdict are waited for.
const closeFor = 30 * time.Second

// maxEnvTries bounds the reads of a container's environment for its
// local dirs (a member may vanish between listing and read).
const maxEnvTries = 3

// noteExit takes what p's exit record says of how it ended, for the
// attempt it was a member of: the task JVM's status, the top process's.
// Called before its membership ends.
func (t *Tracker) noteExit(p *proc, final *taskstats.Record, ms int64) {
	tr := p.t
	if final == nil || tr == nil {
		return
	}
	u := tr.unit
	a := u.cur
	if tr.mem != nil {
		a = tr.mem.att
	}
	if a == nil || t.cleanupRun(u, a) { // (a cleanup run's end is not its attempt's: tasklog.go)
		return
	}
	st := wire.ExitStatus{Status: final.ExitCode, Ms: ms}
	if p.pid == u.jvmPID {
		a.info.JVMExit = st
	}
	ppid := p.ppid
	if final.PPID > 0 {
		ppid = final.PPID
	}
	if par := t.procs[ppid]; ppid > 1 && (par == nil || par.t == nil || par.t.unit != u) {
		a.info.RootExit = st
	}
}

// watchEnds runs every tick after the units are sampled: it reads the
// local dirs of new containers while their processes live, and looks for
// the exit-code files and NodeManager verdicts of containers that ended.
func (t *Tracker) watchEnds(ms int64) {
	for _, u := range t.units {
		if u.containerID == "" || u.end.localDirs != nil || u.end.envTries >= maxEnvTries || len(u.members) == 0 {
			continue
		}
		u.end.envTries++
		u.end.localDirs = t.localDirsOf(u)
		if !u.end.oomTried {
			u.end.oomTried = true
			t.watchOOM(u) // oom.go
		}
	}
	if len(t.closing) == 0 {
		return
	}
	watched := len(t.nmWatchers()) > 0
	kept := t.closing[:0]
	for _, c := range t.closing {
		t.lookAtEnd(c, ms)
		// The NodeManager's verdict settles it; without a NodeManager to
		// ask, the exit-code file is looked for a few ticks.
		if ms < c.untilMs && !c.nm && (watched || !c.file && c.fileTries < maxFileTries) {
			kept = append(kept, c)
		}
	}
	for i := len(kept); i < len(t.closing); i++ {
		t.closing[i] = nil
	}
	t.closing = kept
}

// localDirsOf reads the NodeManager's local dirs from a member's
// environment (LOCAL_DIRS); nil if none can be read.
func (t *Tracker) localDirsOf(u *unit) []string {
	for _, p := range u.members {
		if p.t == nil || p.t.vanished {
			continue
		}
		b, err := t.cfg.FS.ReadPidFile(p.pid, "environ", t.buf)
		t.buf = b
		if err != nil {
			continue
		}
		for len(b) > 0 {
			kv := b
			if i := bytes.IndexByte(b, 0); i >= 0 {
				kv, b = b[:i], b[i+1:]
			} else {
				b = nil
			}
			if v, ok := bytes.CutPrefix(kv, []byte("LOCAL_DIRS=")); ok {
				if dirs := nodemanager.LocalDirs(string(v)); len(dirs) > 0 {
					return dirs
				}
			}
		}
		return nil
	}
	return nil
}

// closeUnit is called when the last process of u is gone, before its
// attempt is described as ended: the exit-code file is read at once (the
// NodeManager deletes it soon), and a container's attempt waits for its
// NodeManager's verdict.
func (t *Tracker) closeUnit(u *unit, ms int64) {
	if u.cur != nil {
		u.cur.info.OOMKills = max(u.cur.info.OOMKills, t.oomKills(u))
	}
	t.readTaskLog(u, u.cur, ms) // Hadoop 1 (tasklog.go)
	if u.cur == nil || u.containerID == "" || u.appID == "" {
		return
	}
	c := &closing{info: &u.cur.info, container: u.containerID, localDirs: u.end.localDirs,
		untilMs: ms + closeFor.Milliseconds()}
	t.lookAtEnd(c, ms) // (described as ended right after, with what it found)
	if !c.nm {
		t.closing = append(t.closing, c)
		for _, w := range t.nmWatchers() {
			w.PollSoon()
		}
	}
}

// lookAtEnd reads what is not yet known of a closing attempt's end: the
// exit-code file, the NodeManager's verdict. It reports whether it found
// something new; a closing attempt already described as ended is
// described again then.
func (t *Tracker) lookAtEnd(c *closing, ms int64) bool {
	changed := false
	a := c.info
	if !c.file && c.fileTries < maxFileTries {
		c.fileTries++
		for _, d := range c.localDirs {
			code, err := nodemanager.ReadExitCode(nodemanager.ExitCodeFile(d, a.AppID, c.container))
			if err == nil {
				a.FileExit, c.file, changed = wire.ExitStatus{Status: code, Ms: ms}, true, true
				break
			}
		}
	}
	if !c.nm {
		for _, w := range t.nmWatchers() {
			last, prev := w.Latest()
			for _, l := range []*nodemanager.Listing{last, prev} {
				if l == nil {
					continue
				}
				if e, ok := l.Exits[c.container]; ok {
					a.NMExit, a.ExitDiagnostics = wire.ExitStatus{Status: e.Code, Ms: ms}, e.Diagnostics
					c.nm, changed = true, true
					break
				}
			}
			if c.nm {
				break
			}
		}
	}
	if changed && a.Ended {
		t.sink.Attempt(a)
	}
	return changed
}

// nmWatchers are the NodeManagers the lost checks poll (nmpoll.go).
func (t *Tracker) nmWatchers() []ContainerLister {
	if t.lost == nil {
		return nil
	}
	return t.lost.nm.all()
}
