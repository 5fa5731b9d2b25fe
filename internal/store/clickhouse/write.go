package clickhouse

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Columns of the inserts, in the order rows are written.
var (
	chunkCols     = []string{"day", "kind", "job_key", "key", "t_min", "t_max", "n", "level", "start_ms", "data"}
	seriesCols    = []string{"day", "slot", "kind", "job_key", "key", "t_min", "t_max", "n", "level", "start_ms", "data"}
	procCols      = []string{"day", "job_key", "attempt_key", "proc_key", "gen", "member", "described", "has_cmd", "host", "pid", "ppid", "sid", "start_ms", "end_ms", "cmdline", "comm", "role", "uid", "user_name", "from_ms", "to_ms", "cpu_base_ms", "member_role"}
	procIndexCols = []string{"day", "proc_key", "attempt_key", "attempt_id", "job_key", "start_ms"}
	attIndexCols  = []string{"day", "attempt_key", "attempt_id", "job_key"}
	hostIndexCols = []string{"day", "host", "bucket", "job_key", "attempt_id", "att_day"}
	eventCols     = []string{"day", "job_key", "ts", "host", "kind", "job_id", "attempt_id", "proc_key", "pid", "message", "value", "agent_key", "seq", "idx"}
	extCols       = []string{"kind", "metric"}
	agentColList  = []string{"agent_key", "agent_id", "seq", "host", "first_ms", "last_ms", "batches", "samples", "dropped_samples", "dropped_batches", "read_errors", "overruns"}
)

// writeSet is what a commit writes: each table's block. It is the sink of
// the commit's fold (store.Sink).
type writeSet struct {
	slot                                                             uint32 // of the commit's time: its chunks' (merge.go)
	chunks, procs, procIndex, attIndex, hostIndex, events, ext, atts Block
	agents                                                           Block
	// jobDays are the earliest day of the attempts' rows written, by job
	// (Store.jobDays once stored).
	jobDays map[string]uint16
	// jobRows are the attempts' rows written, as the jobs' flush adds
	// them up (jobRowOf).
	jobRows []*attState
	// seqs is how much the agents' rows move the sum of their last
	// sequences (Store.ownSeqs once stored).
	seqs uint64
	// members are the memberships of the batch being absorbed
	// not yet written: each goes into the row of its process's
	// description in the same batch and attempt, or alone (Batch).
	members    map[memberKey]pendingMember
	memberList []memberKey // (in the batch's order)
	apart      bool        // Store.membersApart
	// took, when not nil (a traced commit), gets each insert's table,
	// rows and time, as "table:rows:time" (the "commit" trace's inserts).
	took []string
}

// memberKey is an attempt's and a process's keys.
type memberKey struct{ att, proc uint64 }

// pendingMember is a membership waiting for its process's description,
// with the head of its row as of its batch (procHead: the next batch may
// tell its attempt's job).
type pendingMember struct {
	head procHead
	m    *wire.Membership
}

// newWriteSet is an empty write set of slot: a spare one's blocks
// emptied, their memory kept, or new ones.
func (s *Store) newWriteSet(slot uint32) *writeSet {
	s.spareMu.Lock()
	var w *writeSet
	if n := len(s.spares); n > 0 {
		w, s.spares[n-1] = s.spares[n-1], nil
		s.spares = s.spares[:n-1]
	}
	s.spareMu.Unlock()
	if w == nil {
		return &writeSet{slot: slot}
	}
	for _, b := range w.blocks() {
		b.Reset()
	}
	w.slot, w.jobDays, w.seqs, w.jobRows = slot, nil, 0, w.jobRows[:0]
	w.memberList = w.memberList[:0]
	clear(w.members)
	w.took = nil
	return w
}

// maxSpares is how many write sets the store keeps for its next commits:
// two are in use at most (one inserting, the next folding: the ingest
// pipeline starts no more), and one more is kept so that a commit that
// ends while both are in use does not drop its blocks.
const maxSpares = 3

// putSpare keeps w's blocks for a later commit (its inserts done, or
// never sent). It may be called while another commit holds wmu: a
// commit's inserts hand their blocks back as soon as they are done, before
// the pipeline begins the next commit (which would otherwise build in new
// blocks while the writer's lock is held).
func (s *Store) putSpare(w *writeSet) {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if len(s.spares) < maxSpares {
		s.spares = append(s.spares, w)
	}
}

// nBlocks is the number of a write set's blocks (blocks).
const nBlocks = 9

// blocks are w's blocks, in a fixed order (Store.perBatch).
func (w *writeSet) blocks() [nBlocks]*Block {
	return [nBlocks]*Block{&w.chunks, &w.procs, &w.procIndex, &w.attIndex, &w.hostIndex, &w.events, &w.ext, &w.atts, &w.agents}
}

// chunkRowBytes is what a row of series_chunks takes beside its data
// (seriesRow: its fixed columns and the data's length, at most).
const chunkRowBytes = 2 + 4 + 1 + 8 + 8 + 8 + 8 + 4 + 1 + 8 + binary.MaxVarintLen64

// sizeBlocks makes room in w's blocks for the rows of a commit of ps
// before its fold (wmu held): in the chunks' block for the batches'
// chunks, and in each block for what a batch took in it in the last
// commits (perBatch), so that a commit larger than the blocks it was
// given (the start's wave, met with none) grows each of them once.
func (s *Store) sizeBlocks(w *writeSet, ps []*store.Prepared) {
	chunks := 0
	for _, p := range ps {
		for _, cs := range [...][]store.SeriesChunk{p.ProcChunks, p.AttChunks, p.ExtChunks} {
			for i := range cs {
				chunks += chunkRowBytes + len(cs[i].Data)
			}
		}
	}
	for i, b := range w.blocks() {
		// An eighth more (batches differ a little), but no more than
		// twice the most the block ever held, or the chunks' size: a
		// commit of a few batches that wrote much (a long list of
		// processes) does not have the next commit of many batches set
		// aside much more memory than the store ever used.
		want := min(int(s.perBatch[i]*float64(len(ps))*9/8), max(2*s.largest[i], chunks))
		if b == &w.chunks {
			want = max(want, chunks)
		}
		if want > cap(b.buf) {
			// (A quarter more: not grown again for a commit a little larger.)
			b.Grow(want + want/4 - b.Len())
		}
	}
}

// blockNames are the tables of w's blocks, in the order of blocks.
var blockNames = [nBlocks]string{"series_chunks", "procs", "proc_index", "attempt_index", "host_index", "events", "ext_metrics",
	"attempts", "agents"}

// grew says which of w's blocks grew as they were written, and how many
// times ("table:times", the "commit" trace's grew), since they were
// sized (sizeBlocks).
func (w *writeSet) grew() string {
	var out []string
	for i, b := range w.blocks() {
		if b.grew > 0 {
			out = append(out, blockNames[i]+":"+strconv.Itoa(b.grew))
		}
	}
	return strings.Join(out, " ")
}

// notePerBatch notes what a batch of a commit of batches took in each of
// w's blocks (wmu held): perBatch keeps the most of the last commits',
// halving at each commit; largest, the most a block held.
func (s *Store) notePerBatch(w *writeSet, batches int) {
	if batches == 0 {
		return
	}
	for i, b := range w.blocks() {
		s.perBatch[i] = max(s.perBatch[i]/2, float64(b.Len())/float64(batches))
		s.largest[i] = max(s.largest[i], b.Len())
	}
}

// jobDay notes a row of an attempt of job written in day.
func (w *writeSet) jobDay(job string, day uint16) {
	if w.jobDays == nil {
		w.jobDays = map[string]uint16{}
	}
	if old, ok := w.jobDays[job]; !ok || day < old {
		w.jobDays[job] = day
	}
}

var _ store.Sink[chRow] = (*writeSet)(nil)

// order is what orders a record of a batch among an attempt's rows (the
// time its agent sent it, its sequence, and its place in the batch), as
// ProcessView wants it: growing with the time the agent sent it.
func order(b *wire.Batch, idx int) uint64 {
	return uint64(max(b.SentMs, 0))<<22 | (b.Seq&0x3ff)<<12 | uint64(idx&0xfff)
}

// Chunk writes a chunk under its job's key, with its process's start.
func (w *writeSet) Chunk(kind int, c *store.SeriesChunk, job string, start int64) {
	w.chunkRow(uint8(kind), jobKey(job), c, start)
}

// Described: an attempt's row holds its description (attemptRow).
func (w *writeSet) Described(*wire.Batch, int, *attState) {}

// Member indexes a process's first membership in an attempt, and keeps
// the membership for the row of its process's description in the same
// batch (Process), or its own row once the batch is absorbed (Batch).
// A process joining an attempt is mostly described in the same batch, and
// leaves it with its exit's description: one row each time, not two (a
// process's memberships and descriptions were most of procs' rows, and
// of its merges).
func (w *writeSet) Member(b *wire.Batch, m *wire.Membership, a *attState, first bool, idx int) {
	if first {
		w.procIndexRow(m, a, b)
	}
	if w.apart {
		w.memberRow(headOf(a, m.Process, order(b, idx), b), m)
		return
	}
	k := memberKey{store.AttemptKey(a.Meta.AttemptID), m.Process}
	if old, ok := w.members[k]; ok {
		// (a second membership of the pair in the batch: the first alone)
		w.memberRow(old.head, old.m)
	} else {
		w.memberList = append(w.memberList, k)
	}
	if w.members == nil {
		w.members = map[memberKey]pendingMember{}
	}
	w.members[k] = pendingMember{headOf(a, m.Process, order(b, idx), b), m}
}

// Process logs a description of a process, with its membership in the
// attempt when the batch has one waiting (Member).
func (w *writeSet) Process(b *wire.Batch, p *wire.Process, a *attState, cmd bool, idx int) {
	gen := order(b, idx)
	if a != nil {
		k := memberKey{store.AttemptKey(a.Meta.AttemptID), p.Key}
		if pm, ok := w.members[k]; ok {
			delete(w.members, k)
			w.processRow(a, p, b, cmd, gen, pm.m)
			return
		}
	}
	w.processRow(a, p, b, cmd, gen, nil)
}

// Batch ends a batch absorbed: the memberships of it that no description
// took are written, each in a row of its own.
func (w *writeSet) Batch(*store.Prepared) {
	for _, k := range w.memberList {
		if pm, ok := w.members[k]; ok {
			w.memberRow(pm.head, pm.m)
		}
	}
	w.memberList = w.memberList[:0]
	clear(w.members)
}

func (w *writeSet) Event(b *wire.Batch, i int, job string) { w.eventRow(b, i, job) }

func (w *writeSet) Ext(kind int, metric string) {
	w.ext.Row()
	w.ext.UInt8(uint8(kind))
	w.ext.String(metric)
}

// Batch: nothing (the table batches, a ledger of the batches stored that
// nothing read, is no longer written: an insert and a part a commit, and
// their merges; agents keeps each agent's counts).
func (w *writeSet) chunkRow(kind uint8, job uint64, c *store.SeriesChunk, start int64) {
	b := &w.chunks
	seriesRow(b, w.slot, kind, job, c.Key, c.TMin, c.TMax, c.N, 0, start, c.Data)
}

// procHead is the key of a row of procs: its day, its attempt's job's and
// its own key, its process's, and its order.
type procHead struct {
	day                uint16
	job, att, key, gen uint64
}

// headOf is the head of a row of a process (key) in the rows of attempt st
// (nil: of none), of batch b.
func headOf(st *attState, key, gen uint64, b *wire.Batch) procHead {
	h := procHead{day: DayOf(store.BatchTime(b)), job: jobKey(""), key: key, gen: gen}
	if st != nil {
		if st.Born > 0 {
			h.day = DayOf(st.Born)
		}
		h.job, h.att = jobKey(st.Meta.JobID), store.AttemptKey(st.Meta.AttemptID)
	}
	return h
}

func (w *writeSet) procRowHead(h procHead) {
	r := &w.procs
	r.Row()
	r.UInt16(h.day)
	r.UInt64(h.job)
	r.UInt64(h.att)
	r.UInt64(h.key)
	r.UInt64(h.gen)
}

// memberRow logs a membership of a process in an attempt, alone.
func (w *writeSet) memberRow(h procHead, m *wire.Membership) {
	w.procRowHead(h)
	r := &w.procs
	r.UInt8(1) // member
	r.UInt8(0) // described
	r.UInt8(0) // has_cmd
	r.String("")
	r.Int32(0)
	r.Int32(0)
	r.Int32(0)
	r.Int64(0)
	r.Int64(0)
	r.String("")
	r.String("")
	r.String("")
	r.UInt32(0)
	r.String("")
	w.memberFields(m)
}

// memberFields ends a row with a membership's columns (m nil: none).
func (w *writeSet) memberFields(m *wire.Membership) {
	r := &w.procs
	if m == nil {
		m = &wire.Membership{}
	}
	r.Int64(m.FromMs)
	r.Int64(m.ToMs)
	r.Int64(m.CPUBaseMs)
	r.String(m.Role)
}

// processRow logs a description of a process, in an attempt's rows (st
// nil: in no attempt's), with its membership in the attempt from the same
// batch (m; nil: none). Such a row is read as the membership, then the
// description (procRecord.add): their order in the batch.
func (w *writeSet) processRow(st *attState, p *wire.Process, b *wire.Batch, logCmd bool, gen uint64, m *wire.Membership) {
	w.procRowHead(headOf(st, p.Key, gen, b))
	r := &w.procs
	r.Bool(m != nil) // member
	r.UInt8(1)       // described
	cmd := ""
	if logCmd {
		r.UInt8(1)
		cmd = p.Cmdline
	} else {
		r.UInt8(0)
	}
	r.String(b.Host)
	r.Int32(p.PID)
	r.Int32(p.PPID)
	r.Int32(p.SID)
	r.Int64(p.StartMs)
	r.Int64(p.EndMs)
	r.String(cmd)
	r.String(p.Comm)
	r.String(p.Role)
	r.UInt32(p.UID)
	r.String(p.User)
	w.memberFields(m)
}

func (w *writeSet) procIndexRow(m *wire.Membership, st *attState, b *wire.Batch) {
	r := &w.procIndex
	r.Row()
	r.Date(store.BatchTime(b))
	r.UInt64(m.Process)
	r.UInt64(store.AttemptKey(m.AttemptID))
	r.String(m.AttemptID)
	r.UInt64(jobKey(st.Meta.JobID))
	r.Int64(m.FromMs)
}

func (w *writeSet) eventRow(b *wire.Batch, i int, job string) {
	e := &b.Events[i]
	r := &w.events
	r.Row()
	r.Date(e.Ms)
	r.UInt64(jobKey(job))
	r.Int64(e.Ms)
	r.String(b.Host)
	r.String(e.Kind)
	r.String(e.JobID)
	r.String(e.AttemptID)
	r.UInt64(e.Process)
	r.Int32(e.PID)
	r.String(e.Message)
	r.Int64(e.Value)
	r.UInt64(store.AttemptKey(b.AgentID))
	r.UInt64(b.Seq)
	r.UInt32(uint32(i))
}

func (w *writeSet) agentRow(id string, a *store.AgentState) {
	r := &w.agents
	r.Row()
	r.UInt64(store.AttemptKey(id))
	r.String(id)
	r.UInt64(a.Seq)
	r.String(a.Host)
	r.Int64(a.FirstMs)
	r.Int64(a.LastMs)
	r.UInt64(a.Batches)
	r.UInt64(a.Samples)
	r.UInt64(a.Stats.DroppedSamples)
	r.UInt64(a.Stats.DroppedBatches)
	r.UInt64(a.Stats.ReadErrors)
	r.UInt64(a.Stats.Overruns)
}

// insert writes the blocks: the data's tables at once, then the agents'
// last batches, so that a commit that fails half way is stored again whole
// by the agents' retries (its rows written twice are kept once). The
// attempts' rows go in once their index rows are in (the other tables
// meanwhile): an attempt with a row has its index row, so a commit looks
// for the attempts it meets in the index alone (stored, indexFirst).
func (w *writeSet) insert(ctx context.Context, s *Store) error {
	type ins struct {
		name string
		cols []string
		b    *Block
		then *ins // inserted once this one is in
	}
	var tmu sync.Mutex
	timed := func(name string, t0 time.Time, rows int) {
		if w.took != nil {
			tmu.Lock()
			w.took = append(w.took, fmt.Sprintf("%s:%d:%s", name, rows, time.Since(t0).Round(time.Millisecond)))
			tmu.Unlock()
		}
	}
	stage := []ins{{"series_chunks", seriesCols, &w.chunks, nil}, {"ext_metrics", extCols, &w.ext, nil},
		{"procs", procCols, &w.procs, nil}, {"proc_index", procIndexCols, &w.procIndex, nil},
		{"host_index", hostIndexCols, &w.hostIndex, nil},
		{"attempt_index", attIndexCols, &w.attIndex, &ins{"attempts", attemptCols, &w.atts, nil}},
		{"events", eventCols, &w.events, nil}}
	errs := make(chan error, len(stage))
	for _, t := range stage {
		go func() {
			t0 := time.Now()
			err := s.insert(ctx, t.name, t.cols, t.b)
			timed(t.name, t0, t.b.Rows())
			if err == nil && t.then != nil {
				t1 := time.Now()
				err = s.insert(ctx, t.then.name, t.then.cols, t.then.b)
				timed(t.then.name, t1, t.then.b.Rows())
			}
			errs <- err
		}()
	}
	var first error
	for range stage {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	// The agents' rows last, this replica's count of the sequences they
	// add once they are in, and Changes told of the insert meanwhile: it
	// does not take what it reads then. (Before, a Changes between the
	// insert and the count took this commit for another replica's: the
	// jobs' flush then dropped its cache and read every job it wrote
	// again, 4 flushes of 48 in a replay of short tasks, 3,912 jobs.)
	s.ownInsertBegins()
	t0 := time.Now()
	err := s.insert(ctx, "agents", agentColList, &w.agents)
	timed("agents", t0, w.agents.Rows())
	var seqs uint64
	if err == nil {
		if s.agentsInserted != nil {
			s.agentsInserted()
		}
		seqs = w.seqs
	}
	s.ownInsertEnds(seqs)
	return err
}

func (s *Store) loadExt(ctx context.Context) error {
	rows, err := s.query(ctx, "SELECT kind, metric FROM "+s.read("ext_metrics"))
	if err != nil {
		return fmt.Errorf("cannot read ext_metrics: %w", err)
	}
	for rows.Next() {
		kind, metric := rows.UInt8(), rows.String()
		s.ext.Add(int(kind), metric)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read ext_metrics: %w", err)
	}
	return nil
}
