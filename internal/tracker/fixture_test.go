package tracker

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files of the fixture tests")

// fixtureBoot is the boot time of every fixture tree (btime of /proc/stat).
const fixtureBoot = 1_700_000_000

// fixtureT0 is the time of a fixture's first tick: 1000 s after boot.
var fixtureT0 = time.Unix(fixtureBoot+1000, 0)

// fixture is a /proc tree in a temporary directory that a test builds and
// changes between ticks.
type fixture struct {
	t     testing.TB
	root  string
	fs    procfs.FS
	procs map[int32]*fproc
}

// fproc is one process of a fixture. Zero fields get plain defaults.
type fproc struct {
	pid, ppid, pgrp, sid int32
	comm                 string
	state                byte
	argv                 []string
	cmdline              []byte // raw /proc/PID/cmdline; overrides argv
	start                uint64 // clock ticks after boot
	utime, stime         uint64 // clock ticks
	cutime, cstime       uint64
	threads              int64
	rssPages             int64
	vsize                uint64
	env                  []string
	cgroup               string // the cgroup file's content
	cwd                  string // target of the cwd link
	readBytes            uint64
	writeBytes           uint64
	ctx                  uint64 // voluntary context switches
	stack                uint64 // startstack: new at every exec
	// ran is scheduler runtime (ns) beyond utime+stime: set and exec add
	// a millisecond, as a process runs to change (the tracker reads the
	// whole of a process only when its schedstat moved).
	ran uint64
	// only, when set, lists the files written (stat and cmdline are then
	// the whole process, as for a process whose other files are gone).
	only []string
	// broken makes files unreadable: "dir" (a directory: EISDIR), "garbage"
	// (unparsable), "dangling" (a link to nowhere: ENOENT while the process
	// is there).
	broken map[string]string
}

// fixtureDir is a temporary directory for a fixture tree: in /dev/shm where
// there is one (thousands of small files are made on a busy disk slowly).
func fixtureDir(t testing.TB) string {
	if d, err := os.MkdirTemp("/dev/shm", "taskscope-fixture-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

func newFixture(t testing.TB) *fixture {
	root := filepath.Join(fixtureDir(t), "proc")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, root: root, fs: procfs.NewFS(root), procs: map[int32]*fproc{}}
	f.write("stat", fmt.Sprintf("cpu  1 2 3 4\nbtime %d\nprocesses 1\n", fixtureBoot))
	// Entries the lister must skip.
	f.write("self/stat", "")
	f.write("sys/kernel/pid_max", "4194304\n")
	return f
}

func (f *fixture) write(rel, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// file writes a file below a process's directory (root/..., for the files a
// process sees: log.index, syslog_attempt_*) with the given modification time.
func (f *fixture) file(pid int32, rel, content string, mtime time.Time) {
	f.t.Helper()
	p := filepath.Join(f.root, strconv.Itoa(int(pid)), rel)
	f.write(strings.TrimPrefix(p, f.root+"/"), content)
	if !mtime.IsZero() {
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			f.t.Fatal(err)
		}
	}
}

// dir makes a directory outside /proc (a working directory) and returns its path.
func (f *fixture) dir(rel string) string {
	f.t.Helper()
	p := filepath.Join(filepath.Dir(f.root), "fs", rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (p *fproc) defaults() {
	if p.sid == 0 {
		p.sid = p.pid
	}
	if p.pgrp == 0 {
		p.pgrp = p.sid
	}
	if p.state == 0 {
		p.state = 'S'
	}
	if p.threads == 0 {
		p.threads = 1
	}
	if p.start == 0 {
		p.start = 90_000 + uint64(p.pid)
	}
	if p.comm == "" && len(p.argv) > 0 {
		p.comm = filepath.Base(p.argv[0])
		if len(p.comm) > 15 {
			p.comm = p.comm[:15]
		}
	}
	if p.stack == 0 {
		p.stack = 0x7ffd_0000_0000 + uint64(p.pid)<<12
	}
	if p.rssPages == 0 {
		p.rssPages = 1000
	}
	if p.vsize == 0 {
		p.vsize = 100 << 20
	}
}

func (p *fproc) statLine() string {
	return fmt.Sprintf("%d (%s) %c %d %d %d 0 -1 4194304 %d 0 %d 0 %d %d %d %d 20 0 %d 0 %d %d %d 18446744073709551615 1 1 %d 0 0 0 0 0 0 0 0 17 1 0 0 %d 0 0 0 0 0 0 0 0 0 0\n",
		p.pid, p.comm, p.state, p.ppid, p.pgrp, p.sid, 100+p.utime, 2, p.utime, p.stime, p.cutime, p.cstime,
		p.threads, p.start, p.vsize, p.rssPages, p.stack, 0)
}

func (p *fproc) files() map[string]string {
	cmd := p.cmdline
	if cmd == nil {
		for _, a := range p.argv {
			cmd = append(cmd, a...)
			cmd = append(cmd, 0)
		}
	}
	env := ""
	for _, e := range p.env {
		env += e + "\x00"
	}
	cg := p.cgroup
	if cg == "" {
		cg = "0::/user.slice\n"
	}
	return map[string]string{
		"stat":    p.statLine(),
		"cmdline": string(cmd),
		"status": fmt.Sprintf("Name:\t%s\nState:\t%c (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t%d\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nVmHWM:\t%d kB\nVmRSS:\t%d kB\nThreads:\t%d\nvoluntary_ctxt_switches:\t%d\nnonvoluntary_ctxt_switches:\t%d\n",
			p.comm, p.state, p.pid, p.pid, p.ppid, p.rssPages*4, p.rssPages*4, p.threads, p.ctx, p.ctx/10),
		"io": fmt.Sprintf("rchar: %d\nwchar: %d\nsyscr: 1\nsyscw: 1\nread_bytes: %d\nwrite_bytes: %d\ncancelled_write_bytes: 0\n",
			p.readBytes+100, p.writeBytes+100, p.readBytes, p.writeBytes),
		"schedstat":    fmt.Sprintf("%d %d 10\n", (p.utime+p.stime)*10_000_000+p.ran, p.utime*100_000),
		"environ":      env,
		"cgroup":       cg,
		"smaps_rollup": fmt.Sprintf("00400000-7fff0000 ---p 00000000 00:00 0 [rollup]\nRss: %d kB\nPss: %d kB\n", p.rssPages*4, p.rssPages*3),
	}
}

// add creates the process's directory.
func (f *fixture) add(p fproc) *fproc {
	f.t.Helper()
	p.defaults()
	dir := filepath.Join(f.root, strconv.Itoa(int(p.pid)))
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.writeFiles(dir, &p)
	pp := &p
	f.procs[p.pid] = pp
	return pp
}

func (f *fixture) writeFiles(dir string, p *fproc) {
	f.t.Helper()
	files := p.files()
	if p.only != nil {
		keep := map[string]string{}
		for _, n := range p.only {
			keep[n] = files[n]
		}
		files = keep
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		// Rewritten in place, as the kernel does: the tracker holds files
		// open. Only what is not a regular file now is made anew.
		if fi, err := os.Lstat(path); err == nil && (!fi.Mode().IsRegular() || p.broken[name] != "") {
			os.RemoveAll(path)
		}
		switch p.broken[name] {
		case "dir":
			if err := os.Mkdir(path, 0o755); err != nil {
				f.t.Fatal(err)
			}
			continue
		case "dangling":
			if err := os.Symlink(filepath.Join(dir, "nowhere", name), path); err != nil {
				f.t.Fatal(err)
			}
			continue
		case "garbage":
			content = "\x00\xff garbage ) ( 12 :\n"
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	if p.cwd != "" {
		os.Remove(filepath.Join(dir, "cwd"))
		if err := os.Symlink(p.cwd, filepath.Join(dir, "cwd")); err != nil {
			f.t.Fatal(err)
		}
	}
}

// set changes a process in place (same directory, same inode).
func (f *fixture) set(pid int32, change func(p *fproc)) {
	f.t.Helper()
	p := f.procs[pid]
	if p == nil {
		f.t.Fatalf("no fixture process %d", pid)
	}
	change(p)
	p.ran += 1_000_000
	f.writeFiles(filepath.Join(f.root, strconv.Itoa(int(pid))), p)
}

// exec changes a process's command line as an exec does (a new stack).
func (f *fixture) exec(pid int32, argv ...string) {
	f.t.Helper()
	p := f.procs[pid]
	if p == nil {
		f.t.Fatalf("no fixture process %d", pid)
	}
	p.argv, p.cmdline, p.stack, p.ran = argv, nil, p.stack+0x1000, p.ran+1_000_000
	p.comm = filepath.Base(argv[0])
	if len(p.comm) > 15 {
		p.comm = p.comm[:15]
	}
	f.writeFiles(filepath.Join(f.root, strconv.Itoa(int(pid))), p)
}

// remove makes a process vanish (it was reaped).
func (f *fixture) remove(pids ...int32) {
	f.t.Helper()
	for _, pid := range pids {
		if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(int(pid)))); err != nil {
			f.t.Fatal(err)
		}
		delete(f.procs, pid)
	}
}

// reuse replaces the process at p.pid by a new one: a new directory (so a
// new inode: the old one exists while the new one is made) renamed over it.
func (f *fixture) reuse(p fproc) *fproc {
	f.t.Helper()
	p.defaults()
	dir := filepath.Join(f.root, strconv.Itoa(int(p.pid)))
	tmp := filepath.Join(filepath.Dir(f.root), "new-"+strconv.Itoa(int(p.pid)))
	if err := os.MkdirAll(filepath.Join(tmp, "root"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.writeFiles(tmp, &p)
	var before, after os.FileInfo
	before, _ = os.Stat(dir)
	if err := os.RemoveAll(dir); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		f.t.Fatal(err)
	}
	after, _ = os.Stat(dir)
	if before != nil && os.SameFile(before, after) {
		f.t.Fatal("reused pid kept its inode")
	}
	pp := &p
	f.procs[p.pid] = pp
	return pp
}

// fakeExits is an ExitSource whose records the test queues.
type fakeExits struct {
	recs []taskstats.Record
	lost uint64 // the socket's overflows (exitLosses)
}

func (e *fakeExits) Lost() uint64    { return e.lost }
func (e *fakeExits) Dropped() uint64 { return e.lost }

func (e *fakeExits) Drain(fn func(*taskstats.Record)) error {
	recs := e.recs
	e.recs = nil
	for i := range recs {
		fn(&recs[i])
	}
	return nil
}

func (e *fakeExits) Close() error { return nil }

// exit queues the exit record of a process's leader thread: cpu ms of CPU
// (as clock ticks count it), a life of lifeMs up to its exit at nowMs
// after boot.
func (e *fakeExits) exit(pid, ppid int32, cpuMs, lifeMs int64, status int32) {
	e.exitAt(pid, ppid, cpuMs, lifeMs, 1000_000+lifeMs, status)
}

func (e *fakeExits) exitAt(pid, ppid int32, cpuMs, lifeMs, exitMs int64, status int32) {
	e.recs = append(e.recs, taskstats.Record{PID: pid, TID: pid, PPID: ppid, BtimeSec: fixtureBoot + (exitMs-lifeMs)/1000,
		UTimeUs: uint64(cpuMs) * 1000, EtimeUs: uint64(lifeMs) * 1000, ExitCode: status, Comm: "x"})
}

// fixtureRun drives a tracker over a fixture, one tick per second from fixtureT0.
type fixtureRun struct {
	t     testing.TB
	f     *fixture
	tr    *Tracker
	sink  *recSink
	exits *fakeExits
	n     int
	log   bytes.Buffer
}

func (f *fixture) tracker(exact bool) *fixtureRun {
	f.t.Helper()
	cfg := Config{FS: &f.fs, Host: "fixture", Collect: collect.Config{FS: &f.fs, PSSEvery: 1}, SelfPID: 4_000_000}
	r := &fixtureRun{t: f.t, f: f, sink: newRecSink()}
	if exact {
		r.exits = &fakeExits{}
		cfg.Exits = r.exits
	}
	tr, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	// The fixture's clock since boot: the tick's wall time less btime.
	tr.clock.sinceBoot = func() int64 { return fixtureT0.Add(time.Duration(r.n)*time.Second).UnixMilli() - fixtureBoot*1000 }
	tr.clock.exitsFromMs = tr.clock.sinceBoot()
	tr.acct.ncpu = 4
	f.t.Cleanup(func() { tr.Close() })
	r.tr = tr
	return r
}

func (r *fixtureRun) now() time.Time { return fixtureT0.Add(time.Duration(r.n) * time.Second) }

// tick takes one tick and appends what the tracker sees to the run's log.
func (r *fixtureRun) tick() {
	r.t.Helper()
	r.sink.events = r.sink.events[:0]
	if err := r.tr.Tick(r.now(), r.sink); err != nil {
		r.t.Fatal(err)
	}
	fmt.Fprintf(&r.log, "tick %d\n", r.n+1)
	r.log.WriteString(renderTick(r.tr, r.sink, 1))
	r.n++
}

// renderTick writes the tracker's view and the tick's events as text.
func renderTick(tr *Tracker, sink *recSink, indent int) string {
	var b strings.Builder
	pad := strings.Repeat("  ", indent)
	st := tr.Stats()
	fmt.Fprintf(&b, "%sscanned %d tracked %d units %d\n", pad, st.Scanned, st.Tracked, st.Units)
	for _, j := range tr.View() {
		fmt.Fprintf(&b, "%sjob %s (%s)\n", pad, j.JobID, j.Framework)
		for _, a := range j.Attempts {
			extra := ""
			if a.Orphaned {
				extra = " orphaned"
			}
			fmt.Fprintf(&b, "%s  attempt %s type %s container %q cpu %d ms%s\n", pad, a.AttemptID, a.Type, a.ContainerID, a.CPUMs, extra)
			for _, p := range a.Processes {
				fmt.Fprintf(&b, "%s    pid %d ppid %d %s: %s\n", pad, p.PID, p.PPID, p.Role, shortCmd(p.Cmdline))
			}
		}
	}
	// Units are visited in map order: events of different attempts sorted.
	var evs []string
	for _, e := range sink.events {
		evs = append(evs, fmt.Sprintf("%sevent %s attempt %q pid %d value %d %s\n", pad, e.Kind, e.AttemptID, e.PID, e.Value, e.Message))
	}
	sort.SliceStable(evs, func(i, j int) bool { return attemptOf(evs[i]) < attemptOf(evs[j]) })
	for _, e := range evs {
		b.WriteString(e)
	}
	return b.String()
}

func attemptOf(event string) string {
	_, a, _ := strings.Cut(event, " attempt ")
	return a[:strings.IndexByte(a, ' ')]
}

func shortCmd(s string) string {
	if len(s) <= 160 {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:160], len(s))
}

// metricsOf renders the metrics the tracker read for a process.
func metricsOf(tr *Tracker, pid int32) string {
	for _, j := range tr.View() {
		for _, a := range j.Attempts {
			for _, p := range a.Processes {
				if p.PID != pid {
					continue
				}
				var names []string
				for k := range p.Values {
					names = append(names, k)
				}
				sort.Strings(names)
				var b strings.Builder
				for _, n := range names {
					fmt.Fprintf(&b, " %s=%d", n, p.Values[n])
				}
				return strings.TrimSpace(b.String())
			}
		}
	}
	return "(not tracked)"
}

// golden compares got with testdata/golden/<name>.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// procByPID finds a process in the tracker's view.
func viewOf(tr *Tracker, pid int32) (AttemptView, ProcessView, bool) {
	for _, j := range tr.View() {
		for _, a := range j.Attempts {
			for _, p := range a.Processes {
				if p.PID == pid {
					return a, p, true
				}
			}
		}
	}
	return AttemptView{}, ProcessView{}, false
}

var _ = wire.RoleChild
