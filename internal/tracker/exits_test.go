package tracker

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// exitContainer lays out a running MapReduce container whose processes
// name localDir in LOCAL_DIRS, and returns its attempt.
func exitContainer(f *fixture, pid int32, seq int, localDir string) (container, attempt string) {
	container, attempt = fxContainer(seq), fxAttempt("m", seq, 0)
	yarnContainer(f, pid, container, yarnChild(container, attempt))
	for _, p := range []int32{pid, pid + 1, pid + 2} {
		f.set(p, func(p *fproc) {
			p.env = append(p.env, "LOCAL_DIRS="+localDir+"/usercache/alice/appcache/"+fxApp)
		})
	}
	return container, attempt
}

// The exit records of the task JVM and of the container's top process,
// and the exit-code file the launch script wrote, are in the attempt's
// description when it ends.
func TestExitStatuses(t *testing.T) {
	f := newFixture(t)
	fxYARNNode(f)
	local := t.TempDir()
	cKill, aKill := exitContainer(f, 1000, 2, local)
	_, aFail := exitContainer(f, 1100, 3, local)
	r := f.tracker(true)
	r.tick()
	r.tick()
	// Container 2: its JVM killed by SIGKILL; bash -c and the launch
	// script exit 137; the script wrote 137 before it exited.
	r.exits.exit(1002, 1001, 3200, 5000, 9)
	r.exits.exit(1001, 1000, 10, 5000, 137<<8)
	r.exits.exit(1000, fxNMPID, 10, 5000, 137<<8)
	exitFile := nodemanager.ExitCodeFile(local, fxApp, cKill)
	os.MkdirAll(filepath.Dir(exitFile), 0o755)
	os.WriteFile(exitFile, []byte("137\n"), 0o644)
	f.remove(1000, 1001, 1002)
	// Container 3: its JVM exits 1; the rest lives on a tick.
	r.exits.exit(1102, 1101, 3200, 5000, 1<<8)
	f.remove(1102)
	r.tick()
	got := r.sink.attempts[aKill]
	// (An exit is stamped with when the process exited, from its record.)
	if !got.Ended || got.JVMExit.Status != 9 || !got.JVMExit.Seen() || got.JVMExit.Ms > r.now().UnixMilli() || got.RootExit.Status != 137<<8 ||
		got.FileExit.Status != 137 || !got.FileExit.Seen() || got.NMExit.Seen() {
		t.Errorf("killed container's attempt: %+v", got)
	}
	if a := r.sink.attempts[aFail]; a.Ended {
		t.Errorf("a container whose JVM exited ended: %+v", a)
	}
	// No exit-code file (the NodeManager deleted it already).
	r.exits.exit(1101, 1100, 10, 5000, 1<<8)
	r.exits.exit(1100, fxNMPID, 10, 5000, 1<<8)
	f.remove(1100, 1101)
	r.tick()
	if a := r.sink.attempts[aFail]; !a.Ended || a.JVMExit.Status != 1<<8 || a.RootExit.Status != 1<<8 || a.FileExit.Seen() {
		t.Errorf("failed container's attempt: %+v", a)
	}
	// With no NodeManager to ask, an ended container's file is looked for
	// a few ticks, then forgotten.
	for i := 0; i < maxFileTries; i++ {
		r.tick()
	}
	if len(r.tr.ends.closing) != 0 {
		t.Errorf("%d ended containers still wait without a NodeManager", len(r.tr.ends.closing))
	}
}

// Without exit records nothing of a process's end is known.
func TestExitStatusesWithoutTaskstats(t *testing.T) {
	f := newFixture(t)
	fxYARNNode(f)
	_, a := exitContainer(f, 1000, 2, t.TempDir())
	r := f.tracker(false)
	r.tick()
	f.remove(1000, 1001, 1002)
	r.tick()
	if got := r.sink.attempts[a]; !got.Ended || got.JVMExit.Seen() || got.RootExit.Seen() {
		t.Errorf("%+v", got)
	}
}

// The NodeManager's verdict, listed after the container completed, is
// asked for when its last process is gone, and the ended attempt is
// described again with it.
func TestNodeManagerVerdict(t *testing.T) {
	var listing atomic.Value
	listing.Store(`{"containers":{}}`)
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws/v1/node/containers" {
			polls.Add(1)
			w.Write([]byte(listing.Load().(string)))
			return
		}
		w.Write([]byte(`{"apps":{}}`))
	}))
	defer srv.Close()
	f := newFixture(t)
	fxYARNNode(f)
	c, a := exitContainer(f, 1000, 2, t.TempDir())
	r := f.tracker(true)
	r.tr.cfg.Lost = LostConfig{Enabled: true, NMURL: srv.URL, NMPoll: time.Hour, CheckEvery: time.Hour}
	r.tick()
	testsrv.WaitUntil(t, "the first poll", 10*time.Second, func() bool { return polls.Load() > 0 })
	listing.Store(`{"containers":{"container":[{"id":"` + c + `","state":"COMPLETE","exitCode":-104,` +
		`"diagnostics":"Container [pid=1001,containerID=` + c + `] is running 10485760B beyond the 'PHYSICAL' memory limit. Killing container."}]}}`)
	r.exits.exit(1002, 1001, 3200, 5000, 143<<8)
	r.exits.exit(1001, 1000, 10, 5000, 15)
	r.exits.exit(1000, fxNMPID, 10, 5000, 143<<8)
	f.remove(1000, 1001, 1002)
	r.tick()
	if got := r.sink.attempts[a]; !got.Ended || got.RootExit.Status != 143<<8 {
		t.Fatalf("ended: %+v", got)
	}
	// The poll asked for comes within a few ticks (an hour's interval otherwise).
	testsrv.WaitUntil(t, "the NodeManager's verdict", 10*time.Second, func() bool {
		r.tick()
		return r.sink.attempts[a].NMExit.Seen()
	})
	got := r.sink.attempts[a]
	if got.NMExit.Status != -104 || got.ExitDiagnostics == "" || !got.Ended {
		t.Errorf("after the verdict: %+v", got)
	}
	if len(r.tr.ends.closing) != 0 {
		t.Errorf("%d attempts still wait for their end", len(r.tr.ends.closing))
	}
}
