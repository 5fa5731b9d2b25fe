package simulator

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Environment variables of the simulator's processes.
const (
	// EnvUnit names the ground truth of every process the simulator starts
	// and of their descendants: the attempt id, or the container (Hadoop 1:
	// JVM) id where the process runs several attempts. The agent never
	// reads it; tests compare the agent's attribution with it. Daemons do
	// not have it.
	EnvUnit = "TASKSCOPE_SIM_UNIT"
	// EnvCluster is set to the cluster's id in every process the
	// simulator starts, daemons included; Close kills what still has it.
	EnvCluster = "TASKSCOPE_SIM_CLUSTER"
	// envRole selects the daemon a re-executed binary runs.
	envRole = "TASKSCOPE_SIM_ROLE"

	roleNodeManager = "nodemanager"
	roleTaskTracker = "tasktracker"
)

// RunDaemonIfRequested runs a simulator daemon and exits when this process
// was started as one (the environment says so); otherwise it returns at
// once. Call it first thing in main() of any binary that starts a cluster,
// and in TestMain of every test package that does:
//
//	func TestMain(m *testing.M) {
//		simulator.RunDaemonIfRequested()
//		os.Exit(m.Run())
//	}
func RunDaemonIfRequested() {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	os.Exit(runDaemon(role))
}

func runDaemon(role string) int {
	// The real daemons are JVMs: their threads are all named java.
	setComm("java")
	f := os.NewFile(3, "controller")
	if f == nil {
		fmt.Fprintln(os.Stderr, "taskscope simulator daemon: no controller connection on fd 3")
		return 2
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "taskscope simulator daemon: %v\n", err)
		return 2
	}
	c := newConn(nc)
	m, err := c.recv()
	if err != nil || m.Config == nil {
		fmt.Fprintf(os.Stderr, "taskscope simulator daemon: no configuration: %v\n", err)
		return 2
	}
	cfg := m.Config
	logFile, err := os.OpenFile(filepath.Join(cfg.DaemonLogs, daemonLogName(cfg)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	var w io.Writer = os.Stderr
	if err == nil {
		defer logFile.Close()
		w = logFile
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", cfg.Name)
	switch role {
	case roleNodeManager:
		err = runNodeManager(cfg, c, log)
	case roleTaskTracker:
		err = runTaskTracker(cfg, c, log)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		log.Error("daemon failed", "err", err)
		fmt.Fprintf(os.Stderr, "taskscope simulator %s: %v\n", role, err)
		return 1
	}
	return 0
}

func daemonLogName(cfg *daemonConfig) string {
	user := os.Getenv("USER")
	if user == "" {
		user = "hadoop"
	}
	if cfg.Role == roleTaskTracker {
		return "hadoop-" + user + "-tasktracker-" + cfg.Name + ".log"
	}
	return "hadoop-" + user + "-nodemanager-" + cfg.Name + ".log"
}

// setComm names every thread of this process (new threads inherit it).
func setComm(name string) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, t := range tasks {
		os.WriteFile("/proc/self/task/"+t.Name()+"/comm", []byte(name), 0)
	}
}

// childEnv is the daemon's environment without the simulator's role
// variable, plus extra (later entries win).
func childEnv(extra ...kv) []string {
	env := make([]string, 0, len(os.Environ())+len(extra))
	idx := map[string]int{}
	add := func(k, v string) {
		if i, ok := idx[k]; ok {
			env[i] = k + "=" + v
			return
		}
		idx[k] = len(env)
		env = append(env, k+"="+v)
	}
	for _, e := range os.Environ() {
		k, v, _ := strings.Cut(e, "=")
		if k == envRole {
			continue
		}
		add(k, v)
	}
	for _, e := range extra {
		add(e.K, e.V)
	}
	return env
}

// send reports to the controller; a failure means the controller is gone,
// which the receive loop notices.
func sendEvent(c *conn, log *slog.Logger, m *message) {
	if err := c.send(m); err != nil {
		log.Debug("cannot report to the controller", "op", m.Op, "err", err)
	}
}

// waitFile waits until path exists and is not empty, and returns its content.
func waitFile(path string, timeout time.Duration, stop <-chan struct{}) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			return b, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not appear within %v", path, timeout)
		}
		select {
		case <-stop:
			return nil, fmt.Errorf("%s: the process ended first", path)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// reapLate waits for what a daemon launched and reaps it, delay after it
// exited (a busy daemon reaps late: its child stays a zombie meanwhile).
// It returns when the process exited.
func reapLate(cmd *exec.Cmd, delay time.Duration) (time.Time, error) {
	if delay > 0 {
		var info unix.Siginfo
		for {
			// WNOWAIT: see it exit, leave it a zombie.
			err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		exited := time.Now()
		time.Sleep(delay)
		return exited, cmd.Wait()
	}
	err := cmd.Wait()
	return time.Now(), err
}
