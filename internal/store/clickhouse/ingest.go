package clickhouse

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// What a replica keeps in memory, as a cache of what ClickHouse holds:
// each agent's last stored batch, the attempts it wrote last and the live
// processes' attempts. Nothing in it is known to this replica only: a
// transaction checks the agents it stores for against the agents table,
// and an attempt whose last write was not this replica's (another replica
// stored its agent's batches since) is read again from the attempts table.

type agentState struct {
	host    string
	seq     uint64
	firstMs int64
	lastMs  int64
	batches uint64
	samples uint64
	stats   wire.AgentStats
}

// attState is an attempt as its row holds it.
type attState struct {
	meta    wire.Attempt
	host    string
	sum     store.AttemptSummary
	procs   map[uint64]uint64 // member processes, and the hash of the command line last logged for each (0: none)
	nprocs  int               // their count, as the row says (read without procs)
	version uint64
	day     uint16
	stored  bool // it has a row (and its index one)
	// indexed is the job key of its last index row this replica wrote (0:
	// none, or not known): a row is written again when its job changes.
	indexed uint64
	// The batch that wrote this state: a replica's cached state is the
	// attempt's only while its agent's last stored batch is this one.
	writerAgent string
	writerSeq   uint64
}

// processes is the count of its member processes.
func (a *attState) processes() int {
	if a.procs != nil {
		return len(a.procs)
	}
	return a.nprocs
}

func (a *attState) clone() *attState {
	c := *a
	c.procs = make(map[uint64]uint64, len(a.procs))
	for k, v := range a.procs {
		c.procs[k] = v
	}
	return &c
}

type liveProc struct {
	atts  []string
	start int64
}

type caches struct {
	agents map[string]*agentState
	atts   map[string]*attState
	live   map[uint64]*liveProc
}

const (
	maxLive   = 1 << 20
	maxAgents = 1 << 16
)

func newCaches() *caches {
	return &caches{agents: map[string]*agentState{}, atts: map[string]*attState{}, live: map[uint64]*liveProc{}}
}

// jobKey is the key of a job id: its rows' shard key and the first part of
// their order.
func jobKey(id string) uint64 { return store.AttemptKey(id) }

// cmdSeed hashes command lines (in memory only).
var cmdSeed = maphash.MakeSeed()

// tx is one ingest transaction: Append checks sequences against the
// agents' last stored batches; Commit checks them again against the agents
// table (another replica may have stored since), folds the batches into
// the attempts' states, and inserts every table's rows in one block each.
type tx struct {
	s        *Store
	ctx      context.Context
	prepared []*store.Prepared
	agents   map[string]*agentState // this transaction's copies
	base     map[string]uint64      // each agent's last stored sequence when the transaction took it
	flush    bool
	done     bool
}

// Begin starts an ingest transaction; it holds the store's writer lock
// until Commit or Rollback.
func (s *Store) Begin(ctx context.Context) (store.Appender, error) {
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return nil, errClosed
	}
	return &tx{s: s, ctx: ctx, agents: map[string]*agentState{}, base: map[string]uint64{}}, nil
}

func (t *tx) Rollback() error {
	if !t.done {
		t.done = true
		t.s.wmu.Unlock()
	}
	return nil
}

func (t *tx) Append(b *wire.Batch) (bool, error) { return t.AppendPrepared(store.Prepare(b)) }

// Prepare encodes a batch's series as chunks (store.Prepare: the store
// keeps the embedded store's chunks), on the ingest requests' goroutines
// (store.BatchPreparer).
func (s *Store) Prepare(b *wire.Batch) *store.Prepared { return store.Prepare(b) }

// AppendPrepared checks the batch's sequence against its agent's last
// stored batch (read from the agents table the first time this replica
// meets the agent).
func (t *tx) AppendPrepared(p *store.Prepared) (bool, error) {
	if t.done {
		return false, fmt.Errorf("append after commit or rollback")
	}
	b := p.Batch
	ag := t.agents[b.AgentID]
	if ag == nil {
		cur := t.s.cache.agents[b.AgentID]
		if cur == nil {
			loaded, err := t.s.loadAgents(t.ctx, []string{b.AgentID})
			if err != nil {
				return false, err
			}
			cur = loaded[b.AgentID]
		}
		if cur != nil {
			cp := *cur
			ag = &cp
		} else {
			ag = &agentState{host: b.Host, firstMs: b.SentMs}
		}
		t.agents[b.AgentID] = ag
		t.base[b.AgentID] = ag.seq
	}
	if b.Seq <= ag.seq {
		return true, nil
	}
	applyBatch(ag, p)
	t.prepared = append(t.prepared, p)
	return false, nil
}

// applyBatch counts a stored batch in its agent's state.
func applyBatch(ag *agentState, p *store.Prepared) {
	b := p.Batch
	ag.seq, ag.host, ag.lastMs, ag.stats = b.Seq, b.Host, b.SentMs, b.Stats
	ag.batches++
	ag.samples += uint64(p.Samples)
	if ag.firstMs == 0 {
		ag.firstMs = b.SentMs
	}
}

const agentCols = `agent_id, seq, host, first_ms, last_ms, batches, samples, dropped_samples, dropped_batches, read_errors, overruns`

// loadAgents reads agents' last stored batches.
func (s *Store) loadAgents(ctx context.Context, ids []string) (map[string]*agentState, error) {
	out := map[string]*agentState{}
	for len(ids) > 0 {
		part := ids[:min(len(ids), 1000)]
		ids = ids[len(part):]
		keys := make([]uint64, len(part))
		for i, id := range part {
			keys[i] = store.AttemptKey(id)
		}
		rows, err := s.query(ctx, "SELECT "+agentCols+" FROM "+s.read("agents")+" FINAL WHERE agent_key IN ("+
			numList(keys)+") AND agent_id IN ("+QuoteList(part)+")")
		if err != nil {
			return nil, fmt.Errorf("cannot read agents: %w", err)
		}
		for rows.Next() {
			id := rows.String()
			a := &agentState{}
			a.seq, a.host, a.firstMs, a.lastMs, a.batches, a.samples = rows.UInt64(), rows.String(), rows.Int64(), rows.Int64(),
				rows.UInt64(), rows.UInt64()
			a.stats.DroppedSamples, a.stats.DroppedBatches, a.stats.ReadErrors, a.stats.Overruns = rows.UInt64(), rows.UInt64(),
				rows.UInt64(), rows.UInt64()
			out[id] = a
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// numList is numbers as a list for IN (...).
func numList(ns []uint64) string {
	var b strings.Builder
	for i, n := range ns {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(n, 10))
	}
	return b.String()
}

// uint64s runs a query of one UInt64 column and returns its values.
func (s *Store) uint64s(ctx context.Context, q string) ([]uint64, error) {
	rows, err := s.query(ctx, q)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for rows.Next() {
		out = append(out, rows.UInt64())
	}
	return out, rows.Err()
}

// Commit stores the transaction's batches: once InsertEvery has passed
// since the last insert, one block per table.
func (t *tx) Commit() error {
	if t.done {
		return fmt.Errorf("commit after commit or rollback")
	}
	defer t.Rollback()
	s := t.s
	if len(t.prepared) == 0 {
		if t.flush {
			return s.flushJobs(t.ctx)
		}
		return nil
	}
	if err := t.recheck(); err != nil {
		return err
	}
	if len(t.prepared) == 0 {
		return nil
	}
	if wait := s.opt.InsertEvery - time.Since(s.lastInsert); wait > 0 && s.opt.InsertEvery > 0 {
		select {
		case <-time.After(wait):
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
	}
	w, err := t.fold()
	if err != nil {
		s.forget(w)
		return err
	}
	// The profiles first, the agents' rows last (profiles.go).
	if err := s.insertProfiles(t.ctx, t.prepared); err != nil {
		s.forget(w)
		return fmt.Errorf("cannot store batches: %w", err)
	}
	if err := w.insert(t.ctx); err != nil {
		s.forget(w)
		return fmt.Errorf("cannot store batches: %w", err)
	}
	s.lastInsert = time.Now()
	t.apply(w)
	return nil
}

// recheck compares the agents' last stored batches with the agents table:
// a batch that another replica stored since this one last looked is not
// stored again.
func (t *tx) recheck() error {
	var ids []string
	for id := range t.agents {
		ids = append(ids, id)
	}
	stored, err := t.s.loadAgents(t.ctx, ids)
	if err != nil {
		return err
	}
	changed := map[string]*agentState{}
	for _, id := range ids {
		if a := stored[id]; a != nil && a.seq != t.base[id] {
			changed[id] = a
		}
	}
	if len(changed) == 0 {
		return nil
	}
	keep := t.prepared[:0]
	for id, a := range changed {
		cp := *a
		t.agents[id], t.base[id] = &cp, a.seq
	}
	for _, p := range t.prepared {
		b := p.Batch
		if a := changed[b.AgentID]; a != nil {
			if b.Seq <= t.agents[b.AgentID].seq {
				continue // stored by another replica meanwhile
			}
			applyBatch(t.agents[b.AgentID], p)
		}
		keep = append(keep, p)
	}
	t.prepared = keep
	return nil
}
