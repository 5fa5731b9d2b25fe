package simulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// ErrClosed is returned for work asked of a closed cluster.
var ErrClosed = errors.New("simulator: cluster closed")

// Job is a submitted job. Its methods are safe for concurrent use.
type Job struct {
	// ID is the job id (job_<ts>_<n>) for MapReduce and Streaming, the
	// application id for Spark and Tez.
	ID string
	// AppID is the YARN application id (application_<ts>_<n>); empty for Hadoop 1.
	AppID string
	// Spec is the spec as run, defaults filled in.
	Spec JobSpec

	c          *Cluster
	seq        int
	procs      []*proc // guarded by c.mu
	containers int     // container sequence numbers given out; guarded by c.mu
	done       chan struct{}
	err        error
	start, end time.Time
}

// Submit starts a job and returns at once; the job runs until it is done
// or the cluster is closed. MapReduce jobs run their maps, then their
// reduces, with an MRAppMaster (YARN) alongside. ctx bounds the submission only.
func (c *Cluster) Submit(ctx context.Context, spec JobSpec) (*Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	want := NodeYARN
	if spec.Kind.Hadoop1() {
		want = NodeHadoop1
	}
	if spec.Kind < JobMapReduce || spec.Kind > JobHadoop1Streaming {
		return nil, fmt.Errorf("unknown job kind %d", spec.Kind)
	}
	if err := c.checkFaults(normalize(spec, 0)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	alive := false
	for _, n := range c.nodes {
		alive = alive || (n.info.Kind == want && n.info.Alive)
	}
	if !alive {
		c.mu.Unlock()
		return nil, fmt.Errorf("no live %s node for a %s job", want, spec.Kind)
	}
	c.seq++
	j := &Job{c: c, seq: c.seq, done: make(chan struct{}), start: time.Now()}
	j.Spec = normalize(spec, j.seq)
	switch spec.Kind {
	case JobMapReduce, JobStreaming:
		j.ID, j.AppID = jobID(c.ts, j.seq), appID(c.ts, j.seq)
	case JobSpark, JobTez:
		j.AppID = appID(c.ts, j.seq)
		j.ID = j.AppID
	default:
		j.ID = jobID(c.ts, j.seq)
	}
	c.jobs[j.ID] = j
	if j.AppID != "" {
		c.jobs[j.AppID] = j
	}
	c.runners.Add(1)
	c.mu.Unlock()
	c.notify(Event{Kind: EventJobSubmitted, JobID: j.ID})
	c.log.Info("job submitted", "job", j.ID, "kind", j.Spec.Kind, "name", j.Spec.Name)
	go func() {
		defer c.runners.Done()
		err := c.run(j)
		c.mu.Lock()
		j.err, j.end = err, time.Now()
		close(j.done)
		c.broadcast()
		c.mu.Unlock()
		c.log.Info("job finished", "job", j.ID, "err", err)
		c.notify(Event{Kind: EventJobFinished, JobID: j.ID, Err: err})
	}()
	return j, nil
}

func normalize(s JobSpec, seq int) JobSpec {
	if s.Name == "" {
		s.Name = fmt.Sprintf("%s-%d", s.Kind, seq)
	}
	if s.User == "" {
		s.User = "hadoop"
	}
	if s.Queue == "" {
		s.Queue = "default"
	}
	if s.Maps <= 0 {
		s.Maps = 2
	}
	if s.NoReduces {
		s.Reduces = 0
	} else if s.Reduces <= 0 {
		s.Reduces = 1
	}
	if s.TaskCPU <= 0 {
		s.TaskCPU = time.Second
	}
	if s.TaskMemMB <= 0 {
		s.TaskMemMB = 32
	}
	if s.MemoryMB <= 0 {
		s.MemoryMB = 1024
	}
	if s.Kind == JobStreaming || s.Kind == JobHadoop1Streaming {
		if s.ShortLivedChildren == 0 {
			s.ShortLivedChildren = 6
		}
		if s.StreamCPU <= 0 {
			s.StreamCPU = s.TaskCPU / 2
		}
	}
	if s.ShortLivedChildren < 0 {
		s.ShortLivedChildren = 0
	}
	if s.JVMReuse == 0 {
		s.JVMReuse = 1
		if s.Kind == JobTez {
			s.JVMReuse = 2
		}
	}
	if s.Executors <= 0 {
		s.Executors = 2
	}
	if s.Cores <= 0 {
		s.Cores = 1
	}
	return s
}

func (c *Cluster) run(j *Job) error {
	switch j.Spec.Kind {
	case JobMapReduce, JobStreaming:
		return c.runMapReduce(j)
	case JobSpark:
		return c.runSpark(j)
	case JobTez:
		return c.runTez(j)
	default:
		return c.runHadoop1(j)
	}
}

// Wait waits for the job to finish (or ctx) and returns what it ran.
func (j *Job) Wait(ctx context.Context) (*JobResult, error) {
	select {
	case <-j.done:
	case <-ctx.Done():
		return j.result(), ctx.Err()
	}
	return j.result(), j.err
}

// Done is closed when the job has finished.
func (j *Job) Done() <-chan struct{} { return j.done }

func (j *Job) result() *JobResult {
	c := j.c
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &JobResult{JobID: j.ID, AppID: j.AppID, Kind: j.Spec.Kind, Start: j.start, End: j.end}
	for _, p := range j.procs {
		r.Attempts = append(r.Attempts, p.snapshot())
	}
	return r
}

// Processes returns the job's process trees so far.
func (j *Job) Processes() []AttemptResult { return j.result().Attempts }

// WaitProcesses waits until at least n of the job's process trees have
// started (their pids are known) and returns those, in start order.
func (j *Job) WaitProcesses(ctx context.Context, n int) ([]AttemptResult, error) {
	c := j.c
	for {
		c.mu.Lock()
		var out []AttemptResult
		for _, p := range j.procs {
			if p.isStart && !p.res.Start.IsZero() {
				out = append(out, p.snapshot())
			}
		}
		ch := c.changed
		finished := false
		select {
		case <-j.done:
			finished = true
		default:
		}
		c.mu.Unlock()
		if len(out) >= n {
			return out, nil
		}
		if finished {
			return out, fmt.Errorf("job %s finished with %d of %d processes: %v", j.ID, len(out), n, j.err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// WaitFor waits until ok holds for the job's processes (checked at every change).
func (j *Job) WaitFor(ctx context.Context, ok func([]AttemptResult) bool) ([]AttemptResult, error) {
	c := j.c
	for {
		c.mu.Lock()
		var out []AttemptResult
		for _, p := range j.procs {
			out = append(out, p.snapshot())
		}
		ch := c.changed
		c.mu.Unlock()
		if ok(out) {
			return out, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

// jobForAttempt finds the job of an attempt id; c.mu must be held.
func (c *Cluster) jobForAttempt(attempt string) *Job {
	a, ok := hadoop.ParseAttempt(attempt)
	if !ok {
		return nil
	}
	return c.jobs[a.JobID()]
}

// acquire takes one unit of capacity (slot index idx) on the least used
// live node of kind, waiting for one to free up.
func (c *Cluster) acquire(kind NodeKind, idx int) (*node, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		var best *node
		alive := false
		for _, n := range c.nodes {
			if n.info.Kind != kind || !n.info.Alive || n.stopping {
				continue
			}
			alive = true
			if n.used[idx] < c.capacity(kind, idx) && (best == nil || n.used[idx] < best.used[idx]) {
				best = n
			}
		}
		if best != nil {
			best.used[idx]++
			c.mu.Unlock()
			return best, nil
		}
		ch := c.changed
		c.mu.Unlock()
		if !alive {
			return nil, fmt.Errorf("no live %s node left", kind)
		}
		select {
		case <-ch:
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
}

func (c *Cluster) capacity(kind NodeKind, idx int) int {
	if kind == NodeYARN {
		return c.o.MapSlots + c.o.ReduceSlots
	}
	if idx == 1 {
		return c.o.ReduceSlots
	}
	return c.o.MapSlots
}

func (c *Cluster) release(n *node, idx int) {
	c.mu.Lock()
	n.used[idx]--
	c.broadcast()
	c.mu.Unlock()
}

// amNode picks the live YARN node with the fewest processes for an
// ApplicationMaster (which takes no task capacity).
func (c *Cluster) amNode() (*node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *node
	load := func(n *node) int {
		k := 0
		for _, p := range n.procs {
			if !p.isDone {
				k++
			}
		}
		return k
	}
	for _, n := range c.nodes {
		if n.info.Kind == NodeYARN && n.info.Alive && !n.stopping && (best == nil || load(n) < load(best)) {
			best = n
		}
	}
	if best == nil {
		return nil, errors.New("no live YARN node")
	}
	return best, nil
}

// waitProc waits for the process tree to end (or to be lost, or Close).
func (c *Cluster) waitProc(p *proc) error {
	select {
	case <-p.done:
		return nil
	case <-c.ctx.Done():
		return ErrClosed
	}
}

func (c *Cluster) snapshot(p *proc) AttemptResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.snapshot()
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scaled multiplies d by the cluster's Scale.
func (c *Cluster) scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * c.scale) }

func (c *Cluster) ms(d time.Duration) string {
	return strconv.FormatInt(c.scaled(d).Milliseconds(), 10)
}

// workConf adds the simulator's work parameters (taskscope.sim.*) to a job
// configuration. Per-unit overrides append ".<unit>" to a key: a task
// (m_000003), a Tez attempt, a Spark executor (exec_2), an attempt id, "am".
func (c *Cluster) workConf(conf *confList, j *Job) {
	s := j.Spec
	p := "taskscope.sim."
	conf.set(p+"cpu.ms", c.ms(s.TaskCPU))
	conf.set(p+"mem.mb", strconv.Itoa(s.TaskMemMB))
	conf.set(p+"hold.ms", c.ms(s.Hold))
	conf.set(p+"io.mb", strconv.Itoa(s.IOMB))
	if s.Leak {
		conf.set(p+"leak.mb.per.s", strconv.Itoa(leakRate(s)))
	}
	if s.GCBound {
		conf.set(p+"gc", "true")
	}
	if s.Kind == JobStreaming || s.Kind == JobHadoop1Streaming {
		conf.set(p+"stream.cpu.ms", c.ms(s.StreamCPU))
		conf.set(p+"stream.children", strconv.Itoa(s.ShortLivedChildren))
	}
	conf.set(p+"input.wait.ms", c.ms(s.InputWait))
	conf.set(p+"lock.wait.ms", c.ms(s.LockWait))
	conf.set(p+"threads", strconv.Itoa(s.Threads))
	if s.SlowMap > 0 {
		conf.set(p+"input.wait.ms."+taskUnit("m", 0), c.ms(s.InputWait+s.SlowMap))
	}
	for _, k := range []string{"mem.mb", "hold.ms", "io.mb", "leak.mb.per.s", "gc", "input.wait.ms", "lock.wait.ms", "threads"} {
		conf.set(p+k+".am", "0")
	}
	conf.set(p+"cpu.ms.am", c.ms(150*time.Millisecond))
	if s.Straggler {
		m0 := "." + taskUnit("m", 0)
		conf.set(p+"cpu.ms"+m0, c.ms(5*s.TaskCPU))
		conf.set(p+"hold.ms"+m0, c.ms(5*s.Hold))
		if s.Kind == JobStreaming || s.Kind == JobHadoop1Streaming {
			conf.set(p+"stream.cpu.ms"+m0, c.ms(5*s.StreamCPU))
		}
	}
	if s.Skew > 0 {
		conf.set(p+"cpu.ms."+taskUnit("r", 0), c.ms(time.Duration(float64(s.TaskCPU)*(1+s.Skew))))
	}
	for i := 0; i < s.OnCPU0Maps && i < s.Maps; i++ {
		// Last in line for CPU 0 (see OnCPU0Maps).
		conf.set(p+"nice."+taskUnit("m", i), "19")
	}
	for i := 0; i < s.GCBoundMaps && i < s.Maps; i++ {
		conf.set(p+"gc."+taskUnit("m", i), "true")
	}
	for i := 0; i < s.FailMaps && i < s.Maps; i++ {
		conf.set(p+"exit.code."+attemptID(c.ts, j.seq, "m", i, 0), "1")
	}
}

func leakRate(s JobSpec) int { return max(s.TaskMemMB/2, 8) }

// taskXmxMB is the default -Xmx of a task JVM: what it holds, leaks (over
// its longest possible life) and some room; a GC-bound task gets a heap
// barely twice what it holds.
func (c *Cluster) taskXmxMB(s JobSpec) int {
	if s.GCBound || s.GCBoundMaps > 0 {
		return s.TaskMemMB*2 + 16
	}
	x := s.TaskMemMB + 64
	if s.Leak {
		// A leak lasts as long as the JVM: all the attempts it runs.
		runs := 1
		switch {
		case s.Kind == JobTez || s.Kind.Hadoop1() && s.JVMReuse > 1:
			runs = s.JVMReuse
		case s.Kind.Hadoop1() && s.JVMReuse < 0:
			runs = max(s.Maps, s.Reduces)
		case s.Kind == JobSpark:
			runs = (s.Maps + s.Executors - 1) / s.Executors
		}
		life := c.scaled(time.Duration(runs) * max(s.TaskCPU, s.Hold)).Seconds()
		if s.Straggler {
			life *= 5
		}
		x += int(float64(leakRate(s))*(life+3)) + 16
	}
	return x
}

func (c *Cluster) taskJavaOpts(s JobSpec) string {
	xmx := s.Xmx
	if xmx == "" {
		xmx = strconv.Itoa(c.taskXmxMB(s)) + "m"
	}
	return strings.TrimSpace("-Xmx" + xmx + " " + lightJVM + " " + s.JavaOpts)
}

// lightJVM keeps the stand-in JVMs cheap to start. Perf data stays on
// (hsperfdata is something an agent reads).
const lightJVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

func (c *Cluster) containerMB(s JobSpec) int {
	if s.Oversized {
		return s.MemoryMB * 4
	}
	return s.MemoryMB
}

// nextContainer gives out the application's next container id.
func (j *Job) nextContainer() (string, int) {
	c := j.c
	c.mu.Lock()
	j.containers++
	seq := j.containers
	c.mu.Unlock()
	return containerID(c.epoch, c.ts, j.seq, 1, seq), seq
}

// launchContainer asks n's NodeManager for a container.
func (c *Cluster) launchContainer(j *Job, n *node, req *launchReq) (*proc, error) {
	c.mu.Lock()
	if !n.info.Alive || n.stopping || c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("node %s is gone", n.info.Name)
	}
	p := newProc(j, n, AttemptResult{Unit: req.Unit, AttemptID: req.AttemptID, ContainerID: req.ContainerID,
		Node: n.info.Name, Type: req.Type, MainClass: req.MainClass, ExitCode: -1})
	n.procs[req.Unit] = p
	j.procs = append(j.procs, p)
	c.mu.Unlock()
	if err := n.conn.send(&message{Op: opLaunch, Launch: req}); err != nil {
		c.mu.Lock()
		p.res.Orphaned = true
		p.markStarted()
		p.markDone()
		c.mu.Unlock()
		return p, err
	}
	return p, nil
}

// waitAll waits for every process tree of the job to be done.
func (c *Cluster) waitAll(j *Job) error {
	c.mu.Lock()
	ps := append([]*proc(nil), j.procs...)
	c.mu.Unlock()
	for _, p := range ps {
		if err := c.waitProc(p); err != nil {
			return err
		}
	}
	return nil
}
