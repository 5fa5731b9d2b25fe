package clickhouse

import (
	"context"
	"fmt"

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
}

// newWriteSet is an empty write set of slot: the spare one's blocks
// emptied, their memory kept, or new ones (wmu held).
func (s *Store) newWriteSet(slot uint32) *writeSet {
	w := s.spare
	if w == nil {
		return &writeSet{slot: slot}
	}
	s.spare = nil
	for _, b := range []*Block{&w.chunks, &w.procs, &w.procIndex, &w.attIndex, &w.hostIndex, &w.events, &w.ext, &w.atts,
		&w.agents} {
		b.Reset()
	}
	w.slot, w.jobDays, w.seqs, w.jobRows = slot, nil, 0, w.jobRows[:0]
	return w
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

// Member logs a membership, and indexes a process's first in an attempt.
func (w *writeSet) Member(b *wire.Batch, m *wire.Membership, a *attState, first bool, idx int) {
	if first {
		w.procIndexRow(m, a, b)
	}
	w.memberRow(a, m, order(b, idx), b)
}

func (w *writeSet) Process(b *wire.Batch, p *wire.Process, a *attState, cmd bool, idx int) {
	w.processRow(a, p, b, cmd, order(b, idx))
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
func (w *writeSet) Batch(*store.Prepared) {}

func (w *writeSet) chunkRow(kind uint8, job uint64, c *store.SeriesChunk, start int64) {
	b := &w.chunks
	seriesRow(b, w.slot, kind, job, c.Key, c.TMin, c.TMax, c.N, 0, start, c.Data)
}

func (w *writeSet) procRowHead(st *attState, key, gen uint64, b *wire.Batch) {
	r := &w.procs
	r.Row()
	day := DayOf(store.BatchTime(b))
	if st != nil && st.Born > 0 {
		day = DayOf(st.Born)
	}
	r.UInt16(day)
	if st != nil {
		r.UInt64(jobKey(st.Meta.JobID))
		r.UInt64(store.AttemptKey(st.Meta.AttemptID))
	} else {
		r.UInt64(jobKey(""))
		r.UInt64(0)
	}
	r.UInt64(key)
	r.UInt64(gen)
}

// memberRow logs a membership of a process in an attempt.
func (w *writeSet) memberRow(st *attState, m *wire.Membership, gen uint64, b *wire.Batch) {
	w.procRowHead(st, m.Process, gen, b)
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
	r.Int64(m.FromMs)
	r.Int64(m.ToMs)
	r.Int64(m.CPUBaseMs)
	r.String(m.Role)
}

// processRow logs a description of a process, in an attempt's rows (st
// nil: in no attempt's).
func (w *writeSet) processRow(st *attState, p *wire.Process, b *wire.Batch, logCmd bool, gen uint64) {
	w.procRowHead(st, p.Key, gen, b)
	r := &w.procs
	r.UInt8(0)
	r.UInt8(1)
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
	r.Int64(0)
	r.Int64(0)
	r.Int64(0)
	r.String("")
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
	for _, stage := range [][]ins{
		{{"series_chunks", seriesCols, &w.chunks, nil}, {"ext_metrics", extCols, &w.ext, nil}, {"procs", procCols, &w.procs, nil},
			{"proc_index", procIndexCols, &w.procIndex, nil}, {"host_index", hostIndexCols, &w.hostIndex, nil},
			{"attempt_index", attIndexCols, &w.attIndex, &ins{"attempts", attemptCols, &w.atts, nil}},
			{"events", eventCols, &w.events, nil}},
		{{"agents", agentColList, &w.agents, nil}},
	} {
		errs := make(chan error, len(stage))
		for _, t := range stage {
			go func() {
				err := s.insert(ctx, t.name, t.cols, t.b)
				if err == nil && t.then != nil {
					err = s.insert(ctx, t.then.name, t.then.cols, t.then.b)
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
	}
	return nil
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
