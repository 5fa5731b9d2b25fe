package clickhouse

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// What a replica keeps in memory is package store's Fold (store.Fold), as
// a cache of what ClickHouse holds: each agent's last stored batch, the
// attempts it wrote last and the live processes' attempts. Nothing in it
// is known to this replica only (store.FoldOptions.Shared): a transaction
// checks the agents it stores for against the agents table, and an
// attempt whose last write was not this replica's, or whose agent had
// batches stored by another replica since, is read again from the
// attempts table.

// chRow is what the store keeps beside an attempt's state for its rows:
// their version (+1 a row), whether it has a row (and its index one), and
// the job key of its last index row this replica wrote (0: none, or not
// known: a row is written again when its job changes). The day of its
// partition is that of the state's Born.
type chRow struct {
	version uint64
	stored  bool
	indexed uint64
	// hosted: the host index rows this replica wrote of it (hostindex.go):
	// under host and job key hostJob, buckets lo to hi (-1, -1: the row of
	// bucket -1). Not hosted: none, or not known (all are written again).
	hosted  bool
	host    string
	hostJob uint64
	lo, hi  int64
	// keyed: attKey and jobKey are the keys of its id and of its job
	// keyJob (keysOf).
	keyed          bool
	keyJob         string
	attKey, jobKey uint64
}

// attState is an attempt's state as the fold keeps it.
type attState = store.AttemptRecord[chRow]

func (s *Store) newFold() *store.Fold[chRow] {
	return store.NewFold(store.FoldOptions[chRow]{
		LoadAttempts:    s.loadAttempts,
		Shared:          true,
		LoadAgents:      s.loadAgents,
		ProcessAttempts: s.procAttempts,
		AgentSeqs:       s.agentSeqs,
		HostsStored:     s.hostsStored,
		KeepEnded:       keepEnded,
	})
}

// keepEnded is how many ended attempts the fold keeps holding
// (store.FoldOptions.KeepEnded): with short tasks, one attempt in seven is
// touched again after it ended (a process of it exiting later), and each
// was read again, FINAL, with its memberships (3,100 of the 21,400
// attempts of BenchmarkStoresIngest's replay on 100 nodes). About a
// kilobyte each.
const keepEnded = 8192

// jobKey is the key of a job id: its rows' shard key and the first part of
// their order.
func jobKey(id string) uint64 { return store.AttemptKey(id) }

// tx is one ingest transaction: Append checks sequences against the
// agents' last stored batches; Commit checks them again against the agents
// table (another replica may have stored since), folds the batches into
// the attempts' states (store.FoldTx), and inserts every table's rows in
// one block each.
type tx struct {
	s     *Store
	ctx   context.Context
	f     *store.FoldTx[chRow]
	began time.Time // when Begin returned: the commit's start, that paces the next
	done  bool
}

// commitTrace is how long a commit's parts took: logged at debug level
// ("commit") once its inserts are done, when Options.Log is.
type commitTrace struct {
	batches, agents, attempts int
	began                     time.Time
	pace, fold                time.Duration
	// recheck is how long the commit waited for the agents' sequences,
	// read again while it folded (StartRecheck), once the fold and its
	// rows were done; refolded, how long the fold and rows took again
	// when an agent had moved.
	recheck, refolded time.Duration
	recheckRead       time.Duration // the read of the agents' sequences (0: none read)
	reads             time.Duration // the fold's reads (loadAttempts, procAttempts)
	rows              time.Duration
	handed            time.Time // when its blocks were handed to write
	// grew is which blocks grew as the fold and rows were written
	// (writeSet.grew: not sized enough).
	grew string
}

// Begin starts an ingest transaction; it holds the store's writer lock
// until Commit or Rollback.
func (s *Store) Begin(ctx context.Context) (store.Appender, error) {
	s.wmu.Lock()
	if s.closed {
		s.wmu.Unlock()
		return nil, errClosed
	}
	return &tx{s: s, ctx: ctx, f: s.fold.Begin(0), began: time.Now()}, nil
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
	return t.f.Append(t.ctx, p)
}

// Preload reads the last stored batches of the batches' agents this
// replica does not hold, in one query (store.GroupAppender).
func (t *tx) Preload(bs []*wire.Batch) error {
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.AgentID
	}
	return t.f.LoadAgents(t.ctx, ids)
}

const agentCols = `agent_id, seq, host, first_ms, last_ms, batches, samples, dropped_samples, dropped_batches, read_errors, overruns`

// loadAgents reads agents' last stored batches.
func (s *Store) loadAgents(ctx context.Context, ids []string) (map[string]*store.AgentState, error) {
	out := map[string]*store.AgentState{}
	err := byAgentKeys(ids, func(part []string, keys string) error {
		rows, err := s.query(ctx, "SELECT "+agentCols+" FROM "+s.read("agents")+" FINAL WHERE agent_key IN ("+
			keys+") AND agent_id IN ("+QuoteList(part)+")")
		if err != nil {
			return fmt.Errorf("cannot read agents: %w", err)
		}
		for rows.Next() {
			id := rows.String()
			a := &store.AgentState{}
			a.Seq, a.Host, a.FirstMs, a.LastMs, a.Batches, a.Samples = rows.UInt64(), rows.String(), rows.Int64(), rows.Int64(),
				rows.UInt64(), rows.UInt64()
			a.Stats.DroppedSamples, a.Stats.DroppedBatches, a.Stats.ReadErrors, a.Stats.Overruns = rows.UInt64(), rows.UInt64(),
				rows.UInt64(), rows.UInt64()
			out[id] = a
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cannot read agents: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// agentSeqs reads agents' last stored sequences (store.FoldOptions.AgentSeqs:
// a commit's recheck): their highest, without FINAL, by their keys (the
// ids are checked here). Whole rows by FINAL took 20-40 ms a commit of
// 1,000 to 2,000 agents on a quiet machine, and up to 1.4 s at load 15
// (BenchmarkStoresIngest -bench.trace).
func (s *Store) agentSeqs(ctx context.Context, ids []string) (map[string]uint64, error) {
	if s.seqsHeld != nil {
		s.seqsHeld()
	}
	defer func(t0 time.Time) { s.seqsRead.Store(int64(time.Since(t0))) }(time.Now())
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := make(map[string]uint64, len(ids))
	err := byAgentKeys(ids, func(_ []string, keys string) error {
		rows, err := s.query(ctx, "SELECT agent_id, max(seq) FROM "+s.read("agents")+" WHERE agent_key IN ("+keys+
			") GROUP BY agent_id")
		if err != nil {
			return fmt.Errorf("cannot read the agents' sequences: %w", err)
		}
		for rows.Next() {
			id, seq := rows.String(), rows.UInt64()
			if want[id] {
				out[id] = seq
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cannot read the agents' sequences: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// hostsStored says which of hosts have a row in the agents table (an
// agent of theirs stored a batch; store.FoldOptions.HostsStored): a
// thousand hosts a query, several at once. The table holds a row per
// agent (each incarnation of each node's), with no key by host: it is
// read whole, its host column alone.
func (s *Store) hostsStored(ctx context.Context, hosts []string) (map[string]bool, error) {
	defer s.timeFoldRead(time.Now())
	var parts [][]string
	for len(hosts) > 0 {
		part := hosts[:min(len(hosts), 1000)]
		hosts = hosts[len(part):]
		parts = append(parts, part)
	}
	outs := make([][]string, len(parts))
	err := partsAtOnce(len(parts), func(i int) error {
		rows, err := s.query(ctx, "SELECT DISTINCT host FROM "+s.read("agents")+" WHERE host IN ("+QuoteList(parts[i])+")")
		if err != nil {
			return fmt.Errorf("cannot read the agents' hosts: %w", err)
		}
		for rows.Next() {
			outs[i] = append(outs[i], rows.String())
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, o := range outs {
		for _, h := range o {
			out[h] = true
		}
	}
	return out, nil
}

// byAgentKeys calls f with ids a thousand at a time, and their keys as a
// list for IN (...) (agents' rows are found by their keys), until it fails.
func byAgentKeys(ids []string, f func(part []string, keys string) error) error {
	for len(ids) > 0 {
		part := ids[:min(len(ids), 1000)]
		ids = ids[len(part):]
		keys := make([]uint64, len(part))
		for i, id := range part {
			keys[i] = store.AttemptKey(id)
		}
		if err := f(part, numList(keys)); err != nil {
			return err
		}
	}
	return nil
}

// AgentSeq is the highest sequence stored of an agent, 0 if none
// (store.SeqReader): its row in agents, which every replica's commits
// write once the batch's data is in, and which a commit checks its
// batches against (recheck).
func (s *Store) AgentSeq(ctx context.Context, agentID string) (uint64, error) {
	got, err := s.loadAgents(ctx, []string{agentID})
	if err != nil {
		return 0, fmt.Errorf("cannot read the sequence of agent %s: %w", agentID, err)
	}
	if a := got[agentID]; a != nil {
		return a.Seq, nil
	}
	return 0, nil
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

// Commit stores the transaction's batches (CommitStart, and waits).
func (t *tx) Commit() error {
	wait, err := t.CommitStart()
	if err != nil {
		return err
	}
	return wait()
}

// CommitStart stores the transaction's batches (store.PipelinedAppender):
// once InsertEvery has passed since the last commit that inserted began,
// it checks them again against the agents table, folds them and makes
// every table's block, then hands these to a goroutine that inserts them
// once the commit before has inserted its own, and returns: the next
// transaction may begin, and fold its batches while these are inserted.
// (The ingest pipeline waits for NextCommit before it takes the batches
// into the transaction: the wait here is for other callers.)
//
// The fold takes the commit's states before they are stored
// (store.Fold.CommitPending): the next commit builds on them. If an
// insert fails, its commit's states and those of every commit started
// after it are dropped (store.Fold.Failed: read again from ClickHouse),
// and those commits fail too: none stores an agent's batch beyond one
// that was not stored, and each commit's agents' rows are still inserted
// after its data, once every commit before it is in.
func (t *tx) CommitStart() (wait func() error, err error) {
	if t.done {
		return nil, fmt.Errorf("commit after commit or rollback")
	}
	defer t.Rollback()
	s := t.s
	if len(t.f.Prepared()) == 0 {
		return waitNone, nil
	}
	tr := &commitTrace{began: t.began}
	t0 := time.Now()
	// The agents are read again while the batches are folded: the fold
	// is done again in the rare case that another server stored some of
	// them since (moved).
	s.seqsRead.Store(0)
	recheck := t.f.StartRecheck(t.ctx)
	if wait := time.Until(s.nextCommit()); wait > 0 && s.opt.InsertEvery > 0 {
		select {
		case <-time.After(wait):
		case <-t.ctx.Done():
			return nil, t.ctx.Err()
		}
	}
	t1 := time.Now()
	tr.pace = t1.Sub(t0)
	w, dirty, stored, err := t.foldRows(tr)
	if err != nil {
		return nil, err
	}
	if s.afterFold != nil {
		s.afterFold()
	}
	t2 := time.Now()
	moved, err := recheck()
	if err != nil {
		return nil, fmt.Errorf("cannot check the agents' last batches again: %w", err)
	}
	t3 := time.Now()
	tr.recheck, tr.recheckRead = t3.Sub(t2), time.Duration(s.seqsRead.Load())
	if moved {
		t.f.Unfold()
		if len(t.f.Prepared()) == 0 {
			return waitNone, nil
		}
		s.putSpare(w) // (its blocks were never sent)
		if w, dirty, stored, err = t.foldRows(tr); err != nil {
			return nil, err
		}
		tr.refolded = time.Since(t3)
	}
	tr.handed = time.Now()
	tr.batches, tr.agents, tr.attempts = len(t.f.Prepared()), len(stored), len(dirty)
	// Commits start InsertEvery apart (the pipeline waits for NextCommit):
	// from the start of this one, so that a batch that came just after it
	// began waits InsertEvery and a commit, not also this commit's fold.
	s.prevInsert, s.lastInsert = s.lastInsert, t.began
	prev := s.inflight
	p := &inflight{done: make(chan struct{}), ended: make(chan struct{})}
	s.inflight = p
	s.fold.CommitPending(t.f)
	go s.write(t.ctx, t.f, w, prev, p, tr)
	return p.wait, nil
}

// foldRows folds the transaction's batches into a new write set and adds
// the rows of the attempts and agents they change (wmu held).
func (t *tx) foldRows(tr *commitTrace) (w *writeSet, dirty []*attState, stored map[string]*store.AgentState, err error) {
	s := t.s
	t0 := time.Now()
	w = s.newWriteSet(slotOf(s.opt.Clock.Now().UnixMilli()))
	w.apart = s.membersApart
	s.sizeBlocks(w, t.f.Prepared())
	if s.opt.Log.Enabled(t.ctx, slog.LevelDebug) {
		w.took = make([]string, 0, 10)
	}
	s.foldReads = 0
	if err := t.f.Fold(t.ctx, w, &s.ext); err != nil {
		s.fold.Failed(t.f)
		return nil, nil, nil, fmt.Errorf("cannot fold the batches: %w", err)
	}
	t1 := time.Now()
	tr.fold, tr.reads = t1.Sub(t0), s.foldReads
	dirty = t.f.DirtyAttempts()
	w.jobRows = slices.Grow(w.jobRows, len(dirty))
	for _, a := range dirty {
		a.B.version++
		w.attemptRow(a)
		w.jobDay(a.Meta.JobID, DayOf(a.Born))
		w.jobRows = append(w.jobRows, jobRowOf(a))
	}
	stored = t.f.StoredAgents()
	for id, a := range stored {
		w.agentRow(id, a)
		w.seqs += a.Seq - t.f.Base(id)
	}
	s.notePerBatch(w, len(t.f.Prepared()))
	tr.rows, tr.grew = time.Since(t1), w.grew()
	return w, dirty, stored, nil
}

func waitNone() error { return nil }

// inflight is a commit whose inserts are under way (CommitStart).
type inflight struct {
	done  chan struct{} // closed once its inserts are done (or failed)
	err   error         // set before done is closed
	ended chan struct{} // closed once the fold took the outcome too
}

func (p *inflight) wait() error {
	<-p.done
	return p.err
}

// write inserts a commit's blocks once the commit before it (prev, nil if
// none) has inserted its own (its failure fails this one), says it is
// done (its batches can be answered: the writer's lock may be held by the
// next commit's fold meanwhile), then ends it in the fold: stored, or
// failed. A commit that starts before that builds on its states, and
// fails with it (its prev is this one).
func (s *Store) write(ctx context.Context, f *store.FoldTx[chRow], w *writeSet, prev, p *inflight, tr *commitTrace) {
	var waited, inserted time.Time
	err := func() error {
		if prev != nil {
			if err := prev.wait(); err != nil {
				return fmt.Errorf("cannot store batches after an earlier commit failed: %w", err)
			}
		}
		waited = time.Now()
		if s.beforeInsert != nil {
			if err := s.beforeInsert(); err != nil {
				return err
			}
		}
		// The profiles first, the agents' rows last (profiles.go).
		if err := s.insertProfiles(ctx, f.Prepared()); err != nil {
			return fmt.Errorf("cannot store batches: %w", err)
		}
		if err := w.insert(ctx, s); err != nil {
			return fmt.Errorf("cannot store batches: %w", err)
		}
		inserted = time.Now()
		return nil
	}()
	jobRows, jobDays, took := w.jobRows, w.jobDays, w.took
	if err == nil {
		// Its blocks are sent: the commit the pipeline begins once this
		// one is answered builds in them. (Only after inserts that all
		// succeeded: a failed request's body may still be read by its
		// transport.)
		w.jobRows, w.jobDays, w.took = nil, nil, nil
		s.putSpare(w)
	}
	p.err = err
	close(p.done)
	if err == nil {
		s.opt.Log.Debug("commit", "began", tr.began.Format("15:04:05.000"), "batches", tr.batches, "agents", tr.agents,
			"attempts", tr.attempts, "recheck_wait", tr.recheck, "recheck_read", tr.recheckRead,
			"refolded", tr.refolded, "pace", tr.pace, "fold", tr.fold, "fold_reads", tr.reads,
			"rows", tr.rows, "grew", tr.grew, "prev", waited.Sub(tr.handed),
			"inserts", inserted.Sub(waited), "durable", inserted.Sub(tr.began), "each", strings.Join(took, " "))
	}
	if prev != nil {
		<-prev.ended // (in order: a flush that waits for this one finds every job to write)
	}
	s.wmu.Lock()
	if err != nil {
		s.fold.Failed(f)
		s.jobCache.drop() // (its rows may be stored in part)
	} else {
		s.fold.Stored(f, &s.ext)
		s.jobCache.stored(jobRows)
		for id, d := range jobDays {
			if old, ok := s.jobDays[id]; !ok || d < old {
				s.jobDays[id] = d
			}
		}
	}
	if s.inflight == p {
		s.inflight = nil
	}
	s.wmu.Unlock()
	close(p.ended)
}

// waitWrites waits until the commits started are done and ended in the
// fold (their jobs to be written are known).
func (s *Store) waitWrites() {
	s.wmu.Lock()
	p := s.inflight
	s.wmu.Unlock()
	if p != nil {
		<-p.ended
	}
}
