package profiling

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// Automatic profiles: when the analysis names a running attempt a
// straggler or an outlier, its JVM is profiled, and a healthy sibling's
// (an attempt of the same job and task type that runs too, and that the
// analysis did not name) over the same window: the differential between
// them shows what the slow one does more. Within bounds: one automatic
// profile at a time per node (a straggler and its sibling on the same node
// are one session, dumped in turn), AutoPerHour per node, an attempt not
// again within autoAgain.

// Named is what the analysis of a running job named: the attempts of its
// straggler and outlier findings, worst first.
type Named struct {
	JobID    string
	Attempts []string
}

// Auto asks for the profiles of the named attempts that run, each with a
// sibling, within the bounds, and returns the requests it made.
func (c *Control) Auto(ctx context.Context, n Named) ([]store.ProfileRequest, error) {
	if !c.cfg.Auto || len(n.Attempts) == 0 {
		return nil, nil
	}
	job, err := c.st.Job(ctx, n.JobID)
	if err != nil {
		return nil, fmt.Errorf("cannot read job %s for its automatic profiles: %w", n.JobID, err)
	}
	named := map[string]bool{}
	for _, id := range n.Attempts {
		named[id] = true
	}
	var made []store.ProfileRequest
	for _, id := range n.Attempts {
		a := attemptIn(job, id)
		if a == nil || !running(a) || !c.free(a.Host, a.AttemptID) {
			continue
		}
		det, err := c.st.Attempt(ctx, id)
		if err != nil {
			return made, fmt.Errorf("cannot read attempt %s for its profile: %w", id, err)
		}
		jvm := jvmOf(det)
		if jvm == nil || !running(&det.Attempt) {
			continue
		}
		sib, sibJVM, err := c.sibling(ctx, job, a, named)
		if err != nil {
			return made, err
		}
		now := c.cfg.Now()
		window := min(c.cfg.AutoWindow, MaxWindow)
		r := store.ProfileRequest{ID: newID(now), AttemptID: id, Host: a.Host, PID: jvm.PID, Process: jvm.Key, StartMs: int64(jvm.Start),
			Trigger: store.TriggerStraggler, Requested: store.Time(now.UnixMilli()), WindowMs: window.Milliseconds(),
			IntervalMs: c.cfg.Interval.Milliseconds()}
		var s store.ProfileRequest
		if sib != nil {
			s = r
			s.ID, s.AttemptID, s.Host, s.PID, s.Process, s.StartMs, s.Trigger = newID(now), sib.AttemptID, sib.Host, sibJVM.PID,
				sibJVM.Key, int64(sibJVM.Start), store.TriggerSibling
			r.Baseline, r.BaselineAttempt = s.ID, s.AttemptID
			// The sibling first: its straggler's order groups with it.
			if err := c.add(ctx, s); err != nil {
				return made, err
			}
			made = append(made, s)
		}
		if err := c.add(ctx, r); err != nil {
			return made, err
		}
		made = append(made, r)
		hosts := []string{r.Host}
		if s.Host != "" && s.Host != r.Host {
			hosts = append(hosts, s.Host)
		}
		c.mu.Lock()
		for _, h := range hosts {
			c.busy[h] = now.Add(window)
			c.auto[h] = append(c.auto[h], now)
		}
		c.autoAtt[r.AttemptID] = now
		if s.AttemptID != "" {
			c.autoAtt[s.AttemptID] = now
		}
		c.mu.Unlock()
	}
	return made, nil
}

func attemptIn(j *store.JobDetail, id string) *store.Attempt {
	for i := range j.AttemptList {
		if j.AttemptList[i].AttemptID == id {
			return &j.AttemptList[i]
		}
	}
	return nil
}

// free reports whether host may start an automatic profile now, of
// attempt (""; any): not off, none under way, not its hour's share yet,
// and the attempt not profiled on its own lately.
func (c *Control) free(host, attempt string) bool {
	if c.HostOff(host) {
		return false
	}
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if attempt != "" && now.Sub(c.autoAtt[attempt]) < autoAgain {
		return false
	}
	if c.busy[host].After(now) {
		return false
	}
	starts := c.auto[host][:0]
	for _, t := range c.auto[host] {
		if now.Sub(t) < time.Hour {
			starts = append(starts, t)
		}
	}
	c.auto[host] = starts
	return len(starts) < c.cfg.AutoPerHour
}

// sibling picks a healthy sibling of a: an attempt of the same task type
// that runs, that the analysis did not name, with a live JVM; on another
// node that is free first, else on a's own node (one session with a); of
// those, the one that started last (siblings take about as long: it has
// the most of the window left to run). nil if there is none.
func (c *Control) sibling(ctx context.Context, j *store.JobDetail, a *store.Attempt, named map[string]bool) (*store.Attempt, *store.Process, error) {
	var other, same []*store.Attempt
	for i := range j.AttemptList {
		s := &j.AttemptList[i]
		if s.AttemptID == a.AttemptID || s.Type != a.Type || named[s.AttemptID] || !running(s) {
			continue
		}
		switch {
		case s.Host == a.Host:
			same = append(same, s)
		case c.free(s.Host, ""):
			other = append(other, s)
		}
	}
	latest := func(x, y *store.Attempt) int { return cmp.Compare(y.Start, x.Start) }
	slices.SortStableFunc(other, latest)
	slices.SortStableFunc(same, latest)
	for _, s := range append(other, same...) {
		det, err := c.st.Attempt(ctx, s.AttemptID)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read attempt %s for a sibling's profile: %w", s.AttemptID, err)
		}
		if jvm := jvmOf(det); jvm != nil && running(&det.Attempt) {
			return s, jvm, nil
		}
	}
	return nil, nil, nil
}
