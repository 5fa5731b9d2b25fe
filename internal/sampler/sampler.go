// Package sampler profiles task JVMs on the node: it takes thread dumps
// through HotSpot's attach mechanism (package hotspot) at a bounded rate
// for a bounded window, joins each thread's stack with what
// /proc/PID/task/TID says of it (the CPU it used since the last dump, and
// whether it sleeps on a disk), and folds the samples into a
// wire.Profile: where the JVM's threads spent their time on a CPU, and
// where they waited (monitors, java.util.concurrent locks and queues,
// sleeps, IO and native code, the shuffle's sockets).
//
// What it costs the JVM is bounded three ways: dumps are at least
// MinInterval apart (DefaultInterval by default); the interval grows so
// that the JVM is stopped at most PauseShare of the time (a dump stops
// every thread at a safepoint; its pause is read from the JVM's own
// counters); and a Budget of stopped time per JVM, shared by all of its
// profiles, ends a profile when it is spent.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/hotspot"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// Bounds of the rate and the window.
const (
	MinInterval        = 50 * time.Millisecond
	DefaultInterval    = 200 * time.Millisecond
	DefaultWindow      = 30 * time.Second
	MaxWindow          = 5 * time.Minute
	DefaultPauseBudget = 3 * time.Second
	// PauseShare is the most of the time a JVM is stopped by dumps: the
	// interval is at least 1/PauseShare times the last pause.
	PauseShare = 0.05
)

// Config is one profile's.
type Config struct {
	ProcFS   string        // default "/proc"
	Interval time.Duration // between dumps (default DefaultInterval; at least MinInterval)
	Window   time.Duration // how long (default DefaultWindow; at most MaxWindow)
	Limits   Limits
	Attach   hotspot.Options
	// Budget is the stopped time each JVM may be charged (nil: a budget of
	// DefaultPauseBudget for this profile alone).
	Budget *Budget
}

// Clamp applies the defaults and bounds to the interval and window.
func (c *Config) Clamp() {
	if c.ProcFS == "" {
		c.ProcFS = "/proc"
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	c.Interval = max(c.Interval, MinInterval)
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	c.Window = min(c.Window, MaxWindow)
	if c.Budget == nil {
		c.Budget = NewBudget(DefaultPauseBudget)
	}
	c.Attach.ProcFS = c.ProcFS
}

// Target is a JVM to profile.
type Target struct {
	ProfileID string
	AttemptID string
	PID       int32
	Process   uint64 // its process key: the budget is kept by it
	StartMs   int64  // when the process started (unix ms), to tell it from a later process of the same pid; 0: not checked
}

// Budget is the time each JVM may be stopped for dumps, over all its
// profiles. Safe for concurrent use.
type Budget struct {
	mu    sync.Mutex
	max   time.Duration
	spent map[uint64]time.Duration
}

// NewBudget gives each JVM max of stopped time.
func NewBudget(max time.Duration) *Budget {
	return &Budget{max: max, spent: map[uint64]time.Duration{}}
}

// Spend charges d to the JVM and returns what it has left (0 or less:
// spent).
func (b *Budget) Spend(process uint64, d time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spent[process] += d
	return b.max - b.spent[process]
}

// Left is what the JVM has left.
func (b *Budget) Left(process uint64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max - b.spent[process]
}

// Forget drops a JVM that exited.
func (b *Budget) Forget(process uint64) {
	b.mu.Lock()
	delete(b.spent, process)
	b.mu.Unlock()
}

// thread is what /proc says of a thread at one read: its time on a CPU
// and waiting for one (schedstat), and its state.
type thread struct {
	runNs, queueNs uint64
	state          byte // from stat, for the threads read there ('D': disk IO)
}

// target is one JVM being profiled.
type target struct {
	Target
	vm       *hotspot.VM
	sp       *hotspot.Safepoints
	fold     *Folder
	prev     map[int32]thread
	cur      map[int32]thread
	runners  map[int32]bool // Java threads RUNNABLE in the last dump: their stat is read for D
	lastRead time.Time      // the last read of its threads
	out      wire.Profile
	done     bool
	paused   time.Duration
	maxP     time.Duration
	buf      []byte
}

// Profile profiles the targets together (a dump of each in turn, every
// interval) for the window, and returns a profile of each: complete, or
// partial when it ended early (the JVM exited, its budget was spent, ctx
// was done), or failed when not one dump could be taken (the JVM cannot
// be attached to: see package hotspot's errors).
func Profile(ctx context.Context, cfg Config, targets []Target) []wire.Profile {
	cfg.Clamp()
	start := time.Now()
	ts := make([]*target, len(targets))
	for i, tg := range targets {
		t := &target{Target: tg, fold: NewFolder(cfg.Limits), prev: map[int32]thread{}, cur: map[int32]thread{}, runners: map[int32]bool{}}
		t.out = wire.Profile{ID: tg.ProfileID, AttemptID: tg.AttemptID, Process: tg.Process, PID: tg.PID,
			StartMs: start.UnixMilli(), IntervalMs: cfg.Interval.Milliseconds()}
		ts[i] = t
		t.attach(ctx, &cfg)
	}
	end := start.Add(cfg.Window)
	interval := cfg.Interval
	for next := time.Now().Add(interval); ; next = next.Add(interval) {
		live := 0
		for _, t := range ts {
			if !t.done {
				live++
			}
		}
		if live == 0 || next.After(end) {
			break
		}
		if !sleepUntil(ctx, next) {
			for _, t := range ts {
				t.stop(wire.ProfilePartial, "the agent stopped")
			}
			break
		}
		var round time.Duration
		for _, t := range ts {
			if !t.done {
				round += t.sample(ctx, &cfg)
			}
		}
		// The next dump far enough that dumps stop each JVM at most
		// PauseShare of the time: of the last interval (the round's
		// pauses), and of the profile so far (pauses vary: a short one
		// after long ones would let the next come too soon).
		interval = max(cfg.Interval, time.Duration(float64(round)/PauseShare))
		if now := time.Now(); next.Before(now) {
			next = now // a slow round: no catching up
		}
		var most time.Duration
		for _, t := range ts {
			most = max(most, t.paused)
		}
		if due := start.Add(time.Duration(float64(most) / PauseShare)); next.Add(interval).Before(due) {
			interval = due.Sub(next)
		}
	}
	out := make([]wire.Profile, len(ts))
	for i, t := range ts {
		t.finish()
		out[i] = t.out
	}
	return out
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// attach attaches to the JVM and reads its threads' baseline.
func (t *target) attach(ctx context.Context, cfg *Config) {
	if t.StartMs > 0 && !sameStart(cfg.ProcFS, t.PID, t.StartMs) {
		t.stop(wire.ProfileFailed, fmt.Sprintf("pid %d is not the process that started at %d: %v", t.PID, t.StartMs, hotspot.ErrGone))
		return
	}
	if cfg.Budget.Left(t.Process) <= 0 {
		t.stop(wire.ProfileFailed, "its pause budget is spent")
		return
	}
	actx, cancel := context.WithTimeout(ctx, cfg.Attach.StartTimeout+5*time.Second)
	defer cancel()
	vm, err := hotspot.Attach(actx, t.PID, cfg.Attach)
	if err != nil {
		t.stop(wire.ProfileFailed, err.Error())
		return
	}
	t.vm = vm
	if sp, err := vm.OpenSafepoints(); err == nil {
		t.sp = sp
	}
	t.lastRead = time.Now()
	if err := t.readThreads(cfg.ProcFS); err != nil {
		t.stop(wire.ProfileFailed, err.Error())
		return
	}
	t.prev, t.cur = t.cur, t.prev
}

// sameStart reports whether pid started at startMs: its stat's start
// (clock ticks after boot, USER_HZ 100) after the boot time, within the 2
// s that btime's rounding and the agent's exact start may differ by.
func sameStart(procFS string, pid int32, startMs int64) bool {
	fsys := procfs.NewFS(procFS)
	btime, err := fsys.BootTime()
	if err != nil {
		return true // cannot tell: the attach's own checks remain
	}
	var buf [1024]byte
	b, err := fsys.ReadPidFile(pid, "stat", buf[:])
	var st procfs.Stat
	if err != nil || procfs.ParseStat(b, &st) != nil {
		return false
	}
	d := btime*1000 + int64(st.StartTime)*10 - startMs
	return d > -2000 && d < 2000
}

// readThreads reads each thread's CPU (schedstat) into t.cur, and the
// state of those that were runnable in the last dump.
func (t *target) readThreads(procFS string) error {
	fsys := procfs.NewFS(procFS)
	dir, err := os.Open(fsys.PidPath(t.PID, "task"))
	if err != nil {
		if procfs.IsGone(err) {
			return fmt.Errorf("pid %d: %w", t.PID, hotspot.ErrGone)
		}
		return fmt.Errorf("cannot list the threads of pid %d: %w", t.PID, err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return fmt.Errorf("cannot list the threads of pid %d: %w", t.PID, err)
	}
	clear(t.cur)
	var st procfs.Schedstat
	var stat procfs.Stat
	for _, n := range names {
		tid, err := strconv.ParseInt(n, 10, 32)
		if err != nil {
			continue
		}
		t.buf, err = fsys.ReadPidFile(t.PID, "task/"+n+"/schedstat", t.buf[:0])
		if err != nil || procfs.ParseSchedstat(t.buf, &st) != nil {
			continue // the thread exited
		}
		th := thread{runNs: st.RunNs, queueNs: st.WaitNs}
		if t.runners[int32(tid)] {
			if t.buf, err = fsys.ReadPidFile(t.PID, "task/"+n+"/stat", t.buf[:0]); err == nil && procfs.ParseStat(t.buf, &stat) == nil {
				th.state = stat.State
			}
		}
		t.cur[int32(tid)] = th
	}
	return nil
}

// sample reads the threads, takes a dump, folds it, and returns the pause
// it cost.
func (t *target) sample(ctx context.Context, cfg *Config) time.Duration {
	now := time.Now()
	if err := t.readThreads(cfg.ProcFS); err != nil {
		t.ended(err)
		return 0
	}
	wall := now.Sub(t.lastRead)
	t.lastRead = now
	var before time.Duration
	if t.sp != nil {
		before, _ = t.sp.Stopped()
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.Attach.CommandTimeout+time.Second)
	t0 := time.Now()
	var err error
	t.buf, err = t.vm.ThreadDump(dctx, t.buf[:0])
	took := time.Since(t0)
	cancel()
	if err != nil {
		t.ended(err)
		return 0
	}
	pause := took // the whole round trip bounds it
	if t.sp != nil {
		if after, err := t.sp.Stopped(); err == nil && after >= before && after-before <= took {
			pause = after - before
		}
	}
	t.out.Dumps++
	t.paused += pause
	t.maxP = max(t.maxP, pause)
	clear(t.runners)
	wallNs := wall.Nanoseconds()
	perr := hotspot.ParseThreadDump(t.buf, hotspot.Limits{MaxFrames: t.fold.lim.MaxFrames}, func(th *hotspot.Thread) error {
		cur, ok := t.cur[th.TID]
		if !ok {
			return nil // a thread started after the read, or not the JVM's
		}
		// Since the last read (since it started, for a new thread): its
		// time on a CPU, waiting for one, and the rest of the interval.
		cpu, queued := int64(cur.runNs), int64(cur.queueNs)
		if p, ok := t.prev[th.TID]; ok {
			cpu -= int64(p.runNs)
			queued -= int64(p.queueNs)
		}
		cpu = min(max(cpu, 0), wallNs)
		queued = min(max(queued, 0), wallNs-cpu)
		state := classify(th, cur.state)
		wait := wallNs - cpu - queued
		if state == wire.ThreadVM || len(th.Frames) == 0 {
			wait = 0 // the JVM's own threads and frameless ones: their idle time says nothing
		}
		if th.Java && th.State == hotspot.StateRunnable {
			t.runners[th.TID] = true
		}
		t.fold.Add(th.Name, state, th.Frames, th.Dropped, cpu, wait, queued)
		return nil
	})
	t.prev, t.cur = t.cur, t.prev
	if perr != nil {
		t.stop(wire.ProfilePartial, perr.Error())
		return pause
	}
	if left := cfg.Budget.Spend(t.Process, pause); left <= 0 {
		t.stop(wire.ProfilePartial, fmt.Sprintf("its pause budget of %s is spent", cfg.Budget.max))
	}
	return pause
}

// classify is the wire state of a thread from its dump and its /proc
// state ('D': uninterruptible sleep, disk IO).
func classify(th *hotspot.Thread, procState byte) string {
	if !th.Java {
		return wire.ThreadVM
	}
	switch th.State {
	case hotspot.StateRunnable:
		if procState == 'D' {
			return wire.ThreadDisk
		}
		return wire.ThreadRunnable
	case hotspot.StateBlocked:
		return wire.ThreadBlocked
	case hotspot.StateWaiting, hotspot.StateTimedWaiting:
		switch th.Wait {
		case hotspot.WaitSleeping:
			return wire.ThreadSleeping
		case hotspot.WaitParking:
			return wire.ThreadParked
		case hotspot.WaitMonitor:
			return wire.ThreadWaiting
		}
	}
	return wire.ThreadOther
}

// ended ends the target after an error: the JVM exited (partial, or
// failed before any dump), or something else went wrong.
func (t *target) ended(err error) {
	status := wire.ProfilePartial
	if t.out.Dumps == 0 {
		status = wire.ProfileFailed
	}
	msg := err.Error()
	if errors.Is(err, hotspot.ErrGone) {
		msg = "the JVM exited"
	}
	t.stop(status, msg)
}

func (t *target) stop(status, msg string) {
	if t.done {
		return
	}
	t.done = true
	t.out.Status, t.out.Error = status, msg
	t.out.EndMs = time.Now().UnixMilli()
}

// finish fills the profile.
func (t *target) finish() {
	if !t.done {
		t.stop(wire.ProfileComplete, "")
	}
	if t.sp != nil {
		t.sp.Close()
	}
	t.out.PausedUs, t.out.MaxPauseUs = t.paused.Microseconds(), t.maxP.Microseconds()
	if t.out.Status == wire.ProfileFailed {
		return // no stacks
	}
	t.fold.Fill(&t.out)
}
