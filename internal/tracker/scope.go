package tracker

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Scope limits a tracker to the tasks of one Hadoop daemon: the
// NodeManager or TaskTracker of the node it reports for, where one host
// runs several (test machines, the demo's simulated nodes, a host that
// runs a NodeManager per disk set or per container image). A task is that
// daemon's when the daemon is among its process's ancestors (what it
// launched, and their descendants); a process whose ancestry is lost
// (reparented to init after a setsid, tied to its container by its cgroup
// or environment only) is when its working directory is under one of the
// daemon's local directories (yarn.nodemanager.local-dirs,
// mapred.local.dir). The zero Scope tracks every task on the host.
//
// A NodeManager in a container of its own is better served by an agent in
// that container's pid namespace (its /proc): see docs/operations.md.
type Scope struct {
	// DaemonPID is the daemon's pid.
	DaemonPID int32
	// DaemonPIDFile names a file holding it: the pid file Hadoop's daemon
	// scripts write ($HADOOP_PID_DIR/hadoop-$USER-tasktracker.pid,
	// $YARN_PID_DIR/yarn-$USER-nodemanager.pid). It is read again when the
	// daemon it named is gone (a restarted daemon has a new pid).
	DaemonPIDFile string
}

// enabled reports whether the scope limits anything.
func (s Scope) enabled() bool { return s.DaemonPID != 0 || s.DaemonPIDFile != "" }

// scopeState is the daemon the tracker is scoped to, as last found.
type scopeState struct {
	pid       int32
	start     uint64   // its start time, clock ticks: a pid reused is another process
	localDirs []string // its local directories, as it sees them
	confRead  bool
	lastTry   uint64 // the tick the pid file was last read
}

// scopeDaemon finds the scope's daemon at this tick's listing: the pid
// given, or the one its pid file names (read again, at most every 5
// ticks, while the daemon named is gone).
func (a *attributor) scopeDaemon() {
	s := &a.scope
	if !a.scopeCfg.enabled() {
		return
	}
	if s.pid != 0 {
		if p := a.view.proc(s.pid); p != nil && p.startTicks == s.start {
			return
		}
		*s = scopeState{lastTry: s.lastTry}
	}
	pid := a.scopeCfg.DaemonPID
	if a.scopeCfg.DaemonPIDFile != "" {
		if s.lastTry != 0 && a.cycle-s.lastTry < 5 {
			return
		}
		s.lastTry = a.cycle
		b, err := os.ReadFile(a.scopeCfg.DaemonPIDFile)
		if err != nil {
			a.errs.count("daemon-pidfile", err)
			return
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 32)
		if err != nil || n <= 1 {
			a.errs.count("daemon-pidfile", err)
			return
		}
		pid = int32(n)
	}
	if p := a.view.proc(pid); p != nil {
		s.pid, s.start = pid, p.startTicks
	}
}

// inScope reports whether p descends from the scope's daemon (or no scope
// is set).
func (a *attributor) inScope(p *proc) bool {
	if !a.scopeCfg.enabled() {
		return true
	}
	s := &a.scope
	if s.pid == 0 {
		return false
	}
	q := p
	for i := 0; i < 64 && q != nil; i++ {
		if q.pid == s.pid {
			return q.startTicks == s.start
		}
		if q.ppid <= 1 {
			return false
		}
		q = a.view.proc(q.ppid)
	}
	return false
}

// inScopeDirs reports whether an escaped process (no ancestry to go by)
// works under one of the scope's daemon's local directories.
func (a *attributor) inScopeDirs(p *proc) bool {
	if !a.scopeCfg.enabled() {
		return true
	}
	s := &a.scope
	if p := a.view.proc(s.pid); !s.confRead && p != nil && p.state == stDaemon {
		// Classified already (it started before what it launched).
		s.confRead = true
		s.localDirs = a.readDaemonConf(s.pid, p.kind).localDirs
	}
	if len(s.localDirs) == 0 {
		return false
	}
	cwd, err := a.fs.Readlink(p.pid, "cwd")
	if err != nil {
		return false
	}
	for _, d := range s.localDirs {
		if d = strings.TrimRight(d, "/"); d != "" && (cwd == d || strings.HasPrefix(cwd, d+"/")) {
			return true
		}
	}
	return false
}

// ownDaemon reports whether a daemon of the node is the scope's (all are
// without a scope): the lost-process checks look at its tasks only.
func (a *attributor) ownDaemon(pid int32) bool {
	return !a.scopeCfg.enabled() || pid == a.scope.pid
}
