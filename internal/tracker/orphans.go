package tracker

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/nodemanager"
	orphanreaper "github.com/taskscope/taskscope/internal/reaper"
	"github.com/taskscope/taskscope/internal/wire"
)

// LostConfig configures the search for lost and runaway task processes on
// the node (every CheckEvery, from the tracker's tick):
//
//   - orphans: a unit whose launcher (the NodeManager's or TaskTracker's
//     child that started it) is gone, or whose topmost process was
//     reparented to init (wire.EventOrphan);
//   - Hadoop 1 Child JVMs beyond the TaskTracker's slots
//     (mapred.tasktracker.{map,reduce}.tasks.maximum in the mapred-site.xml
//     of its conf dir), and Child JVMs that never got their task within
//     LostAfter: "JVM Not killed ... but just removed" (wire.EventLostJVM);
//   - containers the NodeManager no longer lists (its REST API, at the web
//     address of the yarn-site.xml in its conf dir) (wire.EventUnknownContainer);
//   - processes that outlive their job: the framework removed their working
//     directory, or the NodeManager no longer lists their application
//     (wire.EventOutlived).
//
// With a Reaper, the processes of such units are handed to it.
type LostConfig struct {
	Enabled    bool
	CheckEvery time.Duration // default 2 s
	// LostAfter is how long a Hadoop 1 Child may live without having got a
	// task (it writes its first log.index when it does) before it counts as
	// lost (default 60 s).
	LostAfter time.Duration
	// NodeManager: where and how to reach its web services is read from
	// the conf dir of the NodeManager process found on the node; NMURL
	// overrides it ("" and NoNM false: find it). NMPoll is the polling
	// interval (default 10 s). NMClient speaks to it (HTTPS, SPNEGO;
	// nil: plain HTTP).
	NMURL    string
	NoNM     bool
	NMPoll   time.Duration
	NMClient *nodemanager.Client
	// Context, when set, stops the NodeManager pollers when it is done
	// (Tracker.Close stops them anyway).
	Context context.Context
	Reaper  Reaper
}

// lostChecker is the part of the tracker that looks for lost processes
// (LostConfig), every CheckEvery, as independent checks (each a method):
// findDaemons (the node's daemons, their conf dirs read once),
// checkReparented (orphans), checkChildSlots (Hadoop 1 Child JVMs beyond
// their TaskTracker's slots, or that never got their task),
// checkUnknownContainers (containers their NodeManager no longer lists),
// checkOutlived (working directory removed), then reap. Its state is
// what the checks found so far; what it sees of the process table is a
// lostView.
type lostChecker struct {
	cfg   *LostConfig
	view  lostView
	stats *Stats // NMPollErrors
	// The checks' findings.
	lastMs  int64
	daemons map[daemonID]*daemonConf
	nm      *nmPollers // nmpoll.go
	flagged map[*unit]*unitFlags
	excess  map[string]string // "<tt pid>/<type>" -> what was last reported
	// h1Index: some Child's log.index was found, so a Child without one
	// has really not got its task (and is not merely unreadable here).
	h1Index bool
	keys    []string // the units' keys, sorted: the checks report in this order
	tts     []daemonID
}

// lostView is what the lost checks need of the process table.
type lostView interface {
	// unitTable is the units tracked, by key.
	unitTable() map[string]*unit
	// procTable is every process known, by pid.
	procTable() map[int32]*proc
	// ownDaemon reports whether a daemon of the node is the scope's (all
	// are without a scope): its tasks are the tracker's.
	ownDaemon(pid int32) bool
	// readDaemonConf reads what a daemon's conf dir says (daemons.go).
	readDaemonConf(pid int32, kind hadoop.Kind) *daemonConf
	// cwd is the target of pid's cwd link.
	cwd(pid int32) (string, error)
}

type daemonID struct {
	pid   int32
	start uint64
}

// unitFlags are what the checks found about one unit.
type unitFlags struct {
	lost, unknown, outlived bool
	missing                 int    // NodeManager listings in a row without its container
	lastPoll                uint64 // the listing last looked at
	sinceMs                 int64  // when it was first found lost (any way)
}

func newLostChecker(cfg *LostConfig, view lostView, stats *Stats) *lostChecker {
	return &lostChecker{cfg: cfg, view: view, stats: stats, daemons: map[daemonID]*daemonConf{},
		flagged: map[*unit]*unitFlags{}, excess: map[string]string{}, nm: newNMPollers(cfg)}
}

// checkLost runs the lost checks (step 8 of a tick), when they are
// enabled.
func (t *Tracker) checkLost(ms int64) {
	if !t.cfg.Lost.Enabled {
		return
	}
	if t.lost == nil {
		t.lost = newLostChecker(&t.cfg.Lost, t, &t.stats)
	}
	t.lost.check(ms, t.sink)
}

// closeLost stops the NodeManager pollers.
func (t *Tracker) closeLost() {
	if t.lost != nil {
		t.lost.nm.stop()
	}
}

// flags are what the checks found of u so far.
func (ls *lostChecker) flags(u *unit) *unitFlags {
	f := ls.flagged[u]
	if f == nil {
		f = &unitFlags{}
		ls.flagged[u] = f
	}
	return f
}

// check runs the checks of LostConfig, at most every CheckEvery, and
// reports what they find to sink. They are independent: each reports what
// it finds on its own.
func (ls *lostChecker) check(ms int64, sink Sink) {
	c := ls.cfg
	every := c.CheckEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	if ls.lastMs != 0 && ms-ls.lastMs < every.Milliseconds() {
		return
	}
	ls.lastMs = ms
	units := ls.view.unitTable()
	for u := range ls.flagged {
		if units[u.key] != u {
			delete(ls.flagged, u)
		}
	}
	ls.keys = ls.keys[:0]
	for k := range units {
		ls.keys = append(ls.keys, k)
	}
	sort.Strings(ls.keys)
	ls.findDaemons()
	ls.checkReparented(ms, sink)
	ls.checkChildSlots(ms, sink)
	ls.checkUnknownContainers(ms, sink)
	ls.checkOutlived(ms, sink)
	ls.stats.NMPollErrors = ls.nm.errors()
	if c.Reaper != nil {
		ls.reap(ms, sink)
	}
}

// findDaemons finds the node's TaskTrackers and NodeManagers (the scope's
// only, with a Scope), reads their conf dirs once, and polls the
// NodeManagers.
func (ls *lostChecker) findDaemons() {
	ls.tts = ls.tts[:0]
	live := map[daemonID]bool{}
	procs := ls.view.procTable()
	for pid, p := range procs {
		if p.state != stDaemon || (p.kind != hadoop.KindTaskTracker && p.kind != hadoop.KindNodeManager) || !ls.view.ownDaemon(pid) {
			continue
		}
		id := daemonID{pid, p.startTicks}
		live[id] = true
		dc := ls.daemons[id]
		if dc == nil {
			dc = ls.view.readDaemonConf(pid, p.kind)
			ls.daemons[id] = dc
		}
		if p.kind == hadoop.KindTaskTracker {
			ls.tts = append(ls.tts, id)
		} else if !ls.cfg.NoNM {
			ls.nm.watch(pid, dc.endpoint)
		}
	}
	for id := range ls.daemons {
		if !live[id] {
			delete(ls.daemons, id)
		}
	}
	ls.nm.keep(func(pid int32) bool { p := procs[pid]; return p != nil && p.state == stDaemon })
}

// checkLauncher reports u orphaned (at any tick) when the process that
// launched it (its first process's parent: a NodeManager, a TaskTracker)
// is gone.
func (t *Tracker) checkLauncher(u *unit, ms int64) {
	if !u.orphaned && u.launcherPID > 1 && t.procs[u.launcherPID] == nil {
		u.orphaned = true
		t.sink.Event(&wire.Event{Ms: ms, Kind: wire.EventOrphan, AttemptID: u.cur.info.AttemptID,
			JobID: u.cur.info.JobID, PID: u.launcherPID, Message: "the process that launched this task is gone"})
	}
}

// checkReparented finds the orphans that the launcher check of sampleUnits
// cannot see: the launcher recorded is a member of the unit (the agent came
// after the unit's first process), so it looks at the topmost member's
// parent.
func (ls *lostChecker) checkReparented(ms int64, sink Sink) {
	units, procs := ls.view.unitTable(), ls.view.procTable()
	for _, k := range ls.keys {
		u := units[k]
		if u.orphaned || u.cur == nil {
			continue
		}
		top := topMember(u, procs)
		if top == nil {
			continue
		}
		if parent := procs[top.ppid]; top.ppid > 1 && parent.launches() {
			u.launcherPID = top.ppid
		} else if top.ppid == 1 && top.t != nil && (top.t.role == wire.RoleWrapper || top.t.role == wire.RoleTaskJVM) {
			u.orphaned = true
			sink.Event(&wire.Event{Ms: ms, Kind: wire.EventOrphan, AttemptID: u.cur.info.AttemptID, JobID: u.cur.info.JobID,
				PID: top.pid, Process: top.t.key, Message: fmt.Sprintf("%s (pid %d) was reparented to init: the process that launched this task is gone", top.t.comm, top.pid)})
		}
	}
}

// checkChildSlots counts Hadoop 1 Child JVMs per TaskTracker and type
// against its slots, and finds Children that never got their task.
func (ls *lostChecker) checkChildSlots(ms int64, sink Sink) {
	lostAfter := ls.cfg.LostAfter
	if lostAfter <= 0 {
		lostAfter = time.Minute
	}
	type child struct {
		u   *unit
		jvm *proc
	}
	byTT := map[string][]child{}
	units, procs := ls.view.unitTable(), ls.view.procTable()
	for _, k := range ls.keys {
		u := units[k]
		if u.jvmKind != hadoop.KindChild || u.cur == nil || u.orphaned {
			continue
		}
		jvm := procs[u.jvmPID]
		if jvm == nil || jvm.t == nil || jvm.t.unit != u {
			continue
		}
		a, ok := hadoop.ParseAttempt(u.key)
		if !ok {
			a, ok = hadoop.ParseAttempt(u.attemptID)
		}
		if !ok {
			continue
		}
		f := ls.flags(u)
		if u.h1 != nil && len(u.h1.known) > 0 {
			ls.h1Index = true
		}
		if !f.lost && ls.h1Index && u.h1 != nil && u.h1.scanned && len(u.h1.known) == 0 && ms-jvm.t.startMs >= lostAfter.Milliseconds() {
			f.lost = true
			if f.sinceMs == 0 {
				f.sinceMs = ms
			}
			sink.Event(&wire.Event{Ms: ms, Kind: wire.EventLostJVM, AttemptID: u.cur.info.AttemptID, JobID: u.cur.info.JobID,
				PID: jvm.pid, Process: jvm.t.key, Value: 1,
				Message: fmt.Sprintf("Child JVM pid %d has not got its task in %s (no log.index for %s): it hung before getTask; its TaskTracker no longer counts it",
					jvm.pid, time.Duration(ms-jvm.t.startMs)*time.Millisecond/time.Second*time.Second, u.key)})
		}
		key := strconv.Itoa(int(u.launcherPID)) + "/" + a.Type
		byTT[key] = append(byTT[key], child{u, jvm})
	}
	for _, tt := range ls.tts {
		dc := ls.daemons[tt]
		for _, typ := range []string{"map", "reduce"} {
			key := strconv.Itoa(int(tt.pid)) + "/" + typ
			slots := dc.mapSlots
			if typ == "reduce" {
				slots = dc.reduceSlot
			}
			cs := byTT[key]
			if slots <= 0 || int64(len(cs)) <= slots {
				delete(ls.excess, key)
				continue
			}
			// The likeliest lost first: those found lost, then those that have
			// not got a task (no log.index yet), the oldest first.
			sort.Slice(cs, func(i, j int) bool {
				li, lj := ls.flags(cs[i].u).lost, ls.flags(cs[j].u).lost
				if li != lj {
					return li
				}
				ti, tj := cs[i].u.h1 != nil && len(cs[i].u.h1.known) > 0, cs[j].u.h1 != nil && len(cs[j].u.h1.known) > 0
				if ti != tj {
					return tj
				}
				return cs[i].jvm.startTicks < cs[j].jvm.startTicks
			})
			excess := int64(len(cs)) - slots
			var pids []string
			for _, c := range cs[:excess] {
				pids = append(pids, strconv.Itoa(int(c.jvm.pid)))
			}
			what := fmt.Sprintf("%d %s Child JVMs under TaskTracker pid %d, which has %d %s slots: %d more than it counts (likely lost: pids %s)",
				len(cs), typ, tt.pid, slots, typ, excess, strings.Join(pids, ","))
			if ls.excess[key] == what {
				continue
			}
			ls.excess[key] = what
			first := cs[0]
			sink.Event(&wire.Event{Ms: ms, Kind: wire.EventLostJVM, AttemptID: first.u.cur.info.AttemptID, JobID: first.u.cur.info.JobID,
				PID: first.jvm.pid, Process: first.jvm.t.key, Value: excess, Message: what})
		}
	}
}

// checkUnknownContainers finds the containers their NodeManager no longer
// lists. A container counts as unknown when three listings in a row, each
// begun after it started, lack it while its processes live on (a
// container that ends leaves the list as its launcher exits, and its
// processes with it).
func (ls *lostChecker) checkUnknownContainers(ms int64, sink Sink) {
	units, procs := ls.view.unitTable(), ls.view.procTable()
	for _, k := range ls.keys {
		u := units[k]
		if u.containerID == "" || u.cur == nil {
			continue
		}
		var last *nodemanager.Listing
		if l := ls.nm.forLauncher(u.launcherPID); l != nil {
			last, _ = l.Latest()
		}
		f := ls.flags(u)
		if last == nil || last.Polls == f.lastPoll || f.unknown || f.outlived {
			continue
		}
		f.lastPoll = last.Polls
		first := u.cur.info.FirstMs
		if _, listed := last.Containers[u.containerID]; listed || first <= 0 || first >= last.At.UnixMilli() {
			f.missing = 0
		} else {
			f.missing++
		}
		if f.missing < 3 {
			continue
		}
		appGone := false
		if last.Apps != nil && u.appID != "" {
			_, ok := last.Apps[u.appID]
			appGone = !ok
		}
		kind, msg := wire.EventUnknownContainer, "the NodeManager ("+last.URL+") no longer lists container "+u.containerID
		if appGone {
			kind, msg = wire.EventOutlived, "the NodeManager ("+last.URL+") no longer lists application "+u.appID+" nor its container "+u.containerID+": the task outlived its job"
			f.outlived = true
		} else {
			f.unknown = true
		}
		if f.sinceMs == 0 {
			f.sinceMs = ms
		}
		top := topMember(u, procs)
		ev := &wire.Event{Ms: ms, Kind: kind, AttemptID: u.cur.info.AttemptID, JobID: u.cur.info.JobID, Message: msg}
		if top != nil {
			ev.PID, ev.Process = top.pid, top.t.key
		}
		sink.Event(ev)
	}
}

// checkOutlived finds processes that outlive their job: the framework
// removed their working directory (the TaskTracker purges jobcache/<job>
// when the job is done; the NodeManager deletes the container's
// directory).
func (ls *lostChecker) checkOutlived(ms int64, sink Sink) {
	units, procs := ls.view.unitTable(), ls.view.procTable()
	for _, k := range ls.keys {
		u := units[k]
		if u.cur == nil {
			continue
		}
		f := ls.flags(u)
		if f.outlived {
			continue
		}
		p := procs[u.jvmPID]
		if p == nil || p.t == nil || p.t.unit != u {
			p = topMember(u, procs)
		}
		if p == nil || p.t == nil {
			continue
		}
		cwd, err := ls.view.cwd(p.pid)
		if err != nil || !strings.HasSuffix(cwd, " (deleted)") {
			continue
		}
		f.outlived = true
		if f.sinceMs == 0 {
			f.sinceMs = ms
		}
		sink.Event(&wire.Event{Ms: ms, Kind: wire.EventOutlived, AttemptID: u.cur.info.AttemptID, JobID: u.cur.info.JobID,
			PID: p.pid, Process: p.t.key, Message: fmt.Sprintf("the working directory of pid %d was removed (%s): the task outlived its job", p.pid, cwd)})
	}
}

// topMember is the unit's member whose parent is not a member (the oldest
// if there are several).
func topMember(u *unit, procs map[int32]*proc) *proc {
	var top *proc
	for _, m := range u.members {
		if m.t == nil || m.t.vanished {
			continue
		}
		if par := procs[m.ppid]; par != nil && par.t != nil && par.t.unit == u {
			continue
		}
		if top == nil || m.startTicks < top.startTicks {
			top = m
		}
	}
	return top
}

// reap hands the members of every lost unit to the reaper. A process group
// is signalled whole only when every process in it belongs to lost units.
func (ls *lostChecker) reap(ms int64, sink Sink) {
	lostUnit := func(u *unit) (string, bool) {
		f := ls.flagged[u]
		switch {
		case f != nil && f.outlived:
			return wire.EventOutlived, true
		case f != nil && f.unknown:
			return wire.EventUnknownContainer, true
		case f != nil && f.lost:
			return wire.EventLostJVM, true
		case u.orphaned:
			return wire.EventOrphan, true
		}
		return "", false
	}
	groupOK := map[int32]bool{}
	for _, p := range ls.view.procTable() {
		if p.pgrp <= 1 {
			continue
		}
		ok, seen := groupOK[p.pgrp]
		if seen && !ok {
			continue
		}
		lost := false
		if p.t != nil {
			_, lost = lostUnit(p.t.unit)
		}
		groupOK[p.pgrp] = lost
	}
	var targets []orphanreaper.Target
	for _, u := range ls.view.unitTable() {
		why, ok := lostUnit(u)
		if !ok || u.cur == nil {
			continue
		}
		for _, m := range u.members {
			if m.t == nil || m.t.vanished || m.state == stDaemon {
				continue
			}
			tg := orphanreaper.Target{PID: m.pid, StartTicks: m.startTicks, Reason: why, AttemptID: u.cur.info.AttemptID,
				JobID: u.cur.info.JobID, Key: m.t.key}
			if groupOK[m.pgrp] {
				tg.Group = m.pgrp
			}
			targets = append(targets, tg)
		}
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].PID < targets[j].PID })
	for _, ev := range ls.cfg.Reaper.Update(time.UnixMilli(ms), targets) {
		sink.Event(&ev)
	}
}

// nodeManagers are the NodeManagers the lost checks poll (nmpoll.go).
func (t *Tracker) nodeManagers() []ContainerLister {
	if t.lost == nil {
		return nil
	}
	return t.lost.nm.all()
}

// unitTable is the units tracked, by key (lostView).
func (t *Tracker) unitTable() map[string]*unit { return t.attr.units }

// ownDaemon reports whether a daemon of the node is the scope's (lostView).
func (t *Tracker) ownDaemon(pid int32) bool { return t.attr.ownDaemon(pid) }

// readDaemonConf reads what a daemon's conf dir says (lostView).
func (t *Tracker) readDaemonConf(pid int32, kind hadoop.Kind) *daemonConf {
	return t.attr.readDaemonConf(pid, kind)
}

// procTable is every process known, by pid (lostView).
func (t *Tracker) procTable() map[int32]*proc { return t.procs }

// cwd is the target of pid's cwd link (lostView).
func (t *Tracker) cwd(pid int32) (string, error) { return t.cfg.FS.Readlink(pid, "cwd") }
