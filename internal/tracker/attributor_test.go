package tracker

import (
	"testing"

	"github.com/taskscope/taskscope/internal/cgroups"
	"github.com/taskscope/taskscope/internal/wire"
)

// The attributor on a fake process table (the processes' own files from a
// fixture tree): a container's wrappers and JVM make its unit and learn
// its attempt; a child of a member is the Streaming process when it has
// the job's configuration in its environment; a process reparented to
// init joins its session leader's unit; an escapee joins the unit its
// environment names; a process between fork and exec joins its parent's
// unit and is looked at again; a NodeManager's fork that still shows its
// command line is looked at again, up to maxForkLooks times.
func TestAttributor(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2000, c2, yarnChild(c2, m0))
	f.add(fproc{pid: 2003, ppid: 2002, sid: 2001, argv: []string{"python3", "mapper.py"}, env: streamingEnv(c2, m0)})
	f.add(fproc{pid: 2004, ppid: 1, sid: 2001, argv: []string{"sort", "-k1"}})
	f.add(fproc{pid: 2005, ppid: 1, sid: 2005, argv: []string{"sleep", "60"}, env: []string{"CONTAINER_ID=" + c2}})
	f.add(fproc{pid: 2006, ppid: 2003, sid: 2001, cmdline: []byte{}})
	f.add(fproc{pid: 3000, ppid: fxNMPID, sid: fxNMPID, argv: f.procs[fxNMPID].argv})

	tab := newFakeTable()
	for _, fp := range f.procs {
		p := tab.fakeProc(fp.pid, fp.ppid, fp.start)
		p.sid, p.pgrp = fp.sid, fp.pgrp
	}
	st := &Stats{}
	a := newAttributor(&f.fs, tab, &readErrors{stats: st, bySource: map[string]uint64{}}, st, &Scope{}, cgroups.NewHierarchies("hadoop-yarn"))
	var procs []*proc
	for _, p := range tab.procs {
		procs = append(procs, p)
	}
	a.classifyAll(tab.cycle, procs)

	u := a.units[c2]
	if u == nil || u.attemptID != m0 || u.jvmPID != 2002 || u.launcherPID != fxNMPID {
		t.Fatalf("the container's unit: %+v", u)
	}
	roles := map[int32]string{}
	for _, p := range u.members {
		roles[p.pid] = p.t.role
	}
	want := map[int32]string{2000: wire.RoleWrapper, 2001: wire.RoleWrapper, 2002: wire.RoleTaskJVM, 2003: wire.RoleStreaming,
		2004: wire.RoleChild, 2005: wire.RoleChild, 2006: wire.RoleStreamingChild}
	for pid, r := range want {
		if roles[pid] != r {
			t.Errorf("pid %d: role %q, want %q (members %v)", pid, roles[pid], r, roles)
		}
	}
	if len(roles) != len(want) || st.Attributed != uint64(len(want)) || st.New != uint64(len(procs)) {
		t.Errorf("members %v; %d attributed, %d new", roles, st.Attributed, st.New)
	}
	if p := tab.procs[2006]; !p.t.preExec || p.t.recheckAt != tab.cycle+1 {
		t.Errorf("the process between fork and exec: %+v", p.t)
	}
	if p := tab.procs[fxNMPID]; p.state != stDaemon {
		t.Error("the NodeManager is not known as a daemon")
	}
	fork := tab.procs[3000]
	if fork.state == stDaemon || !fork.fork || len(a.again) != 1 || a.again[0] != fork {
		t.Fatalf("the NodeManager's fork: %+v, again %v", fork, a.again)
	}
	// Looked at again each tick while it shows its daemon's command line.
	for i := 1; i < maxForkLooks+5; i++ {
		tab.next(3000)
		a.classifyAll(tab.cycle, nil)
	}
	if fork.looks != maxForkLooks || len(a.again) != 0 || fork.t != nil {
		t.Errorf("after %d ticks: %d looks, %d queued", maxForkLooks+5, fork.looks, len(a.again))
	}
	if job, ok := a.jobOf(u); !ok || job != fxJob {
		t.Errorf("the unit's job: %q %v", job, ok)
	}
}
