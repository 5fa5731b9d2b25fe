package simulator

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// Fault is what happens to a map task's first attempt (JobSpec.Faults):
// how it ends, as the node then shows it. A failed or killed attempt is
// retried (attempt _1, ...), as the MRAppMaster does up to
// mapreduce.map.maxattempts.
type Fault int

// The faults.
const (
	FaultNone Fault = iota
	// FaultExit1: the task JVM exits 1 (failed); bash -c, the exit-code
	// file and the NodeManager say 1.
	FaultExit1
	// FaultKill9: the simulator kills the task JVM with SIGKILL once it has
	// run a moment (kill -9 by hand, or by something else): bash -c exits
	// 137, as do the exit-code file and the NodeManager (killed).
	FaultKill9
	// FaultPmem: the task holds more memory than its container: the
	// NodeManager's monitor kills it, exitCode -104 (killed_memory).
	FaultPmem
	// FaultOOM: the container's memory cgroup is limited to its size
	// (yarn.nodemanager.resource.memory.enforced; needs Options.Cgroups)
	// and the task holds more: the kernel's OOM killer kills the JVM
	// (SIGKILL, the cgroup's oom_kill count grows; killed_memory).
	FaultOOM
	// FaultSpeculate: the task runs long; a speculative copy (attempt _1)
	// starts beside it once it has run a moment, finishes, and the
	// ApplicationMaster kills the original: -105, exit 143 (killed).
	FaultSpeculate
)

var faultNames = [...]string{"none", "exit1", "kill9", "pmem", "oom", "speculate"}

func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// faultRun is how long a faulted attempt would run (it ends by its fault
// long before), and faultAfter how long it runs before the simulator acts
// (a kill -9, a speculative copy): long enough for an agent to see it.
const (
	faultRun   = 120 * time.Second
	faultAfter = 2 * time.Second
	copyRun    = 3 * time.Second // a speculative copy lasts at least this
)

// checkFaults says why spec's faults cannot run, if they cannot.
func (c *Cluster) checkFaults(s JobSpec) error {
	for i, f := range s.Faults {
		if f == FaultNone {
			continue
		}
		if s.Kind != JobMapReduce && s.Kind != JobStreaming {
			return fmt.Errorf("faults are for MapReduce and Streaming jobs on YARN, not %s", s.Kind)
		}
		if f < FaultNone || int(f) >= len(faultNames) {
			return fmt.Errorf("map %d: unknown fault %d", i, int(f))
		}
		if f == FaultOOM && len(c.cgroups) == 0 {
			return errors.New("the OOM killer fault needs the cluster's cgroups (Options.Cgroups)")
		}
	}
	if len(s.Faults) > s.Maps {
		return fmt.Errorf("%d faults for %d maps", len(s.Faults), s.Maps)
	}
	return nil
}

// fault is map i's fault.
func (s *JobSpec) fault(i int) Fault {
	if i < len(s.Faults) {
		return s.Faults[i]
	}
	return FaultNone
}

// faultMemMB is what a task over its container's memory holds.
func (c *Cluster) faultMemMB(s JobSpec) int { return c.containerMB(s) * 3 / 2 }

// faultConf adds the work parameters of the faulted first attempts.
func (c *Cluster) faultConf(conf *confList, j *Job) {
	s := j.Spec
	p := "taskscope.sim."
	for i, f := range s.Faults {
		a := attemptID(c.ts, j.seq, "m", i, 0)
		switch f {
		case FaultExit1:
			conf.set(p+"exit.code."+a, "1")
		case FaultKill9:
			conf.set(p+"hold.ms."+a, c.ms(faultRun))
		case FaultSpeculate:
			// The copy runs a while beside its original, as a real one does.
			conf.set(p+"hold.ms."+a, c.ms(faultRun))
			conf.set(p+"hold.ms."+attemptID(c.ts, j.seq, "m", i, 1), c.ms(copyRun))
		case FaultPmem, FaultOOM:
			conf.set(p+"hold.ms."+a, c.ms(faultRun))
			conf.set(p+"mem.mb."+a, strconv.Itoa(c.faultMemMB(s)))
		}
	}
}

var reXmx = regexp.MustCompile(`-Xmx\S+`)

// faultReq shapes the launch of map i's attempt n for its fault: a heap
// for what it holds, a memory cgroup limit.
func (c *Cluster) faultReq(s JobSpec, i, n int, req *launchReq) {
	if n != 0 {
		return
	}
	switch s.fault(i) {
	case FaultPmem, FaultOOM:
		req.Command = reXmx.ReplaceAllString(req.Command, "-Xmx"+strconv.Itoa(2*c.faultMemMB(s))+"m")
		req.MemoryLimit = s.fault(i) == FaultOOM
	}
}

// runFaultedTask runs map task i whose first attempt has a fault: the
// attempt, what the simulator does to it, and the retries or the
// speculative copy that follow.
func (c *Cluster) runFaultedTask(j *Job, i int, build func(attempt int) (*launchReq, error)) error {
	f := j.Spec.fault(i)
	if f != FaultKill9 && f != FaultSpeculate {
		return c.runContainerTask(j, build) // the attempt ends by itself; the task is retried
	}
	n, err := c.acquire(NodeYARN, 0)
	if err != nil {
		return err
	}
	req, err := build(0)
	if err != nil {
		c.release(n, 0)
		return err
	}
	p, err := c.launchContainer(j, n, req)
	if err != nil {
		c.release(n, 0)
		return err
	}
	select {
	case <-p.started:
	case <-c.ctx.Done():
		c.release(n, 0)
		return ErrClosed
	}
	select {
	case <-p.done:
	case <-time.After(c.scaled(faultAfter)):
	case <-c.ctx.Done():
		c.release(n, 0)
		return ErrClosed
	}
	if f == FaultKill9 {
		if r := c.snapshot(p); r.JVMPID > 1 && r.End.IsZero() {
			c.log.Info("fault: kill -9 of the task JVM", "attempt", r.AttemptID, "pid", r.JVMPID)
			syscall.Kill(r.JVMPID, syscall.SIGKILL)
		}
		err := c.waitProc(p)
		c.release(n, 0)
		if err != nil {
			return err
		}
		// The retries, from attempt 1.
		return c.runContainerTask(j, func(k int) (*launchReq, error) { return build(k + 1) })
	}
	// A speculative copy beside it; when the copy is done, the original is killed.
	copyErr := c.runContainerTask(j, func(k int) (*launchReq, error) { return build(k + 1) })
	c.mu.Lock()
	node, unit := p.node, p.res.Unit
	c.mu.Unlock()
	c.log.Info("fault: the speculative copy is done; killing the original", "unit", unit)
	node.conn.send(&message{Op: opKill, Key: unit})
	err = c.waitProc(p)
	c.release(n, 0)
	if copyErr != nil {
		return copyErr
	}
	return err
}
