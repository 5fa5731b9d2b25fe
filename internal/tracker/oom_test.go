package tracker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// oomKillField reads memory.oom_control's count.
func TestOOMKillField(t *testing.T) {
	if v, ok := oomKillField([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")); !ok || v != 3 {
		t.Errorf("oom_kill: %d %v", v, ok)
	}
}

// TestOOMWatch: a process that goes over its memory cgroup's limit is
// killed by the kernel's OOM killer; the watch counts it, whether the
// cgroup is still there when asked or was removed already (as the
// NodeManager does at once). Needs root and cgroup v1's memory controller.
func TestOOMWatch(t *testing.T) {
	base := "/sys/fs/cgroup/memory/hadoop-yarn"
	if os.Geteuid() != 0 {
		t.Skip("needs root: memory cgroups")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Skipf("no cgroup v1 memory controller here: %v", err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for i, tc := range []struct {
		oom, remove bool
		want        uint32
	}{{true, true, 1}, {true, false, 1}, {false, true, 0}} {
		container := "container_e01_1700000000123_0099_01_00000" + strconv.Itoa(i+1)
		dir := filepath.Join(base, container)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Rmdir(dir) })
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("50000000"), 0); err != nil {
			t.Fatal(err)
		}
		mb := "10"
		if tc.oom {
			mb = "200"
		}
		// Waits for a line on stdin (the watch is registered by then), then allocates.
		cmd := exec.Command(python, "-c", "import sys; sys.stdin.readline(); x = [bytearray(1 << 20) for i in range("+mb+")]")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			cmd.Process.Kill()
			t.Fatal(err)
		}
		u := &unit{containerID: container, members: []*proc{{pid: int32(cmd.Process.Pid), t: &tracked{}}}, cur: &attempt{}}
		u.end.oom = tr.ends.watchOOM(u)
		if u.end.oom == nil {
			cmd.Process.Kill()
			t.Fatal("no watch registered")
		}
		stdin.Write([]byte("go\n"))
		err = cmd.Wait()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if tc.oom != (ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
			t.Fatalf("case %d: the process ended %v", i, err)
		}
		if tc.remove {
			if err := syscall.Rmdir(dir); err != nil {
				t.Fatal(err)
			}
		}
		tr.ends.ended(u, 0)
		if got := u.cur.info.OOMKills; got != tc.want {
			t.Errorf("case %d (OOM %v, cgroup removed %v): %d OOM kills, want %d", i, tc.oom, tc.remove, got, tc.want)
		}
		if u.end.oom != nil {
			t.Error("the watch was not released")
		}
	}
}
