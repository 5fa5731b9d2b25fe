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

// childJVM returns the pid of a child of parent whose command is java, or 0.
func childJVM(parent int) int {
	ps, err := listProcs()
	if err != nil {
		return 0
	}
	for _, p := range ps {
		if p.PPID == parent && p.Comm == "java" {
			return p.PID
		}
	}
	return 0
}

// environHas reports whether pid's environment holds key=value.
func environHas(pid int, kv []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		var e []byte
		if i < 0 {
			e, b = b, nil
		} else {
			e, b = b[:i], b[i+1:]
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
	var out []procEntry
	for _, p := range ps {
		if p.PID == self || p.State == 'Z' || p.State == 'X' {
			continue
		}
		if environHas(p.PID, kv) {
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
