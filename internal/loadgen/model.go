package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// The model behind the numbers. Each process has a CPU level that drifts
// (an AR(1) walk around the task's own target, with phases), and the other
// metrics follow from what it does, as they do in /proc:
//
//   - utime and stime are counted in clock ticks (10 ms); schedstat's run
//     time is the same CPU time, exact to the nanosecond;
//   - run-queue wait grows with the node's load;
//   - voluntary context switches follow the IO done, involuntary ones the
//     CPU used on a loaded node;
//   - a map reads its split at a steady pace in 64 KiB reads (rchar), part of
//     it from disk (read_bytes, in pages); it writes little but spills its
//     sort buffer now and then (wchar, then write_bytes as write-back
//     happens); a reduce shuffles first, then writes its output steadily;
//   - RSS grows as the JVM warms up, then breathes by a few pages; minor
//     faults follow RSS growth; the heap fills at the allocation rate and
//     drops at each GC, which counts and takes some milliseconds;
//   - bash wrappers sleep; streaming children read stdin and write stdout.

// Metrics are the process metrics loadgen sends, like an agent with PSS,
// hsperfdata and schedstat.
var Metrics = []string{wire.CPUUserMs, wire.CPUSysMs, wire.CPUChildUserMs, wire.CPUChildSysMs, wire.RSSBytes,
	wire.VMSBytes, wire.PSSBytes, wire.Threads, wire.MinorFaults, wire.MajorFaults, wire.ReadBytes, wire.WriteBytes,
	wire.ReadChars, wire.WriteChars, wire.CtxVoluntary, wire.CtxInvoluntary, wire.SchedRunNs, wire.SchedWaitNs,
	wire.HeapUsedBytes, wire.HeapCommitBytes, wire.HeapMaxBytes, wire.GCCount, wire.GCTimeMs, wire.JVMThreads}

// Positions in Metrics.
const (
	mUser = iota
	mSys
	mCUser
	mCSys
	mRSS
	mVMS
	mPSS
	mThreads
	mMinflt
	mMajflt
	mRead
	mWrite
	mRchar
	mWchar
	mVol
	mInvol
	mRun
	mWait
	mHeap
	mHeapCommit
	mHeapMax
	mGCCount
	mGCTime
	mJVMThreads
	nMetrics
	nNonJVM = mHeap // processes that are not JVMs have no hsperfdata
)

// AttemptMetrics are the attempt metrics loadgen sends (all of wire's).
var AttemptMetrics = []string{wire.AttemptCPUMs, wire.AttemptRSSBytes, wire.AttemptPSSBytes, wire.AttemptVMSBytes,
	wire.AttemptProcesses, wire.AttemptReadBytes, wire.AttemptWriteBytes, wire.AttemptHeapUsed, wire.AttemptGCTimeMs,
	wire.AttemptSchedWaitNs}

// batchMetrics is the metric list of every batch: the process metrics, then
// the attempt metrics that have no process metric of the same name.
var batchMetrics, attPos = func() ([]string, []uint32) {
	names := append([]string{}, Metrics...)
	pos := map[string]uint32{}
	for i, m := range names {
		pos[m] = uint32(i)
	}
	var ap []uint32
	for _, m := range AttemptMetrics {
		p, ok := pos[m]
		if !ok {
			p = uint32(len(names))
			names = append(names, m)
			pos[m] = p
		}
		ap = append(ap, p)
	}
	return names, ap
}()

type cluster struct {
	cfg    Config
	rng    *rand.Rand
	ts     int64
	jobSeq int
	nodes  []*node
}

type attempt struct {
	id, job, container, typ, name, user, queue string
	memMB, xmx                                 int64
	startTick, endTick                         int
	streaming                                  bool
	procs                                      []*proc
	leak                                       bool
}

type proc struct {
	key       uint64
	pid       int32
	role      string
	cmdline   string
	startTick int
	jvm       bool
	sent      bool

	target, level float64 // CPU share of a core: where it tends, where it is
	userShare     float64
	cpu           float64 // ms, exact
	child         float64 // ms of reaped children, exact
	wait          float64 // ns
	vol, invol    float64
	minflt        float64
	majflt        float64
	rchar, wchar  float64
	read, write   float64
	dirty         float64 // bytes written but not yet written back
	readRate      float64 // bytes per ms of CPU
	writeRate     float64
	spillEvery    int
	rss, rssGoal  float64 // bytes
	vms           float64
	threads       int64
	heap, commit  float64
	heapMax       float64
	allocPerMs    float64 // heap bytes allocated per ms of CPU
	gcCount       int64
	gcMs          float64
}

type node struct {
	c       *cluster
	host    string
	agent   string
	seq     uint64
	rng     *rand.Rand
	running []*attempt
	pid     int32
	load    float64 // run-queue pressure, drifts
	jitter  int64   // the agent's tick phase, ms
}

func newCluster(cfg Config) *cluster {
	c := &cluster{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 7)), ts: cfg.Start.UnixMilli() - 3600_000}
	for i := 0; i < cfg.Nodes; i++ {
		r := rand.New(rand.NewPCG(cfg.Seed, uint64(i+11)))
		c.nodes = append(c.nodes, &node{c: c, host: fmt.Sprintf("node%03d.sim", i+1),
			agent: fmt.Sprintf("node%03d.sim-loadgen%d", i+1, cfg.Seed), rng: r,
			load: 0.05 + 0.1*r.Float64(), jitter: int64(r.IntN(100))})
	}
	return c
}

// schedule starts jobs so that every node keeps its slots busy.
func (c *cluster) schedule(tick int) {
	free := 0
	for _, n := range c.nodes {
		free += c.cfg.Slots - len(n.running)
	}
	for free > c.cfg.Slots {
		c.jobSeq++
		seq := fmt.Sprintf("%04d", c.jobSeq)
		job := fmt.Sprintf("job_%d_%s", c.ts, seq)
		users := []string{"alice", "bob", "carol", "etl", "ml"}
		user := users[c.rng.IntN(len(users))]
		name := []string{"wordcount", "sessionize", "join-orders", "pagerank", "dedup"}[c.rng.IntN(5)] + "-" + user
		streaming := c.rng.IntN(3) == 0
		maps := 4 + c.rng.IntN(min(free, 200))
		reduces := 1 + maps/8
		skewed := c.rng.IntN(4) == 0
		memMB := int64(1024 << c.rng.IntN(3))
		for i := 0; i < maps+reduces; i++ {
			typ, letter, idx := "map", "m", i
			if i >= maps {
				typ, letter, idx = "reduce", "r", i-maps
			}
			n := c.nodes[c.rng.IntN(len(c.nodes))]
			for len(n.running) >= c.cfg.Slots {
				n = c.nodes[c.rng.IntN(len(c.nodes))]
				if free <= 0 {
					break
				}
			}
			dur := 60 + c.rng.IntN(300)
			if typ == "reduce" {
				dur += 120 + c.rng.IntN(600)
				if skewed && idx == 0 {
					dur *= 4
				}
			}
			if c.rng.IntN(40) == 0 {
				dur *= 3 // a straggler
			}
			a := &attempt{id: fmt.Sprintf("attempt_%d_%s_%s_%06d_0", c.ts, seq, letter, idx), job: job,
				container: fmt.Sprintf("container_e01_%d_%s_01_%06d", c.ts, seq, i+2), typ: typ, name: name, user: user,
				queue: []string{"default", "etl", "adhoc"}[c.rng.IntN(3)], memMB: memMB, xmx: memMB * 8 / 10 << 20,
				startTick: tick + c.rng.IntN(5), streaming: streaming, leak: c.rng.IntN(30) == 0}
			a.endTick = a.startTick + int(float64(dur)*float64(time.Second)/float64(c.cfg.Interval))
			n.start(a)
			free--
		}
	}
}

func (n *node) start(a *attempt) {
	r := n.rng
	mk := func(role, cmd string, target, rss float64, jvm bool, at int) *proc {
		n.pid++
		p := &proc{pid: 1000 + n.pid%30000, role: role, cmdline: cmd, startTick: at, jvm: jvm,
			target: target, level: target * 0.3, userShare: 0.85 + 0.1*r.Float64(),
			rssGoal: rss, rss: rss * 0.2, threads: 1, spillEvery: 20 + r.IntN(40)}
		p.key = wire.ProcessKey(n.host, p.pid, n.c.cfg.Start.Add(time.Duration(at)*n.c.cfg.Interval).UnixMilli())
		p.vms = math.Floor((rss*3+float64(r.IntN(1<<28)))/4096) * 4096
		if jvm {
			p.threads = 35 + int64(r.IntN(20))
			p.heapMax = float64(a.xmx)
			p.commit = p.heapMax / 4
			p.heap = 20 << 20
			p.allocPerMs = float64(1<<20) * (0.2 + 0.8*r.Float64())
			p.vms = math.Floor((p.heapMax*2.5+float64(2<<30))/4096) * 4096
		}
		switch {
		case role == wire.RoleWrapper:
		case a.typ == "map":
			p.readRate = 30e3 + 60e3*r.Float64() // bytes per ms of CPU
			p.writeRate = p.readRate * (0.3 + 0.5*r.Float64())
		default:
			p.readRate = 20e3 + 40e3*r.Float64()
			p.writeRate = 10e3 + 30e3*r.Float64()
		}
		return p
	}
	jvmBusy := 0.35 + r.Float64()*0.55
	a.procs = append(a.procs,
		mk(wire.RoleWrapper, "/bin/bash -c /usr/lib/jvm/bin/java -Xmx820m org.apache.hadoop.mapred.YarnChild 10.0.0.1 40111 "+a.id+" 2", 0.0005, 3<<20, false, a.startTick),
		mk(wire.RoleTaskJVM, "/usr/lib/jvm/bin/java -Xmx820m -Djava.io.tmpdir=./tmp org.apache.hadoop.mapred.YarnChild 10.0.0.1 40111 "+a.id+" 2", jvmBusy, float64(200+r.IntN(400))*(1<<20), true, a.startTick))
	if a.streaming {
		a.procs = append(a.procs, mk(wire.RoleStreaming, "python3 mapper.py --field 3 <script>x</script>", 0.5+r.Float64()*0.4, float64(30+r.IntN(60))*(1<<20), false, a.startTick+1))
		a.procs[1].target *= 0.3
	}
	n.running = append(n.running, a)
}

// step advances a process by one interval of iv ms and writes its values
// (cumulative counters, current gauges) in Metrics order into vals.
func (p *proc) step(r *rand.Rand, n *node, iv float64, a *attempt, tick int, vals *[nMetrics]int64) {
	// The CPU level drifts towards the target; a JVM starts slowly (JIT,
	// class loading), a map ends with a merge; now and then a pause.
	age := tick - p.startTick
	goal := p.target
	if p.jvm && age < 10 {
		goal = p.target * (0.5 + 0.05*float64(age))
	}
	if r.IntN(300) == 0 {
		p.level *= 0.3 // waiting for a block, a lock, a slow disk
	}
	p.level += 0.15*(goal-p.level) + p.target*0.04*(r.Float64()+r.Float64()-1)
	p.level = math.Max(0, math.Min(p.level, 1.9))
	cpu := p.level * iv
	p.cpu += cpu
	// On a loaded node some of the time runnable goes waiting.
	p.wait += cpu * n.load * (0.7 + 0.6*r.Float64()) * 1e6
	// Streaming children and wrappers reap short-lived children.
	if p.role == wire.RoleStreaming && r.IntN(25) == 0 {
		p.child += float64(5 + r.IntN(60))
	}
	// IO: reads at a pace set by the CPU, in 64 KiB reads; part from disk.
	if p.readRate > 0 {
		rd := math.Floor(cpu*p.readRate*(0.9+0.2*r.Float64())/65536) * 65536
		p.rchar += rd
		if r.IntN(4) == 0 {
			p.read += math.Floor(rd*0.5/4096) * 4096
		}
		p.vol += rd/65536*0.6 + float64(r.IntN(20))
		// Output: a spill every spillEvery ticks, else a little logging.
		if age > 0 && age%p.spillEvery == 0 {
			sp := math.Floor(float64(p.spillEvery)*iv*p.level*p.writeRate/4096) * 4096
			p.wchar += sp
			p.dirty += sp
			p.vol += sp / 65536
		} else if r.IntN(3) == 0 {
			p.wchar += float64(80 + r.IntN(200))
		}
		if p.dirty > 0 {
			wb := math.Min(p.dirty, math.Floor(p.dirty*0.4/4096+1)*4096)
			p.write += wb
			p.dirty -= wb
		}
	} else {
		p.vol += float64(r.IntN(3))
	}
	p.invol += cpu / 1000 * n.load * 40 * r.Float64()
	// Memory.
	if p.rss < p.rssGoal {
		g := math.Floor((p.rssGoal-p.rss)*0.1/4096) * 4096
		p.rss += g
		p.minflt += g / 4096
	}
	if a.leak {
		p.rss += 1 << 20
		p.minflt += 256
	}
	d := float64(r.IntN(33)-16) * 4096
	p.rss = math.Max(1<<20, p.rss+d)
	if d > 0 {
		p.minflt += d / 4096
	}
	p.minflt += math.Floor(cpu * 0.02 * r.Float64())
	if r.IntN(500) == 0 {
		p.majflt++
	}
	if p.jvm {
		p.heap += cpu * p.allocPerMs * (0.8 + 0.4*r.Float64())
		if p.heap > p.commit*0.9 {
			if p.commit < p.heapMax {
				p.commit = math.Min(p.heapMax, p.commit*1.5)
			}
			live := p.commit * (0.1 + 0.2*r.Float64())
			p.gcMs += 2 + (p.heap-live)/(256<<20)*(1+2*r.Float64())
			p.gcCount++
			p.heap = live
		}
		if r.IntN(120) == 0 {
			p.threads += int64(r.IntN(3) - 1)
		}
	}
	*vals = [nMetrics]int64{}
	vals[mUser] = int64(math.Floor(p.cpu*p.userShare/10) * 10)
	vals[mSys] = int64(math.Floor(p.cpu*(1-p.userShare)/10) * 10)
	vals[mCUser] = int64(math.Floor(p.child*0.9/10) * 10)
	vals[mCSys] = int64(math.Floor(p.child*0.1/10) * 10)
	vals[mRSS] = int64(math.Floor(p.rss/4096) * 4096)
	vals[mVMS] = int64(p.vms)
	vals[mPSS] = int64(math.Floor(p.rss*0.93/1024) * 1024)
	vals[mThreads] = p.threads
	vals[mMinflt] = int64(p.minflt)
	vals[mMajflt] = int64(p.majflt)
	vals[mRead] = int64(p.read)
	vals[mWrite] = int64(p.write)
	vals[mRchar] = int64(p.rchar)
	vals[mWchar] = int64(p.wchar)
	vals[mVol] = int64(p.vol)
	vals[mInvol] = int64(p.invol)
	vals[mRun] = int64(p.cpu * 1e6)
	vals[mWait] = int64(p.wait)
	if p.jvm {
		vals[mHeap] = int64(p.heap)
		vals[mHeapCommit] = int64(math.Floor(p.commit/(1<<20)) * (1 << 20))
		vals[mHeapMax] = int64(p.heapMax)
		vals[mGCCount] = p.gcCount
		vals[mGCTime] = int64(p.gcMs)
		vals[mJVMThreads] = p.threads - 12
	}
}

// batch makes the batch of ticks [from, to) for this node.
func (n *node) batch(from, to int) *wire.Batch {
	cfg := n.c.cfg
	n.seq++
	r := n.rng
	b := &wire.Batch{Version: wire.Version, AgentID: n.agent, Seq: n.seq, Host: n.host,
		SentMs: cfg.Start.Add(time.Duration(to) * cfg.Interval).UnixMilli(), Metrics: batchMetrics}
	var still []*attempt
	iv := float64(cfg.Interval.Milliseconds())
	// The node's load drifts; it is the same for every process on it.
	busy := 0.0
	for _, a := range n.running {
		for _, p := range a.procs {
			busy += p.level
		}
	}
	n.load = math.Max(0.01, 0.8*n.load+0.2*(busy/16)*(0.8+0.4*r.Float64()))
	var vals [nMetrics]int64
	for _, a := range n.running {
		if a.startTick >= to {
			still = append(still, a)
			continue
		}
		if a.startTick >= from {
			b.Attempts = append(b.Attempts, a.info(cfg, false))
		}
		// Series of this attempt's processes in this batch, by position in a.procs.
		series := make([]*wire.Series, len(a.procs))
		for pi, p := range a.procs {
			if p.startTick >= to || p.startTick >= a.endTick {
				continue
			}
			if !p.sent {
				p.sent = true
				startMs := cfg.Start.Add(time.Duration(p.startTick) * cfg.Interval).UnixMilli()
				b.Processes = append(b.Processes, wire.Process{Key: p.key, PID: p.pid, PPID: 1, StartMs: startMs,
					Cmdline: p.cmdline, Comm: commOf(p), Role: p.role, User: a.user})
				b.Members = append(b.Members, wire.Membership{Process: p.key, AttemptID: a.id, FromMs: startMs, Role: p.role})
			}
			nm := nNonJVM
			if p.jvm {
				nm = nMetrics
			}
			s := &wire.Series{Key: p.key, Columns: make([]wire.Column, nm)}
			for i := range s.Columns {
				s.Columns[i].Metric = uint32(i)
			}
			series[pi] = s
		}
		as := wire.Series{AttemptID: a.id, Columns: make([]wire.Column, len(AttemptMetrics))}
		for i := range as.Columns {
			as.Columns[i].Metric = attPos[i]
		}
		for t := max(from, a.startTick); t < to && t < a.endTick; t++ {
			// The agent ticks on its own phase, a few ms late at times.
			ms := cfg.Start.Add(time.Duration(t+1)*cfg.Interval).UnixMilli() + n.jitter + int64(r.IntN(3))
			as.Times = append(as.Times, ms)
			var sum [10]float64
			for pi, p := range a.procs {
				s := series[pi]
				if t < p.startTick || s == nil {
					continue
				}
				p.step(r, n, iv, a, t, &vals)
				sum[0] += float64(vals[mUser] + vals[mSys] + vals[mCUser] + vals[mCSys])
				sum[1] += float64(vals[mRSS])
				sum[2] += float64(vals[mPSS])
				sum[3] += float64(vals[mVMS])
				sum[4]++
				sum[5] += float64(vals[mRead])
				sum[6] += float64(vals[mWrite])
				sum[7] += float64(vals[mHeap])
				sum[8] += float64(vals[mGCTime])
				sum[9] += float64(vals[mWait])
				i := len(s.Times)
				s.Times = append(s.Times, ms)
				for c := range s.Columns {
					col := &s.Columns[c]
					col.Values = append(col.Values, vals[c])
				}
				// PSS is read every 10th tick only, like the agent does.
				if t%10 != 0 {
					markAbsent(&s.Columns[mPSS], i)
				}
			}
			for i := range as.Columns {
				as.Columns[i].Values = append(as.Columns[i].Values, int64(sum[i]))
			}
			if t%10 != 0 {
				markAbsent(&as.Columns[2], len(as.Times)-1)
			}
		}
		for _, s := range series {
			if s != nil && len(s.Times) > 0 {
				fixAbsent(s)
				b.ProcSeries = append(b.ProcSeries, *s)
			}
		}
		if len(as.Times) > 0 {
			fixAbsent(&as)
			b.AttemptSeries = append(b.AttemptSeries, as)
		}
		if to >= a.endTick {
			end := cfg.Start.Add(time.Duration(a.endTick) * cfg.Interval).UnixMilli()
			for _, p := range a.procs {
				if p.sent {
					b.Processes = append(b.Processes, wire.Process{Key: p.key, PID: p.pid, PPID: 1,
						StartMs: cfg.Start.Add(time.Duration(p.startTick) * cfg.Interval).UnixMilli(), EndMs: end,
						Cmdline: p.cmdline, Comm: commOf(p), Role: p.role, User: a.user})
					b.Members = append(b.Members, wire.Membership{Process: p.key, AttemptID: a.id,
						FromMs: cfg.Start.Add(time.Duration(p.startTick) * cfg.Interval).UnixMilli(), ToMs: end, Role: p.role})
				}
			}
			b.Attempts = append(b.Attempts, a.info(cfg, true))
			b.Events = append(b.Events, wire.Event{Ms: end, Kind: wire.EventAttemptEnd, AttemptID: a.id, JobID: a.job})
			continue
		}
		still = append(still, a)
	}
	n.running = still
	return b
}

func markAbsent(c *wire.Column, i int) {
	for len(c.Absent) <= i/8 {
		c.Absent = append(c.Absent, 0)
	}
	c.Absent[i/8] |= 1 << (i % 8)
	c.Values[i] = 0
}

// fixAbsent makes every absent bitmap of s exactly ceil(times/8) bytes.
func fixAbsent(s *wire.Series) {
	for c := range s.Columns {
		col := &s.Columns[c]
		if col.Absent != nil {
			for len(col.Absent) < (len(s.Times)+7)/8 {
				col.Absent = append(col.Absent, 0)
			}
		}
	}
}

func commOf(p *proc) string {
	switch p.role {
	case wire.RoleWrapper:
		return "bash"
	case wire.RoleStreaming:
		return "python3"
	}
	return "java"
}

func (a *attempt) info(cfg Config, ended bool) wire.Attempt {
	at := wire.Attempt{AttemptID: a.id, JobID: a.job, ContainerID: a.container, Type: a.typ, Framework: "mapreduce",
		FirstMs: cfg.Start.Add(time.Duration(a.startTick) * cfg.Interval).UnixMilli(), JobName: a.name, User: a.user,
		Queue: a.queue, MemoryMB: a.memMB, JavaOpts: fmt.Sprintf("-Xmx%dm", a.xmx>>20), XmxBytes: a.xmx,
		Streaming: a.streaming, Ended: ended}
	at.LastMs = at.FirstMs
	if ended {
		at.LastMs = cfg.Start.Add(time.Duration(a.endTick) * cfg.Interval).UnixMilli()
	}
	return at
}

// AddJob queues a job of n map attempts of ticks ticks each on the
// cluster's nodes, round-robin, one after the other on each node (they take
// a slot each, so the scheduler starts no other job until they drain). It
// returns the job's id and the tick after which the last attempt has ended.
// For benchmarks of a big job's queries.
func (g *Generator) AddJob(n, ticks int) (string, int) {
	c := g.c
	c.jobSeq++
	seq := fmt.Sprintf("%04d", c.jobSeq)
	job := fmt.Sprintf("job_%d_%s", c.ts, seq)
	end := g.tick
	for i := 0; i < n; i++ {
		nd := c.nodes[i%len(c.nodes)]
		start := g.tick + (i/len(c.nodes))*ticks + nd.rng.IntN(3)
		a := &attempt{id: fmt.Sprintf("attempt_%d_%s_m_%06d_0", c.ts, seq, i), job: job,
			container: fmt.Sprintf("container_e01_%d_%s_01_%06d", c.ts, seq, i+2), typ: "map", name: "big-etl",
			user: "etl", queue: "etl", memMB: 2048, xmx: 2048 * 8 / 10 << 20, startTick: start, endTick: start + ticks}
		nd.start(a)
		end = max(end, a.endTick)
	}
	return job, end
}

// AddAttempt starts a reduce attempt of ticks ticks (a job of its own) on
// the first node now, beside what the scheduler runs; it returns the job's
// and the attempt's ids. For benchmarks of a long attempt's series.
func (g *Generator) AddAttempt(ticks int) (string, string) {
	c := g.c
	c.jobSeq++
	seq := fmt.Sprintf("%04d", c.jobSeq)
	job := fmt.Sprintf("job_%d_%s", c.ts, seq)
	a := &attempt{id: fmt.Sprintf("attempt_%d_%s_r_%06d_0", c.ts, seq, 0), job: job,
		container: fmt.Sprintf("container_e01_%d_%s_01_%06d", c.ts, seq, 2), typ: "reduce", name: "long-reduce",
		user: "etl", queue: "etl", memMB: 4096, xmx: 4096 * 8 / 10 << 20, startTick: g.tick, endTick: g.tick + ticks}
	c.nodes[0].start(a)
	return job, a.id
}

// Tick is the next tick Next starts from.
func (g *Generator) Tick() int { return g.tick }
