package tracker

import (
	"fmt"
	"io/fs"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

// fakeTable is a process table as the tracker's parts see it (their
// views: outcomeView, exitView, memberView, statReader, lostView,
// attributionView), made
// of plain values a test sets: no /proc behind it.
type fakeTable struct {
	procs    map[int32]*proc
	units    map[string]*unit
	cycle    uint64
	bootMs   int64                 // CLOCK_BOOTTIME at this tick's listing
	stats    map[int32]procfs.Stat // what statOf reads
	gonePIDs map[int32]bool        // pids that left /proc
	nms      []ContainerLister     // the NodeManagers polled
	daemons  map[int32]*daemonConf // what daemons' conf dirs say
	cwds     map[int32]string      // cwd links
	fs       procfs.FS             // handles (openProc) are of a tree nothing reads
	statErr  map[int32]error       // a stat that cannot be read
	reads    int                   // statOf calls
	onStat   func(pid int32)       // called at each statOf, before the read
	newKids  map[int32][]int32     // this tick's new processes, by parent (newChildren)
	unlisted []int32               // what unlist took out of the listing
}

func newFakeTable() *fakeTable {
	return &fakeTable{procs: map[int32]*proc{}, units: map[string]*unit{}, cycle: 1, stats: map[int32]procfs.Stat{},
		gonePIDs: map[int32]bool{}, daemons: map[int32]*daemonConf{}, cwds: map[int32]string{},
		fs: procfs.NewFS("/nonexistent"), statErr: map[int32]error{}}
}

func (f *fakeTable) proc(pid int32) *proc                                { return f.procs[pid] }
func (f *fakeTable) listed(p *proc) bool                                 { return p.seen == f.cycle }
func (f *fakeTable) alive(p *proc) bool                                  { return p.seen == f.cycle && !p.t.vanished }
func (f *fakeTable) bootNow() int64                                      { return f.bootMs }
func (f *fakeTable) startMs(ticks uint64) int64                          { return int64(ticks) * 10 }
func (f *fakeTable) pidGone(pid int32) bool                              { return f.gonePIDs[pid] }
func (f *fakeTable) openProc(pid int32) *procfs.Proc                     { return f.fs.OpenProc(pid) }
func (f *fakeTable) nodeManagers() []ContainerLister                     { return f.nms }
func (f *fakeTable) unitTable() map[string]*unit                         { return f.units }
func (f *fakeTable) procTable() map[int32]*proc                          { return f.procs }
func (f *fakeTable) ownDaemon(int32) bool                                { return true }
func (f *fakeTable) readDaemonConf(pid int32, _ hadoop.Kind) *daemonConf { return f.daemons[pid] }

// track makes p a member of u with the role given (attributionView).
func (f *fakeTable) track(p *proc, u *unit, _ []string, cmdline string, l *hadoop.Launch, role string) {
	p.state = stTracked
	p.t = &tracked{key: uint64(p.pid), unit: u, cmdline: cmdline, launch: *l, role: role, vals: make([]int64, 9)}
	u.members = append(u.members, p)
}

func (f *fakeTable) cwd(pid int32) (string, error) {
	if c, ok := f.cwds[pid]; ok {
		return c, nil
	}
	return "", fs.ErrNotExist
}

func (f *fakeTable) newChildren(ppid int32, dst []int32) []int32 {
	return append(dst, f.newKids[ppid]...)
}

func (f *fakeTable) unlist(pid int32) bool {
	p := f.procs[pid]
	if p == nil || p.seen != f.cycle {
		return false
	}
	p.seen = f.cycle - 1
	f.unlisted = append(f.unlisted, pid)
	return true
}

func (f *fakeTable) statOf(pid int32, _ *procfs.Proc) (*procfs.Stat, error) {
	f.reads++
	if f.onStat != nil {
		f.onStat(pid)
	}
	if err := f.statErr[pid]; err != nil {
		return nil, err
	}
	st, ok := f.stats[pid]
	if !ok {
		return nil, fmt.Errorf("cannot read stat of pid %d: %w", pid, fs.ErrNotExist)
	}
	return &st, nil
}

// next starts the next tick: the processes given are listed in it.
func (f *fakeTable) next(listed ...int32) {
	f.cycle++
	for _, pid := range listed {
		f.procs[pid].seen = f.cycle
	}
}

// fakeIdx is where a fake process's values are: CPU user, system, its
// children's user and system, RSS, read and write bytes, GC, wait.
var fakeIdx = metricIndex{cpuUser: 0, cpuSys: 1, cpuCUser: 2, cpuCSys: 3, rss: 4, read: 5, write: 6, gc: 7, wait: 8,
	pss: -1, vms: -1, heap: -1, run: -1, threads: -1}

// fakeUnit is a unit running attempt id.
func (f *fakeTable) fakeUnit(key, id string) (*unit, *attempt) {
	u := &unit{key: key, containerID: key}
	a := &attempt{unit: u, info: wire.Attempt{AttemptID: id}}
	u.cur = a
	f.units[key] = u
	return u, a
}

// fakeMember adds a listed process to u, a member of its attempt, with
// its own CPU (ms, user) and that of the children it reaped (ms, user).
func (f *fakeTable) fakeMember(u *unit, pid, ppid int32, startTicks uint64, cpuMs, childrenMs int64) *proc {
	p := &proc{pid: pid, ppid: ppid, pgrp: pid, startTicks: startTicks, seen: f.cycle, state: stTracked}
	tr := &tracked{key: uint64(pid), unit: u, vals: make([]int64, 9), age: 1, startMs: int64(startTicks) * 10}
	tr.vals[fakeIdx.cpuUser], tr.vals[fakeIdx.cpuCUser] = cpuMs, childrenMs
	tr.present = 1<<9 - 1
	tr.lastChildren = childrenMs
	tr.mem = &member{att: u.cur}
	p.t = tr
	f.procs[pid] = p
	u.members = append(u.members, p)
	return p
}

// fakeProc adds a listed process that is no task's.
func (f *fakeTable) fakeProc(pid, ppid int32, startTicks uint64) *proc {
	p := &proc{pid: pid, ppid: ppid, startTicks: startTicks, seen: f.cycle}
	f.procs[pid] = p
	return p
}

// exitRecord is the exit record of a process of one thread.
func exitRecord(pid, ppid int32, cpuMs int64, status int32) *taskstats.Record {
	return &taskstats.Record{PID: pid, TID: pid, PPID: ppid, UTimeUs: uint64(cpuMs) * 1000, ExitCode: status, BtimeSec: 1}
}
