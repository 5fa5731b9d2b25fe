package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestBlockGrowth: a block written value by value doubles when full (a
// few allocations for megabytes, where append grows a large slice by a
// quarter: about 30 for 4 MB), counting each time (grew); Grow makes room
// ahead, after which nothing grows; Reset keeps the memory, not the count.
func TestBlockGrowth(t *testing.T) {
	var b Block
	allocs := 0
	for i := range 1 << 19 { // 4 MB
		c := cap(b.buf)
		b.UInt64(uint64(i))
		if cap(b.buf) != c {
			allocs++
		}
	}
	// 4096 B to 4 MB doubling: 11 allocations.
	if allocs > 12 || b.grew != allocs {
		t.Errorf("4 MB written in %d allocations, %d counted; want at most 12, each counted", allocs, b.grew)
	}
	for i := range 1 << 19 {
		if got := b.buf[8*i]; got != byte(i) {
			t.Fatalf("byte %d is %d, want %d", 8*i, got, byte(i))
		}
	}
	mem := cap(b.buf)
	b.Reset()
	if cap(b.buf) != mem || b.Len() != 0 || b.grew != 0 {
		t.Errorf("after Reset: cap %d (was %d), len %d, grew %d", cap(b.buf), mem, b.Len(), b.grew)
	}
	b.Grow(2 * mem)
	s := strings.Repeat("x", 1000)
	for range 2 * mem / (len(s) + 2) {
		b.String(s)
	}
	if b.grew != 0 || cap(b.buf) < 2*mem {
		t.Errorf("after Grow(%d): %d bytes written grew the block %d times", 2*mem, b.Len(), b.grew)
	}
	// Grow beyond the capacity keeps what was written.
	var c Block
	c.String("kept")
	c.Grow(2 * cap(c.buf))
	if got := string(c.Bytes()); got != "\x04kept" || cap(c.buf) < 2*minBlockGrow {
		t.Errorf("after Grow beyond the capacity: %q, cap %d; want %q, at least %d", got, cap(c.buf), "\x04kept", 2*minBlockGrow)
	}
}

// blocksGen is n agents' generators and an attempt each (agents named by
// prefix), with what makes their batches.
type blocksGen struct {
	gens []*storetest.Gen
	atts [][]*storetest.AttemptSpec
}

func newBlocksGen(prefix string, job, n int) *blocksGen {
	g := &blocksGen{}
	for i := range n {
		host := fmt.Sprintf("%s%03d", prefix, i)
		g.gens = append(g.gens, &storetest.Gen{Agent: host + "-agent", Host: host})
		g.atts = append(g.atts, []*storetest.AttemptSpec{{ID: fmt.Sprintf("attempt_1800000000000_%04d_m_%06d_0", job, i),
			JobID: fmt.Sprintf("job_1800000000000_%04d", job), Type: "map", Start: storetest.T0,
			Procs: []storetest.ProcSpec{{PID: 1000 + int32(i), Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 1 << 28},
				{PID: 2000 + int32(i), Role: wire.RoleChild, Cmdline: "sort -k1", CPUPerS: 100, RSS: 1 << 20}}}})
	}
	return g
}

// batches are each agent's batch of seconds from to to.
func (g *blocksGen) batches(from, to int) []*wire.Batch {
	var bs []*wire.Batch
	for i, gen := range g.gens {
		bs = append(bs, gen.Batch(g.atts[i], from, to, false))
	}
	return bs
}

// startCommit appends bs in one transaction and starts its commit.
func startCommit(t *testing.T, s *Store, bs []*wire.Batch) func() error {
	t.Helper()
	app, err := s.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if dup, err := app.Append(b); err != nil || dup {
			t.Fatalf("append %s seq %d: dup %v, %v", b.AgentID, b.Seq, dup, err)
		}
	}
	wait, err := app.(store.PipelinedAppender).CommitStart()
	if err != nil {
		t.Fatal(err)
	}
	return wait
}

// spares is a copy of the store's spare write sets.
func (s *Store) sparesNow() []*writeSet {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	return append([]*writeSet(nil), s.spares...)
}

// TestCommitHandsBlocksBack: a commit's write set is kept for the next
// commits once its inserts are done, before its commit is answered, even
// while the next transaction holds the writer's lock (the ingest pipeline
// begins a commit once the one two before is answered: it builds in that
// one's blocks, not in new ones). The next commit takes it. A failed
// commit's blocks are not kept (its requests' bodies may still be read by
// the transport).
func TestCommitHandsBlocksBack(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=blocks_back", Clock: storetest.Clock, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := newBlocksGen("back", 1, 3)
	if n := len(s.sparesNow()); n != 0 {
		t.Fatalf("%d spare write sets before any commit", n)
	}
	wait1 := startCommit(t, s, g.batches(0, 5))
	// The next transaction holds the writer's lock as the first is
	// answered.
	next, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait1(); err != nil {
		t.Fatal(err)
	}
	spares := s.sparesNow()
	if len(spares) != 1 {
		next.Rollback()
		t.Fatalf("%d spare write sets once the first commit is answered, the writer's lock held by the next; want its own", len(spares))
	}
	first := spares[0]
	if first.chunks.Rows() == 0 || first.atts.Rows() == 0 {
		t.Errorf("the spare write set holds %d chunks and %d attempt rows, want the first commit's", first.chunks.Rows(), first.atts.Rows())
	}
	for _, b := range g.batches(5, 10) {
		if _, err := next.Append(b); err != nil {
			next.Rollback()
			t.Fatal(err)
		}
	}
	wait2, err := next.(store.PipelinedAppender).CommitStart()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.sparesNow()); n != 0 {
		t.Errorf("%d spare write sets once the second commit folded, want none (it took the first's)", n)
	}
	if err := wait2(); err != nil {
		t.Fatal(err)
	}
	if spares := s.sparesNow(); len(spares) != 1 || spares[0] != first {
		t.Errorf("spare write sets after the second commit: %d, the first's: %v; want the first's alone", len(spares),
			len(spares) == 1 && spares[0] == first)
	}

	// A failed commit's blocks are not kept.
	failed := errors.New("inserts failed on purpose")
	s.wmu.Lock()
	s.beforeInsert = func() error { return failed }
	s.wmu.Unlock()
	if err := startCommit(t, s, g.batches(10, 15))(); !errors.Is(err, failed) {
		t.Fatalf("the failed commit: %v", err)
	}
	s.waitWrites()
	s.wmu.Lock()
	s.beforeInsert = nil
	s.wmu.Unlock()
	if n := len(s.sparesNow()); n != 0 {
		t.Errorf("%d spare write sets after a failed commit that took the only one, want none", n)
	}
	// Its batches come again: stored, in new blocks.
	if err := startCommit(t, s, g.batches(10, 15))(); err != nil {
		t.Fatal(err)
	}
	if spares := s.sparesNow(); len(spares) != 1 || spares[0] == first {
		t.Errorf("%d spare write sets after the commit again, the failed one's among them: %v", len(spares),
			len(spares) > 0 && spares[0] == first)
	}
}

// TestCommitSizesBlocks: a commit makes room in its blocks before its
// fold, so they do not grow as its rows are written: the first commit of
// a store (no blocks to reuse, no commit to go by) in its chunks' block,
// sized from its batches' chunks; a commit of twice the batches of the
// one before, of the same kind (new agents and attempts), in every block,
// sized from what a batch took in the commit before (their agents',
// hosts', jobs' and attempts' names of the same lengths: twice the bytes).
func TestCommitSizesBlocks(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: srv.URL() + "?database=blocks_sized", Clock: storetest.Clock, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	grown := func(what string) *writeSet {
		t.Helper()
		spares := s.sparesNow()
		if len(spares) != 1 {
			t.Fatalf("%s: %d spare write sets, want 1", what, len(spares))
		}
		return spares[0]
	}
	if err := startCommit(t, s, newBlocksGen("first", 1, 20).batches(0, 5))(); err != nil {
		t.Fatal(err)
	}
	w := grown("first commit")
	if w.chunks.Rows() == 0 || w.chunks.grew != 0 {
		t.Errorf("first commit: its chunks' block (%d rows, %d bytes) grew %d times as it was written, want 0", w.chunks.Rows(),
			w.chunks.Len(), w.chunks.grew)
	}
	if err := startCommit(t, s, newBlocksGen("later", 2, 40).batches(0, 5))(); err != nil {
		t.Fatal(err)
	}
	w = grown("second commit")
	if w.chunks.Rows() == 0 || w.procs.Rows() == 0 || w.atts.Rows() == 0 || w.procIndex.Rows() == 0 {
		t.Fatalf("second commit: blocks of %d chunks, %d process rows, %d attempts, %d process index rows; want some of each",
			w.chunks.Rows(), w.procs.Rows(), w.atts.Rows(), w.procIndex.Rows())
	}
	if g := w.grew(); g != "" {
		t.Errorf("second commit, twice the batches of the first: blocks grew as they were written (%s), want none", g)
	}
}
