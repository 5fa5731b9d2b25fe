package tracker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// On cgroup v2 (a fixture tree): processes that left their container's
// tree are tied to it by the unified line of their cgroup file, under
// YARN's default hierarchy and under the one the NodeManager's
// yarn-site.xml names (yarn.nodemanager.linux-container-executor.cgroups.hierarchy,
// learned when the lost checks read its conf dir); a container's OOM
// kills are counted from its memory.events when the kernel changes it,
// and kept after the NodeManager removed the cgroup.
func TestCgroupV2(t *testing.T) {
	f := newFixture(t)
	fxYARNNode(f)
	f.file(fxNMPID, "root/etc/hadoop/yarn-site.xml", `<configuration>
<property><name>yarn.nodemanager.linux-container-executor.cgroups.hierarchy</name><value>/yarn.slice/nm1</value></property>
</configuration>`, fixtureT0)
	c2, c3, c4 := fxContainer(2), fxContainer(3), fxContainer(4)
	yarnContainer(f, 2001, c2, yarnChild(c2, fxAttempt("m", 0, 0)))
	yarnContainer(f, 3001, c3, yarnChild(c3, fxAttempt("m", 1, 0)))
	yarnContainer(f, 4001, c4, yarnChild(c4, fxAttempt("m", 2, 0)))
	for _, pid := range []int32{2001, 2002, 2003} {
		f.set(pid, func(p *fproc) { p.cgroup = "0::/hadoop-yarn/" + c2 + "\n" })
	}
	for _, pid := range []int32{3001, 3002, 3003} {
		f.set(pid, func(p *fproc) { p.cgroup = "0::/yarn.slice/nm1/" + c3 + "\n" })
	}
	for _, pid := range []int32{4001, 4002, 4003} {
		f.set(pid, func(p *fproc) { p.cgroup = "0::/yarn.slice/nm1/" + c4 + "\n" })
	}
	// The cgroup tree: v2 at the top, the containers' cgroups limited.
	cg := t.TempDir()
	os.WriteFile(filepath.Join(cg, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	for _, d := range []string{"hadoop-yarn/" + c2, "yarn.slice/nm1/" + c3, "yarn.slice/nm1/" + c4} {
		dir := filepath.Join(cg, d)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "memory.max"), []byte("1073741824\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"), 0o644)
	}
	os.WriteFile(filepath.Join(cg, "yarn.slice/nm1", c4, "memory.max"), []byte("max\n"), 0o644) // no limit

	r := f.tracker(false)
	r.tr.cfg.Lost = LostConfig{Enabled: true, NoNM: true, CheckEvery: time.Millisecond}
	r.tr.ends.cgroupRoot = cg
	r.tick()
	if got := r.tr.attr.hier.Names(); len(got) != 2 || got[1] != "yarn.slice/nm1" {
		t.Fatalf("hierarchies %q: the NodeManager's not learned", got)
	}
	// Escapees (setsid, reparented to init) found after that.
	f.add(fproc{pid: 2050, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/hadoop-yarn/" + c2 + "\n"})
	f.add(fproc{pid: 3050, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/yarn.slice/nm1/" + c3 + "\n"})
	f.add(fproc{pid: 3051, ppid: 1, argv: []string{"sleep", "1000"}, cgroup: "0::/yarn.slice/nm2/" + c3 + "\n"})
	r.tick()
	for pid, want := range map[int32]string{2050: c2, 3050: c3, 3051: ""} {
		a, _, ok := viewOf(r.tr, pid)
		if ok != (want != "") || a.ContainerID != want {
			t.Errorf("pid %d: in %q (%v), want %q", pid, a.ContainerID, ok, want)
		}
	}

	// OOM kills: each limited container's memory.events is watched.
	u2, u3, u4 := r.tr.attr.units[c2], r.tr.attr.units[c3], r.tr.attr.units[c4]
	if u2 == nil || u3 == nil || u4 == nil {
		t.Fatal("no units")
	}
	for _, u := range []*unit{u2, u3, u4} {
		u.end.oom = r.tr.ends.watchOOM(u)
	}
	_, ok2 := u2.end.oom.(*oomEvents)
	e3, ok3 := u3.end.oom.(*oomEvents)
	if !ok2 || !ok3 || u4.end.oom != nil {
		t.Fatalf("watches %T %T %T: want memory.events for the limited ones only", u2.end.oom, u3.end.oom, u4.end.oom)
	}
	// The kernel kills in container 3: its count is read when it changes.
	os.WriteFile(filepath.Join(cg, "yarn.slice/nm1", c3, "memory.events"), []byte("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n"), 0o644)
	testsrv.WaitUntil(t, "the OOM kill read", 5*time.Second, func() bool { return e3.w.Seen() == 1 })
	// The NodeManager removes the cgroups as soon as the containers end.
	os.RemoveAll(filepath.Join(cg, "yarn.slice/nm1", c3))
	os.RemoveAll(filepath.Join(cg, "hadoop-yarn", c2))
	for _, u := range []*unit{u2, u3} {
		r.tr.ends.ended(u, r.now().UnixMilli())
	}
	if u2.cur.info.OOMKills != 0 || u3.cur.info.OOMKills != 1 {
		t.Errorf("OOM kills: %d and %d, want 0 and 1", u2.cur.info.OOMKills, u3.cur.info.OOMKills)
	}
	if u2.end.oom != nil || u3.end.oom != nil || r.tr.ends.oomV2.Watching() != 0 {
		t.Errorf("watches not released: %v %v, %d watched", u2.end.oom, u3.end.oom, r.tr.ends.oomV2.Watching())
	}
}
