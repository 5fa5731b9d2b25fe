package tracker

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

// Tick-sequence tests: a fixture tree changed between ticks, as a node's
// /proc changes.

func endedProcesses(s *recSink) map[int32]wire.Process {
	out := map[int32]wire.Process{}
	for _, p := range s.procs {
		if p.EndMs != 0 {
			out[p.PID] = p
		}
	}
	return out
}

func hasEvent(s *recSink, kind, attempt string) bool {
	for _, e := range s.events {
		if e.Kind == kind && (attempt == "" || e.AttemptID == attempt) {
			return true
		}
	}
	return false
}

func TestTickPidReuse(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"/usr/bin/python3", "mapper.py"}, env: streamingEnv(c2, m0), start: 95_000})
	r := f.tracker(false)
	r.tick()
	_, before, ok := viewOf(r.tr, 2010)
	if !ok || before.Role != wire.RoleStreaming {
		t.Fatalf("pid 2010 before: %+v, %v", before, ok)
	}
	// The mapper exits and its pid is taken by an unrelated process: a new
	// start time and a new /proc inode.
	f.reuse(fproc{pid: 2010, ppid: 50, argv: []string{"/usr/sbin/sshd", "-R"}, start: 95_500})
	r.tick()
	if _, p, ok := viewOf(r.tr, 2010); ok {
		t.Errorf("the new process at pid 2010 is tracked: %+v", p)
	}
	if e, ok := endedProcesses(r.sink)[2010]; !ok || e.Key != before.Key {
		t.Errorf("the mapper's exit was not reported: %+v", e)
	}
	// And the other way: a task process takes a pid an unrelated one had.
	f.reuse(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"sort"}, env: streamingEnv(c2, m0), start: 96_000})
	r.tick()
	if a, p, ok := viewOf(r.tr, 2010); !ok || a.AttemptID != m0 || p.Role != wire.RoleStreaming || p.Key == before.Key {
		t.Errorf("the new task process at pid 2010: %+v in %s, %v", p, a.AttemptID, ok)
	}
	// Same pid, same inode, but a new start time (the inode was reused too):
	// still a new process.
	f.set(2010, func(p *fproc) {
		p.start = 97_000
		p.argv = []string{"/usr/bin/awk"}
		p.ppid = 1
		p.sid = 1
		p.env = nil
	})
	r.tick()
	r.tick()
	if _, p, ok := viewOf(r.tr, 2010); ok {
		t.Errorf("the process at pid 2010 with a new start time is tracked: %+v", p)
	}
	golden(t, "tick-pid-reuse", r.log.String())
}

func TestTickExitAndAttemptEnd(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	r := f.tracker(false)
	r.tick()
	f.remove(2003)
	r.tick()
	if _, ok := endedProcesses(r.sink)[2003]; !ok {
		t.Error("the JVM's exit was not reported")
	}
	if hasEvent(r.sink, wire.EventAttemptEnd, m0) {
		t.Error("the attempt ended while its wrappers live")
	}
	f.remove(2002, 2001)
	r.tick()
	if !hasEvent(r.sink, wire.EventAttemptEnd, m0) {
		t.Error("no attempt_end when the container's last process exited")
	}
	if a := r.sink.attempts[m0]; !a.Ended {
		t.Errorf("attempt record not ended: %+v", a)
	}
	if st := r.tr.Stats(); st.Tracked != 0 || st.Units != 0 || st.Exited != 3 {
		t.Errorf("stats after the container: %+v", st)
	}
	golden(t, "tick-exit", r.log.String())
}

func TestTickReparenting(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"/bin/sh", "-c", "sleep 100 &"}})
	f.add(fproc{pid: 2011, ppid: 2010, sid: 2002, argv: []string{"sleep", "100"}})
	r := f.tracker(false)
	r.tick()
	// The shell exits; its child is reparented to init, in the same session.
	f.remove(2010)
	f.set(2011, func(p *fproc) { p.ppid = 1 })
	r.tick()
	if a, p, ok := viewOf(r.tr, 2011); !ok || a.AttemptID != m0 || p.PPID != 1 {
		t.Errorf("the reparented child: %+v in %q, tracked %v", p, a.AttemptID, ok)
	}
	// A process that appears already reparented (its parent exited within
	// one tick) joins by its session.
	f.add(fproc{pid: 2012, ppid: 1, sid: 2002, argv: []string{"sleep", "200"}})
	r.tick()
	if a, _, ok := viewOf(r.tr, 2012); !ok || a.AttemptID != m0 {
		t.Errorf("the process reparented before it was seen: in %q, tracked %v", a.AttemptID, ok)
	}
	// The NodeManager dies: the container's launcher is gone.
	f.remove(fxNMPID)
	f.set(2001, func(p *fproc) { p.ppid = 1 })
	r.tick()
	if !hasEvent(r.sink, wire.EventOrphan, m0) {
		t.Error("no orphan event when the launcher died")
	}
	golden(t, "tick-reparenting", r.log.String())
}

// A process seen between fork and exec: with an empty command line, or with
// its parent's (a daemon's or a task JVM's), it becomes what it exec'd at
// the next tick.
func TestTickForkBeforeExec(t *testing.T) {
	c2, c3, m0, m1 := fxContainer(2), fxContainer(3), fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	// The NodeManager's fork, still the NodeManager.
	f.add(fproc{pid: 2101, ppid: fxNMPID, sid: fxNMPID, argv: f.procs[fxNMPID].argv})
	// Another with nothing in its command line yet.
	f.add(fproc{pid: 2201, ppid: fxNMPID, sid: fxNMPID, cmdline: []byte{}, comm: "java"})
	// The task JVM's fork for a Streaming process, still the JVM.
	f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: f.procs[2003].argv, env: f.procs[2003].env})
	// And one with an empty command line.
	f.add(fproc{pid: 2011, ppid: 2003, sid: 2002, cmdline: []byte{}, comm: "java"})
	// And one through ProcessBuilder's jspawnhelper (JDK 13 on), with the
	// JVM's environment until it execs the mapper.
	f.add(fproc{pid: 2012, ppid: 2003, sid: 2002, argv: []string{"/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper", "11:12:13"},
		env: f.procs[2003].env})
	r := f.tracker(false)
	r.tick()
	if _, _, ok := viewOf(r.tr, 2101); ok {
		t.Error("the NodeManager's fork is tracked")
	}
	for _, pid := range []int32{2010, 2011, 2012} {
		if a, p, ok := viewOf(r.tr, pid); !ok || a.AttemptID != m0 || p.Role == wire.RoleTaskJVM {
			t.Errorf("the JVM's fork %d: %+v in %q, %v", pid, p, a.AttemptID, ok)
		}
	}
	work, _ := yarnPaths(c3)
	f.exec(2101, "bash", work+"/default_container_executor.sh")
	f.set(2101, func(p *fproc) { p.env = []string{"CONTAINER_ID=" + c3} })
	f.exec(2201, "/usr/bin/df", "-k")
	f.exec(2010, "/usr/bin/python3", "mapper.py")
	f.set(2010, func(p *fproc) { p.env = streamingEnv(c2, m0) })
	f.exec(2011, "/bin/sh", "-c", "true")
	f.exec(2012, "/bin/sh", "mapper.sh")
	f.set(2012, func(p *fproc) { p.env = streamingEnv(c2, m0) })
	r.tick()
	f.add(fproc{pid: 2102, ppid: 2101, argv: []string{"/bin/bash", "-c", strings.Join(yarnChild(c3, m1), " ")}})
	f.add(fproc{pid: 2103, ppid: 2102, argv: yarnChild(c3, m1)})
	r.tick()
	if a, _, ok := viewOf(r.tr, 2101); !ok || a.AttemptID != m1 {
		t.Errorf("the NodeManager's fork, exec'd: in %q, tracked %v", a.AttemptID, ok)
	}
	if _, _, ok := viewOf(r.tr, 2201); ok {
		t.Error("the NodeManager's df is tracked")
	}
	if _, p, _ := viewOf(r.tr, 2010); p.Role != wire.RoleStreaming {
		t.Errorf("the JVM's fork, exec'd to the mapper: role %q", p.Role)
	}
	if _, p, _ := viewOf(r.tr, 2012); p.Role != wire.RoleStreaming {
		t.Errorf("the JVM's fork through jspawnhelper, exec'd to the mapper: role %q", p.Role)
	}
	if _, p, _ := viewOf(r.tr, 2011); p.Role != wire.RoleChild {
		t.Errorf("the JVM's other fork: role %q", p.Role)
	}
	if u := r.tr.attr.units[c2]; u.jvmPID != 2003 {
		t.Errorf("the unit's JVM is pid %d", u.jvmPID)
	}
	golden(t, "tick-fork-before-exec", r.log.String())
}

// TestTickCaughtInsideExec: the bash -c of launch_container.sh forks the
// task JVM, which the tracker joins before its exec, and the next look at
// it comes inside its exec: the kernel has named the new program and moved
// its stack, but not laid out its command line yet (empty). The JVM is
// known as the task's JVM once its command line is there, not left a
// wrapper's fork for good (seen by e2e's TestProfileKnownMethods on a
// loaded machine: no running JVM to profile for the whole of a map).
func TestTickCaughtInsideExec(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	// 2003 is still bash -c's fork, with its parent's command line.
	jvm := f.procs[2003].argv
	f.set(2003, func(p *fproc) { p.argv, p.comm, p.threads = f.procs[2002].argv, "bash", 1 })
	r := f.tracker(false)
	r.tick()
	if a, p, ok := viewOf(r.tr, 2003); !ok || a.AttemptID != m0 || p.Role == wire.RoleTaskJVM {
		t.Fatalf("bash -c's fork: %+v in %q, %v", p, a.AttemptID, ok)
	}
	r.tick()
	// Inside its exec: the new name and stack, no command line yet.
	f.set(2003, func(p *fproc) { p.comm, p.stack, p.cmdline = "java", p.stack+0x1000, []byte{} })
	r.tick()
	// Its exec done: the JVM's command line, the same name and stack.
	f.set(2003, func(p *fproc) { p.argv, p.cmdline, p.threads = jvm, nil, 40 })
	for i := 0; i < 3; i++ {
		r.tick()
	}
	if a, p, ok := viewOf(r.tr, 2003); !ok || a.AttemptID != m0 || p.Role != wire.RoleTaskJVM {
		t.Errorf("the JVM after an exec caught halfway: %+v in %q, %v", p, a.AttemptID, ok)
	}
	if u := r.tr.attr.units[c2]; u.jvmPID != 2003 {
		t.Errorf("the unit's JVM is pid %d", u.jvmPID)
	}
}

// JVM reuse, with CPU: what the JVM used before the switch stays with the
// first attempt, what it uses after is the second's.
func TestTickJVMReuseCPU(t *testing.T) {
	m0, m1 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
	f := newFixture(t)
	fxH1Node(f)
	f.add(fproc{pid: 3001, ppid: fxTTPID, argv: h1Child(m0, "-77"), utime: 500})
	logDir := fxH1Logs + "/userlogs/" + fxJob + "/" + m0
	f.file(3001, "root"+logDir+"/log.index", logIndex(logDir), fixtureT0.Add(-10e9))
	r := f.tracker(false)
	r.tick()
	f.set(3001, func(p *fproc) { p.utime = 700 })
	r.tick()
	f.file(3001, "root"+fxH1Logs+"/userlogs/"+fxJob+"/"+m1+"/log.index", logIndex(logDir), fixtureT0.Add(2e9))
	r.tick()
	f.set(3001, func(p *fproc) { p.utime = 1000 })
	r.tick()
	if got := r.sink.lastCPU[m0]; got != 7000 {
		t.Errorf("first attempt: %d ms, want 7000", got)
	}
	if got := r.sink.lastCPU[m1]; got != 3000 {
		t.Errorf("second attempt: %d ms, want 3000", got)
	}
	// The JVM exits: the second attempt ends with all of it, the first
	// keeps its own.
	f.remove(3001)
	f.set(fxTTPID, func(p *fproc) { p.cutime += 1000 })
	r.tick()
	if got := r.sink.lastCPU[m1]; got != 3000 {
		t.Errorf("second attempt after the exit: %d ms, want 3000", got)
	}
	if got := r.sink.lastCPU[m0]; got != 7000 {
		t.Errorf("first attempt after the exit: %d ms, want 7000", got)
	}
}

// timesSink records the times of every process's samples.
type timesSink struct {
	*recSink
	times map[uint64][]int64
}

func (s *timesSink) ProcessSample(key uint64, ms int64, _ []int64, _ uint64) {
	s.times[key] = append(s.times[key], ms)
}

// Ticks within one millisecond (a late ticker fires twice) and a clock
// stepped back still give every series increasing times: the server
// rejects a batch whose times repeat.
func TestTickTimesIncrease(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	r := f.tracker(false)
	sink := &timesSink{recSink: newRecSink(), times: map[uint64][]int64{}}
	now := fixtureT0
	for _, d := range []time.Duration{0, 0, time.Millisecond, -time.Second, 0, time.Second} {
		now = now.Add(d)
		if err := r.tr.Tick(now, sink); err != nil {
			t.Fatal(err)
		}
	}
	if len(sink.times) == 0 {
		t.Fatal("no process sampled")
	}
	for key, ts := range sink.times {
		if len(ts) != 6 {
			t.Errorf("process %x: %d samples, want 6", key, len(ts))
		}
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Errorf("process %x: times %v do not increase", key, ts)
				break
			}
		}
	}
}

// fakeGroups gives thread groups' scheduler totals from a map, as
// taskstats would.
type fakeGroups map[int32]taskstats.Group

func (g fakeGroups) ThreadGroup(tgid int32, out *taskstats.Group) error {
	v, ok := g[tgid]
	if !ok {
		return syscall.ESRCH
	}
	*out = v
	return nil
}

// A process that has not run since its last sample (its scheduler runtime
// holds) keeps that sample: nothing but its runtime is read until it runs
// again, or until idleFullEvery ticks of its life have passed. A JVM's
// runtime is its thread group's (taskstats), or it is read in full.
func TestTickIdle(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	for _, groups := range []bool{false, true} {
		t.Run(fmt.Sprintf("groups=%v", groups), func(t *testing.T) {
			f := newFixture(t)
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"/usr/bin/python3", "mapper.py"}, env: streamingEnv(c2, m0), utime: 50})
			r := f.tracker(false)
			fg := fakeGroups{2003: {RunNs: 7e9, WaitNs: 2e9}}
			if groups {
				r.tr.cfg.Groups = fg
			}
			// io changed behind the runtime's back (no kernel does this),
			// so that what a tick read shows.
			sneakRead := func(pid int32, read uint64) {
				p := f.procs[pid]
				p.readBytes = read
				f.writeFiles(filepath.Join(f.root, fmt.Sprint(pid)), p)
			}
			value := func(pid int32, m string) int64 {
				t.Helper()
				_, p, ok := viewOf(r.tr, pid)
				if !ok {
					t.Fatalf("pid %d is not tracked", pid)
				}
				return p.Values[m]
			}
			r.tick()
			r.tick()
			skips := r.tr.Stats().IdleSkips
			// The wrappers and the mapper (one thread each) are skipped at
			// the second tick; the JVM too when its group's runtime is known.
			if want := uint64(3 + btoi(groups)); skips != want {
				t.Errorf("idle skips after two ticks: %d, want %d", skips, want)
			}
			sneakRead(2010, 4096)
			sneakRead(2003, 8192)
			r.tick()
			if v := value(2010, wire.ReadBytes); v != 0 {
				t.Errorf("an idle process's io was read: read_bytes %d", v)
			}
			if v, want := value(2003, wire.ReadBytes), int64(8192); groups == (v == want) {
				t.Errorf("the JVM's read_bytes %d (groups %v: idle when its group's runtime holds)", v, groups)
			}
			if v, want := value(2003, wire.SchedRunNs), int64(7e9); groups != (v == want) {
				t.Errorf("the JVM's sched_run_ns %d: its group's (%d) with groups only", v, want)
			}
			// It runs: read in full at once.
			f.set(2010, func(p *fproc) { p.readBytes = 1 << 20 })
			fg[2003] = taskstats.Group{RunNs: 8e9, WaitNs: 3e9}
			r.tick()
			if v := value(2010, wire.ReadBytes); v != 1<<20 {
				t.Errorf("a process that ran: read_bytes %d", v)
			}
			if v := value(2003, wire.ReadBytes); v != 8192 {
				t.Errorf("a JVM that ran: read_bytes %d", v)
			}
			if groups && value(2003, wire.SchedWaitNs) != 3e9 {
				t.Errorf("the JVM's wait %d, its group's is 3e9", value(2003, wire.SchedWaitNs))
			}
			// Idle, but read in full every idleFullEvery ticks of its life.
			sneakRead(2001, 512)
			for i := 0; i < idleFullEvery && value(2001, wire.ReadBytes) != 512; i++ {
				r.tick()
			}
			if v := value(2001, wire.ReadBytes); v != 512 {
				t.Errorf("an idle wrapper was not read in full in %d ticks", idleFullEvery)
			}
			// Its parent exits: reparented while it sleeps, it is read in
			// full (its new parent is needed for its exit).
			before := r.tr.Stats().IdleSkips
			f.remove(2003)
			f.procs[2010].ppid = 1
			sneakRead(2010, 4096+1)
			r.tick()
			if p := r.tr.procs[2010]; p.ppid != 1 || value(2010, wire.ReadBytes) != 4097 {
				t.Errorf("the reparented child: ppid %d, read_bytes %d", p.ppid, value(2010, wire.ReadBytes))
			}
			if r.tr.Stats().IdleSkips <= before {
				t.Error("the wrappers were not skipped beside it")
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A JVM's context switches are its threads' (taskstats), counted on when a
// thread exits and the live threads' sum drops; without taskstats they are
// its leader's, from status.
func TestTickGroupCtx(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c2, yarnChild(c2, m0)) // the JVM's status says 500 voluntary
	r := f.tracker(false)
	fg := fakeGroups{2003: {RunNs: 7e9, WaitNs: 2e9, VolCtx: 1000, InvolCtx: 10}}
	r.tr.cfg.Groups = fg
	ctx := func() (int64, int64) {
		_, p, _ := viewOf(r.tr, 2003)
		return p.Values[wire.CtxVoluntary], p.Values[wire.CtxInvoluntary]
	}
	for i, step := range []struct {
		vol, invol uint64 // the live threads' sums
		want       [2]int64
	}{
		{1000, 10, [2]int64{1000, 10}},
		{1150, 12, [2]int64{1150, 12}},
		{1120, 13, [2]int64{1150, 13}}, // a thread of 40 switches exited; the others made 10
		{1130, 13, [2]int64{1160, 13}},
	} {
		g := fg[2003]
		g.RunNs += 1e6 // it ran
		g.VolCtx, g.InvolCtx = step.vol, step.invol
		fg[2003] = g
		r.tick()
		if v, iv := ctx(); v != step.want[0] || iv != step.want[1] {
			t.Errorf("step %d: context switches %d, %d; want %v", i, v, iv, step.want)
		}
	}
}

// A task process first seen after the agent's first tick, of one thread,
// has its first sample's scheduler figures and context switches from its
// thread group (taskstats: one request, no schedstat or status read) and
// its owner from its stat file's (fstat); its later samples read its
// schedstat, unless that shows less than its group did (threads of it had
// exited): then its group's for good.
func TestTickFirstSampleFromGroup(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	for _, deadThreads := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadThreads=%v", deadThreads), func(t *testing.T) {
			f := newFixture(t)
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			r := f.tracker(false)
			fg := fakeGroups{2003: {RunNs: 7e9, WaitNs: 2e9}}
			r.tr.cfg.Groups = fg
			r.tick()
			// A child of the JVM, one thread; its status is missing (a
			// read of it would count an error) and its directory is
			// owned by uid 1234.
			ch := f.add(fproc{pid: 2020, ppid: 2003, sid: 2002, argv: []string{"/bin/sleep", "1"}, utime: 3, ctx: 999,
				only: []string{"stat", "cmdline", "environ", "io", "schedstat", "smaps_rollup"}})
			if err := os.Chown(filepath.Join(f.root, "2020"), 1234, 1234); err != nil {
				t.Skipf("chown: %v", err)
			}
			schedRun := int64((ch.utime + ch.stime) * 10_000_000) // its schedstat's
			groupRun := uint64(schedRun - 1e6)
			if deadThreads {
				groupRun = uint64(schedRun + 50e6)
			}
			wait := ch.utime * 100_000 // its schedstat's
			fg[2020] = taskstats.Group{RunNs: groupRun, WaitNs: wait, VolCtx: 7, InvolCtx: 3}
			errs := r.tr.Stats().ReadErrors
			r.tick()
			_, p, ok := viewOf(r.tr, 2020)
			if !ok {
				t.Fatal("the JVM's child is not tracked")
			}
			if p.Values[wire.SchedRunNs] != int64(groupRun) || p.Values[wire.SchedWaitNs] != int64(wait) ||
				p.Values[wire.CtxVoluntary] != 7 || p.Values[wire.CtxInvoluntary] != 3 {
				t.Errorf("first sample: %v, want its group's figures", p.Values)
			}
			var rec wire.Process
			for _, w := range r.sink.procs {
				if w.PID == 2020 {
					rec = w
				}
			}
			if rec.UID != 1234 {
				t.Errorf("owner %d, want 1234 (its directory's)", rec.UID)
			}
			if n := r.tr.Stats().ReadErrors - errs; n != 0 {
				t.Errorf("%d read errors: status was read", n)
			}
			// Its second sample: it ran.
			f.set(2020, func(p *fproc) { p.utime++ })
			g := fg[2020]
			g.RunNs += 10e6
			fg[2020] = g
			r.tick()
			_, p, _ = viewOf(r.tr, 2020)
			ch = f.procs[2020]
			want := int64((ch.utime+ch.stime)*10_000_000 + ch.ran) // its schedstat's
			if deadThreads {
				want = int64(g.RunNs) // its group's, which never go back
			}
			if p.Values[wire.SchedRunNs] != want {
				t.Errorf("second sample: sched_run_ns %d, want %d", p.Values[wire.SchedRunNs], want)
			}
			if gs := r.tr.procs[2020].t.groupSched; gs != deadThreads {
				t.Errorf("on its group's figures for good: %v, want %v", gs, deadThreads)
			}
		})
	}
}

// Errors that leave the tracker say what it could not do, and where, and
// keep their cause: a procfs without /proc/stat, a listing that fails.
func TestErrorsSayWhere(t *testing.T) {
	root := filepath.Join(t.TempDir(), "proc")
	fs := procfs.NewFS(root)
	_, err := New(Config{FS: &fs})
	if err == nil || !errors.Is(err, iofs.ErrNotExist) || !strings.Contains(err.Error(), "cannot start tracking "+root) {
		t.Errorf("New on an empty root: %v", err)
	}
	f := newFixture(t)
	fxYARNNode(f)
	r := f.tracker(false)
	r.tick()
	if err := os.RemoveAll(f.root); err != nil {
		t.Fatal(err)
	}
	err = r.tr.Tick(r.now(), r.sink)
	if err == nil || !errors.Is(err, iofs.ErrNotExist) || !strings.Contains(err.Error(), "cannot list the processes of "+f.root) {
		t.Errorf("a tick of a procfs gone: %v", err)
	}
}
