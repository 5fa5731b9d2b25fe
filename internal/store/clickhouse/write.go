package clickhouse

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Series kinds of the chunk tables (as the embedded store's).
const (
	kindProcess    = 0
	kindAttempt    = 1
	kindProcessExt = 2
	kindAttemptExt = 3
)

// Columns of the inserts, in the order rows are written.
var (
	chunkCols     = []string{"day", "kind", "job_key", "key", "t_min", "t_max", "n", "level", "start_ms", "data"}
	procCols      = []string{"day", "job_key", "attempt_key", "proc_key", "gen", "member", "described", "has_cmd", "host", "pid", "ppid", "sid", "start_ms", "end_ms", "cmdline", "comm", "role", "uid", "user_name", "from_ms", "to_ms", "cpu_base_ms", "member_role"}
	procIndexCols = []string{"day", "proc_key", "attempt_key", "attempt_id", "job_key", "start_ms"}
	attIndexCols  = []string{"day", "attempt_key", "attempt_id", "job_key"}
	eventCols     = []string{"day", "job_key", "ts", "host", "kind", "job_id", "attempt_id", "proc_key", "pid", "message", "value", "agent_key", "seq", "idx"}
	extCols       = []string{"kind", "metric"}
	batchCols     = []string{"day", "agent_key", "agent_id", "seq", "host", "sent_ms", "samples", "dropped_samples", "dropped_batches", "read_errors", "overruns"}
	agentColList  = []string{"agent_key", "agent_id", "seq", "host", "first_ms", "last_ms", "batches", "samples", "dropped_samples", "dropped_batches", "read_errors", "overruns"}
	attemptCols   = []string{"day", "job_key", "attempt_id", "attempt_key", "version", "job_id", "host", "container_id", "app_id", "type", "framework", "meta_first_ms", "meta_last_ms", "first_ms", "last_ms", "ended", "job_name", "user_name", "queue", "memory_mb", "java_opts", "xmx_bytes", "streaming", "cpu_ms", "peak_rss", "peak_pss", "peak_vms", "peak_heap", "read_bytes", "write_bytes", "gc_time_ms", "sched_wait_ms", "rss_byte_ms", "sum_first_ms", "sum_last_ms", "first_rss", "last_rss", "processes", "writer_agent", "writer_seq", "exit_jvm", "exit_jvm_ms", "exit_root", "exit_root_ms", "exit_file", "exit_file_ms", "exit_nm", "exit_nm_ms", "exit_diag", "oom_kills", "exit_log", "exit_log_ms"}
)

// writeSet is what a commit writes: each table's block, and the states it
// changes.
type writeSet struct {
	s                                                     *Store
	chunks, procs, procIndex, attIndex, events, ext, atts Block
	batches, agents                                       Block
	states                                                map[string]*attState // attempts touched, as they will be
	live                                                  map[uint64]*liveProc // changes to the live processes (nil: exited)
	newExt                                                []extName
	jobs                                                  map[string]bool
}

// order is what orders a record of a batch among an attempt's rows (the
// time its agent sent it, its sequence, and its place in the batch), as
// ProcessView wants it: growing with the time the agent sent it.
func order(b *wire.Batch, idx int) uint64 {
	return uint64(max(b.SentMs, 0))<<22 | (b.Seq&0x3ff)<<12 | uint64(idx&0xfff)
}

func (w *writeSet) liveProc(k uint64) *liveProc {
	if lp, ok := w.live[k]; ok {
		return lp
	}
	return w.s.cache.live[k]
}

func (w *writeSet) setLive(k uint64, lp *liveProc) { w.live[k] = lp }

func (w *writeSet) addLive(k uint64, id string) {
	lp := w.liveProc(k)
	cp := &liveProc{}
	if lp != nil {
		if contains(lp.atts, id) {
			return
		}
		cp.start, cp.atts = lp.start, append([]string(nil), lp.atts...)
	}
	cp.atts = append(cp.atts, id)
	w.setLive(k, cp)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// fold makes the commit's rows: the batches folded, in order, into the
// states of the attempts they touch (read again from ClickHouse where this
// replica's copy may be stale).
func (t *tx) fold() (*writeSet, error) {
	s := t.s
	w := &writeSet{s: s, states: map[string]*attState{}, live: map[uint64]*liveProc{},
		jobs: map[string]bool{}}
	// The attempts the batches touch, and by which agent first.
	touchedBy := map[string]string{}
	jobOf := map[string]string{} // the job a batch names for an attempt
	var unknownProcs []uint64
	for _, p := range t.prepared {
		b := p.Batch
		add := func(id string) {
			if id != "" {
				if _, ok := touchedBy[id]; !ok {
					touchedBy[id] = b.AgentID
				}
			}
		}
		members := map[uint64]bool{}
		for i := range b.Attempts {
			add(b.Attempts[i].AttemptID)
			if j := b.Attempts[i].JobID; j != "" {
				jobOf[b.Attempts[i].AttemptID] = j
			}
		}
		for i := range b.AttemptSeries {
			add(b.AttemptSeries[i].AttemptID)
		}
		for i := range b.Members {
			add(b.Members[i].AttemptID)
			members[b.Members[i].Process] = true
		}
		for i := range b.Processes {
			k := b.Processes[i].Key
			if lp := s.cache.live[k]; lp != nil {
				for _, id := range lp.atts {
					add(id)
				}
			} else if !members[k] {
				unknownProcs = append(unknownProcs, k)
			}
		}
		for i := range b.ProcSeries {
			if k := b.ProcSeries[i].Key; s.cache.live[k] == nil && !members[k] {
				unknownProcs = append(unknownProcs, k)
			}
		}
	}
	// Processes this replica does not know: their attempts from the index.
	if len(unknownProcs) > 0 {
		found, err := s.procAttempts(t.ctx, unknownProcs)
		if err != nil {
			return w, err
		}
		for k, lp := range found {
			w.setLive(k, lp)
			for _, id := range lp.atts {
				if _, ok := touchedBy[id]; !ok {
					touchedBy[id] = ""
				}
			}
		}
	}
	// Attempts to read: those not cached, and those whose cached state is
	// not the last its agent stored.
	var load []string
	for id, agent := range touchedBy {
		st := s.cache.atts[id]
		if st == nil || agent == "" && st.writerAgent == "" || agent != "" && (st.writerAgent != agent || st.writerSeq != t.base[agent]) {
			load = append(load, id)
			continue
		}
		w.states[id] = st.clone()
	}
	if len(load) > 0 {
		loaded, err := s.loadAttempts(t.ctx, load, jobOf)
		if err != nil {
			return w, err
		}
		for _, id := range load {
			st := loaded[id]
			if st == nil {
				st = newAttemptState(id)
			}
			w.states[id] = st
			for k := range st.procs {
				w.addLive(k, id)
			}
		}
	}
	touched := map[string]bool{}
	for _, p := range t.prepared {
		w.absorb(p, touched)
	}
	for id := range touched {
		st := w.states[id]
		if st.meta.JobID == "" {
			// Samples of an attempt no batch described yet wait, in this
			// replica's memory, for its description (as the embedded
			// store's): its rows are under its job's key.
			continue
		}
		st.version++
		w.attemptRow(id, st)
		w.jobs[st.meta.JobID] = true
	}
	for _, p := range t.prepared {
		w.batchRow(p)
	}
	for id, ag := range t.agents {
		if ag.seq != t.base[id] {
			w.agentRow(id, ag)
		}
	}
	return w, nil
}

// absorb folds a batch into the states, and writes its rows.
func (w *writeSet) absorb(p *store.Prepared, touched map[string]bool) {
	b := p.Batch
	touch := func(id string) *attState {
		st := w.states[id]
		if st == nil { // (fold reads every attempt a batch names first)
			st = newAttemptState(id)
			w.states[id] = st
		}
		touched[id] = true
		st.writerAgent, st.writerSeq = b.AgentID, b.Seq
		if st.day == 0 {
			st.day = DayOf(max(b.SentMs, firstTime(b)))
		}
		return st
	}
	idx := 0
	next := func() uint64 { idx++; return order(b, idx) }
	for i := range b.Attempts {
		a := &b.Attempts[i]
		st := touch(a.AttemptID)
		store.MergeAttempt(&st.meta, a)
		st.host = b.Host
	}
	for i := range b.Members {
		m := &b.Members[i]
		st := touch(m.AttemptID)
		if _, ok := st.procs[m.Process]; !ok {
			st.procs[m.Process] = 0
			w.procIndexRow(m, st, b)
		}
		w.memberRow(st, m, next(), b)
		w.addLive(m.Process, m.AttemptID)
	}
	for i := range b.Processes {
		pr := &b.Processes[i]
		lp := w.liveProc(pr.Key)
		if lp == nil || len(lp.atts) == 0 {
			w.processRow(nil, pr, b, true, next())
		} else {
			for _, id := range lp.atts {
				st := touch(id)
				h := maphash.String(cmdSeed, pr.Cmdline) | 1
				logCmd := st.procs[pr.Key] != h
				if logCmd {
					st.procs[pr.Key] = h
				}
				w.processRow(st, pr, b, logCmd, next())
			}
		}
		if pr.EndMs != 0 {
			w.setLive(pr.Key, nil)
		} else if lp != nil && lp.start != pr.StartMs {
			cp := *lp
			cp.start = pr.StartMs
			w.setLive(pr.Key, &cp)
		}
	}
	for id, sum := range p.Atts {
		st := touch(id)
		if st.host == "" {
			st.host = b.Host
		}
		store.MergeSummary(&st.sum, sum)
	}
	// Series: each process's chunks under its job's key (the job of its
	// attempt), with its start.
	starts := map[uint64]int64{}
	for i := range b.Processes {
		starts[b.Processes[i].Key] = b.Processes[i].StartMs
	}
	procJob := func(k uint64) (uint64, int64) {
		start, ok := starts[k]
		lp := w.liveProc(k)
		if lp != nil && !ok {
			start = lp.start
		}
		if lp != nil {
			for _, id := range lp.atts {
				if st := w.states[id]; st != nil && st.meta.JobID != "" {
					return jobKey(st.meta.JobID), start
				}
			}
		}
		return jobKey(""), start
	}
	for i := range p.ProcChunks {
		c := &p.ProcChunks[i]
		job, start := procJob(c.Key)
		w.chunkRow(kindProcess, job, c, start)
	}
	for i := range p.AttChunks {
		c := &p.AttChunks[i]
		w.chunkRow(kindAttempt, w.attJob(c.AttemptID), c, 0)
	}
	if len(p.ExtChunks) > 0 {
		// A process's ext chunk is keyed by store.ExtKey(process, metric).
		extProc := map[uint64]uint64{}
		for i := range b.ProcSeries {
			s := &b.ProcSeries[i]
			for j := range s.Columns {
				m := b.Metrics[s.Columns[j].Metric]
				extProc[store.ExtKey(s.Key, m)] = s.Key
			}
		}
		for i := range p.ExtChunks {
			c := &p.ExtChunks[i]
			kind, job, start := uint8(kindProcessExt), uint64(0), int64(0)
			if c.AttemptID != "" {
				kind, job = kindAttemptExt, w.attJob(c.AttemptID)
			} else {
				job, start = procJob(extProc[c.Key])
			}
			w.chunkRow(kind, job, c, start)
			if n := (extName{kind, c.Metric}); !w.s.knownExt(n) && !containsExt(w.newExt, n) {
				w.newExt = append(w.newExt, n)
				w.ext.Row()
				w.ext.UInt8(n.kind)
				w.ext.String(n.metric)
			}
		}
	}
	for i := range b.Events {
		w.eventRow(b, i)
	}
}

func containsExt(ns []extName, n extName) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}

// firstTime is the earliest time a batch says (its first sample, or an
// attempt's first sighting), for the day of a new attempt.
func firstTime(b *wire.Batch) int64 {
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
	return t
}

func (w *writeSet) attJob(id string) uint64 {
	if st := w.states[id]; st != nil {
		return jobKey(st.meta.JobID)
	}
	return jobKey("")
}

func (w *writeSet) chunkRow(kind uint8, job uint64, c *store.SeriesChunk, start int64) {
	b := &w.chunks
	b.Row()
	b.Date(c.TMin)
	b.UInt8(kind)
	b.UInt64(job)
	b.UInt64(c.Key)
	b.Int64(c.TMin)
	b.Int64(c.TMax)
	b.UInt32(uint32(c.N))
	b.UInt8(0)
	b.Int64(start)
	b.Blob(c.Data)
}

func (w *writeSet) procRowHead(st *attState, key, gen uint64, b *wire.Batch) {
	r := &w.procs
	r.Row()
	day := DayOf(max(b.SentMs, firstTime(b)))
	if st != nil && st.day > 0 {
		day = st.day
	}
	r.UInt16(day)
	if st != nil {
		r.UInt64(jobKey(st.meta.JobID))
		r.UInt64(store.AttemptKey(st.meta.AttemptID))
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
	r.Date(max(b.SentMs, firstTime(b)))
	r.UInt64(m.Process)
	r.UInt64(store.AttemptKey(m.AttemptID))
	r.String(m.AttemptID)
	r.UInt64(jobKey(st.meta.JobID))
	r.Int64(m.FromMs)
}

func (w *writeSet) eventRow(b *wire.Batch, i int) {
	e := &b.Events[i]
	job := e.JobID
	if job == "" && e.AttemptID != "" {
		if st := w.states[e.AttemptID]; st != nil {
			job = st.meta.JobID
		}
	}
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

func (w *writeSet) attemptRow(id string, st *attState) {
	m, s := &st.meta, &st.sum
	first, last := store.AttemptSpan(m, s)
	r := &w.atts
	r.Row()
	r.UInt16(st.day)
	r.UInt64(jobKey(m.JobID))
	r.String(id)
	r.UInt64(store.AttemptKey(id))
	r.UInt64(st.version)
	r.String(m.JobID)
	r.String(st.host)
	r.String(m.ContainerID)
	r.String(m.AppID)
	r.String(m.Type)
	r.String(m.Framework)
	r.Int64(m.FirstMs)
	r.Int64(m.LastMs)
	r.Int64(first)
	r.Int64(last)
	r.Bool(m.Ended)
	r.String(m.JobName)
	r.String(m.User)
	r.String(m.Queue)
	r.Int64(m.MemoryMB)
	r.String(m.JavaOpts)
	r.Int64(m.XmxBytes)
	r.Bool(m.Streaming)
	r.Int64(s.CPUMs)
	r.Int64(s.PeakRSS)
	r.Int64(s.PeakPSS)
	r.Int64(s.PeakVMS)
	r.Int64(s.PeakHeap)
	r.Int64(s.ReadBytes)
	r.Int64(s.WriteBytes)
	r.Int64(s.GCTimeMs)
	r.Int64(s.SchedWaitMs)
	r.Float64(s.RSSByteMs)
	r.Int64(s.FirstMs)
	r.Int64(s.LastMs)
	r.Int64(s.FirstRSS)
	r.Int64(s.LastRSS)
	r.UInt32(uint32(len(st.procs)))
	r.String(st.writerAgent)
	r.UInt64(st.writerSeq)
	for _, x := range [...]*wire.ExitStatus{&m.JVMExit, &m.RootExit, &m.FileExit, &m.NMExit} {
		r.Int32(x.Status)
		r.Int64(x.Ms)
	}
	r.String(m.ExitDiagnostics)
	r.UInt32(m.OOMKills)
	r.Int32(m.TaskLog.Status)
	r.Int64(m.TaskLog.Ms)
	// The index says under which job the attempt's rows are: written with
	// its first row, and again when its job changes (an attempt stored
	// before its description named the job): the index is what a read by
	// attempt (loadAttempts, Attempt) finds its job's rows by.
	if !st.stored || st.indexed != jobKey(m.JobID) {
		st.stored, st.indexed = true, jobKey(m.JobID)
		x := &w.attIndex
		x.Row()
		x.UInt16(st.day)
		x.UInt64(store.AttemptKey(id))
		x.String(id)
		x.UInt64(jobKey(m.JobID))
	}
}

func (w *writeSet) batchRow(p *store.Prepared) {
	b := p.Batch
	r := &w.batches
	r.Row()
	r.Date(max(b.SentMs, firstTime(b)))
	r.UInt64(store.AttemptKey(b.AgentID))
	r.String(b.AgentID)
	r.UInt64(b.Seq)
	r.String(b.Host)
	r.Int64(b.SentMs)
	r.UInt64(uint64(p.Samples))
	r.UInt64(b.Stats.DroppedSamples)
	r.UInt64(b.Stats.DroppedBatches)
	r.UInt64(b.Stats.ReadErrors)
	r.UInt64(b.Stats.Overruns)
}

func (w *writeSet) agentRow(id string, a *agentState) {
	r := &w.agents
	r.Row()
	r.UInt64(store.AttemptKey(id))
	r.String(id)
	r.UInt64(a.seq)
	r.String(a.host)
	r.Int64(a.firstMs)
	r.Int64(a.lastMs)
	r.UInt64(a.batches)
	r.UInt64(a.samples)
	r.UInt64(a.stats.DroppedSamples)
	r.UInt64(a.stats.DroppedBatches)
	r.UInt64(a.stats.ReadErrors)
	r.UInt64(a.stats.Overruns)
}

// insert writes the blocks: the data's tables at once, then the agents'
// last batches, so that a commit that fails half way is stored again whole
// by the agents' retries (its rows written twice are kept once).
func (w *writeSet) insert(ctx context.Context) error {
	type ins struct {
		name string
		cols []string
		b    *Block
	}
	for _, stage := range [][]ins{
		{{"chunks", chunkCols, &w.chunks}, {"ext_metrics", extCols, &w.ext}, {"procs", procCols, &w.procs},
			{"proc_index", procIndexCols, &w.procIndex}, {"attempt_index", attIndexCols, &w.attIndex},
			{"events", eventCols, &w.events}, {"attempts", attemptCols, &w.atts}, {"batches", batchCols, &w.batches}},
		{{"agents", agentColList, &w.agents}},
	} {
		errs := make(chan error, len(stage))
		for _, t := range stage {
			go func() { errs <- w.s.insert(ctx, t.name, t.cols, t.b) }()
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

// apply makes the committed states the cache's.
func (t *tx) apply(w *writeSet) {
	c := t.s.cache
	if len(c.agents) >= maxAgents {
		clear(c.agents)
	}
	for id, a := range t.agents {
		c.agents[id] = a
	}
	for id, st := range w.states {
		if st.meta.Ended {
			delete(c.atts, id) // it will not change: forget it
			continue
		}
		c.atts[id] = st
	}
	for k, lp := range w.live {
		if lp == nil {
			delete(c.live, k)
		} else {
			c.live[k] = lp
		}
	}
	if len(c.live) > maxLive {
		clear(c.live)
	}
	t.s.addExt(w.newExt)
	for j := range w.jobs {
		t.s.dirtyJobs[j] = true
	}
}

// forget drops from the cache what a failed commit may have written in
// part: those states are read again.
func (s *Store) forget(w *writeSet) {
	if w == nil {
		return
	}
	for id := range w.states {
		delete(s.cache.atts, id)
	}
	clear(s.cache.agents)
}

func (s *Store) addExt(ns []extName) {
	s.emu.Lock()
	defer s.emu.Unlock()
	for _, n := range ns {
		s.ext[n] = true
	}
}

func (s *Store) knownExt(n extName) bool {
	s.emu.Lock()
	defer s.emu.Unlock()
	return s.ext[n]
}

func (s *Store) loadExt(ctx context.Context) error {
	rows, err := s.query(ctx, "SELECT kind, metric FROM "+s.read("ext_metrics"))
	if err != nil {
		return fmt.Errorf("cannot read ext_metrics: %w", err)
	}
	var ns []extName
	for rows.Next() {
		ns = append(ns, extName{rows.UInt8(), rows.String()})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.addExt(ns)
	return nil
}
