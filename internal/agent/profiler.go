package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/sampler"
	"github.com/taskscope/taskscope/internal/tracker"
	"github.com/taskscope/taskscope/internal/wire"
)

// Profiling says which profiles the agent takes (--profiling): those
// someone asked for on an attempt's page, those the server orders on its
// own for stragglers and outliers, both, or none. A node's operator turns
// them off here whatever the server asks.
type Profiling struct {
	OnDemand, Auto bool
}

// ParseProfiling reads --profiling: "on-demand,auto" (the default, also
// for ""), "on-demand", "auto", or "off".
func ParseProfiling(s string) (Profiling, error) {
	if s == "" {
		return Profiling{OnDemand: true, Auto: true}, nil
	}
	var p Profiling
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "on-demand":
			p.OnDemand = true
		case "auto":
			p.Auto = true
		case "off":
		default:
			return p, fmt.Errorf("--profiling takes on-demand, auto (or both, comma-separated) or off, not %q", w)
		}
	}
	return p, nil
}

// jvms is the agent's view of the node's JVMs, made of what the tracker
// reports (its Sink's processes and memberships, through jvmSink): the
// profiler takes an order only for a JVM that a tracked attempt has as a
// member now, so that a server cannot have the agent signal any other
// process.
type jvms struct {
	mu    sync.Mutex
	procs map[uint64]*jvmProc
	gone  func(key uint64) // told of a JVM that exited
}

type jvmProc struct {
	pid      int32
	startMs  int64
	jvm      bool            // its role is a JVM's
	attempts map[string]bool // the attempts it is a member of now
}

func jvmRole(r string) bool {
	return r == wire.RoleTaskJVM || r == wire.RoleAppMaster || r == wire.RoleExecutor
}

func (j *jvms) proc(key uint64) *jvmProc {
	p := j.procs[key]
	if p == nil {
		p = &jvmProc{attempts: map[string]bool{}}
		j.procs[key] = p
	}
	return p
}

func (j *jvms) process(p *wire.Process) {
	j.mu.Lock()
	if p.EndMs != 0 {
		delete(j.procs, p.Key)
		j.mu.Unlock()
		j.gone(p.Key)
		return
	}
	jp := j.proc(p.Key)
	jp.pid, jp.startMs = p.PID, p.StartMs
	jp.jvm = jp.jvm || jvmRole(p.Role)
	j.mu.Unlock()
}

func (j *jvms) member(m *wire.Membership) {
	j.mu.Lock()
	defer j.mu.Unlock()
	jp := j.proc(m.Process)
	jp.jvm = jp.jvm || jvmRole(m.Role)
	if m.ToMs != 0 {
		delete(jp.attempts, m.AttemptID)
	} else {
		jp.attempts[m.AttemptID] = true
	}
}

// find returns the JVM pid of attempt (its key and start), if the tracker
// has it so.
func (j *jvms) find(attempt string, pid int32) (key uint64, startMs int64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, p := range j.procs {
		if p.pid == pid && p.jvm && p.attempts[attempt] {
			return k, p.startMs, true
		}
	}
	return 0, 0, false
}

// jvmSink passes everything to the batch builder, and the processes and
// memberships to the JVM view too.
type jvmSink struct {
	tracker.Sink
	j *jvms
}

func (s jvmSink) Process(p *wire.Process) {
	s.j.process(p)
	s.Sink.Process(p)
}

func (s jvmSink) Membership(m *wire.Membership) {
	s.j.member(m)
	s.Sink.Membership(m)
}

// profiler takes the server's profile orders (from the answers to the
// agent's batches), checks them against the node's JVMs and --profiling,
// profiles one session at a time (a session: the orders of a group, or
// one order), and keeps the finished profiles for the next batch. Every
// order it takes gets a profile, failed when it was refused.
type profiler struct {
	mode   Profiling
	procFS string
	jvms   *jvms
	budget *sampler.Budget
	log    *slog.Logger

	mu     sync.Mutex
	seen   map[string]time.Time // orders taken, by id
	queue  [][]order            // sessions waiting
	done   []wire.Profile       // finished, for the next batch
	wake   chan struct{}
	active int // profiles being taken
	// Counters for the agent's metrics: profiles answered (handed to a
	// batch), and the time their dumps stopped the JVMs.
	answeredN uint64
	pausedN   uint64
}

type order struct {
	wire.ProfileOrder
	key     uint64
	startMs int64
}

// Bounds of the profiler's memory of orders and of its queue.
const (
	maxSeenOrders = 4096
	seenFor       = time.Hour
	maxSessions   = 8
)

func newProfiler(mode Profiling, procFS string, budget time.Duration, log *slog.Logger) *profiler {
	p := &profiler{mode: mode, procFS: procFS, budget: sampler.NewBudget(budget), log: log,
		seen: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	p.jvms = &jvms{procs: map[uint64]*jvmProc{}, gone: p.budget.Forget}
	return p
}

// take takes a server's orders (on the sender's goroutine: it returns at
// once).
func (p *profiler) take(orders []wire.ProfileOrder) {
	now := time.Now()
	groups := map[string]int{} // group -> session index in this call
	var sessions [][]order
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) > maxSeenOrders {
		for id, t := range p.seen {
			if now.Sub(t) > seenFor || len(p.seen) > maxSeenOrders {
				delete(p.seen, id)
			}
		}
	}
	for _, o := range orders {
		if err := o.Check(); err != nil {
			p.log.Warn("the server sent an unusable profile order", "err", err)
			continue
		}
		if _, ok := p.seen[o.ID]; ok {
			continue // taken before (the server sends an order until its profile comes)
		}
		p.seen[o.ID] = now
		if reason := p.refuse(&o); reason != "" {
			p.log.Info("profile refused", "id", o.ID, "attempt", o.AttemptID, "pid", o.PID, "trigger", o.Trigger, "reason", reason)
			p.done = append(p.done, failedProfile(&o, reason))
			continue
		}
		key, start, _ := p.jvms.find(o.AttemptID, o.PID)
		if o.StartMs == 0 {
			o.StartMs = start
		}
		od := order{ProfileOrder: o, key: key, startMs: o.StartMs}
		if i, ok := groups[o.Group]; ok && o.Group != "" {
			sessions[i] = append(sessions[i], od)
			continue
		}
		groups[o.Group] = len(sessions)
		sessions = append(sessions, []order{od})
	}
	for _, s := range sessions {
		if len(p.queue) >= maxSessions {
			for _, o := range s {
				p.done = append(p.done, failedProfile(&o.ProfileOrder, "the node's queue of profiles is full"))
			}
			continue
		}
		p.queue = append(p.queue, s)
		p.log.Info("profile ordered", "id", s[0].ID, "attempt", s[0].AttemptID, "pid", s[0].PID, "trigger", s[0].Trigger,
			"window", time.Duration(s[0].WindowMs)*time.Millisecond, "jvms", len(s))
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refuse says why an order is not taken ("" : it is).
func (p *profiler) refuse(o *wire.ProfileOrder) string {
	switch {
	case o.Automatic() && !p.mode.Auto:
		return "automatic profiles are off on this node (taskscope-agent --profiling)"
	case !o.Automatic() && !p.mode.OnDemand:
		return "profiles on demand are off on this node (taskscope-agent --profiling)"
	}
	if _, _, ok := p.jvms.find(o.AttemptID, o.PID); !ok {
		return fmt.Sprintf("pid %d is not a JVM of attempt %s on this node now", o.PID, o.AttemptID)
	}
	return ""
}

func failedProfile(o *wire.ProfileOrder, reason string) wire.Profile {
	now := time.Now().UnixMilli()
	return wire.Profile{ID: o.ID, AttemptID: o.AttemptID, PID: o.PID, StartMs: now, EndMs: now, IntervalMs: o.IntervalMs,
		Status: wire.ProfileFailed, Error: reason}
}

// run profiles the sessions as they come, one at a time, until ctx is
// done (a session under way is cut short: partial).
func (p *profiler) run(ctx context.Context) {
	for {
		p.mu.Lock()
		var s []order
		if len(p.queue) > 0 {
			s = p.queue[0]
			p.queue = p.queue[1:]
			p.active = len(s)
		}
		p.mu.Unlock()
		if s == nil {
			select {
			case <-ctx.Done():
				p.stopped()
				return
			case <-p.wake:
				continue
			}
		}
		cfg := sampler.Config{ProcFS: p.procFS, Interval: time.Duration(s[0].IntervalMs) * time.Millisecond,
			Window: time.Duration(s[0].WindowMs) * time.Millisecond, Budget: p.budget}
		targets := make([]sampler.Target, len(s))
		for i, o := range s {
			targets[i] = sampler.Target{ProfileID: o.ID, AttemptID: o.AttemptID, PID: o.PID, Process: o.key, StartMs: o.startMs}
		}
		out := sampler.Profile(ctx, cfg, targets)
		for _, pr := range out {
			p.log.Info("profile taken", "id", pr.ID, "attempt", pr.AttemptID, "pid", pr.PID, "status", pr.Status, "error", pr.Error,
				"dumps", pr.Dumps, "paused", time.Duration(pr.PausedUs)*time.Microsecond, "stacks", len(pr.Stacks))
		}
		p.mu.Lock()
		p.done = append(p.done, out...)
		p.active = 0
		p.mu.Unlock()
	}
}

// stopped answers the orders still queued when the agent stops.
func (p *profiler) stopped() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.queue {
		for _, o := range s {
			p.done = append(p.done, failedProfile(&o.ProfileOrder, "the agent stopped"))
		}
	}
	p.queue = nil
}

// ready reports whether profiles wait for a batch.
func (p *profiler) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.done) > 0
}

// profiles takes the finished profiles, for a batch.
func (p *profiler) profiles() []wire.Profile {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.done
	p.done = nil
	for i := range out {
		p.answeredN++
		p.pausedN += uint64(out[i].PausedUs)
	}
	return out
}

func (p *profiler) answered() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answeredN
}

func (p *profiler) pausedUs() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pausedN
}

// busy is how many profiles are being taken now.
func (p *profiler) busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active
}
