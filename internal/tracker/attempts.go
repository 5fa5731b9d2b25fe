package tracker

import (
	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/wire"
)

// sampleUnits samples every member of every unit, settles which attempt
// each unit runs, and reports samples and attempt sums (steps 5 and 6 of
// a tick).
func (t *Tracker) sampleUnits(ms int64) {
	tracked := 0
	for key, u := range t.attr.units {
		n, live := t.sampleUnit(u, ms)
		tracked += n
		if !live {
			t.endUnit(u, ms)
			delete(t.attr.units, key)
		}
	}
	t.stats.Tracked = tracked
	t.stats.Units = len(t.attr.units)
	if t.cycle%64 == 0 {
		t.forgetApps()
	}
}

// sampleUnit samples u's members and reports them and its attempt's sums.
// It returns how many processes it reported, and false when u has no
// process left (every member exited).
func (t *Tracker) sampleUnit(u *unit, ms int64) (int, bool) {
	if len(u.members) == 0 {
		return 0, false
	}
	for _, p := range u.members {
		t.sampleProc(p)
	}
	tracked := 0
	if u.cur == nil {
		if _, ok := t.attr.jobOf(u); !ok && t.cycle-u.bornCycle < undecidedTicks {
			// No attempt until its job is known (jobOf): its
			// processes' samples go out, their memberships start
			// with its first attempt, from their starts.
			for _, p := range u.members {
				if !p.t.vanished {
					t.sink.ProcessSample(p.t.key, ms, p.t.vals, p.t.present)
					tracked++
				}
			}
			return tracked, true
		}
	}
	u.poll(t.cfg.FS)
	if want := u.wantAttempt(); u.cur == nil || u.cur.info.AttemptID != want {
		t.switchAttempt(u, want, ms)
	} else if a := u.cur; a.confRetryAt != 0 && t.cycle >= a.confRetryAt {
		t.retryConf(u, a)
	}
	t.allocation(u)
	t.checkLauncher(u, ms) // orphans.go
	zombies := false
	for _, p := range u.members {
		tr := p.t
		if tr.mem == nil {
			t.acct.join(p, u.cur, false, ms, t.sink)
		}
		if !tr.vanished {
			t.sink.ProcessSample(tr.key, ms, tr.vals, tr.present)
			tracked++
		}
		zombies = zombies || tr.exited
	}
	if zombies && t.endZombies(u, ms) {
		return tracked, false
	}
	t.acct.attemptSample(u.cur, ms, t.sink)
	u.cur.info.LastMs = ms
	return tracked, true
}

// forgetApps forgets the frameworks of applications no unit runs any more.
func (t *Tracker) forgetApps() {
	live := make(map[string]bool, len(t.attr.units))
	for _, u := range t.attr.units {
		live[u.app()] = true
	}
	for app := range t.attr.apps {
		if !live[app] {
			delete(t.attr.apps, app)
		}
	}
}

// switchAttempt ends the unit's current attempt, if any, and starts want.
func (t *Tracker) switchAttempt(u *unit, want string, ms int64) {
	old := u.cur
	// Only the processes counted in old move on from now; one first seen
	// in this tick (a container's JVM that began its attempt before the
	// agent's first look at it) counts in want from its start.
	var carried []*proc
	if old != nil && old.confRetryAt != 0 {
		// What its container's configuration says, read once more before
		// it ends: a Tez container's first attempt (the container, until
		// its JVM runs a task) may have been read before its launch
		// script linked tez-conf.pb, and end within a tick.
		t.retryConf(u, old)
	}
	if old != nil {
		t.acct.attemptSample(old, ms, t.sink)
		for _, p := range u.members {
			if p.t.mem != nil && p.t.mem.att == old {
				t.acct.leave(p, nil, 0, ms, t.sink)
				carried = append(carried, p)
			}
		}
		t.ends.switched(u, old, ms)
		t.finishAttempt(old, ms, wire.EventAttemptSwitch)
	}
	a := &attempt{unit: u, cleanup: u.cleanup}
	a.info = wire.Attempt{
		AttemptID: want, AppID: u.appID, ContainerID: u.containerID,
		Type: u.attemptType(want), Framework: u.framework, FirstMs: ms, LastMs: ms,
	}
	a.info.JobID, _ = t.attr.jobOf(u)
	if at, ok := hadoop.ParseAttempt(want); ok {
		a.info.JobID = at.JobID()
		if at.Tez && u.appID == "" {
			a.info.AppID = at.JobID()
		}
	}
	if old == nil {
		// The unit's first attempt began when its first process did.
		for _, p := range u.members {
			if s := p.t.startMs; s > 0 && s < a.info.FirstMs {
				a.info.FirstMs = s
			}
		}
	}
	a.confTries = 1
	if !t.desc.describe(u, &a.info) {
		a.confRetryAt = t.cycle + 1
	}
	u.cur = a
	t.sink.Attempt(&a.info)
	t.sink.Event(&wire.Event{Ms: ms, Kind: wire.EventAttemptStart, AttemptID: want, JobID: a.info.JobID})
	for _, p := range carried {
		t.acct.join(p, a, true, ms, t.sink)
	}
}

func (t *Tracker) finishAttempt(a *attempt, ms int64, kind string) {
	a.info.Ended = true
	a.info.LastMs = ms
	t.sink.Attempt(&a.info)
	t.sink.Event(&wire.Event{Ms: ms, Kind: kind, AttemptID: a.info.AttemptID, JobID: a.info.JobID, Value: a.exitedCPU})
}

// endUnit is called when the unit's last process has exited.
func (t *Tracker) endUnit(u *unit, ms int64) {
	if u.cur == nil {
		t.ends.release(u) // (one that never ran an attempt)
		return
	}
	t.acct.attemptSample(u.cur, ms, t.sink)
	t.ends.ended(u, ms)
	t.finishAttempt(u.cur, ms, wire.EventAttemptEnd)
}
