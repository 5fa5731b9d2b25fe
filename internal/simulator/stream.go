package simulator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// RunStream submits an endless, realistic mix of jobs (MapReduce,
// Streaming, Spark with and without PySpark, Tez, and Hadoop 1 jobs when
// Hadoop 1 nodes exist), Concurrency at a time, a share of them with an
// anomaly: a straggler, skew, a memory leak, a GC-bound heap, oversized
// containers, a fork storm of short-lived children, a failing map, a lost
// Hadoop 1 Child. It returns when ctx is done (jobs in flight run on until
// they finish or Close) or, with MaxJobs, when those jobs have finished.
func (c *Cluster) RunStream(ctx context.Context, s StreamOptions) error {
	kinds := s.Kinds
	if len(kinds) == 0 {
		kinds = c.runnableKinds()
	}
	if len(kinds) == 0 {
		return errors.New("no live node to run jobs on")
	}
	conc := s.Concurrency
	if conc <= 0 {
		conc = max(len(c.Nodes()), 1)
	}
	rate := s.AnomalyRate
	if rate == 0 {
		rate = 0.25
	}
	seed := s.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>1|1))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	submitted := 0
	for s.MaxJobs <= 0 || submitted < s.MaxJobs {
		select {
		case <-ctx.Done():
			return nil
		case sem <- struct{}{}:
		}
		spec := randomSpec(rng, kinds, rate)
		if submitted < len(s.First) {
			spec = s.First[submitted]
		}
		j, err := c.Submit(ctx, spec)
		if err != nil {
			<-sem
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return nil
			}
			return err
		}
		submitted++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			select {
			case <-j.Done():
				if _, err := j.Wait(ctx); err != nil && !errors.Is(err, ErrClosed) {
					mu.Lock()
					failures = append(failures, fmt.Errorf("%s: %w", j.ID, err))
					mu.Unlock()
				}
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return errors.Join(failures...)
}

// runnableKinds lists the job kinds the live nodes can run.
func (c *Cluster) runnableKinds() []JobKind {
	var yarn, h1 bool
	for _, n := range c.Nodes() {
		if n.Alive {
			yarn = yarn || n.Kind == NodeYARN
			h1 = h1 || n.Kind == NodeHadoop1
		}
	}
	var out []JobKind
	if yarn {
		out = append(out, JobMapReduce, JobMapReduce, JobStreaming, JobSpark, JobTez)
	}
	if h1 {
		out = append(out, JobHadoop1, JobHadoop1Streaming)
	}
	return out
}

var (
	streamUsers  = []string{"alice", "bob", "etl", "hive", "analytics"}
	streamQueues = []string{"default", "etl", "adhoc", "reporting"}
	streamNames  = map[JobKind][]string{
		JobMapReduce:        {"wordcount", "terasort", "sessionize-clicks", "daily-aggregates", "pi"},
		JobStreaming:        {"streamjob-logs", "grep-errors", "python-dedup"},
		JobSpark:            {"spark-etl", "feature-build", "pyspark-report", "als-training"},
		JobTez:              {"hive-query", "insert-overwrite-daily", "tez-orderedwordcount"},
		JobHadoop1:          {"legacy-wordcount", "nightly-join", "index-build"},
		JobHadoop1Streaming: {"legacy-streaming", "perl-aggregate"},
	}
)

// randomSpec draws one job of the mix.
func randomSpec(r *rand.Rand, kinds []JobKind, anomalyRate float64) JobSpec {
	k := kinds[r.IntN(len(kinds))]
	names := streamNames[k]
	s := JobSpec{
		Kind:      k,
		Name:      fmt.Sprintf("%s-%d", names[r.IntN(len(names))], r.IntN(1000)),
		User:      streamUsers[r.IntN(len(streamUsers))],
		Queue:     streamQueues[r.IntN(len(streamQueues))],
		Maps:      1 + r.IntN(4),
		Reduces:   r.IntN(3),
		NoReduces: r.IntN(5) == 0,
		TaskCPU:   time.Duration(500+r.IntN(3500)) * time.Millisecond,
		Hold:      time.Duration(r.IntN(6000)) * time.Millisecond,
		TaskMemMB: 16 + r.IntN(80),
		MemoryMB:  []int{1024, 1536, 2048}[r.IntN(3)],
		IOMB:      r.IntN(3) * 8,
	}
	switch k {
	case JobSpark:
		s.PySpark = r.IntN(2) == 0
		s.Executors = 1 + r.IntN(3)
		s.Maps = s.Executors * (1 + r.IntN(3))
	case JobHadoop1, JobHadoop1Streaming:
		if r.IntN(2) == 0 {
			s.JVMReuse = []int{2, -1}[r.IntN(2)]
		}
	}
	if anomalyRate > 0 && r.Float64() < anomalyRate {
		switch r.IntN(8) {
		case 0:
			s.Straggler = true
		case 1:
			s.Skew = 2 + 3*r.Float64()
			s.Reduces = max(s.Reduces, 2)
			s.NoReduces = false
		case 2:
			s.Leak = true
		case 3:
			s.GCBound = true
		case 4:
			s.Oversized = true
		case 5:
			if k == JobStreaming || k == JobHadoop1Streaming {
				s.ShortLivedChildren = 60
			} else {
				s.Straggler = true
			}
		case 6:
			// A map's first attempt ends badly: exit 1, kill -9, over its
			// container's memory (a small container: the task holds 1.5
			// times it), or beaten by a speculative copy.
			if k == JobMapReduce || k == JobStreaming {
				f := []Fault{FaultExit1, FaultKill9, FaultPmem, FaultSpeculate}[r.IntN(4)]
				if f == FaultPmem {
					s.MemoryMB = 256
				}
				s.Faults = []Fault{f}
			} else {
				s.FailMaps = 1
			}
		case 7:
			if k.Hadoop1() {
				s.LostChild = true
			} else {
				s.Oversized = true
			}
		}
	}
	return s
}
