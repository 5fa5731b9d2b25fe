package simulator

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"github.com/taskscope/taskscope/internal/procfs"
)

// Reading the live process table, for the simulator's own bookkeeping (the
// daemons find their JVMs; Close makes sure nothing is left).

var procFS = procfs.NewFS("/proc")

// procEntry is what the simulator needs of one process.
type procEntry struct {
	PID, PPID, PGRP, Session int
	State                    byte
	Comm                     string
}

// listProcs reads every process's stat; vanished processes are skipped.
func listProcs() ([]procEntry, error) {
	l := procFS.NewLister()
	pids, err := l.List(nil)
	if err != nil {
		return nil, err
	}
	out := make([]procEntry, 0, len(pids))
	var buf []byte
	var st procfs.Stat
	for _, p := range pids {
		buf, err = procFS.ReadPidFile(p.PID, "stat", buf)
		if err != nil {
			continue
		}
		if procfs.ParseStat(buf, &st) != nil {
			continue
		}
		out = append(out, procEntry{
			PID: int(st.PID), PPID: int(st.PPID), PGRP: int(st.PGRP), Session: int(st.Session),
			State: st.State, Comm: string(st.Comm),
		})
	}
	return out, nil
}

// statOf reads one process's stat.
func statOf(pid int) (procEntry, error) {
	buf, err := procFS.ReadPidFile(int32(pid), "stat", nil)
	if err != nil {
		return procEntry{}, err
	}
	var st procfs.Stat
	if err := procfs.ParseStat(buf, &st); err != nil {
		return procEntry{}, err
	}
	return procEntry{PID: int(st.PID), PPID: int(st.PPID), PGRP: int(st.PGRP), Session: int(st.Session), State: st.State, Comm: string(st.Comm)}, nil
}

// childJVM returns the pid of a child of parent that has exec'd java, or 0.
func childJVM(parent int) int {
	ps, err := listProcs()
	if err != nil {
		return 0
	}
	for _, p := range ps {
		if p.PPID == parent && p.Comm == "java" && execDone(p.PID) {
			return p.PID
		}
	}
	return 0
}

// execDone reports whether pid's command line and environment are in
// place. The kernel renames a process (comm) before it has set up the new
// program's stack: in between, both read empty.
func execDone(pid int) bool {
	for _, f := range []string{"cmdline", "environ"} {
		b, err := procFS.ReadPidFile(int32(pid), f, nil)
		if err != nil || len(b) == 0 {
			return false
		}
	}
	return true
}

// readEnviron reads /proc/<pid>/environ with one read into buf: a process
// that exits or execs between two reads would leave a truncated or mixed
// environment.
func readEnviron(pid int, buf []byte) ([]byte, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if n == 0 && err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// environHas reports whether env (NUL-separated) holds kv ("key=value").
func environHas(env, kv []byte) bool {
	for len(env) > 0 {
		i := bytes.IndexByte(env, 0)
		var e []byte
		if i < 0 {
			e, env = env, nil
		} else {
			e, env = env[:i], env[i+1:]
		}
		if bytes.Equal(e, kv) {
			return true
		}
	}
	return false
}

// markedProcs returns the live (non-zombie) processes whose environment
// holds key=value.
func markedProcs(key, value string) []procEntry {
	ps, err := listProcs()
	if err != nil {
		return nil
	}
	kv := []byte(key + "=" + value)
	self := os.Getpid()
	buf := make([]byte, 1<<20)
	var out []procEntry
	for _, p := range ps {
		if p.PID == self || p.State == 'Z' || p.State == 'X' {
			continue
		}
		if env, err := readEnviron(p.PID, buf); err == nil && environHas(env, kv) {
			out = append(out, p)
		}
	}
	return out
}

// killGroupAndPid sends sig to pid's process group when pid leads one, and to pid.
func killGroupAndPid(pid int, sig syscall.Signal) {
	if pid <= 1 {
		return
	}
	if st, err := statOf(pid); err == nil && st.PGRP == pid {
		syscall.Kill(-pid, sig)
	}
	syscall.Kill(pid, sig)
}
