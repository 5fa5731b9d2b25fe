package tracker

import (
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/wire"
)

// The lost checks on a fake process table: a unit whose top process was
// reparented to init is an orphan, one whose JVM's working directory was
// removed outlived its job, Child JVMs beyond their TaskTracker's slots
// are counted (the likeliest lost named), and the reaper is handed every
// process of a lost unit, by process group where the whole group is lost.
func TestLostChecks(t *testing.T) {
	tab := newFakeTable()
	nm := tab.fakeProc(fxNMPID, 1, 10)
	nm.state, nm.kind = stDaemon, hadoop.KindNodeManager
	tt := tab.fakeProc(fxTTPID, 1, 11)
	tt.state, tt.kind = stDaemon, hadoop.KindTaskTracker
	tab.daemons[fxTTPID] = &daemonConf{kind: hadoop.KindTaskTracker, mapSlots: 1, reduceSlot: 1}
	tab.daemons[fxNMPID] = &daemonConf{kind: hadoop.KindNodeManager}

	// An orphan: its wrapper reparented to init, its JVM in its group.
	orphan, _ := tab.fakeUnit(fxContainer(2), fxAttempt("m", 2, 0))
	w := tab.fakeMember(orphan, 2000, 1, 100, 0, 0)
	w.t.role = wire.RoleWrapper
	j := tab.fakeMember(orphan, 2001, 2000, 101, 0, 0)
	j.pgrp = 2000
	// Outlived: its JVM's working directory removed; a process of another
	// unit shares its group.
	gone, _ := tab.fakeUnit(fxContainer(3), fxAttempt("m", 3, 0))
	g := tab.fakeMember(gone, 3000, fxNMPID, 110, 0, 0)
	gone.launcherPID, gone.jvmPID = fxNMPID, 3000
	tab.cwds[3000] = "/data/1/yarn/local/usercache/u/appcache/" + fxApp + "/" + fxContainer(3) + " (deleted)"
	// A running container.
	ok, _ := tab.fakeUnit(fxContainer(4), fxAttempt("m", 4, 0))
	o := tab.fakeMember(ok, 4000, fxNMPID, 120, 0, 0)
	o.pgrp = g.pgrp
	tab.cwds[4000] = "/data/1/yarn/local/usercache/u/appcache/" + fxApp + "/" + fxContainer(4)
	// Hadoop 1: two map Child JVMs under a TaskTracker of one map slot.
	for i, pid := range []int32{5000, 5100} {
		id := fxAttempt("m", 10+i, 0)
		u, _ := tab.fakeUnit(id, id)
		u.containerID = ""
		u.jvmKind, u.jvmPID, u.launcherPID = hadoop.KindChild, pid, fxTTPID
		tab.fakeMember(u, pid, fxTTPID, 130+uint64(i), 0, 0)
	}

	reaper := &fakeReaper{}
	cfg := LostConfig{Enabled: true, NoNM: true, Reaper: reaper}
	st := &Stats{}
	ls := newLostChecker(&cfg, tab, st)
	defer ls.nm.stop()
	sink := newRecSink()
	ls.check(10_000, sink)

	kinds := map[string]string{}
	for _, e := range sink.events {
		kinds[e.AttemptID] += e.Kind + " "
		if e.Kind == wire.EventLostJVM && !strings.Contains(e.Message, "2 map Child JVMs under TaskTracker pid 200, which has 1 map slots") {
			t.Errorf("the slots' event: %s", e.Message)
		}
	}
	want := map[string]string{fxAttempt("m", 2, 0): wire.EventOrphan + " ", fxAttempt("m", 3, 0): wire.EventOutlived + " ",
		fxAttempt("m", 10, 0): wire.EventLostJVM + " "}
	if len(kinds) != len(want) {
		t.Errorf("events: %v, want %v", kinds, want)
	}
	for a, k := range want {
		if kinds[a] != k {
			t.Errorf("%s: events %q, want %q", a, kinds[a], k)
		}
	}
	got := map[int32]int32{}
	for _, tg := range reaper.targets {
		got[tg.PID] = tg.Group
	}
	if len(got) != 3 || got[2000] != 2000 || got[2001] != 2000 || got[3000] != 0 {
		t.Errorf("reaper targets (pid: group): %v", got)
	}
	// Checked at most every CheckEvery: nothing new within it, each
	// finding reported once.
	n := len(sink.events)
	ls.check(10_500, sink)
	ls.check(10_000+(3*time.Second).Milliseconds(), sink)
	if len(sink.events) != n {
		t.Errorf("reported again: %v", sink.events[n:])
	}
}
