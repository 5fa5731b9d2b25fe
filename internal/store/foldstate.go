package store

import (
	"hash/maphash"
	"maps"
	"slices"

	"github.com/taskscope/taskscope/internal/wire"
)

// The states a store keeps of what agents sent (Fold keeps them): an
// agent's last stored batch, an attempt's description, summary and member
// processes, a job's figures over its attempts, and the live processes'
// attempts.

// Series kinds: what a chunk is a series of (both stores keep a kind
// beside each chunk).
const (
	KindProcess    = 0
	KindAttempt    = 1
	KindProcessExt = 2 // a process's metric with no column of its own (ExtColumns)
	KindAttemptExt = 3 // an attempt's
)

// AgentState is an agent as a store keeps it: its last stored batch and
// counts over its batches.
type AgentState struct {
	Host             string
	Seq              uint64 // of its last stored batch
	FirstMs, LastMs  int64  // when its first and its last stored batch were sent
	Batches, Samples uint64
	Stats            wire.AgentStats // as its last batch says
	dirty            bool            // changed since it was last written
	// since (Shared): every batch of the agent stored with a later
	// sequence went through this fold (its Seq when the fold took the
	// agent's state from the store; 0 for an agent nothing was stored of).
	since uint64
}

// count counts a stored batch.
func (a *AgentState) count(p *Prepared) {
	b := p.Batch
	a.Seq, a.Host, a.LastMs, a.Stats = b.Seq, b.Host, b.SentMs, b.Stats
	a.Batches++
	a.Samples += uint64(p.Samples)
	if a.FirstMs == 0 {
		a.FirstMs = b.SentMs
	}
	a.dirty = true
}

// AttemptRecord is an attempt as a store keeps it: its description as
// merged (MergeAttempt), the host it runs on, its summary in absolute
// values (MergeSummary: its LastMs and LastRSS are its last RSS point, to
// integrate across batches), and its member processes. B is what the
// backend keeps beside it for its own rows (a version, a partition, ...):
// it travels with the record.
type AttemptRecord[B any] struct {
	// AttemptRow is what is stored of it (its NProcs: the count of its
	// member processes as a read says it, for a record read without them;
	// Processes).
	AttemptRow
	// Born is the time the first batch that stored anything of it says
	// (BatchTime), 0 while not known.
	Born int64
	// GenFirst and GenLast are the first and the last commit that stored
	// anything of it, as the backend numbers its commits (FoldTx's gen; 0
	// for a backend that does not).
	GenFirst, GenLast uint64
	// Writer and WriterSeq are the agent and the batch that made this
	// state (Shared: a state in memory is the attempt's only while every
	// batch its agent stored after that one went through the fold).
	Writer    string
	WriterSeq uint64
	B         B
	// procs are its member processes, each with a hash of the command line
	// last logged for it in the attempt's rows (0: none yet).
	procs   map[uint64]uint64
	shared  bool // procs is shared with another copy: copied before a change
	counted counted
	dirty   bool // changed since it was last written
}

// counted is what an attempt adds to its job, with the first commit of the
// attempt (a job keeps the range of its attempts').
type counted struct {
	Contribution
	gen uint64
}

// NewAttemptRecord is the record of an attempt a store holds nothing of.
func NewAttemptRecord[B any](id string) *AttemptRecord[B] {
	return &AttemptRecord[B]{AttemptRow: AttemptRow{Meta: wire.Attempt{AttemptID: id}}}
}

// Processes is the count of its member processes.
func (a *AttemptRecord[B]) Processes() int {
	if a.procs != nil {
		return len(a.procs)
	}
	return int(a.NProcs)
}

// Members lists its member processes' keys (those a loader added).
func (a *AttemptRecord[B]) Members() []uint64 {
	return slices.Collect(maps.Keys(a.procs))
}

// ReadMembers says that its member processes are those AddMember adds
// from now (a loader about to read the record's memberships): none so
// far, whatever NProcs says.
func (a *AttemptRecord[B]) ReadMembers() { a.procs, a.shared = map[uint64]uint64{}, false }

// AddMember takes process k as a member (a loader reading the record's
// memberships).
func (a *AttemptRecord[B]) AddMember(k uint64) {
	if _, ok := a.procs[k]; ok {
		return
	}
	a.setCmd(k, 0)
}

// HasMember reports whether process k is a member.
func (a *AttemptRecord[B]) HasMember(k uint64) bool {
	_, ok := a.procs[k]
	return ok
}

// CmdLogged reports whether a command line of member k was logged in the
// attempt's rows.
func (a *AttemptRecord[B]) CmdLogged(k uint64) bool { return a.procs[k] != 0 }

// TakeCmd records cmd as the command line logged for process k in the
// attempt's rows, and reports whether it differs from the one logged
// last (then the rows log it): a command line is logged once per attempt
// and process.
func (a *AttemptRecord[B]) TakeCmd(k uint64, cmd string) bool {
	h := maphash.String(cmdSeed, cmd) | 1
	if a.procs[k] == h {
		return false
	}
	a.setCmd(k, h)
	return true
}

// cmdSeed hashes command lines (in memory only).
var cmdSeed = maphash.MakeSeed()

func (a *AttemptRecord[B]) setCmd(k, h uint64) {
	if a.shared || a.procs == nil {
		a.procs = maps.Clone(a.procs)
		if a.procs == nil {
			a.procs = map[uint64]uint64{}
		}
		a.shared = false
	}
	a.procs[k] = h
}

// Contribution is what it adds to its job now.
func (a *AttemptRecord[B]) Contribution() Contribution {
	return AttemptContribution(&a.Meta, a.Host, &a.Sum)
}

func (a *AttemptRecord[B]) contribution() counted {
	c := counted{Contribution: a.Contribution()}
	if c.In {
		c.gen = a.GenFirst
	}
	return c
}

// Attempt is the attempt as the API shows it (AttemptOf), its state
// decided by staleBefore.
func (a *AttemptRecord[B]) Attempt(staleBefore int64) Attempt {
	return AttemptOf(&a.Meta, a.Host, &a.Sum, a.Processes(), staleBefore)
}

// copyOf is a copy of a that changes to it leave a as it is (its
// processes are copied at the first change).
func (a *AttemptRecord[B]) copyOf() *AttemptRecord[B] {
	c := *a
	c.shared = true
	return &c
}

// JobRecord is a job's figures as sums over its attempts (JobTotals),
// with the range of its attempts' first commits (GenFirst).
type JobRecord struct {
	JobTotals
	GenLo, GenHi uint64
	dirty        bool // changed since it was last written
}

func (j *JobRecord) clone() *JobRecord {
	return &JobRecord{JobTotals: j.JobTotals.Clone(), GenLo: j.GenLo, GenHi: j.GenHi, dirty: j.dirty}
}

// apply replaces old's share of the job by now's.
func (j *JobRecord) apply(old, now counted) {
	j.Apply(old.Contribution, now.Contribution)
	if now.In && now.gen > 0 {
		if j.GenLo == 0 || now.gen < j.GenLo {
			j.GenLo = now.gen
		}
		j.GenHi = max(j.GenHi, now.gen)
	}
	j.dirty = true
}

// AddAttempt adds an attempt to the job: what its description says of the
// job (Describe) and its contribution. A job read back from its attempts'
// records is made by it, in any order (a store that keeps none, a store
// loading one it let go, a store recovering after a crash).
func (j *JobTotals) AddAttempt(m *wire.Attempt, host string, s *AttemptSummary) {
	j.Describe(m)
	j.Add(AttemptContribution(m, host, s))
}

// liveProc is what is known of a live process (one not seen to exit): the
// attempts it is a member of, its start, and the job of the first of them
// that had one when it was added (its chunks are filed under that job
// once the attempt has ended and been let go).
type liveProc struct {
	atts  []string
	start int64
	job   string
}

// BatchTime is the time a batch says it is of: the later of when it was
// sent and of the earliest time it says (its first attempt sample, or an
// attempt's first sighting).
func BatchTime(b *wire.Batch) int64 {
	var t int64
	for i := range b.AttemptSeries {
		if s := &b.AttemptSeries[i]; len(s.Times) > 0 && (t == 0 || s.Times[0] < t) {
			t = s.Times[0]
		}
	}
	for i := range b.Attempts {
		if f := b.Attempts[i].FirstMs; f > 0 && (t == 0 || f < t) {
			t = f
		}
	}
	return max(b.SentMs, t)
}
