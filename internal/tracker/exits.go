package tracker

import (
	"bytes"
	"time"

	"github.com/taskscope/taskscope/internal/cgroups"
	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

// outcomes is the part of the tracker that tells how attempts end, as the
// node shows it (wire.Attempt's exit fields; what they mean is the
// server's to say, store.Outcome):
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
//     the verdict comes, for up to closeFor;
//   - the kernel's OOM kills in the container's memory cgroup (oom.go);
//   - Hadoop 1: what the attempt's own log says (tasklog.go).
//
// The top process is the unit's process whose parent is no member (the
// NodeManager's child default_container_executor.sh, which exits with the
// status of the container's root; a Hadoop 1 Child JVM).
//
// The tracker tells it five things, and asks nothing else: a unit is
// tracked (watch, every tick), a process exited (exited), a unit's JVM
// took its next attempt (switched), a unit's last process is gone
// (ended), the tracker closes (close). What it reads of the process
// table is an outcomeView.
type outcomes struct {
	fs   *procfs.FS
	view outcomeView
	errs *readErrors
	// cgroupRoot is where the cgroup controllers are mounted ("-": none);
	// hier the YARN hierarchies (Config's, and the NodeManagers'); oomV2
	// the cgroup v2 OOM watcher, made at the first v2 container (oom.go).
	cgroupRoot string
	hier       *cgroups.Hierarchies
	oomV2      *cgroups.OOMWatcher
	closing    []*closing
	buf        []byte
}

// outcomeView is what the outcomes part needs of the process table.
type outcomeView interface {
	// proc is the process known by pid (nil: none).
	proc(pid int32) *proc
	// nodeManagers are the NodeManagers polled (nmpoll.go; none without
	// the lost checks).
	nodeManagers() []ContainerLister
}

func newOutcomes(fs *procfs.FS, view outcomeView, errs *readErrors, cgroupRoot string, hier *cgroups.Hierarchies) *outcomes {
	if cgroupRoot == "" {
		cgroupRoot = cgroups.DefaultRoot
	}
	return &outcomes{fs: fs, view: view, errs: errs, cgroupRoot: cgroupRoot, hier: hier}
}

// unitEnd is what a unit keeps to tell how its attempt ends.
type unitEnd struct {
	localDirs []string // the NodeManager's local dirs (LOCAL_DIRS), for the exit-code file
	envTries  int      // reads of a member's environment for them
	oom       oomCounter
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

// exited takes what p's exit record says of how it ended, for the
// attempt it was a member of: the task JVM's status, the top process's.
// Called before its membership ends.
func (o *outcomes) exited(p *proc, final *taskstats.Record, ms int64) {
	tr := p.t
	if final == nil || tr == nil {
		return
	}
	u := tr.unit
	a := u.cur
	if tr.mem != nil {
		a = tr.mem.att
	}
	if a == nil || cleanupRun(u, a) { // (a cleanup run's end is not its attempt's: tasklog.go)
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
	if par := o.view.proc(ppid); ppid > 1 && (par == nil || par.t == nil || par.t.unit != u) {
		a.info.RootExit = st
	}
}

// switched is told that u's JVM took its next attempt: old ended
// (Hadoop 1's Child asks for its next task once the last said it was
// done: its log says how that one ended).
func (o *outcomes) switched(u *unit, old *attempt, ms int64) {
	o.readTaskLog(u, old, ms)
}

// watch runs every tick after the units are sampled: it reads the local
// dirs of new containers while their processes live (and watches their
// memory cgroups), and looks for the exit-code files and NodeManager
// verdicts of containers that ended, describing their attempts again
// when they come.
func (o *outcomes) watch(units map[string]*unit, ms int64, sink Sink) {
	for _, u := range units {
		if u.containerID == "" || u.end.localDirs != nil || u.end.envTries >= maxEnvTries || len(u.members) == 0 {
			continue
		}
		u.end.envTries++
		u.end.localDirs = o.localDirsOf(u)
		if !u.end.oomTried {
			u.end.oomTried = true
			u.end.oom = o.watchOOM(u) // oom.go
		}
	}
	if len(o.closing) == 0 {
		return
	}
	nms := o.view.nodeManagers()
	kept := o.closing[:0]
	for _, c := range o.closing {
		o.lookAtEnd(c, nms, ms, sink)
		// The NodeManager's verdict settles it; without a NodeManager to
		// ask, the exit-code file is looked for a few ticks.
		if ms < c.untilMs && !c.nm && (len(nms) > 0 || !c.file && c.fileTries < maxFileTries) {
			kept = append(kept, c)
		}
	}
	for i := len(kept); i < len(o.closing); i++ {
		o.closing[i] = nil
	}
	o.closing = kept
}

// localDirsOf reads the NodeManager's local dirs from a member's
// environment (LOCAL_DIRS); nil if none can be read.
func (o *outcomes) localDirsOf(u *unit) []string {
	for _, p := range u.members {
		if p.t == nil || p.t.vanished {
			continue
		}
		b, err := o.fs.ReadPidFile(p.pid, "environ", o.buf)
		o.buf = b
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

// ended is told that the last process of u is gone, before its attempt
// is described as ended: the OOM kills are counted and the task log read
// (Hadoop 1), the exit-code file is read at once (the NodeManager deletes
// it soon), and a container's attempt waits for its NodeManager's verdict.
func (o *outcomes) ended(u *unit, ms int64) {
	if u.cur != nil && u.end.oom != nil {
		u.cur.info.OOMKills = max(u.cur.info.OOMKills, u.end.oom.kills())
	}
	o.release(u)
	o.readTaskLog(u, u.cur, ms) // Hadoop 1 (tasklog.go)
	if u.cur == nil || u.containerID == "" || u.appID == "" {
		return
	}
	c := &closing{info: &u.cur.info, container: u.containerID, localDirs: u.end.localDirs,
		untilMs: ms + closeFor.Milliseconds()}
	nms := o.view.nodeManagers()
	o.lookAtEnd(c, nms, ms, nil) // (described as ended right after, with what it found)
	if !c.nm {
		o.closing = append(o.closing, c)
		for _, w := range nms {
			w.PollSoon()
		}
	}
}

// release lets go of what u's end was watched with.
func (o *outcomes) release(u *unit) {
	if u.end.oom != nil {
		u.end.oom.close()
		u.end.oom = nil
	}
}

// close releases the watches of the units still running.
func (o *outcomes) close(units map[string]*unit) {
	for _, u := range units {
		o.release(u)
	}
	if o.oomV2 != nil {
		o.oomV2.Close()
	}
}

// lookAtEnd reads what is not yet known of a closing attempt's end: the
// exit-code file, the NodeManager's verdict. It reports whether it found
// something new; a closing attempt already described as ended is
// described again then, to sink.
func (o *outcomes) lookAtEnd(c *closing, nms []ContainerLister, ms int64, sink Sink) bool {
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
		for _, w := range nms {
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
	if changed && a.Ended && sink != nil {
		sink.Attempt(a)
	}
	return changed
}
