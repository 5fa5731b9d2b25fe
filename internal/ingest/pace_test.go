package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// pacedStore is a store that wants no commit before next (unix nanos;
// store.CommitPacer), and counts its transactions.
type pacedStore struct {
	*gatedStore
	next  atomic.Int64
	begun atomic.Int64
}

func (s *pacedStore) NextCommit() time.Time { return time.Unix(0, s.next.Load()) }

func (s *pacedStore) Begin(ctx context.Context) (store.Appender, error) {
	s.begun.Add(1)
	return s.gatedStore.Begin(ctx)
}

// TestPipelinePaced: the pipeline waits for a paced store's next commit
// before it takes the batches waiting, so those that arrive while it
// waits go into that commit, not the one after.
func TestPipelinePaced(t *testing.T) {
	r := newRig(t, rigOptions{})
	ps := &pacedStore{gatedStore: r.gs}
	ps.next.Store(time.Now().Add(time.Hour).UnixNano())
	p := NewPipeline(ps, PipelineOptions{})
	defer p.Close()
	results := make(chan Result, 5)
	submit := sender(p, results)
	submit(0)
	// The writer has taken the first batch and waits for the store.
	waitTaken(t, p, 1)
	for i := 1; i < 5; i++ {
		submit(i)
	}
	testsrv.WaitUntil(t, "4 batches queued", 10*time.Second, func() bool { return len(p.q) == 4 })
	if n := ps.begun.Load(); n != 0 {
		t.Fatalf("%d commits began before the store's time", n)
	}
	ps.next.Store(time.Now().UnixNano())
	inOneCommit(t, r, ps, results, 5)
}

// sender is what sends batch 1 of agent-i to p on a goroutine of its own,
// its result to results.
func sender(p *Pipeline, results chan Result) (submit func(i int)) {
	return func(i int) {
		go func() { results <- p.Submit(context.Background(), batch(fmt.Sprintf("agent-%d", i), 1, "node1")) }()
	}
}

// waitTaken waits until p's writer holds n batches of 10 samples (taken,
// not committed) and none is queued.
func waitTaken(t *testing.T, p *Pipeline, n int) {
	t.Helper()
	testsrv.WaitUntil(t, fmt.Sprintf("the writer to take %d batches", n), 10*time.Second,
		func() bool { return p.queued.Load() == int64(n)*10 && len(p.q) == 0 })
}

// inOneCommit waits for the n results of batches sent to ps's pipeline,
// each stored, and checks that one commit stored them (10 samples each).
func inOneCommit(t *testing.T, r *rig, ps *pacedStore, results chan Result, n int) {
	t.Helper()
	for range n {
		if res := <-results; res.Err != nil || res.Duplicate {
			t.Fatalf("result %+v", res)
		}
	}
	if got := ps.begun.Load(); got != 1 {
		t.Errorf("%d commits, want the %d batches in 1", got, n)
	}
	if u := r.samples(t); u.Samples != int64(n)*10 {
		t.Errorf("%d samples stored, want %d", u.Samples, n*10)
	}
}

// TestPipelineGathers: when a batch comes to an idle pipeline and a paced
// store wants a commit at once, the writer does not commit it alone (that
// would hold the next commit back for the store's whole pace, and the
// batches right behind it with it): it takes the batches that keep coming
// into the same commit, until none came for GatherGap, for GatherMax at
// most, or until the group is full.
func TestPipelineGathers(t *testing.T) {
	idle := func(t *testing.T, o PipelineOptions) (*rig, *pacedStore, *Pipeline) {
		r := newRig(t, rigOptions{})
		ps := &pacedStore{gatedStore: r.gs}
		ps.next.Store(time.Now().Add(-time.Hour).UnixNano())
		p := NewPipeline(ps, o)
		t.Cleanup(p.Close)
		return r, ps, p
	}
	t.Run("wave", func(t *testing.T) {
		// No gap or time ends the gathering: the full group does.
		r, ps, p := idle(t, PipelineOptions{MaxGroup: 5, GatherGap: time.Hour, GatherMax: time.Hour})
		results := make(chan Result, 5)
		submit := sender(p, results)
		submit(0)
		waitTaken(t, p, 1)
		for i := 1; i < 4; i++ {
			submit(i)
		}
		waitTaken(t, p, 4)
		if n := ps.begun.Load(); n != 0 {
			t.Fatalf("%d commits began before the group was full", n)
		}
		submit(4)
		inOneCommit(t, r, ps, results, 5)
	})
	t.Run("while a request is on its way", func(t *testing.T) {
		// Gaps end the gathering, but not while a request is being read
		// and decoded (Arriving): a thousand decoded at once come nearly
		// together at the end.
		r, ps, p := idle(t, PipelineOptions{GatherGap: 20 * time.Millisecond, GatherMax: time.Hour})
		arrived := p.Arriving()
		results := make(chan Result, 2)
		submit := sender(p, results)
		submit(0)
		heldWhileOnItsWay(t, p, &ps.begun, 0, func() { submit(1) }, arrived)
		arrived() // (once only)
		inOneCommit(t, r, ps, results, 2)
		if n := p.arriving.Load(); n != 0 {
			t.Errorf("%d requests on their way, want 0", n)
		}
	})
	t.Run("the rest of a wave", func(t *testing.T) {
		// The group after one that gathered after an idle period gathers
		// too when the store wants it at once, though a request waited
		// in the queue: the rest of the wave; the group after that one
		// does not.
		r, ps, p := idle(t, PipelineOptions{MaxGroup: 2, GatherGap: time.Hour, GatherMax: time.Hour})
		results := make(chan Result, 5)
		submit := sender(p, results)
		held := func(i int) {
			t.Helper()
			entered := r.gs.hold()
			submit(i)
			<-entered // (the writer holds its group in Begin)
			submit(i + 1)
			testsrv.WaitUntil(t, fmt.Sprintf("batch %d queued", i+1), 10*time.Second, func() bool { return len(p.q) == 1 })
			r.gs.open()
		}
		submit(0)
		waitTaken(t, p, 1)
		held(1) // the first group, 0 and 1, gathered; 2 queued meanwhile
		for range 2 {
			if res := <-results; res.Err != nil {
				t.Fatalf("result %+v", res)
			}
		}
		if testsrv.Poll(200*time.Millisecond, func() bool { return ps.begun.Load() > 1 }) {
			t.Fatal("the group after a wave's began with the request that waited alone")
		}
		held(3) // the second group, 2 and 3, gathered; 4 queued meanwhile
		testsrv.WaitUntil(t, "4 committed alone", 10*time.Second, func() bool { return len(results) == 3 })
		for range 3 {
			if res := <-results; res.Err != nil {
				t.Fatalf("result %+v", res)
			}
		}
		if n := ps.begun.Load(); n != 3 {
			t.Errorf("%d commits, want 3 (0 and 1, 2 and 3, 4 alone)", n)
		}
	})
	for _, c := range []struct {
		name string
		o    PipelineOptions
	}{
		{"ended by the gap", PipelineOptions{GatherGap: 20 * time.Millisecond, GatherMax: time.Hour}},
		{"ended after GatherMax", PipelineOptions{GatherGap: time.Hour, GatherMax: 50 * time.Millisecond}},
		{"none", PipelineOptions{GatherGap: time.Hour, GatherMax: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, ps, p := idle(t, c.o)
			if res := p.Submit(context.Background(), batch("agent-0", 1, "node1")); res.Err != nil || ps.begun.Load() != 1 {
				t.Fatalf("result %+v, %d commits", res, ps.begun.Load())
			}
		})
	}
}

// heldWhileOnItsWay checks that p's writer, holding a batch, begins no
// commit (begun stays at was) while a request is on its way (20 ms gaps
// go by), then sends the next batch (next) and, once the writer holds
// both, lets the request arrive.
func heldWhileOnItsWay(t *testing.T, p *Pipeline, begun *atomic.Int64, was int64, next, arrived func()) {
	t.Helper()
	waitTaken(t, p, 1)
	if testsrv.Poll(10*20*time.Millisecond, func() bool { return begun.Load() > was }) {
		t.Fatal("the commit began while a request was on its way")
	}
	next()
	waitTaken(t, p, 2)
	arrived()
}

// pipelinedStore is a store whose commits are durable only when the test
// says (store.PipelinedAppender): each commit started sends the test the
// channel its wait reads.
type pipelinedStore struct {
	*gatedStore
	started chan chan error
}

func (s *pipelinedStore) Begin(ctx context.Context) (store.Appender, error) {
	app, err := s.gatedStore.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pipelinedAppender{Appender: app, s: s}, nil
}

type pipelinedAppender struct {
	store.Appender
	s *pipelinedStore
}

func (a *pipelinedAppender) CommitStart() (func() error, error) {
	if err := a.Commit(); err != nil {
		return nil, err
	}
	durable := make(chan error, 1)
	a.s.started <- durable
	return func() error { return <-durable }, nil
}

// TestPipelineOverlapsCommits: with a store whose commits come in two
// parts (store.PipelinedAppender), the pipeline starts the next group's
// commit while the one before is not durable yet, answers each request
// once its own commit is durable, in the order the commits started, and
// answers a commit that fails once under way with its error.
func TestPipelineOverlapsCommits(t *testing.T) {
	r := newRig(t, rigOptions{})
	ps := &pipelinedStore{gatedStore: r.gs, started: make(chan chan error)}
	p := NewPipeline(ps, PipelineOptions{})
	defer p.Close()
	results := make([]chan Result, 4)
	submit := func(i int) {
		results[i] = make(chan Result, 1)
		go func() { results[i] <- p.Submit(context.Background(), batch(fmt.Sprintf("agent-%d", i), 1, "node1")) }()
	}
	answered := func(i int) bool {
		select {
		case res := <-results[i]:
			results[i] <- res
			return true
		default:
			return false
		}
	}
	submit(0)
	first := <-ps.started
	submit(1)
	// The second commit starts while the first is not durable.
	second := <-ps.started
	if answered(0) || answered(1) {
		t.Fatal("a request answered before its commit was durable")
	}
	second <- nil
	// In order: the second waits for the first (its answerer waits for
	// the first's).
	if answered(1) {
		t.Fatal("the second commit's request answered before the first's")
	}
	first <- nil
	for i := range 2 {
		if res := <-results[i]; res.Err != nil || res.Duplicate {
			t.Fatalf("request %d: %+v", i, res)
		}
	}
	// A commit that fails under way: its request gets the error.
	submit(2)
	failed := errors.New("inserts failed")
	(<-ps.started) <- failed
	if res := <-results[2]; !errors.Is(res.Err, failed) {
		t.Fatalf("request of the failed commit: %+v", res)
	}
	submit(3)
	(<-ps.started) <- nil
	if res := <-results[3]; res.Err != nil {
		t.Fatalf("request after the failed commit: %+v", res)
	}
}

// gatheringStore is a store that wants the pipeline to gather before
// each commit (store.CommitGatherer), and counts its transactions.
type gatheringStore struct {
	*gatedStore
	gap, most time.Duration
	enough    int
	begun     atomic.Int64
}

func (s *gatheringStore) CommitGather() store.Gathering {
	return store.Gathering{Gap: s.gap, Max: s.most, Enough: s.enough}
}

func (s *gatheringStore) Begin(ctx context.Context) (store.Appender, error) {
	s.begun.Add(1)
	return s.gatedStore.Begin(ctx)
}

// queuedBehindCommit starts a pipeline on gs whose first commit (of one
// batch) waits in Begin while n more batches queue; then, with a request on
// its way (arrived ends it), lets it go and waits for its result.
func queuedBehindCommit(t *testing.T, r *rig, gs *gatheringStore, n int) (p *Pipeline, results chan Result, arrived func()) {
	t.Helper()
	p = NewPipeline(gs, PipelineOptions{})
	results = make(chan Result, n+2)
	submit := sender(p, results)
	entered := r.gs.hold()
	submit(0)
	<-entered
	for i := 1; i <= n; i++ {
		submit(i)
	}
	testsrv.WaitUntil(t, "the batches queued", 10*time.Second, func() bool { return len(p.q) == n })
	arrived = p.Arriving()
	r.gs.open()
	if res := <-results; res.Err != nil {
		t.Fatalf("first batch: %+v", res)
	}
	return p, results, arrived
}

// TestPipelineGathersBeforeEachCommit: for a store that wants it
// (store.CommitGatherer: the embedded store), the writer gathers before
// every commit, not only after an idle period: a request taken from a
// queue that was not empty waits for those on their way, so that agents
// each waiting for their answer before they send again have their next
// batches in one commit. The gathering ends on the store's gap, or after
// its most.
func TestPipelineGathersBeforeEachCommit(t *testing.T) {
	t.Run("after a commit, while a request is on its way", func(t *testing.T) {
		r := newRig(t, rigOptions{})
		gs := &gatheringStore{gatedStore: r.gs, gap: 20 * time.Millisecond, most: time.Hour}
		p, results, arrived := queuedBehindCommit(t, r, gs, 1)
		defer p.Close()
		submit := sender(p, results)
		// The writer took the queued batch (not waiting for it) and
		// gathers while a request is on its way.
		heldWhileOnItsWay(t, p, &gs.begun, 1, func() { submit(2) }, arrived)
		for range 2 {
			if res := <-results; res.Err != nil || res.Duplicate {
				t.Fatalf("result %+v", res)
			}
		}
		if n := gs.begun.Load(); n != 2 {
			t.Errorf("%d commits, want 2 (the second with 2 batches)", n)
		}
		if u := r.samples(t); u.Samples != 30 {
			t.Errorf("%d samples stored, want 30", u.Samples)
		}
	})
	// What queued while the last commit ran is enough for the store
	// (Gathering.Enough series; a batch here has 3): committed at once,
	// though a request is on its way (with 1,000 agents in flight,
	// gathering kept the writer idle before every commit); one series
	// short of it, the writer gathers.
	for _, c := range []struct {
		enough int
		gap    time.Duration
		atOnce bool
	}{{6, time.Hour, true}, {7, 20 * time.Millisecond, false}} {
		t.Run(fmt.Sprintf("what queued holds %d series of %d", 6, c.enough), func(t *testing.T) {
			r := newRig(t, rigOptions{})
			gs := &gatheringStore{gatedStore: r.gs, gap: c.gap, most: time.Hour, enough: c.enough}
			p, results, arrived := queuedBehindCommit(t, r, gs, 2)
			defer p.Close()
			defer arrived()
			if !c.atOnce {
				waitTaken(t, p, 2)
				if testsrv.Poll(10*20*time.Millisecond, func() bool { return gs.begun.Load() > 1 }) {
					t.Fatal("the commit began while a request was on its way, with less than enough queued")
				}
				arrived()
			}
			for range 2 {
				select {
				case res := <-results:
					if res.Err != nil || res.Duplicate {
						t.Fatalf("result %+v", res)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the queued batches were not committed (the writer gathers, an hour at most)")
				}
			}
			if n := gs.begun.Load(); n != 2 {
				t.Errorf("%d commits, want 2 (the second with 2 batches)", n)
			}
		})
	}
	// A request alone, none on its way: committed at once (an agent
	// replaying its spool one batch at a time waits for no gap).
	t.Run("at once when none is on its way", func(t *testing.T) {
		r := newRig(t, rigOptions{})
		gs := &gatheringStore{gatedStore: r.gs, gap: time.Hour, most: time.Hour}
		p := NewPipeline(gs, PipelineOptions{})
		defer p.Close()
		// (Gathering would wait an hour: the context ends first.)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for seq := uint64(1); seq <= 3; seq++ {
			if res := p.Submit(ctx, batch("agent-0", seq, "node1")); res.Err != nil || gs.begun.Load() != int64(seq) {
				t.Fatalf("batch %d: result %+v, %d commits", seq, res, gs.begun.Load())
			}
		}
	})
	for _, c := range []struct {
		name      string
		gap, most time.Duration
		release   bool // the request on its way arrives (is given up) once the batch is taken
	}{
		{"ended by the gap", 20 * time.Millisecond, time.Hour, true},
		{"ended after its most", time.Hour, 50 * time.Millisecond, false},
		{"none", 0, time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			gs := &gatheringStore{gatedStore: r.gs, gap: c.gap, most: c.most}
			p := NewPipeline(gs, PipelineOptions{})
			defer p.Close()
			arrived := p.Arriving()
			defer arrived()
			results := make(chan Result, 1)
			sender(p, results)(0)
			if c.release {
				waitTaken(t, p, 1)
				arrived()
			}
			if res := <-results; res.Err != nil || gs.begun.Load() != 1 {
				t.Fatalf("result %+v, %d commits", res, gs.begun.Load())
			}
		})
	}
}
