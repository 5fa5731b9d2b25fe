package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// One entry point per capability (the way io.Copy looks for a WriterTo):
// each helper below does the type assertion for one of the optional
// interfaces of store.go, and what a store without it is asked instead, so
// that no caller branches on the backend. The conformance suite runs once
// through a store that hides every capability (storetest.Plain), so each
// fallback is tested.

// PrepareBatch is b prepared by st outside its transaction, for
// AppendBatch (BatchPreparer: on the caller's goroutine, so that requests
// prepare their batches in parallel); nil when st prepares nothing ahead.
func PrepareBatch(st Store, b *wire.Batch) *Prepared {
	if bp, ok := st.(BatchPreparer); ok {
		return bp.Prepare(b)
	}
	return nil
}

// AppendBatch appends b to app: as p, what PrepareBatch made of it, when
// app takes prepared batches (PreparedAppender) and p is not nil; else b.
func AppendBatch(app Appender, b *wire.Batch, p *Prepared) (dup bool, err error) {
	if pa, ok := app.(PreparedAppender); ok && p != nil {
		return pa.AppendPrepared(p)
	}
	return app.Append(b)
}

// CommitStart commits app, and returns what waits until its batches are
// durable: a PipelinedAppender's two parts; another Appender's Commit,
// and a wait that returns nil.
func CommitStart(app Appender) (wait func() error, err error) {
	if pa, ok := app.(PipelinedAppender); ok {
		return pa.CommitStart()
	}
	if err := app.Commit(); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

// CommitGather is how the ingest pipeline gathers before each of st's
// commits (CommitGatherer); the zero Gathering for a store that wants
// none.
func CommitGather(st Store) Gathering {
	if cg, ok := st.(CommitGatherer); ok {
		return cg.CommitGather()
	}
	return Gathering{}
}

// NextCommit is the time before which st wants no commit (CommitPacer);
// the zero time for a store that paces none.
func NextCommit(st Store) time.Time {
	if cp, ok := st.(CommitPacer); ok {
		return cp.NextCommit()
	}
	return time.Time{}
}

// FlushDue writes st's summaries that are due (PacedFlusher), saying
// whether some wait; every one (Flush) for a store that paces none.
func FlushDue(ctx context.Context, st Store) (waiting bool, err error) {
	if pf, ok := st.(PacedFlusher); ok {
		return pf.FlushDue(ctx)
	}
	return false, st.Flush(ctx)
}

// PreloadBatches tells app the batches it is about to be given (a
// GroupAppender reads what it needs of them at once); nothing for an
// Appender that is not one.
func PreloadBatches(app Appender, bs []*wire.Batch) error {
	if ga, ok := app.(GroupAppender); ok {
		return ga.Preload(bs)
	}
	return nil
}

// ReadAgentSeq is the highest sequence number st stored of an agent (0 for
// one it has none of), as Append decides duplicates (SeqReader); can is
// false when st cannot say it.
func ReadAgentSeq(ctx context.Context, st Store, agentID string) (seq uint64, can bool, err error) {
	sr, ok := st.(SeqReader)
	if !ok {
		return 0, false, nil
	}
	seq, err = sr.AgentSeq(ctx, agentID)
	return seq, true, err
}

// ReadSeriesMany is what Series returns for each query (nil for a series
// that is not found): read together where st can (SeriesBatcher), else
// one by one. An error other than ErrNotFound fails the whole call.
func ReadSeriesMany(ctx context.Context, st Store, qs []SeriesQuery) ([]*SeriesResult, error) {
	if sb, ok := st.(SeriesBatcher); ok {
		return sb.SeriesMany(ctx, qs)
	}
	out := make([]*SeriesResult, len(qs))
	for i, q := range qs {
		r, err := st.Series(ctx, q)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// ReadAttemptProcesses is each attempt's ProcessList as Attempt says it:
// read together where st can (ProcessLister), else attempt by attempt.
// Unknown attempts, and attempts without processes, are absent.
func ReadAttemptProcesses(ctx context.Context, st Store, ids []string) (map[string][]Process, error) {
	if pl, ok := st.(ProcessLister); ok {
		return pl.AttemptProcesses(ctx, ids)
	}
	out := map[string][]Process{}
	for _, id := range ids {
		d, err := st.Attempt(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(d.ProcessList) > 0 {
			out[id] = d.ProcessList
		}
	}
	return out, nil
}

// ReadJobs is what Job returns for each job of ids that st knows, by job
// id (unknown ones absent): read together where st can (JobReader), else
// one by one.
func ReadJobs(ctx context.Context, st Store, ids []string) (map[string]*JobDetail, error) {
	if jr, ok := st.(JobReader); ok {
		return jr.JobsDetail(ctx, ids)
	}
	out := map[string]*JobDetail{}
	for _, id := range ids {
		d, err := st.Job(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[id] = d
	}
	return out, nil
}

// ReadHostsAttempts is what HostAttempts returns for each window of ws:
// read together where st can (HostsReader), else window by window.
func ReadHostsAttempts(ctx context.Context, st Store, ws []HostWindow) ([][]Attempt, error) {
	if hr, ok := st.(HostsReader); ok {
		return hr.HostsAttempts(ctx, ws)
	}
	out := make([][]Attempt, len(ws))
	for i, w := range ws {
		atts, err := st.HostAttempts(ctx, w.Host, w.From, w.To)
		if err != nil {
			return nil, err
		}
		out[i] = atts
	}
	return out, nil
}

// InWindow reports whether an attempt of w's host ran within w, as
// HostAttempts selects them: seen at or after From, started before To
// (To 0: no end).
func (w HostWindow) InWindow(a *Attempt) bool {
	to := w.To
	if to <= 0 {
		to = 1 << 62
	}
	return a.Host == w.Host && int64(a.LastSeen) >= w.From && int64(a.Start) < to
}

// EventsLimit is limit as the events' reads take it: 1000 when it is not
// positive, at most 100,000.
func EventsLimit(limit int) int {
	if limit <= 0 || limit > 100_000 {
		return 1000
	}
	return limit
}

// ReadJobEvents is, by job id, each job's events of kinds (all if none),
// oldest first, at most limit a job (EventsLimit), as Events lists them;
// jobs without any are absent: read together where st can
// (JobEventsReader), else job by job and kind by kind.
func ReadJobEvents(ctx context.Context, st Store, jobIDs, kinds []string, limit int) (map[string][]Event, error) {
	limit = EventsLimit(limit)
	if jr, ok := st.(JobEventsReader); ok {
		return jr.JobEvents(ctx, jobIDs, kinds, limit)
	}
	out := map[string][]Event{}
	for _, id := range jobIDs {
		var evs []Event
		if len(kinds) == 0 {
			e, err := st.Events(ctx, EventFilter{JobID: id, Limit: limit})
			if err != nil {
				return nil, err
			}
			evs = e
		}
		for _, k := range kinds {
			e, err := st.Events(ctx, EventFilter{JobID: id, Kind: k, Limit: limit})
			if err != nil {
				return nil, err
			}
			evs = append(evs, e...)
		}
		// (Each kind's in order: the oldest first of all, as one read
		// orders them, by time and then kind.)
		sort.SliceStable(evs, func(x, y int) bool {
			if evs[x].Time != evs[y].Time {
				return evs[x].Time < evs[y].Time
			}
			return evs[x].Kind < evs[y].Kind
		})
		if len(evs) > limit {
			evs = evs[:limit]
		}
		if len(evs) > 0 {
			out[id] = evs
		}
	}
	return out, nil
}

// PutAnalyses stores analyses as PutAnalysis stores each, and returns
// each one's error: together where st can (AnalysesPutter: an error then
// is every one's), else one by one.
func PutAnalyses(ctx context.Context, st FindingStore, as []*Analysis) []error {
	errs := make([]error, len(as))
	if ap, ok := st.(AnalysesPutter); ok && len(as) > 1 {
		if err := ap.PutAnalyses(ctx, as); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
		return errs
	}
	for i, a := range as {
		errs[i] = st.PutAnalysis(ctx, a)
	}
	return errs
}

// ReadJobSummary is what Job says of a job but its ByType (ErrNotFound if
// unknown): without its attempts where st can (JobSummarizer), else from
// Job.
func ReadJobSummary(ctx context.Context, st Store, id string) (*Job, error) {
	if js, ok := st.(JobSummarizer); ok {
		return js.JobSummary(ctx, id)
	}
	d, err := st.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	j := d.Job
	j.ByType = nil
	return &j, nil
}

// ReadAttemptSummary is what Attempt says of an attempt but RetryOf and
// Speculative (ErrNotFound if unknown): without its processes and events
// where st can (AttemptSummarizer), else from Attempt.
func ReadAttemptSummary(ctx context.Context, st Store, id string) (*Attempt, error) {
	if as, ok := st.(AttemptSummarizer); ok {
		return as.AttemptSummary(ctx, id)
	}
	d, err := st.Attempt(ctx, id)
	if err != nil {
		return nil, err
	}
	a := d.Attempt
	a.RetryOf, a.Speculative = "", false
	return &a, nil
}

// ReadAttemptLife is what the series routes need of an attempt: its job
// and its life (ErrNotFound if unknown): a few columns where st can
// (AttemptSeriesReader), else from ReadAttemptSummary.
func ReadAttemptLife(ctx context.Context, st Store, id string) (*AttemptLife, error) {
	if r, ok := st.(AttemptSeriesReader); ok {
		return r.AttemptLife(ctx, id)
	}
	a, err := ReadAttemptSummary(ctx, st, id)
	if err != nil {
		return nil, err
	}
	return &AttemptLife{AttemptID: a.AttemptID, JobID: a.JobID, Start: a.Start, End: a.End}, nil
}

// ReadAttemptSeries is what Series returns for q, a query of ScopeAttempt
// of the attempt of life (ReadAttemptLife): without reading the attempt
// again where st can (AttemptSeriesReader), else by Series.
func ReadAttemptSeries(ctx context.Context, st Store, life *AttemptLife, q SeriesQuery) (*SeriesResult, error) {
	if q.Scope != ScopeAttempt || q.AttemptID != life.AttemptID {
		return nil, fmt.Errorf("cannot read the series of %s %s from the life of attempt %s", q.Scope, q.AttemptID, life.AttemptID)
	}
	if r, ok := st.(AttemptSeriesReader); ok {
		return r.AttemptSeries(ctx, life, q)
	}
	return st.Series(ctx, q)
}

// ChangesOf is the Changes of st when other servers write it too
// (SharedData), and whether they may: a server that shares its store
// polls it to hear of the others' commits.
func ChangesOf(st Store) (changes func(context.Context) (uint64, error), shared bool) {
	sd, ok := st.(SharedData)
	if !ok {
		return nil, false
	}
	return sd.Changes, true
}

// DataDirOf is the directory of st's files on this machine (LocalData),
// "" when it has none.
func DataDirOf(st Store) string {
	if l, ok := st.(LocalData); ok {
		return l.DataDir()
	}
	return ""
}

// ReplicasOf is st's registry of the servers that share it (Replicas),
// and whether it has one: without it a server is alone on its store and
// analyses every job itself.
func ReplicasOf(st Store) (Replicas, bool) {
	r, ok := st.(Replicas)
	return r, ok
}
