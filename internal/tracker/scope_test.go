package tracker

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Two NodeManagers on one host (the demo's simulated nodes, a host with a
// NodeManager per disk set): an agent scoped to one tracks its tasks only,
// by ancestry, and by local directories those that escaped it.
func TestScopeOneOfTwoNodeManagers(t *testing.T) {
	const nm2 = 110
	f := newFixture(t)
	fxYARNNode(f)
	// A second NodeManager with its own configuration and local dirs.
	f.add(fproc{pid: nm2, ppid: 1, start: 600, threads: 80, env: []string{"HADOOP_CONF_DIR=/etc/hadoop-nm2"},
		argv: []string{fxJava, "-Dproc_nodemanager", "-classpath", "/etc/hadoop-nm2:/usr/lib/hadoop/lib/*",
			"org.apache.hadoop.yarn.server.nodemanager.NodeManager"}})
	// (Its local dirs as it sees them: here, where the fixture's
	// working directories are.)
	fsRoot := filepath.Dir(f.root) + "/fs"
	f.file(nm2, "root/etc/hadoop-nm2/yarn-site.xml", `<configuration>
<property><name>yarn.nodemanager.local-dirs</name><value>`+fsRoot+`/data/2/yarn/local,`+fsRoot+`/data/3/yarn/local</value></property>
</configuration>`, fixtureT0)
	pidFile := filepath.Join(t.TempDir(), "yarn-alice-nodemanager.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(nm2)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c2, c3, c4 := fxContainer(2), fxContainer(3), fxContainer(4)
	m0, m1 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0)
	// Container 2 is the first NodeManager's, container 3 the second's.
	yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	yarnContainer(f, 3001, c3, yarnChild(c3, m1))
	f.set(3001, func(p *fproc) { p.ppid = nm2 })
	// Escapees (setsid, reparented to init) tied by their cgroup: one
	// works in the second NodeManager's local dirs, one in the first's.
	f.add(fproc{pid: 3100, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/hadoop-yarn/" + c4 + "\n",
		cwd: f.dir("/data/3/yarn/local/usercache/alice/appcache/" + fxApp + "/" + c4)})
	f.add(fproc{pid: 2100, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/hadoop-yarn/" + fxContainer(5) + "\n",
		cwd: f.dir(fxNMLocal + "/usercache/alice/appcache/" + fxApp + "/" + fxContainer(5))})
	r := f.tracker(false)
	r.tr.cfg.Scope = Scope{DaemonPIDFile: pidFile}
	r.tick()
	// And two that appear later.
	f.add(fproc{pid: 3101, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/hadoop-yarn/" + c4 + "\n",
		cwd: f.dir("/data/3/yarn/local/usercache/alice/appcache/" + fxApp + "/" + c4)})
	f.add(fproc{pid: 2101, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/hadoop-yarn/" + fxContainer(6) + "\n",
		cwd: f.dir(fxNMLocal + "/usercache/alice/appcache/" + fxApp + "/" + fxContainer(6))})
	r.tick()
	for pid, want := range map[int32]bool{3001: true, 3002: true, 3003: true, 3100: true, 3101: true, 2001: false, 2003: false, 2100: false, 2101: false} {
		if _, _, ok := viewOf(r.tr, pid); ok != want {
			t.Errorf("pid %d tracked %v, want %v", pid, ok, want)
		}
	}
	if r.tr.attr.scope.pid != nm2 || len(r.tr.attr.scope.localDirs) != 2 {
		t.Errorf("scope: %+v", r.tr.attr.scope)
	}
	// The NodeManager restarts (a new pid in its pid file): its new
	// containers are the agent's, the old ones' processes stay tracked.
	f.remove(nm2)
	f.add(fproc{pid: 120, ppid: 1, start: 95_000, argv: f.procs[fxNMPID].argv})
	os.WriteFile(pidFile, []byte("120\n"), 0o644)
	for i := 0; i < 6; i++ {
		r.tick()
	}
	yarnContainer(f, 4001, fxContainer(7), yarnChild(fxContainer(7), fxAttempt("m", 2, 0)))
	f.set(4001, func(p *fproc) { p.ppid = 120 })
	r.tick()
	if _, _, ok := viewOf(r.tr, 4003); !ok || r.tr.attr.scope.pid != 120 {
		t.Errorf("after the restart: the new container's JVM tracked %v, scope %+v", ok, r.tr.attr.scope)
	}
	if _, _, ok := viewOf(r.tr, 3003); !ok {
		t.Error("the old container's JVM is no longer tracked")
	}
	if _, _, ok := viewOf(r.tr, 2003); ok {
		t.Error("the other NodeManager's container is tracked")
	}
}

// Without a scope every NodeManager's tasks are tracked.
func TestScopeNone(t *testing.T) {
	f := newFixture(t)
	fxYARNNode(f)
	f.add(fproc{pid: 110, ppid: 1, start: 600, argv: f.procs[fxNMPID].argv})
	yarnContainer(f, 2001, fxContainer(2), yarnChild(fxContainer(2), fxAttempt("m", 0, 0)))
	yarnContainer(f, 3001, fxContainer(3), yarnChild(fxContainer(3), fxAttempt("m", 1, 0)))
	f.set(3001, func(p *fproc) { p.ppid = 110 })
	r := f.tracker(false)
	r.tick()
	for _, pid := range []int32{2003, 3003} {
		if _, _, ok := viewOf(r.tr, pid); !ok {
			t.Errorf("pid %d not tracked", pid)
		}
	}
}
