// Package loadgen sends realistic agent batches from many simulated nodes:
// jobs of maps and reduces spread over the nodes, each attempt a wrapper, a
// task JVM and for Streaming jobs a child, with noisy but plausible metrics
// (CPU busy with jitter, RSS random walks, IO bursts, GC saw-tooth). It is the
// ingest benchmark and a source of data for developing the UI.
package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/wire"
)

// Config configures a run.
type Config struct {
	URL         string
	Token       string
	Nodes       int
	Slots       int           // attempts running at once per node
	Interval    time.Duration // simulated sampling interval
	BatchTicks  int           // ticks per batch
	Duration    time.Duration // simulated time to cover
	Realtime    bool          // tick at the wall clock (for a live UI); else as fast as the server takes it
	Concurrency int           // batches in flight (fast mode)
	Start       time.Time     // simulated start (default: now - Duration in fast mode, now in realtime)
	Seed        uint64
	Client      *http.Client
}

// Result sums up a run.
type Result struct {
	Batches  int64
	Samples  int64 // process samples
	Bytes    int64 // compressed bytes sent
	Elapsed  time.Duration
	Rejected int64
	Retries  int64
}

// SamplesPerSec is the accepted sample rate.
func (r Result) SamplesPerSec() float64 { return float64(r.Samples) / r.Elapsed.Seconds() }

// Metrics are the process metrics loadgen sends, like an agent with PSS,
// hsperfdata and schedstat.
var Metrics = []string{wire.CPUUserMs, wire.CPUSysMs, wire.CPUChildUserMs, wire.CPUChildSysMs, wire.RSSBytes,
	wire.VMSBytes, wire.PSSBytes, wire.Threads, wire.MinorFaults, wire.MajorFaults, wire.ReadBytes, wire.WriteBytes,
	wire.ReadChars, wire.WriteChars, wire.CtxVoluntary, wire.CtxInvoluntary, wire.SchedRunNs, wire.SchedWaitNs,
	wire.HeapUsedBytes, wire.HeapCommitBytes, wire.HeapMaxBytes, wire.GCCount, wire.GCTimeMs, wire.JVMThreads}

// AttemptMetrics are the attempt metrics loadgen sends.
var AttemptMetrics = []string{wire.AttemptCPUMs, wire.AttemptRSSBytes, wire.AttemptPSSBytes, wire.AttemptVMSBytes,
	wire.AttemptProcesses, wire.AttemptReadBytes, wire.AttemptWriteBytes, wire.AttemptHeapUsed, wire.AttemptGCTimeMs}

// Run sends batches until the simulated duration is covered (or ctx ends).
func Run(ctx context.Context, cfg Config) (Result, error) {
	defaults(&cfg)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 60 * time.Second}
	}
	c := newCluster(cfg)
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	var res Result
	start := time.Now()
	ticks := int(cfg.Duration / cfg.Interval)
	type job struct {
		n       *node
		body    []byte
		samples int
	}
	jobs := make(chan job, cfg.Concurrency*2)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				rej, retries, err := send(ctx, cfg, j.body)
				atomic.AddInt64(&res.Retries, retries)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if rej {
					atomic.AddInt64(&res.Rejected, 1)
					continue
				}
				atomic.AddInt64(&res.Batches, 1)
				atomic.AddInt64(&res.Samples, int64(j.samples))
				atomic.AddInt64(&res.Bytes, int64(len(j.body)))
			}
		}()
	}
	buf := []byte{}
	// Each node's batches go in order: one worker per node would serialise
	// them; here a node's next batch is made only after its previous one
	// was queued, and each batch is independent (the server orders by seq).
	for t := 0; t < ticks && ctx.Err() == nil; t += cfg.BatchTicks {
		if cfg.Realtime {
			due := cfg.Start.Add(time.Duration(t+cfg.BatchTicks) * cfg.Interval)
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(due)):
			}
		}
		c.schedule(t)
		for _, n := range c.nodes {
			b := n.batch(t, min(t+cfg.BatchTicks, ticks))
			buf = wire.Marshal(buf[:0], b)
			body := enc.EncodeAll(buf, nil)
			select {
			case jobs <- job{n: n, body: body, samples: b.SampleCount()}:
			case <-ctx.Done():
			}
		}
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return res, err
	}
	return res, nil
}

func send(ctx context.Context, cfg Config, body []byte) (rejected bool, retries int64, err error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL+"/api/v1/ingest", bytes.NewReader(body))
		if err != nil {
			return false, retries, err
		}
		req.Header.Set("Content-Type", wire.ContentType)
		req.Header.Set("Content-Encoding", "zstd")
		if cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
		}
		resp, err := cfg.Client.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
			resp.Body.Close()
			switch {
			case resp.StatusCode/100 == 2:
				return false, retries, nil
			case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
			default:
				return true, retries, fmt.Errorf("server refused a batch: %s: %s", resp.Status, msg)
			}
		} else if ctx.Err() != nil {
			return false, retries, ctx.Err()
		}
		if attempt > 100 {
			return false, retries, fmt.Errorf("server unavailable: %v", err)
		}
		retries++
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond)
	}
}

func defaults(cfg *Config) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 10
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 8
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.BatchTicks <= 0 {
		cfg.BatchTicks = 5
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Now()
		if !cfg.Realtime {
			cfg.Start = cfg.Start.Add(-cfg.Duration)
		}
	}
}

func newCluster(cfg Config) *cluster {
	c := &cluster{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 7)), ts: cfg.Start.UnixMilli() - 3600_000}
	for i := 0; i < cfg.Nodes; i++ {
		c.nodes = append(c.nodes, &node{c: c, host: fmt.Sprintf("node%03d.sim", i+1),
			agent: fmt.Sprintf("node%03d.sim-loadgen%d", i+1, cfg.Seed), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i+11)))})
	}
	return c
}

// Generator makes batches without sending them (for store benchmarks).
type Generator struct {
	c    *cluster
	tick int
}

// NewGenerator returns a generator of cfg's cluster (Duration is ignored).
func NewGenerator(cfg Config) *Generator {
	defaults(&cfg)
	return &Generator{c: newCluster(cfg)}
}

// Next returns the next BatchTicks ticks: one batch per node.
func (g *Generator) Next() []*wire.Batch {
	g.c.schedule(g.tick)
	out := make([]*wire.Batch, 0, len(g.c.nodes))
	for _, n := range g.c.nodes {
		out = append(out, n.batch(g.tick, g.tick+g.c.cfg.BatchTicks))
	}
	g.tick += g.c.cfg.BatchTicks
	return out
}

type cluster struct {
	cfg    Config
	rng    *rand.Rand
	ts     int64
	jobSeq int
	nodes  []*node
}

type attempt struct {
	id, job, container, typ, name, user, queue string
	memMB                                      int64
	startTick, endTick                         int
	streaming                                  bool
	procs                                      []*proc
	leak                                       bool
	cpuMs                                      int64
	exitedCPU                                  int64
}

type proc struct {
	key       uint64
	pid       int32
	role      string
	cmdline   string
	startTick int
	busy      float64 // share of a core
	rss       float64 // bytes
	jvm       bool
	cum       [len(counterIdx)]float64
	heap      float64
	gcCount   int64
	gcMs      float64
	sent      bool
}

// counterIdx are the positions in Metrics of the counters a proc keeps.
var counterIdx = [...]int{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}

type node struct {
	c       *cluster
	host    string
	agent   string
	seq     uint64
	rng     *rand.Rand
	running []*attempt
	pid     int32
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
				queue: []string{"default", "etl", "adhoc"}[c.rng.IntN(3)], memMB: int64(1024 << c.rng.IntN(3)),
				startTick: tick + c.rng.IntN(5), streaming: streaming, leak: c.rng.IntN(30) == 0}
			a.endTick = a.startTick + int(float64(dur)*float64(time.Second)/float64(c.cfg.Interval))
			n.start(a)
			free--
		}
	}
}

func (n *node) start(a *attempt) {
	mk := func(role, cmd string, busy, rss float64, jvm bool, at int) *proc {
		n.pid++
		p := &proc{pid: 1000 + n.pid%30000, role: role, cmdline: cmd, startTick: at, busy: busy, rss: rss, jvm: jvm}
		p.key = wire.ProcessKey(n.host, p.pid, n.c.cfg.Start.Add(time.Duration(at)*n.c.cfg.Interval).UnixMilli())
		p.heap = 50 << 20
		return p
	}
	jvmBusy := 0.3 + n.rng.Float64()*0.6
	a.procs = append(a.procs,
		mk(wire.RoleWrapper, "/bin/bash -c /usr/lib/jvm/bin/java -Xmx820m org.apache.hadoop.mapred.YarnChild 10.0.0.1 40111 "+a.id+" 2", 0.001, 3<<20, false, a.startTick),
		mk(wire.RoleTaskJVM, "/usr/lib/jvm/bin/java -Xmx820m -Djava.io.tmpdir=./tmp org.apache.hadoop.mapred.YarnChild 10.0.0.1 40111 "+a.id+" 2", jvmBusy, 300<<20, true, a.startTick))
	if a.streaming {
		a.procs = append(a.procs, mk(wire.RoleStreaming, "python3 mapper.py --field 3 <script>x</script>", 0.5+n.rng.Float64()*0.4, 60<<20, false, a.startTick+1))
		a.procs[1].busy *= 0.3
	}
	n.running = append(n.running, a)
}

// batch makes the batch of ticks [from, to) for this node.
func (n *node) batch(from, to int) *wire.Batch {
	cfg := n.c.cfg
	n.seq++
	b := &wire.Batch{Version: wire.Version, AgentID: n.agent, Seq: n.seq, Host: n.host,
		SentMs: cfg.Start.Add(time.Duration(to) * cfg.Interval).UnixMilli()}
	b.Metrics = append(append([]string{}, Metrics...), wire.AttemptCPUMs, wire.AttemptProcesses)
	pos := map[string]uint32{}
	for i, m := range b.Metrics {
		pos[m] = uint32(i)
	}
	var still []*attempt
	iv := float64(cfg.Interval.Milliseconds())
	for _, a := range n.running {
		if a.startTick >= to {
			still = append(still, a)
			continue
		}
		if a.startTick >= from {
			b.Attempts = append(b.Attempts, a.info(cfg, false))
		}
		var as wire.Series
		as.AttemptID = a.id
		acols := make([][]int64, len(AttemptMetrics))
		for _, p := range a.procs {
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
		}
		for t := max(from, a.startTick); t < to && t < a.endTick; t++ {
			ms := cfg.Start.Add(time.Duration(t+1)*cfg.Interval).UnixMilli() + int64(n.rng.IntN(5))
			as.Times = append(as.Times, ms)
			sum := make([]float64, len(AttemptMetrics))
			for _, p := range a.procs {
				if t < p.startTick {
					continue
				}
				vals := p.step(n.rng, iv, a.leak)
				sum[0] += (vals[0] + vals[1])
				sum[1] += vals[4]
				sum[2] += vals[6]
				sum[3] += vals[5]
				sum[4]++
				sum[5] += vals[10]
				sum[6] += vals[11]
				if p.jvm {
					sum[7] += vals[18]
					sum[8] += vals[22]
				}
				n.addSample(b, p, ms, vals, t)
			}
			a.cpuMs = int64(sum[0])
			for i := range acols {
				acols[i] = append(acols[i], int64(sum[i]))
			}
		}
		if len(as.Times) > 0 {
			for i, m := range AttemptMetrics {
				as.Columns = append(as.Columns, wire.Column{Metric: pos[m], Values: acols[i]})
			}
			b.AttemptSeries = append(b.AttemptSeries, as)
		}
		if to >= a.endTick {
			end := cfg.Start.Add(time.Duration(a.endTick) * cfg.Interval).UnixMilli()
			for _, p := range a.procs {
				if p.sent {
					b.Processes = append(b.Processes, wire.Process{Key: p.key, PID: p.pid, PPID: 1,
						StartMs: cfg.Start.Add(time.Duration(p.startTick) * cfg.Interval).UnixMilli(), EndMs: end,
						Cmdline: p.cmdline, Comm: commOf(p), Role: p.role, User: a.user})
				}
			}
			b.Attempts = append(b.Attempts, a.info(cfg, true))
			continue
		}
		still = append(still, a)
	}
	n.running = still
	return b
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
		Queue: a.queue, MemoryMB: a.memMB, JavaOpts: "-Xmx820m", XmxBytes: 820 << 20, Streaming: a.streaming, Ended: ended}
	at.LastMs = at.FirstMs
	if ended {
		at.LastMs = cfg.Start.Add(time.Duration(a.endTick) * cfg.Interval).UnixMilli()
	}
	return at
}

// step advances a process by one interval and returns its cumulative values
// in Metrics order.
func (p *proc) step(r *rand.Rand, iv float64, leak bool) []float64 {
	busy := math.Max(0, p.busy+r.NormFloat64()*0.08)
	cpu := busy * iv
	p.cum[0] += cpu * 0.92
	p.cum[1] += cpu * 0.08
	if p.role == wire.RoleWrapper && r.IntN(50) == 0 {
		p.cum[2] += float64(r.IntN(5))
	}
	p.cum[4] += float64(r.IntN(int(20 + busy*300)))
	if r.IntN(200) == 0 {
		p.cum[5]++
	}
	if r.IntN(3) == 0 {
		p.cum[6] += float64(4096 * r.IntN(int(1+busy*400)))
	}
	p.cum[7] += float64(4096 * r.IntN(int(1+busy*100)))
	p.cum[8] += busy * 8e6 * (0.8 + 0.4*r.Float64())
	p.cum[9] += busy * 4e6 * (0.8 + 0.4*r.Float64())
	p.cum[10] += float64(r.IntN(int(5 + busy*80)))
	p.cum[11] += float64(r.IntN(int(1 + busy*15)))
	p.cum[12] += cpu * 1e6
	p.cum[13] += float64(r.IntN(int(1 + busy*3e6)))
	if leak {
		p.rss += 2 << 20
	}
	p.rss = math.Max(1<<20, p.rss+float64((r.IntN(257)-128)*4096))
	vals := make([]float64, len(Metrics))
	for i, ci := range counterIdx {
		vals[ci] = math.Floor(p.cum[i])
	}
	vals[4] = math.Floor(p.rss/4096) * 4096
	vals[5] = float64(3<<30 + int64(p.pid%7)<<20)
	vals[6] = math.Floor(p.rss*0.9/1024) * 1024
	vals[7] = 1
	if p.jvm {
		vals[7] = 40
		p.heap += busy * float64(8<<20) * r.Float64()
		if p.heap > 700<<20 {
			p.heap = 60 << 20
			p.gcCount++
			p.gcMs += 15 + 40*r.Float64()
		}
		vals[18] = math.Floor(p.heap)
		vals[19] = 820 << 20
		vals[20] = 820 << 20
		vals[21] = float64(p.gcCount)
		vals[22] = math.Floor(p.gcMs)
		vals[23] = 28
	}
	return vals
}

func (n *node) addSample(b *wire.Batch, p *proc, ms int64, vals []float64, tick int) {
	var s *wire.Series
	for i := range b.ProcSeries {
		if b.ProcSeries[i].Key == p.key {
			s = &b.ProcSeries[i]
		}
	}
	if s == nil {
		b.ProcSeries = append(b.ProcSeries, wire.Series{Key: p.key})
		s = &b.ProcSeries[len(b.ProcSeries)-1]
		nm := len(Metrics)
		if !p.jvm {
			nm = 18 // no JVM metrics
		}
		for i := 0; i < nm; i++ {
			s.Columns = append(s.Columns, wire.Column{Metric: uint32(i)})
		}
	}
	i := len(s.Times)
	s.Times = append(s.Times, ms)
	for c := range s.Columns {
		col := &s.Columns[c]
		col.Values = append(col.Values, int64(vals[col.Metric]))
		// PSS is read every 10th tick only, like the agent does.
		if col.Metric == 6 && tick%10 != 0 {
			for len(col.Absent) <= i/8 {
				col.Absent = append(col.Absent, 0)
			}
			col.Absent[i/8] |= 1 << (i % 8)
			col.Values[i] = 0
		}
	}
	for c := range s.Columns {
		col := &s.Columns[c]
		if col.Absent != nil {
			for len(col.Absent) < (len(s.Times)+7)/8 {
				col.Absent = append(col.Absent, 0)
			}
		}
	}
}
