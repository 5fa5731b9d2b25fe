package simulator

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// YARN's cgroup layout (CGroupsHandlerImpl with the default hierarchy
// /hadoop-yarn): <mount of controller>/hadoop-yarn/<containerId>.
const cgroupHierarchy = "hadoop-yarn"

var cgroupControllers = []string{"cpu", "memory"}

// detectCgroups returns the cgroup v1 mounts of the cpu and memory
// controllers under which this process may create the hierarchy, or why not.
func detectCgroups() ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cgroups need root")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cannot read mountinfo: %w", err)
	}
	defer f.Close()
	mounts := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || rf[0] != "cgroup" || lf[3] != "/" {
			continue
		}
		for _, o := range strings.Split(rf[2], ",") {
			for _, c := range cgroupControllers {
				if o == c {
					if _, seen := mounts[c]; !seen {
						mounts[c] = lf[4]
					}
				}
			}
		}
	}
	var out []string
	for _, c := range cgroupControllers {
		m, ok := mounts[c]
		if !ok {
			return nil, fmt.Errorf("no cgroup v1 mount of the %s controller", c)
		}
		if err := os.MkdirAll(filepath.Join(m, cgroupHierarchy), 0o755); err != nil {
			return nil, fmt.Errorf("cannot create %s: %w", filepath.Join(m, cgroupHierarchy), err)
		}
		out = append(out, m)
	}
	return out, nil
}

// containerCgroups creates <mount>/hadoop-yarn/<id> in each mount; a
// memLimit > 0 is written to the memory controller's memory.limit_in_bytes.
func containerCgroups(mounts []string, id string, vcores int, memLimit int64) ([]string, error) {
	var paths []string
	for _, m := range mounts {
		p := filepath.Join(m, cgroupHierarchy, id)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			removeCgroups(paths)
			return nil, fmt.Errorf("cannot create cgroup %s: %w", p, err)
		}
		paths = append(paths, p)
		if strings.HasSuffix(m, "/cpu") || strings.Contains(m, "cpu,") {
			os.WriteFile(filepath.Join(p, "cpu.shares"), []byte(strconv.Itoa(1024*max(vcores, 1))), 0)
		}
		if memLimit > 0 && (strings.HasSuffix(m, "/memory") || strings.Contains(m, "memory,")) {
			if err := os.WriteFile(filepath.Join(p, "memory.limit_in_bytes"), []byte(strconv.FormatInt(memLimit, 10)), 0); err != nil {
				removeCgroups(paths)
				return nil, fmt.Errorf("cannot limit the memory of cgroup %s: %w", p, err)
			}
		}
	}
	return paths, nil
}

// firstCPU is the first CPU this process may run on ("CPU 0" of
// JobSpec.OnCPU0: a container's cpuset need not hold CPU 0).
func firstCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		for i := 0; i < 1024; i++ {
			if set.IsSet(i) {
				return i
			}
		}
	}
	return 0
}

// startIn starts cmd so that it is born inside the cgroups and on the
// CPUs (none: any): the calling OS thread joins them, forks, and goes
// back. Should going back fail, the thread is left locked and dies with
// its goroutine.
func startIn(cmd *exec.Cmd, paths []string, cpus []int) error {
	if len(paths) == 0 && len(cpus) == 0 {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var all unix.CPUSet
		if len(cpus) > 0 {
			if err := unix.SchedGetaffinity(0, &all); err != nil {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("cannot read the CPU affinity: %w", err)
				return
			}
			var set unix.CPUSet
			for _, c := range cpus {
				set.Set(c)
			}
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errc <- fmt.Errorf("cannot run on CPUs %v: %w", cpus, err)
				return // the thread stays locked
			}
		}
		tid := strconv.Itoa(unix.Gettid())
		var orig map[string]string
		if len(paths) > 0 {
			var err error
			if orig, err = threadCgroups(tid); err != nil {
				errc <- err
				return // the thread stays locked
			}
		}
		for _, p := range paths {
			if err := os.WriteFile(filepath.Join(p, "tasks"), []byte(tid), 0); err != nil {
				errc <- fmt.Errorf("cannot join cgroup %s: %w", p, err)
				moveBack(tid, paths, orig) // best effort; the thread stays locked
				return
			}
		}
		err := cmd.Start()
		back := len(paths) == 0 || moveBack(tid, paths, orig)
		if len(cpus) > 0 && unix.SchedSetaffinity(0, &all) != nil {
			back = false
		}
		if back {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// threadCgroups maps a controller's mount to the thread's cgroup path in it.
func threadCgroups(tid string) (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/task/" + tid + "/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

func moveBack(tid string, paths []string, orig map[string]string) bool {
	ok := true
	for _, p := range paths {
		mount := filepath.Dir(filepath.Dir(p))
		rel := "/"
		for _, ctrl := range strings.Split(filepath.Base(mount), ",") {
			if r, found := orig[ctrl]; found {
				rel = r
				break
			}
		}
		if err := os.WriteFile(filepath.Join(mount, rel, "tasks"), []byte(tid), 0); err != nil {
			ok = false
		}
	}
	return ok
}

// removeCgroups removes the container's cgroups, killing what is left in
// them, retrying while the kernel still counts exiting tasks.
func removeCgroups(paths []string) error {
	var errs []error
	for _, p := range paths {
		var err error
		for i := 0; i < 100; i++ {
			if err = syscall.Rmdir(p); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if b, rerr := os.ReadFile(filepath.Join(p, "cgroup.procs")); rerr == nil {
				for _, f := range strings.Fields(string(b)) {
					if pid, _ := strconv.Atoi(f); pid > 1 {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cannot remove cgroup %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
