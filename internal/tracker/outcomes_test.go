package tracker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/taskscope/taskscope/internal/cgroups"
	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/wire"
)

// fakeOOM is an OOM counter that says n.
type fakeOOM struct {
	n      uint32
	closed bool
}

func (f *fakeOOM) kills() uint32 { return f.n }
func (f *fakeOOM) close()        { f.closed = true }

// newFakeOutcomes is the outcomes part over a fake table and a /proc
// tree of environments only.
func newFakeOutcomes(t *testing.T, tab *fakeTable) (*outcomes, string) {
	root := t.TempDir()
	fs := procfs.NewFS(root)
	st := &Stats{}
	return newOutcomes(&fs, tab, &readErrors{stats: st, bySource: map[string]uint64{}}, "-", cgroups.NewHierarchies("hadoop-yarn")), root
}

// What exit records say goes to the attempt its process was a member of:
// the task JVM's status, the top process's (its parent no member); a
// Hadoop 1 task-cleanup run's are not its attempt's.
func TestOutcomesExited(t *testing.T) {
	tab := newFakeTable()
	tab.fakeProc(1000, 1, 10)
	u, a := tab.fakeUnit("c1", "a1")
	top := tab.fakeMember(u, 2000, 1000, 100, 0, 0)
	jvm := tab.fakeMember(u, 2001, 2000, 110, 0, 0)
	child := tab.fakeMember(u, 2002, 2001, 120, 0, 0)
	u.jvmPID = 2001
	o, _ := newFakeOutcomes(t, tab)
	o.exited(child, exitRecord(2002, 2001, 0, 1<<8), 3000)
	if a.info.JVMExit.Seen() || a.info.RootExit.Seen() {
		t.Fatalf("a child's exit taken for the attempt's: %+v", a.info)
	}
	o.exited(jvm, exitRecord(2001, 2000, 0, 9), 4000)
	o.exited(top, exitRecord(2000, 1000, 0, 137<<8), 5000)
	o.exited(top, nil, 5000) // without its record: nothing
	if a.info.JVMExit != (wire.ExitStatus{Status: 9, Ms: 4000}) || a.info.RootExit != (wire.ExitStatus{Status: 137 << 8, Ms: 5000}) {
		t.Errorf("JVM %+v, top %+v", a.info.JVMExit, a.info.RootExit)
	}
	u.cleanup, a.info.JVMExit = true, wire.ExitStatus{}
	o.exited(jvm, exitRecord(2001, 2000, 0, 0), 6000)
	if a.info.JVMExit.Seen() {
		t.Error("a task-cleanup run's exit taken for its attempt's")
	}
}

// When a container's last process is gone: its OOM kills are counted
// (and their watch released), its exit-code file read from the local
// dirs its environment named, and its NodeManager asked for a verdict,
// which describes the ended attempt again when it comes.
func TestOutcomesEnded(t *testing.T) {
	const container, app = "container_e01_1700000000123_0001_01_000002", "application_1700000000123_0001"
	tab := newFakeTable()
	u, a := tab.fakeUnit(container, "attempt_1700000000123_0001_m_000001_0")
	u.appID, a.info.AppID = app, app
	tab.fakeMember(u, 2000, 1000, 100, 0, 0)
	o, root := newFakeOutcomes(t, tab)
	local := t.TempDir()
	os.MkdirAll(filepath.Join(root, "2000"), 0o755)
	os.WriteFile(filepath.Join(root, "2000", "environ"), []byte("A=1\x00LOCAL_DIRS="+local+"/usercache/u/appcache/"+app+"\x00"), 0o644)
	nm := &fakeLister{}
	tab.nms = []ContainerLister{nm}
	sink := newRecSink()
	o.watch(tab.units, 1000, sink)
	if len(u.end.localDirs) != 1 || u.end.localDirs[0] != local {
		t.Fatalf("local dirs: %v", u.end.localDirs)
	}
	oom := &fakeOOM{n: 2}
	u.end.oom = oom
	exitFile := nodemanager.ExitCodeFile(local, app, container)
	os.MkdirAll(filepath.Dir(exitFile), 0o755)
	os.WriteFile(exitFile, []byte("137\n"), 0o644)
	o.ended(u, 5000)
	if a.info.OOMKills != 2 || !oom.closed || u.end.oom != nil {
		t.Errorf("OOM kills %d, watch closed %v", a.info.OOMKills, oom.closed)
	}
	if a.info.FileExit != (wire.ExitStatus{Status: 137, Ms: 5000}) || a.info.NMExit.Seen() {
		t.Errorf("at its end: file %+v, NodeManager %+v", a.info.FileExit, a.info.NMExit)
	}
	if nm.soon != 1 || len(o.closing) != 1 || len(sink.attempts) != 0 {
		t.Fatalf("polls asked %d, %d closing, described %d times", nm.soon, len(o.closing), len(sink.attempts))
	}
	a.info.Ended = true // (the tracker describes it as ended)
	nm.list(fixtureT0, nil)
	o.watch(tab.units, 6000, sink)
	if len(o.closing) != 1 {
		t.Fatal("given up before the verdict")
	}
	nm.last.Exits = map[string]nodemanager.Exit{container: {Code: -104, Diagnostics: "beyond the 'PHYSICAL' memory limit"}}
	o.watch(tab.units, 7000, sink)
	got := sink.attempts[a.info.AttemptID]
	if len(o.closing) != 0 || got.NMExit != (wire.ExitStatus{Status: -104, Ms: 7000}) || got.ExitDiagnostics == "" || got.FileExit.Status != 137 {
		t.Errorf("after the verdict: %d closing, described %+v", len(o.closing), got)
	}
}

// A unit that ends without an attempt releases its OOM watch all the same.
func TestOutcomesRelease(t *testing.T) {
	tab := newFakeTable()
	o, _ := newFakeOutcomes(t, tab)
	u := &unit{key: "c1"}
	oom := &fakeOOM{}
	u.end.oom = oom
	o.release(u)
	if !oom.closed || u.end.oom != nil {
		t.Error("the watch was kept")
	}
}
