package nodemanager

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// A listing keeps the exit status of the containers that have one: ended
// (COMPLETE) or being killed; the running ones' (-1000), and answers
// without exitCode (older NodeManagers), are none.
func TestListingExits(t *testing.T) {
	var cs, as atomic.Value
	long := strings.Repeat("x", 2*maxDiagnostics)
	cs.Store(`{"containers":{"container":[
		{"id":"c_run","state":"RUNNING","exitCode":-1000,"diagnostics":""},
		{"id":"c_old","state":"RUNNING"},
		{"id":"c_pmem","state":"KILLING","exitCode":-104,"diagnostics":"Container [pid=4242,containerID=c_pmem] is running 10485760B beyond the 'PHYSICAL' memory limit."},
		{"id":"c_done","state":"COMPLETE","exitCode":0,"diagnostics":""},
		{"id":"c_failed","state":"COMPLETE","exitCode":1,"diagnostics":"` + long + `"}]}}`)
	as.Store(`{"apps":{}}`)
	s := nm(t, &cs, &as)
	w := NewWatcher(time.Hour, nil)
	w.SetURL(s.URL)
	w.Start()
	defer w.Stop()
	var l *Listing
	testsrv.WaitUntil(t, "a listing", 5*time.Second, func() bool { l, _ = w.Latest(); return l != nil })
	if len(l.Exits) != 3 || l.Exits["c_done"] != (Exit{Code: 0, State: "COMPLETE"}) || l.Exits["c_pmem"].Code != -104 ||
		!strings.Contains(l.Exits["c_pmem"].Diagnostics, "PHYSICAL") || l.Exits["c_failed"].Code != 1 ||
		len(l.Exits["c_failed"].Diagnostics) != maxDiagnostics {
		t.Errorf("exits %+v", l.Exits)
	}
	if l.Containers["c_old"] != "RUNNING" || len(l.Containers) != 5 {
		t.Errorf("containers %v", l.Containers)
	}
}

// PollSoon polls at once, whatever the interval.
func TestPollSoon(t *testing.T) {
	var cs, as atomic.Value
	cs.Store(`{"containers":{}}`)
	as.Store(`{"apps":{}}`)
	s := nm(t, &cs, &as)
	w := NewWatcher(time.Hour, nil)
	w.SetURL(s.URL)
	w.Start()
	defer w.Stop()
	testsrv.WaitUntil(t, "the first poll", 5*time.Second, func() bool { l, _ := w.Latest(); return l != nil })
	cs.Store(`{"containers":{"container":[{"id":"c1","state":"COMPLETE","exitCode":137}]}}`)
	w.PollSoon()
	testsrv.WaitUntil(t, "a poll on request", 5*time.Second, func() bool {
		l, _ := w.Latest()
		return l.Exits["c1"].Code == 137
	})
}

func TestExitCodeFiles(t *testing.T) {
	dirs := LocalDirs("/data/1/yarn/local/usercache/alice/appcache/application_1700000000000_0042," +
		" /data/2/yarn/local/usercache/alice/appcache/application_1700000000000_0042/ ,/tmp/other,,/x/appcache/application_1")
	if want := []string{"/data/1/yarn/local", "/data/2/yarn/local"}; !reflect.DeepEqual(dirs, want) {
		t.Errorf("LocalDirs = %q, want %q", dirs, want)
	}
	local := t.TempDir()
	p := ExitCodeFile(local, "application_1700000000000_0042", "container_e01_1700000000000_0042_01_000002")
	if want := filepath.Join(local, "nmPrivate/application_1700000000000_0042/container_e01_1700000000000_0042_01_000002/container_e01_1700000000000_0042_01_000002.pid.exitcode"); p != want {
		t.Errorf("ExitCodeFile = %s", p)
	}
	if _, err := ReadExitCode(p); !os.IsNotExist(err) {
		t.Errorf("no file: %v", err)
	}
	os.MkdirAll(filepath.Dir(p), 0o755)
	for content, want := range map[string]int32{"0\n": 0, "137\n": 137, "143": 143, " 1 \n": 1, "-104\n": -104} {
		os.WriteFile(p, []byte(content), 0o644)
		if got, err := ReadExitCode(p); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", content, got, err, want)
		}
	}
	for _, bad := range []string{"", "x\n", "99999999999\n", strings.Repeat("1", 100)} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := ReadExitCode(p); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParseExitCode(f *testing.F) {
	for _, s := range []string{"0\n", "137\n", "-104", "", "x", "2147483648"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseExitCode(b)
		if err != nil {
			return
		}
		if w, err := ParseExitCode([]byte(strconv.Itoa(int(v)))); err != nil || w != v {
			t.Errorf("%q: %d, again %d %v", b, v, w, err)
		}
	})
}

func FuzzLocalDirs(f *testing.F) {
	f.Add("/d/usercache/u/appcache/application_1_0001,/e/usercache/u/appcache/application_1_0001")
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range LocalDirs(s) {
			found := false
			for _, part := range strings.Split(s, ",") {
				found = found || strings.HasPrefix(filepath.Clean(strings.TrimSpace(part)), d)
			}
			if !found {
				t.Errorf("%q gave %q, the start of none of its dirs", s, d)
			}
		}
	})
}
