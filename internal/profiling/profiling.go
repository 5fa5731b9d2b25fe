// Package profiling is the server's side of the stack profiles of task
// JVMs (the agent's side is packages sampler and hotspot): it takes the
// requests for them, from an attempt's page (on demand) and from the
// analysis for the stragglers and outliers it names while they run
// (automatic, with a healthy sibling profiled over the same window for
// the differential); it keeps them in the store, and hands them to the
// nodes' agents in the answers to their batches, so that no node needs an
// inbound port. It keeps the bounds: one automatic profile at a time per
// node, so many per node and hour, and the operators' switches, for the
// cluster here and per node (the server's list, and each agent's own
// --profiling).
package profiling

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Config is the operators' word on profiles (taskscope server flags).
type Config struct {
	// OnDemand: profiles may be asked for on an attempt's page (by
	// operators and the job's owner). Auto: the analysis' stragglers and
	// outliers are profiled on their own.
	OnDemand, Auto bool
	// OffHosts are nodes where no profile is taken (beside each agent's
	// own --profiling).
	OffHosts []string
	// AutoPerHour bounds the automatic profiles each node takes in an
	// hour (default 6).
	AutoPerHour int
	// Window and Interval are the automatic profiles' (default 20 s and
	// 200 ms) and the default of those asked for (30 s).
	AutoWindow, Window, Interval time.Duration
	// Poll is how often the store's pending requests are read (default
	// 2 s): those another server took are handed out here too.
	Poll time.Duration
	Log  *slog.Logger
	Now  func() time.Time
}

// Defaults.
const (
	DefaultAutoPerHour = 6
	DefaultAutoWindow  = 20 * time.Second
	DefaultWindow      = 30 * time.Second
	DefaultInterval    = 200 * time.Millisecond
	MinInterval        = 50 * time.Millisecond
	MaxWindow          = 5 * time.Minute
	// deliverFor is how long after it was made a request is handed to its
	// agent: after that its attempt has moved on.
	deliverFor = 2 * time.Minute
	// resendAfter: a request handed out and not answered is handed out
	// again after this (its answer may have been lost); the agent takes
	// it once.
	resendAfter = 15 * time.Second
	// autoAgain: an attempt profiled on its own is not again within this.
	autoAgain = 10 * time.Minute
)

func (c *Config) defaults() {
	if c.AutoPerHour <= 0 {
		c.AutoPerHour = DefaultAutoPerHour
	}
	if c.AutoWindow <= 0 {
		c.AutoWindow = DefaultAutoWindow
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Errors of Request.
var (
	ErrOff        = errors.New("profiles are off")
	ErrNotRunning = errors.New("the attempt has no running JVM")
	ErrPending    = errors.New("a profile of the attempt is already asked for")
)

// Control is the server's profile requests. Safe for concurrent use.
type Control struct {
	st  store.Store
	ps  store.ProfileStore
	cfg Config

	reqMu sync.Mutex // one Request at a time: its check and its write

	mu      sync.Mutex
	pending map[string][]store.ProfileRequest // by host: requests whose profile has not come
	sent    map[string]time.Time              // request id -> last handed out
	auto    map[string][]time.Time            // host -> its automatic profiles' starts (the last hour's)
	busy    map[string]time.Time              // host -> when its automatic profile ends
	autoAtt map[string]time.Time              // attempt -> its last automatic profile
}

// New returns the Control over st, or nil if st keeps no profiles.
func New(st store.Store, cfg Config) *Control {
	ps, ok := st.(store.ProfileStore)
	if !ok {
		return nil
	}
	cfg.defaults()
	return &Control{st: st, ps: ps, cfg: cfg, pending: map[string][]store.ProfileRequest{}, sent: map[string]time.Time{},
		auto: map[string][]time.Time{}, busy: map[string]time.Time{}, autoAtt: map[string]time.Time{}}
}

// Settings is what the API tells of the switches.
type Settings struct {
	OnDemand bool     `json:"on_demand"`
	Auto     bool     `json:"auto"`
	OffHosts []string `json:"off_hosts"`
}

// Settings are the operators' switches.
func (c *Control) Settings() Settings {
	return Settings{OnDemand: c.cfg.OnDemand, Auto: c.cfg.Auto, OffHosts: append([]string{}, c.cfg.OffHosts...)}
}

// HostOff reports whether host takes no profiles.
func (c *Control) HostOff(host string) bool { return slices.Contains(c.cfg.OffHosts, host) }

// Run reads the store's pending requests every Poll until ctx is done.
func (c *Control) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Poll)
	defer t.Stop()
	for {
		if err := c.poll(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Debug("cannot read pending profile requests", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll replaces the pending requests by the store's.
func (c *Control) poll(ctx context.Context) error {
	now := c.cfg.Now()
	rs, err := c.ps.PendingProfiles(ctx, now.Add(-deliverFor).UnixMilli())
	if err != nil {
		return err
	}
	byHost := map[string][]store.ProfileRequest{}
	for _, r := range rs {
		byHost[r.Host] = append(byHost[r.Host], r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A request made here since the read began is kept.
	for h, l := range c.pending {
		for _, r := range l {
			if int64(r.Requested) > now.UnixMilli()-c.cfg.Poll.Milliseconds() && !slices.ContainsFunc(byHost[h], func(x store.ProfileRequest) bool { return x.ID == r.ID }) {
				byHost[h] = append(byHost[h], r)
			}
		}
	}
	c.pending = byHost
	for id, t := range c.sent {
		if now.Sub(t) > deliverFor {
			delete(c.sent, id)
		}
	}
	return nil
}

// Orders are the requests to hand to host's agent now (the ingest
// answers carry them): each pending one not handed out in the last
// resendAfter.
func (c *Control) Orders(host string) []wire.ProfileOrder {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []wire.ProfileOrder
	for _, r := range c.pending[host] {
		if now.Sub(time.UnixMilli(int64(r.Requested))) > deliverFor {
			continue
		}
		if t, ok := c.sent[r.ID]; ok && now.Sub(t) < resendAfter {
			continue
		}
		c.sent[r.ID] = now
		group := ""
		if r.Baseline != "" {
			group = r.ID
		}
		for _, o := range c.pending[host] {
			if o.Baseline == r.ID {
				group = o.ID // a sibling goes with its straggler
			}
		}
		out = append(out, wire.ProfileOrder{ID: r.ID, AttemptID: r.AttemptID, PID: r.PID, StartMs: r.StartMs, WindowMs: r.WindowMs,
			IntervalMs: r.IntervalMs, Trigger: r.Trigger, Group: group})
	}
	return out
}

// add stores a request and makes it pending.
func (c *Control) add(ctx context.Context, r store.ProfileRequest) error {
	if err := c.ps.RequestProfile(ctx, r); err != nil {
		return err
	}
	c.mu.Lock()
	c.pending[r.Host] = append(c.pending[r.Host], r)
	c.mu.Unlock()
	c.cfg.Log.Info("profile requested", "id", r.ID, "attempt", r.AttemptID, "host", r.Host, "pid", r.PID, "trigger", r.Trigger,
		"requested_by", r.RequestedBy, "baseline", r.Baseline, "window", time.Duration(r.WindowMs)*time.Millisecond)
	return nil
}

// newID is a profile's id: when it was asked for, and 48 random bits.
func newID(now time.Time) string {
	var b [6]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// jvmOf is the JVM of an attempt that runs now: its task JVM, else its
// executor or application master; nil if none is alive.
func jvmOf(a *store.AttemptDetail) *store.Process {
	var best *store.Process
	rank := func(role string) int {
		switch role {
		case wire.RoleTaskJVM:
			return 3
		case wire.RoleExecutor:
			return 2
		case wire.RoleAppMaster:
			return 1
		}
		return 0
	}
	for i := range a.ProcessList {
		p := &a.ProcessList[i]
		if p.End != 0 || rank(p.Role) == 0 {
			continue
		}
		if best == nil || rank(p.Role) > rank(best.Role) {
			best = p
		}
	}
	return best
}

// running reports whether the attempt runs now (as the store says: not
// ended, not lost).
func running(a *store.Attempt) bool { return a.State == store.StateRunning }

// Request asks for a profile of attempt a's JVM on someone's behalf (who,
// for the log and the list); window and interval 0 are the defaults.
func (c *Control) Request(ctx context.Context, who string, a *store.AttemptDetail, window, interval time.Duration) (store.ProfileRequest, error) {
	var r store.ProfileRequest
	switch {
	case !c.cfg.OnDemand:
		return r, fmt.Errorf("%w: profiles on demand are off on this server (taskscope server --profiling)", ErrOff)
	case c.HostOff(a.Host):
		return r, fmt.Errorf("%w: profiles are off on node %s", ErrOff, a.Host)
	case !running(&a.Attempt):
		return r, fmt.Errorf("attempt %s is %s: %w", a.AttemptID, a.State, ErrNotRunning)
	}
	jvm := jvmOf(a)
	if jvm == nil {
		return r, fmt.Errorf("attempt %s: %w", a.AttemptID, ErrNotRunning)
	}
	if window <= 0 {
		window = c.cfg.Window
	}
	if interval <= 0 {
		interval = c.cfg.Interval
	}
	window, interval = min(window, MaxWindow), max(interval, MinInterval)
	// One waiting request per attempt, as the store says (what the
	// attempt's page lists, whichever server took it): not this server's
	// pending list, which learns of a profile that came, or of a request
	// another server took, only at its next poll.
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	ps, err := c.ps.Profiles(ctx, a.AttemptID)
	if err != nil {
		return r, fmt.Errorf("cannot read the profiles of attempt %s: %w", a.AttemptID, err)
	}
	for _, p := range ps {
		if p.Status == store.ProfileRequested {
			return r, fmt.Errorf("%w (%s)", ErrPending, p.ID)
		}
	}
	now := c.cfg.Now()
	r = store.ProfileRequest{ID: newID(now), AttemptID: a.AttemptID, Host: a.Host, PID: jvm.PID, Process: jvm.Key,
		StartMs: int64(jvm.Start), Trigger: store.TriggerRequest, RequestedBy: who, Requested: store.Time(now.UnixMilli()),
		WindowMs: window.Milliseconds(), IntervalMs: interval.Milliseconds()}
	return r, c.add(ctx, r)
}
