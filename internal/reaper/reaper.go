// Package reaper ends task processes that the agent has positively
// identified as lost (their launcher died, the NodeManager forgot their
// container, a Hadoop 1 Child that never got its task, a task whose job
// was cleaned up) once they have been so for a while: SIGTERM to the
// process group (or the process alone when its group holds anything else),
// then SIGKILL after a grace period. It never signals pid 1, the agent, its
// process group, or a process the caller protects (the Hadoop daemons), and
// it logs every action and reports it as an event (wire.EventReap). It is
// off unless the agent runs with --reap-orphans.
package reaper

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// Target is a process identified as lost now.
type Target struct {
	PID        int32
	StartTicks uint64 // with PID, the process's identity
	Group      int32  // the process group to signal (every process in it is a target), or 0: the process alone
	Reason     string // the event kind that identified it: orphan, unknown_container, lost_jvm, outlived_job
	AttemptID  string
	JobID      string
	Key        uint64 // the process key
}

// Config configures a Reaper.
type Config struct {
	After   time.Duration // how long a process must have been identified before it is signalled
	Grace   time.Duration // between SIGTERM and SIGKILL (default 10 s)
	DryRun  bool          // log and report what would be done, signal nothing
	Log     *slog.Logger
	Self    int32                // the agent's pid (default os.Getpid())
	Protect func(pid int32) bool // true: never signal this process
	// Allow, when set, limits the reaper to the processes it accepts (tests
	// on a shared machine limit it to their own cluster).
	Allow func(pid int32) bool
	// Kill sends a signal (default syscall.Kill; a negative pid is a group).
	Kill func(pid int, sig syscall.Signal) error
}

type id struct {
	pid   int32
	start uint64
}

type state struct {
	since  time.Time // first identified
	termAt time.Time // SIGTERM sent (or would have been)
	killed bool
	why    string
}

// Reaper follows identified processes from one check to the next. It is
// not safe for concurrent use.
type Reaper struct {
	cfg   Config
	procs map[id]*state
	pgrp  int32
}

// New returns a Reaper.
func New(cfg Config) *Reaper {
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Self == 0 {
		cfg.Self = int32(os.Getpid())
	}
	if cfg.Kill == nil {
		cfg.Kill = syscall.Kill
	}
	return &Reaper{cfg: cfg, procs: map[id]*state{}, pgrp: int32(syscall.Getpgrp())}
}

// DryRun reports whether the reaper only says what it would do.
func (r *Reaper) DryRun() bool { return r.cfg.DryRun }

// Update takes the processes identified at this check and signals those
// that have been identified for long enough. It returns the events of what
// it did.
func (r *Reaper) Update(now time.Time, targets []Target) []wire.Event {
	var evs []wire.Event
	seen := make(map[id]bool, len(targets))
	signalled := map[int32]bool{} // groups signalled in this call
	for _, tg := range targets {
		k := id{tg.PID, tg.StartTicks}
		seen[k] = true
		st := r.procs[k]
		if st == nil {
			st = &state{since: now, why: tg.Reason}
			r.procs[k] = st
		}
		if st.killed || now.Sub(st.since) < r.cfg.After {
			continue
		}
		if why := r.refuse(tg); why != "" {
			if st.termAt.IsZero() {
				r.cfg.Log.Warn("not reaping", "pid", tg.PID, "attempt", tg.AttemptID, "why", why)
				st.termAt = now
				st.killed = true
			}
			continue
		}
		var sig syscall.Signal
		switch {
		case st.termAt.IsZero():
			sig = syscall.SIGTERM
			st.termAt = now
		case !r.cfg.DryRun && now.Sub(st.termAt) >= r.cfg.Grace:
			sig = syscall.SIGKILL
			st.killed = true
		default:
			continue
		}
		if r.cfg.DryRun {
			st.killed = true // one report per process
		}
		target, what := int(tg.PID), fmt.Sprintf("process %d", tg.PID)
		group := tg.Group > 1 && tg.Group != r.pgrp
		if group {
			target, what = -int(tg.Group), fmt.Sprintf("process group %d", tg.Group)
			if signalled[tg.Group] {
				continue // the group's other targets share its signal
			}
			signalled[tg.Group] = true
		}
		msg := fmt.Sprintf("%s to %s (%s for %s)", sigName(sig), what, st.why, now.Sub(st.since).Round(time.Second))
		var err error
		if r.cfg.DryRun {
			msg = "dry run: would send " + msg
		} else {
			err = r.cfg.Kill(target, sig)
			if err == syscall.ESRCH {
				err = nil // gone meanwhile
			}
			if err != nil {
				msg += ": " + err.Error()
			}
		}
		r.cfg.Log.Warn("reaping lost task process", "pid", tg.PID, "group", tg.Group, "signal", sigName(sig), "attempt", tg.AttemptID,
			"reason", st.why, "identified_for", now.Sub(st.since).Round(time.Second), "dry_run", r.cfg.DryRun, "err", err)
		evs = append(evs, wire.Event{Ms: now.UnixMilli(), Kind: wire.EventReap, PID: tg.PID, Process: tg.Key,
			AttemptID: tg.AttemptID, JobID: tg.JobID, Message: msg, Value: int64(sig)})
	}
	for k := range r.procs {
		if !seen[k] {
			delete(r.procs, k) // gone, or no longer lost
		}
	}
	return evs
}

// refuse says why a process must not be signalled, or "".
func (r *Reaper) refuse(tg Target) string {
	switch {
	case tg.PID <= 1:
		return "pid 1 or less"
	case tg.PID == r.cfg.Self:
		return "the agent itself"
	case tg.Group != 0 && (tg.Group <= 1 || tg.Group == r.pgrp):
		return "the group of init or of the agent"
	case r.cfg.Protect != nil && r.cfg.Protect(tg.PID):
		return "a protected process (a daemon)"
	case r.cfg.Allow != nil && !r.cfg.Allow(tg.PID):
		return "not allowed"
	}
	return ""
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return s.String()
}
