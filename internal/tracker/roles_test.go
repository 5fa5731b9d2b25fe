package tracker

import (
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

// TestRoles checks the role of every kind of task process.
func TestRoles(t *testing.T) {
	c1, c2, c3 := fxContainer(1), fxContainer(2), fxContainer(3)
	m0 := fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	yarnContainer(f, 2001, c1, yarnJVMArgv(c1, "org.apache.hadoop.mapreduce.v2.app.MRAppMaster"))
	yarnContainer(f, 2101, c2, yarnChild(c2, m0))
	f.add(fproc{pid: 2110, ppid: 2103, sid: 2102, argv: []string{"/usr/bin/python3", "mapper.py"}, env: streamingEnv(c2, m0)})
	f.add(fproc{pid: 2111, ppid: 2110, sid: 2102, argv: []string{"sort"}, env: streamingEnv(c2, m0)})
	f.add(fproc{pid: 2112, ppid: 2111, sid: 2102, argv: []string{"uniq", "-c"}, env: streamingEnv(c2, m0)})
	f.add(fproc{pid: 2120, ppid: 2103, sid: 2102, argv: []string{"/bin/sh", "-c", "hostname"}})
	yarnContainer(f, 2201, c3, []string{fxJava, "-server", "org.apache.spark.executor.CoarseGrainedExecutorBackend",
		"--driver-url", "spark://x", "--executor-id", "3", "--app-id", fxApp})
	f.add(fproc{pid: 2210, ppid: 2203, sid: 2202, argv: []string{"python3", "-m", "pyspark.daemon"}})
	r := f.tracker(false)
	r.tick()
	want := map[int32]string{
		2001: wire.RoleWrapper, 2002: wire.RoleWrapper, 2003: wire.RoleAppMaster,
		2101: wire.RoleWrapper, 2102: wire.RoleWrapper, 2103: wire.RoleTaskJVM,
		2110: wire.RoleStreaming, 2111: wire.RoleStreamingChild, 2112: wire.RoleStreamingChild, 2120: wire.RoleChild,
		2201: wire.RoleWrapper, 2202: wire.RoleWrapper, 2203: wire.RoleExecutor, 2210: wire.RoleChild,
	}
	seen := map[string]bool{}
	for pid, role := range want {
		_, p, ok := viewOf(r.tr, pid)
		if !ok {
			t.Errorf("pid %d not tracked", pid)
			continue
		}
		if p.Role != role {
			t.Errorf("pid %d (%s): role %q, want %q", pid, p.Cmdline, p.Role, role)
		}
		seen[p.Role] = true
		// The process record and the membership carry the same role.
		if rec, ok := r.sink.procs[p.Key]; !ok || rec.Role != role {
			t.Errorf("pid %d: process record role %q", pid, rec.Role)
		}
	}
	for _, m := range r.sink.members {
		if want[pidOfKey(r, m.Process)] != m.Role {
			t.Errorf("membership of %d: role %q", pidOfKey(r, m.Process), m.Role)
		}
	}
	for _, role := range []string{wire.RoleWrapper, wire.RoleTaskJVM, wire.RoleStreaming, wire.RoleStreamingChild,
		wire.RoleAppMaster, wire.RoleExecutor, wire.RoleChild} {
		if !seen[role] {
			t.Errorf("role %q not seen", role)
		}
	}
}

func pidOfKey(r *fixtureRun, key uint64) int32 { return r.sink.procs[key].PID }
