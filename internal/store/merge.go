package store

import "github.com/taskscope/taskscope/internal/wire"

// What every backend needs to keep an attempt's description and summary
// as batches come: pure functions of the attempt's values so far and of a
// batch's, which a backend applies to the states it keeps (DuckDB keeps
// the running attempts in memory) or to the rows it reads back (a store
// with no in-place updates folds an attempt's rows in the order its agent
// sent them). An attempt's batches come from one agent, in order; the
// attempts of a job come from many agents, through many servers at once:
// what adds attempts up into their job (JobTotals) does not depend on
// their order.

// MergeAttempt takes into dst, an attempt's description so far, what a new
// description src says, field by field by the rule each field's
// declaration gives (AttemptFields): the later description wins, except
// that a field it leaves empty does not erase one; an attempt's job does
// not change; its first sighting is the earliest and its last the latest
// said; once ended it stays ended; a framework said is not replaced by
// "unknown"; once Streaming, it stays so; an exit status seen stays until
// its source says another; OOM kills only grow.
func MergeAttempt(dst, src *wire.Attempt) {
	for _, f := range descs {
		mergeField(f, dst, src)
	}
}

// MergeSummary adds to dst, an attempt's summary so far, src: what the
// next batch of its agent says of it (Prepared.Atts, SummarizeBatch, or
// SummarizePoints of the samples after dst's last). Peaks and counters
// (cumulative) take the larger; the RSS integral adds src's, and the
// trapezoid from dst's last RSS point to src's first when src comes
// after it; dst's last point becomes src's when src ends later. src is
// not changed.
func MergeSummary(dst, src *AttemptSummary) {
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

// AttemptSpan is an attempt's first and last sighting: its description's
// first (the samples' when it has none), and the later of its
// description's last and its last sample.
func AttemptSpan(m *wire.Attempt, s *AttemptSummary) (first, last int64) {
	first = m.FirstMs
	if first == 0 {
		first = s.FirstMs
	}
	return first, max(m.LastMs, s.LastMs)
}

// AttemptOf is the attempt as the API shows it: its description m (as
// merged), the host it ran on, its summary s, the number of processes of
// its memberships, and its state decided by staleBefore
// (Clock.StaleBefore), with its outcome (Outcome). Its type and framework
// are "unknown" when not said. RetryOf and Speculative need the other
// attempts of its task: LinkAttempts sets them.
func AttemptOf(m *wire.Attempt, host string, s *AttemptSummary, processes int, staleBefore int64) Attempt {
	first, last := AttemptSpan(m, s)
	a := Attempt{AttemptID: m.AttemptID, JobID: m.JobID, Host: host, ContainerID: m.ContainerID, AppID: m.AppID,
		Type: m.Type, Framework: m.Framework, Start: Time(first), LastSeen: Time(last), DurationMs: last - first,
		CPUMs: s.CPUMs, CPUDoubtMs: m.CPUDoubtMs, PeakRSS: s.PeakRSS, PeakPSS: s.PeakPSS, PeakVMS: s.PeakVMS, PeakHeap: s.PeakHeap,
		Processes: processes, ReadBytes: s.ReadBytes, WriteBytes: s.WriteBytes, GCTimeMs: s.GCTimeMs,
		SchedWaitMs: s.SchedWaitMs, RSSByteMs: s.RSSByteMs, MemoryMB: m.MemoryMB, VCores: m.VCores, XmxBytes: m.XmxBytes,
		JavaOpts: m.JavaOpts, Streaming: m.Streaming, JobName: m.JobName, User: m.User, Queue: m.Queue}
	if a.Type == "" {
		a.Type = "unknown"
	}
	if a.Framework == "" {
		a.Framework = "unknown"
	}
	a.State, a.End = AttemptState(m.Ended, last, staleBefore)
	a.Outcome, a.ExitCode, a.ExitSource = Outcome(m, a.State)
	a.ExitDiagnostics = m.ExitDiagnostics
	return a
}
