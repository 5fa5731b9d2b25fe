package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/taskscope/taskscope/internal/wire"
)

// Fold turns batches into the states a store keeps (foldstate.go): each
// agent's last stored batch (the exactly-once check), each attempt's
// description and summary merged batch by batch (MergeAttempt,
// MergeSummary) with its member processes and the command lines logged of
// them, the live processes' attempts, and the jobs' figures over their
// attempts (AttemptContribution, JobTotals). Every backend folds with it;
// what a commit stores of the batches it emits to the backend's Sink as
// backend-neutral changes (a chunk under its job, a process record or a
// membership in an attempt's rows, an event, ...), and the backend writes
// the states it changed (DirtyAttempts, DirtyJobs, DirtyAgents) as its
// rows.
//
// A Fold keeps the states of running attempts (and of their jobs) in
// memory as a cache of the store; a transaction (FoldTx) works on copies
// of those it touches, which Commit makes the cache's once the backend
// stored them. A Fold is not safe for concurrent use: the backend's
// writer's lock guards it.
type Fold[B any] struct {
	opt    FoldOptions[B]
	agents map[string]*AgentState
	atts   map[string]*AttemptRecord[B]
	jobs   map[string]*JobRecord // LoadJobAttempts: the jobs of the attempts held
	live   map[uint64]*liveProc
	// hosts are the hosts known to have stored batches (HostsStored), or
	// whose batches this fold took into a commit.
	hosts map[string]bool
	// dirtyJobs are the jobs of attempts written since TakeDirtyJobs (a
	// fold that keeps no jobs: the backend adds them up again).
	dirtyJobs map[string]bool
	// ended are the ended attempts held (KeepEnded), oldest first, each
	// with its number in endedN (an attempt ended again is kept by its
	// latest).
	ended  []endedAtt
	endedN map[string]uint64
	nEnded uint64
}

type endedAtt struct {
	id string
	n  uint64
}

// FoldOptions say how a Fold reads what it does not hold from its store.
type FoldOptions[B any] struct {
	// LoadAttempts reads attempts' records, with their member processes
	// (AttemptRecord.AddMember); those the store has nothing of are absent
	// (or new records the backend knows something of). jobOf names the job
	// a batch of the transaction says for some of them.
	LoadAttempts func(ctx context.Context, ids []string, jobOf map[string]string) (map[string]*AttemptRecord[B], error)
	// LoadJobAttempts, when set, has the fold keep the figures of the jobs
	// of the attempts it holds (JobRecord): it reads the records of jobs'
	// attempts, of which a job the fold does not hold is added up
	// (AddAttempt). Without it, the backend adds up the jobs of the
	// attempts it wrote (TakeDirtyJobs) from their rows.
	LoadJobAttempts func(ctx context.Context, ids []string) ([]*AttemptRecord[B], error)
	// Shared is a store that other servers store batches into at once:
	// an agent this fold does not hold is read (LoadAgents), the agents'
	// last batches are read again before a commit (FoldTx.Recheck), an
	// attempt's state in memory is taken only while every batch its agent
	// stored since the one that made it went through this fold, and the
	// processes a batch names that the fold holds nothing of are looked up
	// (ProcessAttempts).
	Shared          bool
	LoadAgents      func(ctx context.Context, ids []string) (map[string]*AgentState, error)
	ProcessAttempts func(ctx context.Context, keys []uint64) (map[uint64][]string, error)
	// AgentSeqs, if set (Shared), reads the agents' last stored sequences
	// alone (absent: none stored), for FoldTx.Recheck: only the agents
	// whose sequence moved are then read whole (LoadAgents).
	AgentSeqs func(ctx context.Context, ids []string) (map[string]uint64, error)
	// KeepEnded is how many ended attempts the fold keeps holding, the
	// latest to end (0: it lets each go once it is written). A process
	// that outlives its attempt touches the attempt again when it exits:
	// held, the attempt is not read again (Shared: while every batch its
	// agent stored since the one that made its state went through this
	// fold).
	KeepEnded int
	// HostsStored, if set (Shared), says which of hosts have an agent
	// that stored a batch (absent: none did, through any server). An
	// attempt runs on one node, and every agent of a node (each of its
	// incarnations: an agent that starts again takes a new id) sends its
	// batches under the node's host: so nothing is stored of an attempt
	// or a process that only batches of such hosts touch, and the fold
	// does not look them up (LoadAttempts, ProcessAttempts; a server's
	// first commit beside thousands of new agents looked up every one of
	// their attempts). What a commit that failed half way wrote (its
	// agents' rows are written last) counts as not stored, as it does for
	// a state in memory (Shared): its batches are sent again.
	HostsStored func(ctx context.Context, hosts []string) (map[string]bool, error)
}

// How many live processes a fold keeps at most (processes whose exit was
// never told), and agents (Shared: a cache of the store's).
const (
	maxLive   = 1 << 20
	maxAgents = 1 << 16
)

// NewFold is an empty fold.
func NewFold[B any](opt FoldOptions[B]) *Fold[B] {
	return &Fold[B]{opt: opt, agents: map[string]*AgentState{}, atts: map[string]*AttemptRecord[B]{},
		jobs: map[string]*JobRecord{}, live: map[uint64]*liveProc{}, hosts: map[string]bool{}, dirtyJobs: map[string]bool{},
		endedN: map[string]uint64{}}
}

// PutAgent takes an agent's state as the store holds it.
func (f *Fold[B]) PutAgent(id string, a *AgentState) {
	a.since = a.Seq
	f.agents[id] = a
}

// LoggedSeq takes a sequence logged of an agent beyond its state (a commit
// after its state was last written): its state is written again.
func (f *Fold[B]) LoggedSeq(id string, seq uint64) {
	a := f.agents[id]
	if a == nil {
		a = &AgentState{}
		f.agents[id] = a
	}
	if seq > a.Seq {
		a.Seq, a.dirty = seq, true
	}
	a.since = a.Seq
}

// Attempt is the state the fold holds of an attempt (nil if none).
func (f *Fold[B]) Attempt(id string) *AttemptRecord[B] { return f.atts[id] }

// Load reads attempts the fold does not hold into it (LoadAttempts), with
// their processes in the live table.
func (f *Fold[B]) Load(ctx context.Context, ids []string) error {
	var want []string
	for _, id := range ids {
		if f.atts[id] == nil {
			want = append(want, id)
		}
	}
	if len(want) == 0 {
		return nil
	}
	got, err := f.opt.LoadAttempts(ctx, want, nil)
	if err != nil {
		return fmt.Errorf("cannot load %d attempts: %w", len(want), err)
	}
	loaded(got, want, func(id string, a *AttemptRecord[B]) { f.atts[id] = a }, f.addLive)
	return nil
}

// loaded takes the records of ids a store read (got; new ones for the
// others), each counting in its job as it is: keep is given each, live
// each of its member processes.
func loaded[B any](got map[string]*AttemptRecord[B], ids []string, keep func(string, *AttemptRecord[B]), live func(uint64, string)) {
	for _, id := range ids {
		a := got[id]
		if a == nil {
			a = NewAttemptRecord[B](id)
		}
		a.counted = a.contribution()
		keep(id, a)
		for k := range a.procs {
			live(k, id)
		}
	}
}

// Changed marks an attempt's state changed outside a transaction (a
// recovery merging what a crash left unwritten): it is written with the
// next summaries, and counts in its job as it now is.
func (f *Fold[B]) Changed(a *AttemptRecord[B]) {
	a.dirty = true
	a.counted = a.contribution()
}

// AddLive makes process k known as a live member of attempt id.
func (f *Fold[B]) AddLive(k uint64, id string) { f.addLive(k, id) }

func (f *Fold[B]) addLive(k uint64, id string) {
	lp := f.live[k]
	if lp == nil {
		if len(f.live) >= maxLive {
			clear(f.live)
		}
		lp = &liveProc{}
		f.live[k] = lp
	}
	if !slices.Contains(lp.atts, id) {
		lp.atts = append(lp.atts, id)
	}
	if a := f.atts[id]; lp.job == "" && a != nil {
		lp.job = a.Meta.JobID
	}
}

// ForgetJobs drops the jobs the fold holds: they are added up again from
// their attempts when next needed (a recovery).
func (f *Fold[B]) ForgetJobs() { clear(f.jobs) }

// RecountJobs adds up jobs ids again from the records of their attempts
// (LoadJobAttempts), those the fold holds taking their place, and holds
// them, to be written (a recovery).
func (f *Fold[B]) RecountJobs(ctx context.Context, ids []string) error {
	got, err := f.loadJobs(ctx, ids, func(id string) *AttemptRecord[B] { return f.atts[id] })
	if err != nil {
		return fmt.Errorf("cannot count %d jobs again: %w", len(ids), err)
	}
	for id, j := range got {
		j.dirty = true
		f.jobs[id] = j
	}
	return nil
}

// loadJobs adds up jobs ids from the records of their attempts, held
// ones (by held) taking their place.
func (f *Fold[B]) loadJobs(ctx context.Context, ids []string, held func(string) *AttemptRecord[B]) (map[string]*JobRecord, error) {
	out := make(map[string]*JobRecord, len(ids))
	for _, id := range ids {
		out[id] = &JobRecord{}
	}
	if len(ids) == 0 || f.opt.LoadJobAttempts == nil {
		return out, nil
	}
	recs, err := f.opt.LoadJobAttempts(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("cannot read the attempts of %d jobs: %w", len(ids), err)
	}
	seen := map[string]bool{}
	add := func(a *AttemptRecord[B]) {
		if j := out[a.Meta.JobID]; j != nil && !seen[a.Meta.AttemptID] {
			seen[a.Meta.AttemptID] = true
			j.Describe(&a.Meta)
			c := a.contribution()
			a.counted = c
			j.apply(counted{}, c)
			j.dirty = false
		}
	}
	for _, a := range recs {
		if h := held(a.Meta.AttemptID); h != nil {
			a = h
		}
		add(a)
	}
	return out, nil
}

// Dirty reports whether a state waits to be written.
func (f *Fold[B]) Dirty() bool {
	for _, a := range f.agents {
		if a.dirty {
			return true
		}
	}
	for _, a := range f.atts {
		if a.dirty && a.Meta.JobID != "" {
			return true
		}
	}
	for _, j := range f.jobs {
		if j.dirty {
			return true
		}
	}
	return false
}

// TakeDirtyJobs returns the jobs of the attempts written since it was
// last called (a fold that keeps no jobs), and forgets them.
func (f *Fold[B]) TakeDirtyJobs() []string {
	out := make([]string, 0, len(f.dirtyJobs))
	for id := range f.dirtyJobs {
		out = append(out, id)
	}
	clear(f.dirtyJobs)
	return out
}

// UntakeDirtyJobs gives jobs back that TakeDirtyJobs returned and that
// were not written.
func (f *Fold[B]) UntakeDirtyJobs(ids []string) {
	for _, id := range ids {
		f.dirtyJobs[id] = true
	}
}

// FoldTx is one commit's fold: Append the batches, Fold them, write what
// the sink got and the dirty states, then Commit (or Failed).
type FoldTx[B any] struct {
	f        *Fold[B]
	gen      uint64
	prepared []*Prepared
	agents   map[string]*AgentState // copies, changed by this transaction
	base     map[string]uint64      // Shared: each agent's last stored sequence when the transaction took it
	loaded   map[string]*AgentState // Shared: agents LoadAgents read (nil: none stored), for Append
	fresh    map[string]bool        // Shared: agents whose state Append took from a read of this transaction
	atts     map[string]*AttemptRecord[B]
	jobs     map[string]*JobRecord
	live     map[uint64]*liveProc // changes to the live processes (nil: exited)
	newExt   []extName
	seen     map[string]counted // absorb's: the attempts a batch touched, with what each counted before it
	written  []string           // commit's: the jobs of the attempts it wrote (Stored marks them dirty)
}

// Begin starts a transaction. gen numbers the commit (GenFirst, GenLast:
// 0 for a backend that numbers none).
func (f *Fold[B]) Begin(gen uint64) *FoldTx[B] {
	return &FoldTx[B]{f: f, gen: gen, agents: map[string]*AgentState{}, base: map[string]uint64{},
		atts: map[string]*AttemptRecord[B]{}, jobs: map[string]*JobRecord{}, live: map[uint64]*liveProc{}}
}

// Prepared are the batches appended (not duplicates), in order.
func (t *FoldTx[B]) Prepared() []*Prepared { return t.prepared }

// Append takes a prepared batch, unless its agent's last stored batch is
// of its sequence or later (dup: then nothing of it is stored).
func (t *FoldTx[B]) Append(ctx context.Context, p *Prepared) (dup bool, err error) {
	b := p.Batch
	ag := t.agents[b.AgentID]
	if ag == nil {
		cur := t.f.agents[b.AgentID]
		fromStore := false
		if loaded, ok := t.loaded[b.AgentID]; cur == nil && ok {
			cur, fromStore = loaded, true
			t.readNow(b.AgentID)
		} else if cur == nil && t.f.opt.Shared {
			got, err := t.f.opt.LoadAgents(ctx, []string{b.AgentID})
			if err != nil {
				return false, fmt.Errorf("cannot read agent %s's last batch: %w", b.AgentID, err)
			}
			cur, fromStore = got[b.AgentID], true
			t.readNow(b.AgentID)
		}
		if cur != nil {
			cp := *cur
			if fromStore {
				cp.since = cp.Seq
			}
			ag = &cp
		} else {
			ag = &AgentState{Host: b.Host, FirstMs: b.SentMs}
		}
		t.agents[b.AgentID] = ag
		t.base[b.AgentID] = ag.Seq
	}
	if b.Seq <= ag.Seq {
		return true, nil
	}
	ag.count(p)
	t.prepared = append(t.prepared, p)
	return false, nil
}

// readNow notes that agent id's last stored batch was read by this
// transaction (LoadAgents, or Append): Recheck does not read it again.
func (t *FoldTx[B]) readNow(id string) {
	if t.fresh == nil {
		t.fresh = map[string]bool{}
	}
	t.fresh[id] = true
}

// LoadAgents (Shared) reads at once the last stored batches of the
// agents of ids that the fold does not hold, for Append: the batches of a
// commit's group go through one query, not one an agent (a replica that
// meets a thousand agents at start, or again after a failed commit).
func (t *FoldTx[B]) LoadAgents(ctx context.Context, ids []string) error {
	if !t.f.opt.Shared {
		return nil
	}
	var want []string
	for _, id := range ids {
		if _, ok := t.loaded[id]; !ok && t.agents[id] == nil && t.f.agents[id] == nil {
			want = append(want, id)
			if t.loaded == nil {
				t.loaded = map[string]*AgentState{}
			}
			t.loaded[id] = nil
		}
	}
	if len(want) == 0 {
		return nil
	}
	got, err := t.f.opt.LoadAgents(ctx, want)
	if err != nil {
		return err
	}
	for id, a := range got {
		t.loaded[id] = a
	}
	return nil
}

// Recheck (Shared) reads the agents' last stored batches again: a batch
// that another server stored since this one read its agent's is not
// stored again. An agent's row behind the fold's is this server's own
// commit whose inserts are under way (Fold.CommitPending), not a change.
// The agents this transaction read itself (LoadAgents or Append: met for
// the first time, or again after a failed commit), moments before, are
// not read again: a wave of new agents' commit reads them once.
func (t *FoldTx[B]) Recheck(ctx context.Context) error {
	_, err := t.StartRecheck(ctx)()
	return err
}

// StartRecheck is Recheck in two steps, so that a commit folds its
// batches while their agents are read again (ClickHouse: the read is a
// query, tens of milliseconds on a quiet server and up to seconds on a
// busy one, that no longer comes before the fold): it takes the agents and
// their bases now and reads them on a goroutine of its own; done waits
// for the read and does what Recheck does with it. Between the two, the
// transaction may be folded (Fold, DirtyAttempts, StoredAgents), and
// nothing else. moved says that the read changed an agent's base (another
// server stored its batches since): a fold made meanwhile built on states
// that may be stale and kept batches that may not be stored, so the
// caller drops it (Unfold, and what its sink got) and folds again.
func (t *FoldTx[B]) StartRecheck(ctx context.Context) (done func() (moved bool, err error)) {
	none := func() (bool, error) { return false, nil }
	if !t.f.opt.Shared {
		return none
	}
	ids := make([]string, 0, len(t.agents))
	base := make(map[string]uint64, len(t.agents))
	for id := range t.agents {
		if !t.fresh[id] {
			ids = append(ids, id)
			base[id] = t.base[id]
		}
	}
	if len(ids) == 0 {
		return none
	}
	type result struct {
		stored map[string]*AgentState
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		stored, err := t.f.readAgentsAgain(ctx, ids, base)
		ch <- result{stored, err}
	}()
	return func() (bool, error) {
		r := <-ch
		if r.err != nil {
			return false, r.err
		}
		return t.applyRecheck(ids, r.stored), nil
	}
}

// readAgentsAgain reads the rows of the agents of ids whose last stored
// sequence is past base (Recheck): with AgentSeqs, their sequences first,
// and the rows of those that moved only. It touches no transaction.
func (f *Fold[B]) readAgentsAgain(ctx context.Context, ids []string, base map[string]uint64) (map[string]*AgentState, error) {
	read := ids
	if f.opt.AgentSeqs != nil {
		// A thousand agents' sequences, not their whole rows: the rows
		// of those that moved only (another server stored since).
		seqs, err := f.opt.AgentSeqs(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("cannot read the last sequences of %d agents: %w", len(ids), err)
		}
		read = nil
		for _, id := range ids {
			if seqs[id] > base[id] {
				read = append(read, id)
			}
		}
		if len(read) == 0 {
			return nil, nil
		}
	}
	stored, err := f.opt.LoadAgents(ctx, read)
	if err != nil {
		return nil, fmt.Errorf("cannot read the last batches of %d agents: %w", len(read), err)
	}
	return stored, nil
}

// applyRecheck takes the agents' rows read again (readAgentsAgain) of
// those of ids that moved, and drops the batches they stored since; it
// says whether any moved.
func (t *FoldTx[B]) applyRecheck(ids []string, stored map[string]*AgentState) bool {
	changed := map[string]bool{}
	for _, id := range ids {
		if a := stored[id]; a != nil && a.Seq > t.base[id] {
			cp := *a
			cp.since = cp.Seq
			t.agents[id], t.base[id] = &cp, a.Seq
			changed[id] = true
		}
	}
	if len(changed) == 0 {
		return false
	}
	keep := t.prepared[:0]
	for _, p := range t.prepared {
		b := p.Batch
		if changed[b.AgentID] {
			if ag := t.agents[b.AgentID]; b.Seq <= ag.Seq {
				continue // stored by another server meanwhile
			} else {
				ag.count(p)
			}
		}
		keep = append(keep, p)
	}
	t.prepared = keep
	return true
}

// Unfold drops what Fold made of the transaction's states (its batches
// and agents stay as appended and rechecked): to fold them again
// (StartRecheck's moved).
func (t *FoldTx[B]) Unfold() {
	t.atts = map[string]*AttemptRecord[B]{}
	t.jobs = map[string]*JobRecord{}
	t.live = map[uint64]*liveProc{}
	t.newExt, t.seen, t.written = nil, nil, nil
}

// Sink takes what a commit stores of its batches, as the fold makes it of
// them (FoldTx.Fold), in the order of the batches: each method's records
// come in the order they are to be written. It must not retain the
// batches' memory past the commit (the chunks' data excepted, which
// Prepare made for it).
type Sink[B any] interface {
	// Chunk is a chunk of a series of kind (KindProcess, ...) under job,
	// the job of its attempt ("" while not known); start is its process's
	// start where known (process chunks).
	Chunk(kind int, c *SeriesChunk, job string, start int64)
	// Described is a description of attempt a as an agent sent it (b's
	// Attempts[i]), merged into a's.
	Described(b *wire.Batch, i int, a *AttemptRecord[B])
	// Member is a membership of a process in attempt a (m); first: a had
	// not had it as a member before. idx orders it among the rows of the
	// batch (Process's too).
	Member(b *wire.Batch, m *wire.Membership, a *AttemptRecord[B], first bool, idx int)
	// Process is a description of a process (p) in the rows of attempt a,
	// a member of it (nil: of no attempt known); cmd says whether the row
	// logs its command line (it differs from the one last logged in a's
	// rows).
	Process(b *wire.Batch, p *wire.Process, a *AttemptRecord[B], cmd bool, idx int)
	// Event is b's Events[i], of job (its own, or its attempt's).
	Event(b *wire.Batch, i int, job string)
	// Ext is a metric with no column of its own first sent for series of
	// kind (ExtNames did not know it).
	Ext(kind int, metric string)
	// Batch is a batch stored.
	Batch(p *Prepared)
}

// Fold folds the batches appended into the states of the attempts (and
// jobs) they touch, read first from the store where the fold does not
// hold them (or, Shared, holds a state another server may have changed
// since), and gives the sink what the commit stores of them. ext are the
// store's ext metrics' names (Sink.Ext is told of the new ones).
func (t *FoldTx[B]) Fold(ctx context.Context, sink Sink[B], ext *ExtNames) error {
	if err := t.load(ctx); err != nil {
		return err
	}
	// Each batch's chunks and events are filed under the jobs its states
	// give once it is absorbed, before its processes' exits: what a batch
	// gives does not depend on the batches committed with it. (ClickHouse
	// keeps a chunk once only if every write of it, a commit's that failed
	// half way and its retry's, files it under the same job.)
	for _, p := range t.prepared {
		t.absorb(p, sink)
		sink.Batch(p)
		t.emit(p, sink, ext)
		t.exits(p)
	}
	return nil
}

// load brings into the transaction the states of the attempts (and jobs)
// the batches touch that the fold does not hold, or holds a state of that
// may be stale (Shared).
func (t *FoldTx[B]) load(ctx context.Context) error {
	f := t.f
	fresh, err := t.freshHosts(ctx)
	if err != nil {
		return err
	}
	// The attempts the batches touch, and the agent that touches each
	// first ("": found through a process only); old: touched by a batch
	// of a host not fresh, or through a process.
	by := map[string]string{}
	old := map[string]bool{}
	var order []string
	jobOf := map[string]string{} // the job a batch names for an attempt
	var host string              // of the batch being looked at
	touch := func(id, agent string) {
		if id == "" {
			return
		}
		if _, ok := by[id]; !ok {
			by[id] = agent
			order = append(order, id)
		}
		if agent == "" || !fresh[host] {
			old[id] = true
		}
	}
	var unknown []uint64 // Shared: processes the fold holds nothing of
	for _, p := range t.prepared {
		b := p.Batch
		host = b.Host
		var members map[uint64]bool
		if f.opt.Shared && !fresh[host] {
			members = make(map[uint64]bool, len(b.Members))
		}
		for i := range b.Attempts {
			touch(b.Attempts[i].AttemptID, b.AgentID)
			if j := b.Attempts[i].JobID; j != "" {
				jobOf[b.Attempts[i].AttemptID] = j
			}
		}
		for i := range b.AttemptSeries {
			touch(b.AttemptSeries[i].AttemptID, b.AgentID)
		}
		for i := range b.Members {
			touch(b.Members[i].AttemptID, b.AgentID)
			if members != nil {
				members[b.Members[i].Process] = true
			}
		}
		for i := range b.Processes {
			k := b.Processes[i].Key
			if lp := f.live[k]; lp != nil {
				for _, id := range lp.atts {
					touch(id, b.AgentID)
					old[id] = true // (known here: not taken for new)
				}
			} else if members != nil && !members[k] {
				unknown = append(unknown, k)
			}
		}
		if members != nil {
			for i := range b.ProcSeries {
				if k := b.ProcSeries[i].Key; f.live[k] == nil && !members[k] {
					unknown = append(unknown, k)
				}
			}
		}
	}
	if len(unknown) > 0 {
		found, err := f.opt.ProcessAttempts(ctx, unknown)
		if err != nil {
			return fmt.Errorf("cannot find the attempts of processes: %w", err)
		}
		for k, atts := range found {
			t.live[k] = &liveProc{atts: atts}
			for _, id := range atts {
				touch(id, "")
			}
		}
	}
	var load, none []string // none: of fresh hosts only, nothing stored
	for _, id := range order {
		a := f.atts[id]
		switch {
		case a == nil && !old[id]:
			none = append(none, id)
		case a == nil || f.opt.Shared && t.stale(a, by[id]):
			load = append(load, id)
		}
	}
	var got map[string]*AttemptRecord[B]
	if len(load) > 0 {
		got, err = f.opt.LoadAttempts(ctx, load, jobOf)
		if err != nil {
			return fmt.Errorf("cannot load attempts: %w", err)
		}
	}
	// (As a read that found nothing of them.)
	loaded(got, append(load, none...), func(id string, a *AttemptRecord[B]) { t.atts[id] = a }, t.addLive)
	if f.opt.LoadJobAttempts == nil {
		return nil
	}
	var jobs []string
	seen := map[string]bool{}
	wantJob := func(id string) {
		if id != "" && f.jobs[id] == nil && !seen[id] {
			seen[id] = true
			jobs = append(jobs, id)
		}
	}
	for _, p := range t.prepared {
		for i := range p.Batch.Attempts {
			wantJob(p.Batch.Attempts[i].JobID)
		}
	}
	for _, id := range order {
		if a := t.Attempt(id); a != nil {
			wantJob(a.Meta.JobID)
		}
	}
	gotJobs, err := f.loadJobs(ctx, jobs, t.Attempt)
	if err != nil {
		return fmt.Errorf("cannot load jobs: %w", err)
	}
	for id, j := range gotJobs {
		t.jobs[id] = j
	}
	return nil
}

// freshHosts are the hosts of the transaction's batches of which nothing
// is stored (FoldOptions.HostsStored), asked of the store for those the
// fold does not know stored; every host of them is known stored from
// now (this commit stores its batches).
func (t *FoldTx[B]) freshHosts(ctx context.Context) (map[string]bool, error) {
	f := t.f
	if !f.opt.Shared || f.opt.HostsStored == nil {
		return nil, nil
	}
	var ask []string
	fresh := map[string]bool{}
	for _, p := range t.prepared {
		if h := p.Batch.Host; !f.hosts[h] && !fresh[h] {
			fresh[h] = true
			ask = append(ask, h)
		}
	}
	if len(ask) == 0 {
		return nil, nil
	}
	stored, err := f.opt.HostsStored(ctx, ask)
	if err != nil {
		return nil, fmt.Errorf("cannot find the hosts that stored batches: %w", err)
	}
	if len(f.hosts)+len(ask) > maxAgents {
		clear(f.hosts) // (they are asked again)
	}
	for _, h := range ask {
		if stored[h] {
			delete(fresh, h)
		}
		f.hosts[h] = true
	}
	return fresh, nil
}

// stale reports whether the state a of an attempt, held in memory, may not
// be its latest (Shared): it was not made by a batch of the agent that
// touches it now (agent; "": none, the attempt found through a process),
// or that agent stored batches since that did not all go through this
// fold (another server may have changed the attempt). A batch of the
// agent that went through the fold and touched the attempt made the state
// held.
func (t *FoldTx[B]) stale(a *AttemptRecord[B], agent string) bool {
	if agent == "" {
		return a.Writer == ""
	}
	if a.Writer != agent || a.WriterSeq > t.base[agent] {
		return true
	}
	ag := t.agents[agent]
	return a.WriterSeq != t.base[agent] && (ag == nil || a.WriterSeq < ag.since)
}

// Attempt is the state of an attempt as the transaction sees it: its own
// copy, or the fold's (nil if none).
func (t *FoldTx[B]) Attempt(id string) *AttemptRecord[B] {
	if a := t.atts[id]; a != nil {
		return a
	}
	return t.f.atts[id]
}

// att returns the transaction's copy of an attempt's state.
func (t *FoldTx[B]) att(id string) *AttemptRecord[B] {
	if a := t.atts[id]; a != nil {
		return a
	}
	a := NewAttemptRecord[B](id)
	if cur := t.f.atts[id]; cur != nil {
		a = cur.copyOf()
	}
	t.atts[id] = a
	return a
}

// job returns the transaction's copy of a job's figures.
func (t *FoldTx[B]) job(id string) *JobRecord {
	if j := t.jobs[id]; j != nil {
		return j
	}
	j := &JobRecord{}
	if cur := t.f.jobs[id]; cur != nil {
		j = cur.clone()
	}
	t.jobs[id] = j
	return j
}

// LiveAttempts are the attempts process k is known a live member of.
func (t *FoldTx[B]) LiveAttempts(k uint64) []string {
	if lp := t.liveProc(k); lp != nil {
		return lp.atts
	}
	return nil
}

func (t *FoldTx[B]) liveProc(k uint64) *liveProc {
	if lp, ok := t.live[k]; ok {
		return lp
	}
	return t.f.live[k]
}

func (t *FoldTx[B]) setLive(k uint64, lp *liveProc) { t.live[k] = lp }

func (t *FoldTx[B]) addLive(k uint64, id string) {
	lp := t.liveProc(k)
	if lp != nil && slices.Contains(lp.atts, id) {
		return
	}
	cp := &liveProc{}
	if lp != nil {
		cp.start, cp.atts, cp.job = lp.start, slices.Clone(lp.atts), lp.job
	}
	cp.atts = append(cp.atts, id)
	if a := t.Attempt(id); cp.job == "" && a != nil {
		cp.job = a.Meta.JobID
	}
	t.setLive(k, cp)
}

// absorb merges a batch into the states, giving the sink its process
// records and memberships.
func (t *FoldTx[B]) absorb(p *Prepared, sink Sink[B]) {
	b := p.Batch
	if t.seen == nil {
		t.seen = map[string]counted{}
	}
	seen := t.seen
	clear(seen)
	touch := func(id string) *AttemptRecord[B] {
		a := t.att(id)
		if _, ok := seen[id]; !ok {
			seen[id] = a.counted
		}
		if a.GenFirst == 0 {
			a.GenFirst = t.gen
		}
		a.GenLast = t.gen
		a.Writer, a.WriterSeq = b.AgentID, b.Seq
		if a.Born == 0 {
			a.Born = BatchTime(b)
		}
		a.dirty = true
		return a
	}
	idx := 0
	for i := range b.Attempts {
		m := &b.Attempts[i]
		a := touch(m.AttemptID)
		MergeAttempt(&a.Meta, m)
		a.Host = b.Host
		if t.f.opt.LoadJobAttempts != nil && m.JobID != "" {
			t.job(m.JobID).Describe(&a.Meta)
		}
		sink.Described(b, i, a)
	}
	for i := range b.Members {
		m := &b.Members[i]
		a := touch(m.AttemptID)
		first := !a.HasMember(m.Process)
		if first {
			a.AddMember(m.Process)
		}
		idx++
		sink.Member(b, m, a, first, idx)
		t.addLive(m.Process, m.AttemptID)
	}
	for i := range b.Processes {
		pr := &b.Processes[i]
		lp := t.liveProc(pr.Key)
		if lp == nil || len(lp.atts) == 0 {
			idx++
			sink.Process(b, pr, nil, true, idx)
		} else {
			for _, id := range lp.atts {
				a := touch(id)
				idx++
				sink.Process(b, pr, a, a.TakeCmd(pr.Key, pr.Cmdline), idx)
			}
		}
		if pr.EndMs == 0 && lp != nil && lp.start != pr.StartMs {
			cp := *lp
			cp.start = pr.StartMs
			t.setLive(pr.Key, &cp)
		}
	}
	for id, sum := range p.Atts {
		a := touch(id)
		if a.Host == "" {
			a.Host = b.Host
		}
		MergeSummary(&a.Sum, sum)
	}
	for id, old := range seen {
		a := t.atts[id]
		now := a.contribution()
		if now != old {
			if job := a.Meta.JobID; job != "" && t.f.opt.LoadJobAttempts != nil {
				t.job(job).apply(old, now)
			}
			a.counted = now
		}
	}
}

// exits lets go of the processes a batch saw exit (after emit: the
// batch's own chunks of them are under their jobs).
func (t *FoldTx[B]) exits(p *Prepared) {
	for i := range p.Batch.Processes {
		if pr := &p.Batch.Processes[i]; pr.EndMs != 0 {
			t.setLive(pr.Key, nil)
		}
	}
}

// emit gives the sink a batch's chunks, each under the job of its
// attempt (a process's: of the first of its attempts that has one, or the
// job it had when it joined them), its new metrics' names and its events,
// as the states are once the batch is absorbed.
func (t *FoldTx[B]) emit(p *Prepared, sink Sink[B], ext *ExtNames) {
	b := p.Batch
	// A process's start: from a record of it in its batch, or from what
	// is known of it live.
	starts := make(map[uint64]int64, len(b.Processes))
	for i := range b.Processes {
		starts[b.Processes[i].Key] = b.Processes[i].StartMs
	}
	procJob := func(k uint64) (string, int64) {
		start, ok := starts[k]
		lp := t.liveProc(k)
		if lp == nil {
			return "", start
		}
		if !ok {
			start = lp.start
		}
		for _, id := range lp.atts {
			if a := t.Attempt(id); a != nil && a.Meta.JobID != "" {
				return a.Meta.JobID, start
			}
		}
		return lp.job, start
	}
	attJob := func(id string) string {
		if a := t.Attempt(id); a != nil {
			return a.Meta.JobID
		}
		return ""
	}
	for i := range p.ProcChunks {
		c := &p.ProcChunks[i]
		job, start := procJob(c.Key)
		sink.Chunk(KindProcess, c, job, start)
	}
	for i := range p.AttChunks {
		c := &p.AttChunks[i]
		sink.Chunk(KindAttempt, c, attJob(c.AttemptID), 0)
	}
	if len(p.ExtChunks) > 0 {
		// A process's ext chunk is keyed by ExtKey(process, metric).
		extProc := map[uint64]uint64{}
		for i := range b.ProcSeries {
			s := &b.ProcSeries[i]
			for j := range s.Columns {
				extProc[ExtKey(s.Key, b.Metrics[s.Columns[j].Metric])] = s.Key
			}
		}
		for i := range p.ExtChunks {
			c := &p.ExtChunks[i]
			kind, job, start := KindProcessExt, "", int64(0)
			if c.AttemptID != "" {
				kind, job = KindAttemptExt, attJob(c.AttemptID)
			} else {
				job, start = procJob(extProc[c.Key])
			}
			sink.Chunk(kind, c, job, start)
			if n := (extName{kind, c.Metric}); !ext.Known(kind, c.Metric) && !slices.Contains(t.newExt, n) {
				t.newExt = append(t.newExt, n)
				sink.Ext(kind, c.Metric)
			}
		}
	}
	for i := range b.Events {
		e := &b.Events[i]
		job := e.JobID
		if job == "" && e.AttemptID != "" {
			job = attJob(e.AttemptID)
		}
		sink.Event(b, i, job)
	}
}

// DirtyAttempts are the attempts whose states changed since they were
// last written (this transaction's and the fold's) and that have a job:
// an attempt no description named a job of yet waits for one. Commit with
// written clears them.
func (t *FoldTx[B]) DirtyAttempts() []*AttemptRecord[B] {
	for id, a := range t.f.atts {
		if a.dirty && a.Meta.JobID != "" && t.atts[id] == nil {
			t.att(id)
		}
	}
	var out []*AttemptRecord[B]
	for _, a := range t.atts {
		if a.dirty && a.Meta.JobID != "" {
			a.NProcs = uint32(a.Processes())
			out = append(out, a)
		}
	}
	return out
}

// DirtyJobs are the jobs (LoadJobAttempts) whose figures changed since
// they were last written, with attempts.
func (t *FoldTx[B]) DirtyJobs() map[string]*JobRecord {
	for id, j := range t.f.jobs {
		if j.dirty && t.jobs[id] == nil {
			t.job(id)
		}
	}
	out := map[string]*JobRecord{}
	for id, j := range t.jobs {
		if j.dirty && j.Attempts > 0 {
			out[id] = j
		}
	}
	return out
}

// DirtyAgents are the agents whose states changed since they were last
// written.
func (t *FoldTx[B]) DirtyAgents() map[string]*AgentState {
	for id, a := range t.f.agents {
		if a.dirty && t.agents[id] == nil {
			cp := *a
			t.agents[id] = &cp
		}
	}
	out := map[string]*AgentState{}
	for id, a := range t.agents {
		if a.dirty {
			out[id] = a
		}
	}
	return out
}

// StoredAgents are the agents this transaction stores batches of, with
// their states after them.
func (t *FoldTx[B]) StoredAgents() map[string]*AgentState {
	out := map[string]*AgentState{}
	for id, a := range t.agents {
		if a.Seq != t.base[id] {
			out[id] = a
		}
	}
	return out
}

// Base is the sequence of agent id's last stored batch as the transaction
// took it (Shared: as Recheck read it again), before its own batches.
func (t *FoldTx[B]) Base(id string) uint64 { return t.base[id] }

// NewExt are the metrics' names this transaction's sink was told of
// (Sink.Ext).
func (t *FoldTx[B]) NewExt() []extName { return t.newExt }

// Commit makes the transaction's states the fold's, once the backend
// stored what the sink got; written: it wrote the dirty states too
// (DirtyAttempts, DirtyJobs, DirtyAgents). An attempt that ended and is
// written is let go (it will not change), as is a job that runs no
// attempt.
func (f *Fold[B]) Commit(t *FoldTx[B], written bool, ext *ExtNames) {
	f.commit(t, written, false)
	f.Stored(t, ext)
}

// CommitPending is Commit(t, true, ext) of a transaction whose writes are
// under way (PipelinedAppender): the next transaction builds on its
// states, but what waits for them to be durable waits for Stored (the
// jobs of its attempts are to be added up again from their rows,
// TakeDirtyJobs; the attempts that ended are let go, and read again
// while their rows may not be there yet). If they fail: Failed(t).
func (f *Fold[B]) CommitPending(t *FoldTx[B]) { f.commit(t, true, true) }

// commit makes the transaction's states the fold's (pending: its writes
// are under way, Stored does the rest once they are durable).
func (f *Fold[B]) commit(t *FoldTx[B], written, pending bool) {
	for k, lp := range t.live {
		if lp == nil {
			delete(f.live, k)
		} else {
			f.live[k] = lp
		}
	}
	if f.opt.Shared && len(f.agents) >= maxAgents {
		clear(f.agents)
	}
	for id, a := range t.agents {
		if written {
			a.dirty = false
		}
		f.agents[id] = a
	}
	t.written = t.written[:0]
	for id, a := range t.atts {
		a.shared = false
		if written && a.Meta.JobID != "" {
			if f.opt.LoadJobAttempts == nil && a.dirty {
				t.written = append(t.written, a.Meta.JobID)
			}
			a.dirty = false
		}
		f.atts[id] = a
		if a.Meta.Ended && !a.dirty && !pending {
			f.letGo(id)
		}
	}
	for id, j := range t.jobs {
		if written {
			j.dirty = false
		}
		if j.Running <= 0 && !j.dirty && !pending {
			delete(f.jobs, id)
			continue
		}
		f.jobs[id] = j
	}
	if len(f.live) > maxLive {
		// Processes whose exit was never told: keep those of the attempts
		// held (those that run).
		clear(f.live)
		for id, a := range f.atts {
			for k := range a.procs {
				f.addLive(k, id)
			}
		}
	}
}

// Stored ends a commit once its writes are durable (CommitPending; Commit
// calls it): the jobs of the attempts it wrote are to be added up again
// (TakeDirtyJobs), the attempts that ended and the jobs that run none are
// let go unless a later transaction changed them since, and the metrics'
// names it was told of are ext's.
func (f *Fold[B]) Stored(t *FoldTx[B], ext *ExtNames) {
	for _, id := range t.written {
		f.dirtyJobs[id] = true
	}
	for id, a := range t.atts {
		if a.Meta.Ended && !a.dirty && f.atts[id] == a {
			f.letGo(id)
		}
	}
	for id, j := range t.jobs {
		if j.Running <= 0 && !j.dirty && f.jobs[id] == j {
			delete(f.jobs, id)
		}
	}
	for _, n := range t.newExt {
		ext.Add(n.kind, n.metric)
	}
}

// letGo lets an ended attempt that is written go: at once, or (KeepEnded)
// once KeepEnded attempts ended after it.
func (f *Fold[B]) letGo(id string) {
	if f.opt.KeepEnded <= 0 {
		delete(f.atts, id)
		return
	}
	f.nEnded++
	f.endedN[id] = f.nEnded
	f.ended = append(f.ended, endedAtt{id, f.nEnded})
	for len(f.endedN) > f.opt.KeepEnded {
		e := f.ended[0]
		f.ended = f.ended[1:]
		if f.endedN[e.id] != e.n {
			continue // kept by a later entry
		}
		delete(f.endedN, e.id)
		if a := f.atts[e.id]; a != nil && a.Meta.Ended && !a.dirty {
			delete(f.atts, e.id)
		}
	}
	if len(f.ended) > 2*f.opt.KeepEnded {
		// (Entries of attempts ended again since, and the slice's head.)
		f.ended = slices.DeleteFunc(slices.Clone(f.ended), func(e endedAtt) bool { return f.endedN[e.id] != e.n })
	}
}

// Failed drops what a transaction the backend could not store may have
// stored in part (Shared: its attempts' states and the agents are read
// again); the fold's states are as before it otherwise.
func (f *Fold[B]) Failed(t *FoldTx[B]) {
	if !f.opt.Shared {
		return
	}
	for id := range t.atts {
		delete(f.atts, id)
	}
	clear(f.agents)
}

// Take takes o's states in place of f's, keeping f's options (a store
// that opened its data again, as o, goes on with what o read).
func (f *Fold[B]) Take(o *Fold[B]) {
	f.agents, f.atts, f.jobs, f.live, f.hosts, f.dirtyJobs = o.agents, o.atts, o.jobs, o.live, o.hosts, o.dirtyJobs
}
