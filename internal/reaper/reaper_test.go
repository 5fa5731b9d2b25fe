package reaper

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

type sent struct {
	pid int
	sig syscall.Signal
}

func newTest(cfg Config) (*Reaper, *[]sent) {
	var log []sent
	cfg.Kill = func(pid int, sig syscall.Signal) error { log = append(log, sent{pid, sig}); return nil }
	return New(cfg), &log
}

func TestTermThenKill(t *testing.T) {
	r, log := newTest(Config{After: time.Minute, Grace: 10 * time.Second})
	t0 := time.Unix(1700000000, 0)
	tg := []Target{{PID: 500, StartTicks: 7, Group: 500, Reason: wire.EventOrphan, AttemptID: "attempt_1_0001_m_000000_0"},
		{PID: 501, StartTicks: 8, Group: 500, Reason: wire.EventOrphan}}
	if evs := r.Update(t0, tg); len(evs) != 0 || len(*log) != 0 {
		t.Fatalf("signalled at once: %v %v", evs, *log)
	}
	if evs := r.Update(t0.Add(59*time.Second), tg); len(evs) != 0 {
		t.Fatalf("signalled before AFTER: %v", evs)
	}
	evs := r.Update(t0.Add(time.Minute), tg)
	if len(evs) != 1 || len(*log) != 1 || (*log)[0] != (sent{-500, syscall.SIGTERM}) || evs[0].Kind != wire.EventReap ||
		!strings.Contains(evs[0].Message, "SIGTERM to process group 500 (orphan for 1m0s)") {
		t.Fatalf("SIGTERM: %+v %v", evs, *log)
	}
	if evs := r.Update(t0.Add(65*time.Second), tg); len(evs) != 0 {
		t.Fatalf("signalled again within the grace period: %v", evs)
	}
	evs = r.Update(t0.Add(70*time.Second), tg)
	if len(evs) != 1 || (*log)[1] != (sent{-500, syscall.SIGKILL}) {
		t.Fatalf("SIGKILL: %+v %v", evs, *log)
	}
	if evs := r.Update(t0.Add(200*time.Second), tg); len(evs) != 0 {
		t.Fatalf("signalled after SIGKILL: %v", evs)
	}
	// A process that is no longer identified starts over.
	r.Update(t0.Add(201*time.Second), nil)
	if evs := r.Update(t0.Add(202*time.Second), tg); len(evs) != 0 {
		t.Fatalf("the clock did not start over: %v", evs)
	}
}

func TestNeverSignalled(t *testing.T) {
	r, log := newTest(Config{After: 0, Self: 42, Protect: func(pid int32) bool { return pid == 77 },
		Allow: func(pid int32) bool { return pid != 78 }})
	now := time.Now()
	evs := r.Update(now, []Target{{PID: 1}, {PID: 0}, {PID: 42}, {PID: 77}, {PID: 78}, {PID: 90, Group: 1}, {PID: 91, Group: r.pgrp}})
	if len(evs) != 0 || len(*log) != 0 {
		t.Fatalf("%v %v", evs, *log)
	}
}

func TestDryRun(t *testing.T) {
	r, log := newTest(Config{After: time.Second, DryRun: true})
	now := time.Now()
	tg := []Target{{PID: 600, Reason: wire.EventUnknownContainer}}
	r.Update(now, tg)
	evs := r.Update(now.Add(2*time.Second), tg)
	if len(evs) != 1 || len(*log) != 0 || !strings.HasPrefix(evs[0].Message, "dry run: would send SIGTERM to process 600") {
		t.Fatalf("%+v %v", evs, *log)
	}
	if evs := r.Update(now.Add(time.Hour), tg); len(evs) != 0 {
		t.Fatalf("reported twice: %v", evs)
	}
}

func TestRealGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r := New(Config{After: 0, Grace: time.Second})
	pid := int32(cmd.Process.Pid)
	evs := r.Update(time.Now(), []Target{{PID: pid, Group: pid, Reason: wire.EventOrphan}})
	if len(evs) != 1 {
		t.Fatalf("%v", evs)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the group survived SIGTERM")
	}
}
