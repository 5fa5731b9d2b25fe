// Package store is where taskscope keeps what agents send: jobs, attempts,
// processes, their time series and events. Store is the interface every
// backend implements (embedded DuckDB, ClickHouse); storetest is the
// conformance suite they all pass. The types here are also what the REST API
// returns.
//
// What the data means lives here, above any backend, as pure functions of
// values that a backend applies to the states it keeps or to the rows it
// reads back (docs/architecture.md, "The store seam"):
//
//   - an attempt's description and summary as batches come: MergeAttempt,
//     MergeSummary (of SummarizeBatch, Prepared.Atts or SummarizePoints),
//     AttemptSpan; and the attempt the API shows of them, AttemptOf;
//   - how attempts add up into their job: AttemptContribution, JobTotals;
//   - which description of a process is its latest: ProcessView;
//   - when an attempt is lost and a job finished: Clock, AttemptState,
//     JobState;
//   - series: Points, ComputeOne, JobAccumulator, ProcessAgg.
//
// A backend must implement Store and Appender, map a full disk to
// ErrDiskFull, take a Clock, and pass storetest. Beyond that it may offer
// capabilities: BatchPreparer (with PreparedAppender), SeqReader,
// SeriesBatcher, ProcessLister, JobReader, JobEventsReader, HostsReader, AnalysesPutter, JobSummarizer, AttemptSummarizer, OwnerReader,
// AttemptSeriesReader, SharedData, LocalData, Replicas. Callers use each through its
// one helper (capability.go: PrepareBatch, ReadSeriesMany, ...), which
// does without it when a store has none.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// Store persists batches and answers queries. Methods are safe for
// concurrent use, except that at most one Appender is open at a time (the
// ingest pipeline serialises writers).
type Store interface {
	FindingStore
	// Begin starts an ingest transaction.
	Begin(ctx context.Context) (Appender, error)
	// Jobs lists jobs, newest first.
	Jobs(ctx context.Context, f JobFilter) (JobPage, error)
	// Job returns one job with its attempts; ErrNotFound if unknown.
	Job(ctx context.Context, jobID string) (*JobDetail, error)
	// Attempt returns one attempt with its processes; ErrNotFound if unknown.
	Attempt(ctx context.Context, attemptID string) (*AttemptDetail, error)
	// Series returns time series bucketed by q.Step.
	Series(ctx context.Context, q SeriesQuery) (*SeriesResult, error)
	// Events lists events, oldest first.
	Events(ctx context.Context, f EventFilter) ([]Event, error)
	// Hosts lists the hosts that sent data, with what runs on them.
	Hosts(ctx context.Context) ([]Host, error)
	// HostAttempts lists the attempts that ran on host within [from, to).
	HostAttempts(ctx context.Context, host string, from, to int64) ([]Attempt, error)
	// Flush makes every committed batch visible in the summaries (jobs,
	// attempts), which a store may write less often than it commits.
	Flush(ctx context.Context) error
	// Maintain compacts recent data, builds rollups and applies retention.
	Maintain(ctx context.Context, now time.Time) error
	// Usage reports rows and bytes.
	Usage(ctx context.Context) (Usage, error)
	Close() error
}

// Appender is one ingest transaction (prometheus storage.Appender style):
// Append any number of validated batches, then Commit or Rollback.
type Appender interface {
	// Append adds a batch. dup reports that its (agent, seq) was stored
	// before: then nothing is written. An error leaves the transaction
	// unusable: Rollback it.
	Append(b *wire.Batch) (dup bool, err error)
	// Commit makes everything appended durable. A full disk fails it with
	// ErrDiskFull in its chain.
	Commit() error
	// Rollback discards everything appended.
	Rollback() error
}

// The optional capabilities of a store. Each is found by a type assertion
// in its helper (capability.go), which does without it on a store that
// has none.

// BatchPreparer is a store that can do part of Append's work outside the
// transaction, on the caller's goroutine: the ingest pipeline prepares
// batches on the requests' goroutines, in parallel, and its single writer
// appends them prepared (PreparedAppender). DuckDB's is the chunk
// encoding (package chunk, Preparer), most of what ingest costs. Prepare
// is safe for concurrent use; what it returns is for the Appenders of the
// same store only.
type BatchPreparer interface {
	Prepare(b *wire.Batch) *Prepared
}

// PreparedAppender is the Appender of a BatchPreparer: AppendPrepared is
// Append of a batch its store prepared.
type PreparedAppender interface {
	Appender
	AppendPrepared(p *Prepared) (dup bool, err error)
}

// GroupAppender is an Appender that is told the batches of a group
// before they are appended (Preload), so that it reads what it needs of
// its store for all of them at once: a store shared by several servers
// (ClickHouse) reads the agents' last stored batches in one query, not
// one an agent it does not hold.
type GroupAppender interface {
	Appender
	Preload(bs []*wire.Batch) error
}

// SeqReader is a store that says the highest sequence number it stored of
// an agent (0 for an agent it has none of), as Append decides duplicates:
// the ingest endpoint answers a batch whose (agent, seq) was stored as a
// duplicate even when the rest of its body cannot be read (docs/wire.md).
type SeqReader interface {
	AgentSeq(ctx context.Context, agentID string) (uint64, error)
}

// SeriesBatcher is a store that reads many series together (the findings
// of a job read tens): SeriesMany returns what Series returns for each
// query, nil for a series that is not found. Without it, the analysis
// reads them one by one.
type SeriesBatcher interface {
	SeriesMany(ctx context.Context, qs []SeriesQuery) ([]*SeriesResult, error)
}

// ProcessLister is a store that reads the process lists of many attempts
// together: AttemptProcesses returns each attempt's ProcessList as Attempt
// does; unknown attempts, and attempts without processes, are absent.
// Without it, the analysis reads attempts one by one.
type ProcessLister interface {
	AttemptProcesses(ctx context.Context, attemptIDs []string) (map[string][]Process, error)
}

// JobReader is a store that reads many jobs with their attempts
// together (the background analyser's passes over running jobs read
// tens at once): JobsDetail returns what Job returns for each job of ids
// that it knows, by job id; unknown jobs are absent. Without it, the
// analysis reads jobs one by one.
type JobReader interface {
	JobsDetail(ctx context.Context, ids []string) (map[string]*JobDetail, error)
}

// JobEventsReader is a store that reads the events of many jobs
// together: JobEvents returns, by job id, each job's events (as Events
// with its JobID lists them, oldest first) of kinds (all kinds if none),
// at most limit a job (the first ones); jobs without any are absent.
// Without it, the analysis reads each job's events of each kind.
type JobEventsReader interface {
	JobEvents(ctx context.Context, jobIDs, kinds []string, limit int) (map[string][]Event, error)
}

// HostsReader is a store that reads the attempts of many hosts together
// (the neighbours of tens of running jobs' attempts): HostsAttempts
// returns, for each window of ws, what HostAttempts returns of its host
// and time. Without it, the analysis reads host by host.
type HostsReader interface {
	HostsAttempts(ctx context.Context, ws []HostWindow) ([][]Attempt, error)
}

// HostWindow is a host and a window of time [From, To), as HostAttempts
// takes them.
type HostWindow struct {
	Host     string
	From, To int64
}

// JobSummarizer is a store that reads a job's summary without its
// attempts: what Job says of it, but ByType (ErrNotFound if unknown). The
// series endpoints need no more; without it they read Job.
type JobSummarizer interface {
	JobSummary(ctx context.Context, jobID string) (*Job, error)
}

// AttemptSummarizer is a store that reads an attempt's summary without
// its processes and events: what Attempt says of it but RetryOf and
// Speculative, which need the attempts of its task (ErrNotFound if
// unknown). The series endpoints need no more; without it they read
// Attempt.
type AttemptSummarizer interface {
	AttemptSummary(ctx context.Context, attemptID string) (*Attempt, error)
}

// AttemptSeriesReader is a store that reads what the series routes need
// of an attempt (AttemptLife: its job and its life, a few columns of a
// wide row), and an attempt's series from that without reading the
// attempt again. Without it the routes read AttemptSummary (or Attempt),
// and the store reads the attempt again for its series.
type AttemptSeriesReader interface {
	// AttemptLife returns what Attempt says of the attempt's id, job,
	// start and end (ErrNotFound if unknown).
	AttemptLife(ctx context.Context, attemptID string) (*AttemptLife, error)
	// AttemptSeries returns what Series returns for q, a query of
	// ScopeAttempt of the attempt of life.
	AttemptSeries(ctx context.Context, life *AttemptLife, q SeriesQuery) (*SeriesResult, error)
}

// AttemptLife is what the series routes need of an attempt: its job (to
// check the reader may see it), and its start and end (the default
// window; End 0 while it runs), as Attempt says them.
type AttemptLife struct {
	AttemptID, JobID string
	Start, End       Time
}

// CommitPacer is a store that paces its commits: it wants none before
// NextCommit (ClickHouse inserts into a table at most every InsertEvery,
// so that its parts stay few). The ingest pipeline waits for that time
// before it takes the batches waiting into a commit, so that those that
// arrive meanwhile go into it, rather than the store waiting inside a
// commit of the batches that had arrived before (which then waited for
// one commit and the pause, and those behind them for the next).
type CommitPacer interface {
	NextCommit() time.Time
}

// CommitGatherer is a store whose commits cost less a batch the more
// batches they hold, and which paces none (the embedded store: a
// transaction's BEGIN and COMMIT and its appenders cost some milliseconds
// of CPU however few rows they write). Before each of its commits the
// ingest pipeline gathers, as it does after an idle period, if a request
// is on its way (else it commits at once): it keeps taking the requests
// that come, until none came for Gap once none is on its way, or for at
// most Max. Agents that each wait for their last batch's answer before
// they send the next (one in flight) then have their next batches in one
// commit, rather than in those that happened to be queued when the last
// commit ended. Gap <= 0: the pipeline commits at once, without
// gathering.
type CommitGatherer interface {
	CommitGather() Gathering
}

// Gathering is how a store wants its commits gathered (CommitGatherer).
type Gathering struct {
	Gap, Max time.Duration
	// Enough is the series (a batch's process and attempt series: the
	// chunks a commit appends) for which a commit gains nothing more by
	// gathering (the embedded store: a row group, which DuckDB writes
	// compressed to the file with only its pointers in the WAL). When what
	// queued while the last commit ran holds as many, the writer is what
	// the batches wait for, and the pipeline commits them at once: with
	// many agents in flight, gathering would keep it idle (0: gather
	// whatever is queued).
	Enough int
}

// PipelinedAppender is an Appender whose commit comes in two parts
// (ClickHouse: a commit's fold, then its inserts): CommitStart does what
// the next transaction needs done before it may begin (the writer's lock
// is free when it returns), and wait blocks until the batches are durable
// or failed. Commits started are durable in the order they started; one
// whose wait fails makes those started after it fail too. The ingest
// pipeline answers a group's requests when its wait returns, while it
// takes and folds the next group (its inserts overlap the next group's
// fold).
type PipelinedAppender interface {
	CommitStart() (wait func() error, err error)
}

// PacedFlusher is a store whose summaries cost more to write the more
// often they are written (ClickHouse adds a job's figures up again from
// all its attempts' rows): FlushDue writes those due, and a job written
// lately waits a little while its attempts keep changing; waiting says
// that some wait. Flush still writes every one. The server's periodic
// flush calls FlushDue.
type PacedFlusher interface {
	FlushDue(ctx context.Context) (waiting bool, err error)
}

// SharedData is a store that several servers write at once (ClickHouse
// behind several taskscope replicas): Changes is a number that moves
// whenever another of them stores a batch (this one's own commits need
// not move it). A server polls it to tell its browsers of the others'
// commits (live updates); without it, a server tells them of its own
// commits only.
type SharedData interface {
	Changes(ctx context.Context) (uint64, error)
}

// LocalData is a store that keeps its data in files on this machine:
// DataDir is their directory ("" if it has none, as in memory). The
// server's /healthz and metrics report that filesystem's free space beside
// whether the store writes; a store that is not local reports its own
// (Usage, ErrDiskFull).
type LocalData interface {
	DataDir() string
}

// Time is unix milliseconds; it marshals to JSON as an RFC 3339 string, and
// 0 as null (and a time outside 1970..2100, which batches may no longer
// carry, also as null: RFC 3339 has four digits of year).
type Time int64

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	if t <= 0 || t > wire.MaxTimeMs {
		return []byte("null"), nil
	}
	// Appended, not json.Marshal of the formatted string: a job of 10,000
	// attempts has 70,000 of them, and that was a third of its encoding.
	b := make([]byte, 0, len(`"2006-01-02T15:04:05.000Z"`))
	b = append(b, '"')
	b = time.UnixMilli(int64(t)).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = 0
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = Time(v.UnixMilli())
	return nil
}

// Key is a process key; it marshals as a 16-digit hex string (JSON numbers
// cannot hold 64 bits).
type Key uint64

// MarshalJSON implements json.Marshaler.
func (k Key) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (k *Key) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseKey(s)
	*k = v
	return err
}

func (k Key) String() string {
	s := strconv.FormatUint(uint64(k), 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

// ParseKey parses the hex form of a process key.
func ParseKey(s string) (Key, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 {
		return 0, errors.New("a process key is 16 hex digits")
	}
	return Key(v), nil
}

// Job states.
const (
	StateRunning  = "running"
	StateFinished = "finished"
)

// JobFilter selects jobs. Empty fields match everything.
type JobFilter struct {
	User, Name, Queue, State, Framework string // Name matches a substring, case-insensitively
	From, To                            int64  // jobs active within [From, To), ms
	Limit                               int    // default 50, at most 1000
	Offset                              int
	// Visible, when set, keeps only the jobs a reader may see (package
	// auth decides which): paging and the total count those alone.
	Visible *Visible
	// By the stored analyses (FindingStore): MinSeverity keeps the jobs
	// whose worst finding is of this severity or worse (nil: any job,
	// analysed or not); Heuristic the jobs with a finding of that
	// heuristic (of low severity at least), and then MinSeverity,
	// BySeverity and the counts are of that heuristic's findings alone.
	// BySeverity sorts the worst first (then newest first); jobs not
	// analysed come last. CountSeverities fills JobPage.Severities.
	MinSeverity     *Severity
	Heuristic       string
	BySeverity      bool
	CountSeverities bool
	// WithoutRestricted: the worst severity, heuristics, filters, order
	// and counts above are those of the findings that are not
	// StoredFinding.Restricted.
	WithoutRestricted bool
	// Bare lists the jobs' own figures alone: their WorstSeverity and
	// Heuristics are not read, nor Total counted (0); the filters above
	// still select by the analyses. The earlier runs of a recurring job
	// are read so (on ClickHouse, one read of the jobs instead of two of
	// the jobs joined with the analyses).
	Bare bool
}

// Visible are the jobs of one of Users or in one of Queues (either list
// may be empty; both empty: none).
type Visible struct {
	Users, Queues []string
}

// JobPage is one page of jobs.
type JobPage struct {
	Jobs  []Job `json:"jobs"`
	Total int   `json:"total"`
	// Severities counts the jobs that match the filter but MinSeverity,
	// by their worst severity (JobFilter.CountSeverities; nil otherwise).
	Severities SeverityCounts `json:"severity_counts,omitempty"`
}

// Job is a job with its key figures.
type Job struct {
	JobID       string         `json:"job_id"`
	AppID       string         `json:"app_id,omitempty"`
	Framework   string         `json:"framework"`
	Name        string         `json:"name"`
	User        string         `json:"user"`
	Queue       string         `json:"queue"`
	State       string         `json:"state"`
	Start       Time           `json:"start"`
	End         Time           `json:"end"` // null while running
	LastSeen    Time           `json:"last_seen"`
	Attempts    int            `json:"attempts"`
	Running     int            `json:"running"`
	ByType      map[string]int `json:"attempts_by_type"`
	Hosts       int            `json:"hosts"`
	CPUMs       int64          `json:"cpu_ms"`
	PeakRSS     int64          `json:"peak_rss_bytes"`       // the largest attempt peak
	MemGBHours  float64        `json:"memory_gb_hours"`      // allocated: memory.mb × duration, summed over attempts
	UsedGBHours float64        `json:"used_memory_gb_hours"` // used: RSS integrated over time
	// WorstSeverity is the worst severity of the job's stored findings
	// (nil, null: not analysed yet); Heuristics the heuristics of its
	// findings of low severity or worse (FindingStore). Jobs sets them,
	// Job and JobSummary do not.
	WorstSeverity *Severity `json:"worst_severity"`
	Heuristics    []string  `json:"heuristics,omitempty"`
}

// JobDetail is a job with its attempts.
type JobDetail struct {
	Job
	AttemptList []Attempt `json:"attempt_list"`
}

// Attempt is a task attempt (or a container running none) with its summary.
type Attempt struct {
	AttemptID   string  `json:"attempt_id"`
	JobID       string  `json:"job_id"`
	Host        string  `json:"host"`
	ContainerID string  `json:"container_id"`
	AppID       string  `json:"app_id,omitempty"`
	Type        string  `json:"type"`
	Framework   string  `json:"framework"`
	State       string  `json:"state"`
	Start       Time    `json:"start"`
	End         Time    `json:"end"`
	LastSeen    Time    `json:"last_seen"`
	DurationMs  int64   `json:"duration_ms"`
	CPUMs       int64   `json:"cpu_ms"`
	CPUDoubtMs  int64   `json:"cpu_doubt_ms,omitempty"` // CPUMs is an estimate, off by up to this (wire.Attempt.CPUDoubtMs); 0: not one
	PeakRSS     int64   `json:"peak_rss_bytes"`
	PeakPSS     int64   `json:"peak_pss_bytes"`
	PeakVMS     int64   `json:"peak_vms_bytes"`
	PeakHeap    int64   `json:"peak_heap_bytes"`
	Processes   int     `json:"processes"`
	ReadBytes   int64   `json:"read_bytes"`
	WriteBytes  int64   `json:"write_bytes"`
	GCTimeMs    int64   `json:"gc_time_ms"`
	SchedWaitMs int64   `json:"sched_wait_ms"`
	RSSByteMs   float64 `json:"-"`
	MemoryMB    int64   `json:"memory_mb"`
	VCores      int64   `json:"vcores"` // allocated virtual cores; 0: not known (count one)
	XmxBytes    int64   `json:"xmx_bytes"`
	JavaOpts    string  `json:"java_opts,omitempty"`
	Streaming   bool    `json:"streaming"`
	JobName     string  `json:"job_name,omitempty"`
	User        string  `json:"user,omitempty"`
	Queue       string  `json:"queue,omitempty"`
	// Outcome is how it ended: OutcomeSucceeded, OutcomeFailed,
	// OutcomeKilled, OutcomeKilledMemory, OutcomeLost; "" while it runs or
	// when nothing of its end was seen (store.Outcome says how it is read).
	Outcome string `json:"outcome"`
	// ExitCode is the exit status it is read from, as the node showed it:
	// the exit code, or 128 + the signal that ended the process (137 is
	// SIGKILL, 143 SIGTERM), as a shell and YARN's exit-code file say it;
	// or YARN's ContainerExitStatus from the NodeManager (-104: over its
	// physical memory, -103 virtual, -100 aborted or lost, ...). nil (null)
	// when none was seen.
	ExitCode *int32 `json:"exit_code"`
	// ExitSource says where ExitCode came from: ExitSourceNodeManager,
	// ExitSourceExitCodeFile, ExitSourceContainerRoot, ExitSourceTaskJVM.
	ExitSource string `json:"exit_source,omitempty"`
	// ExitDiagnostics is the NodeManager's diagnostics for its container.
	ExitDiagnostics string `json:"exit_diagnostics,omitempty"`
	// RetryOf is the attempt of the same task this one repeats ("" if
	// none): the one it retries, or, Speculative, the one it is a
	// speculative copy of (LinkAttempts).
	RetryOf     string `json:"retry_of"`
	Speculative bool   `json:"speculative"`
}

// Process is one process (pid + start) with its summary.
type Process struct {
	Key        Key    `json:"key"`
	Host       string `json:"host"`
	PID        int32  `json:"pid"`
	PPID       int32  `json:"ppid"`
	SID        int32  `json:"sid"`
	Start      Time   `json:"start"`
	End        Time   `json:"end"`
	LastSeen   Time   `json:"last_seen"`
	Cmdline    string `json:"cmdline"`
	Comm       string `json:"comm"`
	Role       string `json:"role"`
	User       string `json:"user"`
	CPUMs      int64  `json:"cpu_ms"` // user + system, own (not children)
	ChildCPUMs int64  `json:"children_cpu_ms"`
	PeakRSS    int64  `json:"peak_rss_bytes"`
	PeakPSS    int64  `json:"peak_pss_bytes"`
	PeakVMS    int64  `json:"peak_vms_bytes"`
	MaxThreads int64  `json:"max_threads"`
	ReadBytes  int64  `json:"read_bytes"`
	WriteBytes int64  `json:"write_bytes"`
	// SchedWaitMs is the time its threads spent runnable, waiting for a CPU
	// (summed over its threads where the agent could ask taskstats).
	SchedWaitMs int64 `json:"sched_wait_ms"`
	Samples     int64 `json:"samples"`
	// The membership of this process in the attempt asked for.
	From      Time  `json:"member_from"`
	To        Time  `json:"member_to"`
	CPUBaseMs int64 `json:"member_cpu_base_ms"`
}

// AttemptDetail is an attempt with its processes and events.
type AttemptDetail struct {
	Attempt
	ProcessList []Process `json:"process_list"`
	Events      []Event   `json:"events"`
}

// Event is something that happened.
type Event struct {
	Time      Time   `json:"time"`
	Host      string `json:"host"`
	Kind      string `json:"kind"`
	JobID     string `json:"job_id,omitempty"`
	AttemptID string `json:"attempt_id,omitempty"`
	Process   Key    `json:"process,omitempty"`
	PID       int32  `json:"pid,omitempty"`
	Message   string `json:"message,omitempty"`
	Value     int64  `json:"value,omitempty"`
}

// EventFilter selects events.
type EventFilter struct {
	Host, JobID, AttemptID, Kind string
	From, To                     int64
	Limit                        int // default 1000
}

// Host is a node that sent data.
type Host struct {
	Host           string `json:"host"`
	LastSeen       Time   `json:"last_seen"`
	Running        int    `json:"running_attempts"`
	Attempts       int    `json:"attempts"`
	Agents         int    `json:"agents"`
	DroppedSamples uint64 `json:"dropped_samples"`
	Orphans        int    `json:"orphan_events"`
}

// Usage is the store's size.
type Usage struct {
	Samples        int64 `json:"samples"`
	AttemptSamples int64 `json:"attempt_samples"`
	Processes      int64 `json:"processes"`
	Attempts       int64 `json:"attempts"`
	Jobs           int64 `json:"jobs"`
	Bytes          int64 `json:"bytes"` // on disk, everything included
}
