package clickhouse

// PENDING THE SEAM. These are the backend-neutral rules of issue 13's
// first point (how attempt descriptions and summaries merge, how attempts
// add up into their job, which description of a process is its latest,
// when an attempt is lost), as they are on branch wt/seam, which moves them
// out of package duckdb into package store. They are here, unexported, so
// that this store builds before that lands on main; at the rebase onto it
// this file goes and the store calls package store's. Nothing here is
// ClickHouse's own.

import (
	"maps"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Attempt states beyond the jobs' (store.StateRunning, store.StateFinished).
const (
	// stateLost is an attempt that did not end but has not been heard of
	// for clock.StaleAfter: its agent or its node went away.
	stateLost = "lost"
)

// defaultStaleAfter is how long an attempt may go unheard before it is
// lost, unless a store is told otherwise: agents send a batch every 5 s
// by default, and retry with backoff.
const defaultStaleAfter = 2 * time.Minute

// clock is a store's time: what time it is now, and how long an attempt
// that has not ended may go unheard before it is lost (and its job, with
// no other attempt running, finished). Every backend takes one in its
// options; the conformance suite (storetest) passes its own.
type clock struct {
	Now        func() time.Time // nil: time.Now
	StaleAfter time.Duration    // 0 or less: defaultStaleAfter
}

// WithDefaults is c with its zero fields set to their defaults.
func (c clock) WithDefaults() clock {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = defaultStaleAfter
	}
	return c
}

// StaleBefore is the time (unix ms) before which an attempt last seen then
// is stale: now less StaleAfter. A read computes it once and decides every
// row's state by it (attemptState, jobState), or puts it in its query.
func (c clock) StaleBefore() int64 {
	c = c.WithDefaults()
	return c.Now().Add(-c.StaleAfter).UnixMilli()
}

// attemptState is an attempt's state, and its end (0 while it runs):
// finished once its agent said it ended, lost when it was last seen before
// staleBefore (clock.StaleBefore), running otherwise. Both ends are its
// last sighting.
func attemptState(ended bool, lastMs, staleBefore int64) (state string, end store.Time) {
	switch {
	case ended:
		return store.StateFinished, store.Time(lastMs)
	case lastMs < staleBefore:
		return stateLost, store.Time(lastMs)
	}
	return store.StateRunning, 0
}

// jobState is a job's state, and its end (0 while it runs): running while
// one of its attempts runs (running, from jobTotals) and it was seen at
// or after staleBefore; finished, at its last sighting, otherwise. A
// query that filters jobs by state says the same: running > 0 AND last_ms
// >= staleBefore.
func jobState(running int, lastMs, staleBefore int64) (state string, end store.Time) {
	if running > 0 && lastMs >= staleBefore {
		return store.StateRunning, 0
	}
	return store.StateFinished, store.Time(lastMs)
}

// What every backend needs to keep an attempt's description and summary
// as batches come: pure functions of the attempt's values so far and of a
// batch's, which a backend applies to the states it keeps (DuckDB keeps
// the running attempts in memory) or to the rows it reads back (a store
// with no in-place updates folds an attempt's rows in the order its agent
// sent them). An attempt's batches come from one agent, in order; the
// attempts of a job come from many agents, through many servers at once:
// what adds attempts up into their job (jobTotals) does not depend on
// their order.

// mergeAttempt takes into dst, an attempt's description so far, what a new
// description src says: the later description wins, field by field,
// except that a field it leaves empty does not erase one; an attempt's
// job does not change; its first sighting is the earliest and its last
// the latest said; once ended it stays ended; a framework said is not
// replaced by "unknown"; and once Streaming, it stays so. A new field of
// wire.Attempt follows the later description unless a rule for it is
// added here.
func mergeAttempt(dst, src *wire.Attempt) {
	first, last, ended := dst.FirstMs, dst.LastMs, dst.Ended
	keep := *dst
	*dst = *src
	if first > 0 && (dst.FirstMs == 0 || first < dst.FirstMs) {
		dst.FirstMs = first
	}
	dst.LastMs = max(last, dst.LastMs)
	dst.Ended = ended || dst.Ended
	// A description that leaves a field empty does not erase it.
	for _, f := range []struct{ d, k *string }{{&dst.JobID, &keep.JobID}, {&dst.AppID, &keep.AppID},
		{&dst.ContainerID, &keep.ContainerID}, {&dst.Type, &keep.Type}, {&dst.JobName, &keep.JobName},
		{&dst.User, &keep.User}, {&dst.Queue, &keep.Queue}, {&dst.JavaOpts, &keep.JavaOpts}} {
		if *f.d == "" {
			*f.d = *f.k
		}
	}
	if keep.JobID != "" {
		dst.JobID = keep.JobID // an attempt's job does not change
	}
	if dst.Framework == "" || dst.Framework == "unknown" {
		if keep.Framework != "" {
			dst.Framework = keep.Framework
		}
	}
	if dst.MemoryMB == 0 {
		dst.MemoryMB = keep.MemoryMB
	}
	if dst.XmxBytes == 0 {
		dst.XmxBytes = keep.XmxBytes
	}
	dst.Streaming = dst.Streaming || keep.Streaming
}

// mergeSummary adds to dst, an attempt's summary so far, src: what the
// next batch of its agent says of it (Prepared.Atts, SummarizeBatch, or
// SummarizePoints of the samples after dst's last). Peaks and counters
// (cumulative) take the larger; the RSS integral adds src's, and the
// trapezoid from dst's last RSS point to src's first when src comes
// after it; dst's last point becomes src's when src ends later. src is
// not changed.
func mergeSummary(dst, src *store.AttemptSummary) {
	gap := 0.0
	if dst.LastMs > 0 && src.FirstMs > dst.LastMs {
		// Join this batch's RSS integral to the previous batch's last point.
		gap = float64(src.FirstRSS+dst.LastRSS) / 2 * float64(src.FirstMs-dst.LastMs)
	}
	if src.LastMs > dst.LastMs {
		dst.LastRSS = src.LastRSS
	}
	dst.LastMs = max(dst.LastMs, src.LastMs)
	dst.PeakRSS, dst.PeakPSS = max(dst.PeakRSS, src.PeakRSS), max(dst.PeakPSS, src.PeakPSS)
	dst.PeakVMS, dst.PeakHeap = max(dst.PeakVMS, src.PeakVMS), max(dst.PeakHeap, src.PeakHeap)
	// Counters are cumulative: the latest values (they only grow).
	dst.CPUMs, dst.ReadBytes = max(dst.CPUMs, src.CPUMs), max(dst.ReadBytes, src.ReadBytes)
	dst.WriteBytes, dst.GCTimeMs = max(dst.WriteBytes, src.WriteBytes), max(dst.GCTimeMs, src.GCTimeMs)
	dst.SchedWaitMs = max(dst.SchedWaitMs, src.SchedWaitMs)
	dst.RSSByteMs += src.RSSByteMs + gap
	if dst.FirstMs == 0 || (src.FirstMs > 0 && src.FirstMs < dst.FirstMs) {
		dst.FirstMs, dst.FirstRSS = src.FirstMs, src.FirstRSS
	}
}

// attemptSpan is an attempt's first and last sighting: its description's
// first (the samples' when it has none), and the later of its
// description's last and its last sample.
func attemptSpan(m *wire.Attempt, s *store.AttemptSummary) (first, last int64) {
	first = m.FirstMs
	if first == 0 {
		first = s.FirstMs
	}
	return first, max(m.LastMs, s.LastMs)
}

// contribution is what one attempt adds to its job's figures (jobTotals),
// made from its description and summary by attemptContribution. The zero
// value adds nothing.
type contribution struct {
	In        bool // counted in a job at all (it has a job id)
	Running   bool // not ended
	CPUMs     int64
	PeakRSS   int64
	First     int64
	Last      int64
	MemMBms   float64 // allocated memory over its span, MB × ms
	RSSByteMs float64 // used memory: its RSS integral
	Host      string
	Type      string // "unknown" when not said
}

// attemptContribution is what the attempt of description m, on host, with
// summary s adds to its job.
func attemptContribution(m *wire.Attempt, host string, s *store.AttemptSummary) contribution {
	if m.JobID == "" {
		return contribution{}
	}
	first, last := attemptSpan(m, s)
	c := contribution{In: true, Running: !m.Ended, CPUMs: s.CPUMs, PeakRSS: s.PeakRSS, First: first, Last: last,
		RSSByteMs: s.RSSByteMs, Host: host, Type: m.Type}
	if c.Type == "" {
		c.Type = "unknown"
	}
	if m.MemoryMB > 0 && first > 0 && last > first {
		c.MemMBms = float64(m.MemoryMB) * float64(last-first)
	}
	return c
}

// jobTotals is a job's figures as sums over its attempts: what their
// descriptions say of the job (Describe), and their contributions. A store
// that keeps it replaces an attempt's old contribution by its new one as
// batches come (Apply); one that keeps none adds up the contributions of
// the job's attempts when it reads it (Add, in any order). store.Job turns it
// into what the API returns.
type jobTotals struct {
	AppID, Framework, Name, User, Queue string
	Attempts, Running                   int
	CPUMs, PeakRSS                      int64 // PeakRSS: the largest attempt peak
	First, Last                         int64
	MemMBms, RSSByteMs                  float64
	Hosts                               map[string]int // attempts by host
	ByType                              map[string]int // attempts by type
}

// Clone is a copy of j that changes to it leave j as it is.
func (j *jobTotals) Clone() jobTotals {
	c := *j
	c.Hosts, c.ByType = maps.Clone(j.Hosts), maps.Clone(j.ByType)
	return c
}

// Describe takes what an attempt's description says of its job: each of
// its application id, name, user and queue that it says replaces the
// job's, and its framework unless it is "unknown" and the job's is known.
func (j *jobTotals) Describe(m *wire.Attempt) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&j.AppID, m.AppID)
	set(&j.Name, m.JobName)
	set(&j.User, m.User)
	set(&j.Queue, m.Queue)
	if m.Framework != "" && (m.Framework != "unknown" || j.Framework == "") {
		j.Framework = m.Framework
	}
}

// Add adds an attempt's contribution.
func (j *jobTotals) Add(c contribution) { j.Apply(contribution{}, c) }

// Apply replaces old, an attempt's contribution counted before (zero: none),
// by now. Sums and counts take old's share off; the peak and the first
// sighting, which cannot, stay where old took them (an attempt's peak and
// first sighting do not move back).
func (j *jobTotals) Apply(old, now contribution) {
	if old.In {
		j.Attempts--
		if old.Running {
			j.Running--
		}
		j.CPUMs -= old.CPUMs
		j.MemMBms -= old.MemMBms
		j.RSSByteMs -= old.RSSByteMs
		if old.Host != "" {
			if j.Hosts[old.Host]--; j.Hosts[old.Host] <= 0 {
				delete(j.Hosts, old.Host)
			}
		}
		if j.ByType[old.Type]--; j.ByType[old.Type] <= 0 {
			delete(j.ByType, old.Type)
		}
	}
	if now.In {
		j.Attempts++
		if now.Running {
			j.Running++
		}
		j.CPUMs += now.CPUMs
		j.MemMBms += now.MemMBms
		j.RSSByteMs += now.RSSByteMs
		j.PeakRSS = max(j.PeakRSS, now.PeakRSS)
		if now.First > 0 && (j.First == 0 || now.First < j.First) {
			j.First = now.First
		}
		j.Last = max(j.Last, now.Last)
		if now.Host != "" {
			if j.Hosts == nil {
				j.Hosts = map[string]int{}
			}
			j.Hosts[now.Host]++
		}
		if j.ByType == nil {
			j.ByType = map[string]int{}
		}
		j.ByType[now.Type]++
	}
}

// MemGBHours is the memory its attempts were allocated, in GB-hours.
func (j *jobTotals) MemGBHours() float64 { return j.MemMBms / 1024 / 3600_000 }

// UsedGBHours is the memory its attempts used (RSS over time), in GB-hours.
func (j *jobTotals) UsedGBHours() float64 { return j.RSSByteMs / (1 << 30) / 3600_000 }

// SetGBHours sets the sums MemGBHours and UsedGBHours give (for a store
// that keeps them in GB-hours).
func (j *jobTotals) SetGBHours(mem, used float64) {
	j.MemMBms, j.RSSByteMs = mem*1024*3600_000, used*(1<<30)*3600_000
}

// store.Job is the job id as the API shows it, its state decided by staleBefore
// (clock.StaleBefore). Its framework is "unknown" when no attempt said
// one. Its ByType is j's (not a copy).
func (j *jobTotals) Job(id string, staleBefore int64) store.Job {
	out := store.Job{JobID: id, AppID: j.AppID, Framework: j.Framework, Name: j.Name, User: j.User, Queue: j.Queue,
		Start: store.Time(j.First), LastSeen: store.Time(j.Last), Attempts: j.Attempts, Running: j.Running, ByType: j.ByType,
		Hosts: len(j.Hosts), CPUMs: j.CPUMs, PeakRSS: j.PeakRSS, MemGBHours: j.MemGBHours(), UsedGBHours: j.UsedGBHours()}
	if out.Framework == "" {
		out.Framework = "unknown"
	}
	out.State, out.End = jobState(j.Running, j.Last, staleBefore)
	return out
}

// processView merges what a store holds of one process in one attempt into
// the process the attempt's page shows: the process's descriptions
// (wire.Process: at its first sight, when it exec'd, at its exit) and its
// memberships in the attempt (wire.Membership), each stored at an order: a
// number that grows with the time the agent sent it (DuckDB's commit; a
// process's records all come from one agent, in order). Records may be
// given in any order. The zero value is empty.
//
// Of its descriptions, the latest wins, except that one without a role or
// a user keeps the role or user said before; its start is the earliest
// said, its end the latest. Its command line is the latest stored (a store
// that keeps command lines aside asks LatestCmd). Of its memberships, it
// joined at the earliest start, left at the latest end (none while one of
// them has no end: it is a member still), with the smallest CPU base. Its
// role in the attempt is the one it joined with, unless it was described
// again since with another: a process seen between fork and exec (a
// wrapper's child, a jspawnhelper) joins as a child and is described again
// as the task JVM or the Streaming process it exec'd into.
type processView struct {
	p         store.Process
	uid       uint32
	described bool // a description was taken
	member    bool // a membership was taken
	openEnded bool // a membership without an end
	hasCmd    bool
	descOrder uint64 // of the latest description
	cmdOrder  uint64 // of the latest command line
	role      string // the latest role described
	roleOrder uint64
	userOrder uint64 // of the latest user described
	joinRole  string // the role of the earliest membership that said one
	joinOrder uint64
}

// Describe takes a description of the process stored at order, sent by
// the agent of host. (p's store.Key and Cmdline are not read: the view's key is
// its caller's, and command lines go through LatestCmd.)
func (v *processView) Describe(order uint64, host string, p *wire.Process) {
	q := &v.p
	if !v.described || order >= v.descOrder {
		v.described, v.descOrder = true, order
		q.Host, q.PID, q.PPID, q.SID, q.Comm, v.uid = host, p.PID, p.PPID, p.SID, p.Comm, p.UID
	}
	if p.Role != "" && (v.role == "" || order >= v.roleOrder) {
		v.role, v.roleOrder = p.Role, order
	}
	if p.User != "" && (q.User == "" || order >= v.userOrder) {
		q.User, v.userOrder = p.User, order
	}
	if p.StartMs != 0 && (q.Start == 0 || store.Time(p.StartMs) < q.Start) {
		q.Start = store.Time(p.StartMs)
	}
	q.End = max(q.End, store.Time(p.EndMs))
}

// LatestCmd reports whether a command line of the process stored at order
// is the latest so far: then the caller keeps it as the process's.
func (v *processView) LatestCmd(order uint64) bool {
	if v.hasCmd && order < v.cmdOrder {
		return false
	}
	v.hasCmd, v.cmdOrder = true, order
	return true
}

// Join takes a membership of the process in the attempt stored at order.
func (v *processView) Join(order uint64, m *wire.Membership) {
	q := &v.p
	if !v.member {
		v.member, q.CPUBaseMs = true, m.CPUBaseMs
	}
	q.CPUBaseMs = min(q.CPUBaseMs, m.CPUBaseMs)
	if m.FromMs != 0 && (q.From == 0 || store.Time(m.FromMs) < q.From) {
		q.From = store.Time(m.FromMs)
	}
	if m.ToMs != 0 {
		q.To = max(q.To, store.Time(m.ToMs))
	} else {
		v.openEnded = true
	}
	if m.Role != "" && (v.joinRole == "" || order < v.joinOrder) {
		v.joinRole, v.joinOrder = m.Role, order
	}
}

// Member reports whether the view has a membership (a process the attempt
// lists), and Described whether it has a description.
func (v *processView) Member() bool    { return v.member }
func (v *processView) Described() bool { return v.described }

// DescribeFrom gives a member that the attempt's own records do not
// describe (a process described before its store knew its attempt, as
// after a restart) the description o merged from its records elsewhere
// (its other attempts'). It reports whether the view takes o's command
// line too: when it has none of its own.
func (v *processView) DescribeFrom(o *processView) (takeCmd bool) {
	q := &v.p
	q.Host, q.PID, q.PPID, q.SID, q.Comm, q.User = o.p.Host, o.p.PID, o.p.PPID, o.p.SID, o.p.Comm, o.p.User
	v.uid, v.role, v.described = o.uid, o.role, true
	if q.Start == 0 || (o.p.Start > 0 && o.p.Start < q.Start) {
		q.Start = o.p.Start
	}
	q.End = max(q.End, o.p.End)
	if !v.hasCmd && o.hasCmd {
		v.hasCmd = true
		return true
	}
	return false
}

// Description is the process as its latest description says, as the
// agent of host would send it (without its key and command line): for a
// record of it that a store copies to the rows of another attempt it
// joins.
func (v *processView) Description() (p wire.Process, host string) {
	return wire.Process{PID: v.p.PID, PPID: v.p.PPID, SID: v.p.SID, StartMs: int64(v.p.Start), EndMs: int64(v.p.End),
		Comm: v.p.Comm, Role: v.role, UID: v.uid, User: v.p.User}, v.p.Host
}

// store.Process is the process as the attempt lists it, with key k, its role in
// the attempt resolved, and no command line (the caller's) nor summary
// (ProcessAgg's).
func (v *processView) Process(k store.Key) store.Process {
	p := v.p
	p.Key = k
	if v.openEnded {
		p.To = 0
	}
	p.Role = v.joinRole
	if p.Role == "" || (v.descOrder > v.joinOrder && v.role != "") {
		p.Role = v.role
	}
	return p
}
