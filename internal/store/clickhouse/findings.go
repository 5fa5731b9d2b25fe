package clickhouse

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// The jobs' analyses (store.FindingStore) and the replicas' beats
// (store.Replicas).
//
// analyses: a row per analysis of a job; the latest (evaluated_ms, the
// ReplacingMergeTree's version) is the job's. Its findings are arrays:
// their heuristics and severities, by which they are selected (ARRAY
// JOIN), and each finding's JSON; heuristics and heuristic_worst are the
// heuristics found (store.HeuristicsFound), by which jobs are; the _open
// columns are the same of the findings that are not restricted
// (f_restricted; store.Unrestricted), for the filters' WithoutRestricted
// (a row stored before them has none: f_restricted is shorter than
// f_body, and the others are read for them). Sharded and
// keyed as jobs (job_key), and not partitioned either: a job's row is
// replaced in place, kept as long as the job's.
//
// job_changes: the jobs' rows again, in the order they were written
// (stored_ms, the writer's clock), by which the analyser finds the jobs
// whose data came lately, whatever time the data says
// (store.FindingStore.AnalysisStates): a read of the last minutes is a
// range of the primary key, where jobs, keyed by job, would be read
// whole. The rows of a job in a minute are replaced by its latest
// (version, as in jobs), so that a job written every second leaves a row
// a minute. Kept changesRetention.
//
// analysis_stamps: the stamps of the analyses (what AnalysisStates says
// of them), in the order they were made (evaluated_ms), for the same
// reason; kept as long.
//
// replicas: a row per beat of each taskscope server sharing the store,
// the latest (beat) its state; on the first shard.
var findingTables = []table{
	{name: "job_changes", columns: cols(`day Date, minute UInt32, stored_ms Int64, job_key UInt64, job_id String,
		version UInt64, app_id String, framework String lc, name String, user_name String lc, queue String lc,
		first_ms Int64, last_ms Int64, attempts UInt32, running UInt32, cpu_ms Int64, peak_rss Int64, mem_gb_hours Float64,
		used_gb_hours Float64, hosts UInt32, by_type String`),
		version: "version", partition: "day", orderBy: "(minute, job_key, job_id)", shardKey: "job_key", retention: keepChanges},
	{name: "analysis_stamps", columns: cols(`day Date, evaluated_ms Int64, job_key UInt64, job_id String, version String lc,
		settings String lc, mark UInt64, ended UInt8, last_ms Int64`),
		partition: "day", orderBy: "(evaluated_ms, job_key, job_id)", shardKey: "job_key", retention: keepChanges},
	{name: "analyses", columns: cols(`job_key UInt64, job_id String, evaluated_ms Int64, job_name String,
		user_name String lc, queue String lc, start_ms Int64, last_ms Int64, ended UInt8, version String lc,
		settings String lc, mark UInt64, worst Int8, heuristics Array(String), heuristic_worst Array(Int8),
		f_heuristic Array(String), f_severity Array(Int8), f_body Array(String), report String, worst_open Int8,
		heuristics_open Array(String), heuristic_worst_open Array(Int8), f_restricted Array(UInt8)`),
		version: "evaluated_ms", orderBy: "(job_key, job_id)", shardKey: "job_key"},
	{name: "replicas", columns: cols("replica String, since DateTime, beat DateTime, left UInt8"), version: "beat",
		orderBy: "replica"},
}

func init() { tables = append(tables, findingTables...) }

// changesRetention is how long job_changes and analysis_stamps are kept:
// longer than an analyser looks back when it starts (analysis.Options'
// Lookback, 6 hours by default).
const changesRetention = 48 * time.Hour

// changeCols are the columns of job_changes: jobCols after its own.
var changeCols = append([]string{"day", "minute", "stored_ms"}, jobCols[1:]...)

// changeRow appends a job's row of job_changes, written at stored.
func changeRow(b *Block, id string, j *store.JobTotals, version uint64, stored int64) {
	b.Row()
	b.Date(stored)
	b.UInt32(uint32(stored / 60_000))
	b.Int64(stored)
	jobFields(b, id, j, version)
}

var stampColumns = []string{"day", "evaluated_ms", "job_key", "job_id", "version", "settings", "mark", "ended", "last_ms"}

var analysisColumns = []string{"job_key", "job_id", "evaluated_ms", "job_name", "user_name", "queue", "start_ms",
	"last_ms", "ended", "version", "settings", "mark", "worst", "heuristics", "heuristic_worst", "f_heuristic",
	"f_severity", "f_body", "report", "worst_open", "heuristics_open", "heuristic_worst_open", "f_restricted"}

// restrictedCol is f_restricted, all 0 in a row stored before it.
const restrictedCol = "if(length(f_restricted) = length(f_body), f_restricted, arrayMap(x -> toUInt8(0), f_body))"

// worstCols are the analysis columns as a filter's WithoutRestricted
// takes them: the job's worst severity, heuristics found and their worst.
func worstCols(withoutRestricted bool) (worst, heuristics, heuristicWorst string) {
	if withoutRestricted {
		old := "length(f_restricted) != length(f_body)"
		return "if(" + old + ", worst, worst_open)", "if(" + old + ", heuristics, heuristics_open)",
			"if(" + old + ", heuristic_worst, heuristic_worst_open)"
	}
	return "worst", "heuristics", "heuristic_worst"
}

// The store's capabilities beyond store.Store.
var _ store.Replicas = (*Store)(nil)

// PutAnalysis stores a job's analysis: a row that replaces the job's
// earlier ones (the latest evaluated wins), inserted with the others of
// its group (analysisgroup.go).
func (s *Store) PutAnalysis(ctx context.Context, a *store.Analysis) error {
	return s.putGrouped(analysisPutOf(ctx, a))
}

// PutAnalyses stores analyses as PutAnalysis does, all in one group
// (store.AnalysesPutter); the first error met is returned.
func (s *Store) PutAnalyses(ctx context.Context, as []*store.Analysis) error {
	ps := make([]*analysisPut, len(as))
	for i, a := range as {
		ps[i] = analysisPutOf(ctx, a)
	}
	return s.putGrouped(ps...)
}

// analysisPutOf is an analysis' rows.
func analysisPutOf(ctx context.Context, a *store.Analysis) *analysisPut {
	names, worst := store.HeuristicsFound(a.Findings)
	p := &analysisPut{ctx: ctx, job: a.JobID}
	b := &p.row
	b.UInt64(jobKey(a.JobID))
	b.String(a.JobID)
	b.Int64(int64(a.Evaluated))
	b.String(a.Name)
	b.String(a.User)
	b.String(a.Queue)
	b.Int64(int64(a.Start))
	b.Int64(int64(a.LastSeen))
	b.Bool(a.Ended)
	b.String(a.Version)
	b.String(a.Settings)
	b.UInt64(a.Mark)
	b.UInt8(uint8(a.Worst))
	b.Strings(names)
	b.Severities(worst)
	fh, fs := make([]string, len(a.Findings)), make([]store.Severity, len(a.Findings))
	for i, f := range a.Findings {
		fh[i], fs[i] = f.Heuristic, f.Severity
	}
	b.Strings(fh)
	b.Severities(fs)
	b.buf = binary.AppendUvarint(b.buf, uint64(len(a.Findings)))
	for _, f := range a.Findings {
		b.Blob(f.Body)
	}
	b.Blob(a.Report)
	open, worstOpen := store.Unrestricted(a.Findings)
	namesOpen, wsOpen := store.HeuristicsFound(open)
	b.UInt8(uint8(worstOpen))
	b.Strings(namesOpen)
	b.Severities(wsOpen)
	b.buf = binary.AppendUvarint(b.buf, uint64(len(a.Findings)))
	for _, f := range a.Findings {
		b.Bool(f.Restricted)
	}
	b.Row()
	st := &p.stamp
	st.Row()
	st.Date(int64(a.Evaluated))
	st.Int64(int64(a.Evaluated))
	st.UInt64(jobKey(a.JobID))
	st.String(a.JobID)
	st.String(a.Version)
	st.String(a.Settings)
	st.UInt64(a.Mark)
	st.Bool(a.Ended)
	st.Int64(int64(a.LastSeen))
	return p
}

// Strings appends an Array(String).
func (b *Block) Strings(ss []string) {
	b.buf = binary.AppendUvarint(b.buf, uint64(len(ss)))
	for _, s := range ss {
		b.String(s)
	}
}

// Severities appends an Array(Int8) of severities.
func (b *Block) Severities(ss []store.Severity) {
	b.buf = binary.AppendUvarint(b.buf, uint64(len(ss)))
	for _, s := range ss {
		b.UInt8(uint8(s))
	}
}

// length reads an Array's length, bounded by what is left of the answer
// (each element takes a byte at least).
func (r *Rows) length() int {
	if r.err != nil {
		return 0
	}
	n, k := binary.Uvarint(r.buf[r.pos:])
	if k <= 0 || n > uint64(len(r.buf)-r.pos-k) {
		r.err = fmt.Errorf("%w: bad array length at %d", ErrMalformed, r.pos)
		return 0
	}
	r.pos += k
	return int(n)
}

// Strings reads an Array(String).
func (r *Rows) Strings() []string {
	n := r.length()
	out := make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.String())
	}
	return out
}

// Severities reads an Array(Int8) of severities.
func (r *Rows) Severities() []store.Severity {
	n := r.length()
	out := make([]store.Severity, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, store.Severity(int8(r.UInt8())))
	}
	return out
}

// Analysis returns a job's stored analysis: its latest row.
func (s *Store) Analysis(ctx context.Context, jobID string) (*store.Analysis, error) {
	rows, err := s.query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE job_key = %d AND job_id = %s ORDER BY evaluated_ms DESC LIMIT 1",
		strings.Join(analysisColumns, ", "), s.read("analyses"), jobKey(jobID), Quote(jobID)))
	if err != nil {
		return nil, fmt.Errorf("cannot read the analysis of job %s: %w", jobID, err)
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("cannot read the analysis of job %s: %w", jobID, err)
		}
		return nil, fmt.Errorf("analysis of job %s: %w", jobID, store.ErrNotFound)
	}
	a := &store.Analysis{}
	rows.UInt64()
	a.JobID = rows.String()
	a.Evaluated = store.Time(rows.Int64())
	a.Name, a.User, a.Queue = rows.String(), rows.String(), rows.String()
	a.Start, a.LastSeen = store.Time(rows.Int64()), store.Time(rows.Int64())
	a.Ended = rows.Bool()
	a.Version, a.Settings, a.Mark = rows.String(), rows.String(), rows.UInt64()
	a.Worst = store.Severity(int8(rows.UInt8()))
	rows.Strings()
	rows.Severities()
	fh, fs := rows.Strings(), rows.Severities()
	n := rows.length()
	if rows.Err() == nil && (len(fh) != n || len(fs) != n) {
		return nil, fmt.Errorf("analysis of job %s: %d heuristics, %d severities, %d findings", jobID, len(fh), len(fs), n)
	}
	for i := 0; i < n && rows.Err() == nil; i++ {
		a.Findings = append(a.Findings, store.StoredFinding{Heuristic: fh[i], Severity: fs[i], Body: json.RawMessage(rows.String())})
	}
	if rep := rows.String(); rep != "" {
		a.Report = json.RawMessage(rep)
	}
	rows.UInt8()
	rows.Strings()
	rows.Severities()
	if m := rows.length(); m == n { // else stored before restrictions: none
		for i := 0; i < m && rows.Err() == nil; i++ {
			a.Findings[i].Restricted = rows.Bool()
		}
	} else {
		for i := 0; i < m && rows.Err() == nil; i++ {
			rows.Bool()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the analysis of job %s: %w", jobID, err)
	}
	return a, nil
}

// AnalysisStates returns the jobs written since `since` with their
// analyses' stamps: the jobs' latest rows (version) among those written
// since (a job's latest row is its latest write), and the latest stamp
// of each among those made since. Both tables are ordered by that time:
// each read is a range of its primary key.
func (s *Store) AnalysisStates(ctx context.Context, since int64, limit int) ([]store.AnalysisState, error) {
	cols := make([]string, len(jobColumns))
	for i, c := range jobColumns {
		cols[i] = "argMax(" + c + ", version)"
	}
	cols[0] = "job_id"
	rows, err := s.query(ctx, fmt.Sprintf("SELECT %s, max(stored_ms) FROM %s WHERE minute >= %d AND stored_ms >= %d GROUP BY job_id "+
		"HAVING argMax(attempts, version) > 0 ORDER BY max(stored_ms) DESC, job_id LIMIT %d",
		strings.Join(cols, ", "), s.read("job_changes"), max(since, 0)/60_000, since, limit))
	if err != nil {
		return nil, fmt.Errorf("cannot list the jobs to analyse: %w", err)
	}
	stale := s.staleBefore()
	var out []store.AnalysisState
	at := map[string]int{}
	for rows.Next() {
		j := readJob(rows, stale)
		at[j.JobID] = len(out)
		out = append(out, store.AnalysisState{Job: j, Changed: store.Time(rows.Int64())})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list the jobs to analyse: %w", err)
	}
	rows, err = s.query(ctx, fmt.Sprintf("SELECT job_id, max(evaluated_ms), argMax(version, evaluated_ms), argMax(settings, evaluated_ms), "+
		"argMax(mark, evaluated_ms), argMax(ended, evaluated_ms), argMax(last_ms, evaluated_ms) FROM %s WHERE evaluated_ms >= %d GROUP BY job_id",
		s.read("analysis_stamps"), since))
	if err != nil {
		return nil, fmt.Errorf("cannot read the stamps of analyses: %w", err)
	}
	for rows.Next() {
		id := rows.String()
		st := &store.AnalysisStamp{Evaluated: store.Time(rows.Int64()), Version: rows.String(), Settings: rows.String(),
			Mark: rows.UInt64(), Ended: rows.Bool(), LastSeen: store.Time(rows.Int64())}
		if i, ok := at[id]; ok && rows.Err() == nil {
			out[i].Stored = st
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the stamps of analyses: %w", err)
	}
	return out, nil
}

// latestAnalyses is the analyses table with a row per job, its latest.
func (s *Store) latestAnalyses() string { return "(SELECT * FROM " + s.read("analyses") + " FINAL)" }

// Findings lists stored findings across jobs.
func (s *Store) Findings(ctx context.Context, f store.FindingFilter) (store.FindingPage, error) {
	f.Limit = min(max(f.Limit, 0), 1000)
	if f.Limit == 0 {
		f.Limit = 100
	}
	f.Offset = max(f.Offset, 0)
	var where, inner []string
	if f.User != "" {
		where = append(where, "user_name = "+Quote(f.User))
	}
	if f.Queue != "" {
		where = append(where, "queue = "+Quote(f.Queue))
	}
	if f.Visible != nil {
		where = append(where, visibleSQL(f.Visible))
	}
	if f.From > 0 {
		where = append(where, fmt.Sprintf("last_ms >= %d", f.From))
	}
	if f.To > 0 {
		where = append(where, fmt.Sprintf("start_ms < %d", f.To))
	}
	worst, _, _ := worstCols(f.WithoutRestricted)
	if f.MinSeverity != nil {
		where = append(where, fmt.Sprintf("%s >= %d", worst, *f.MinSeverity))
		inner = append(inner, fmt.Sprintf("sev >= %d", *f.MinSeverity))
	}
	if f.Heuristic != "" {
		where = append(where, "has(f_heuristic, "+Quote(f.Heuristic)+")")
		inner = append(inner, "heuristic = "+Quote(f.Heuristic))
	}
	if f.WithoutRestricted {
		inner = append(inner, "restricted = 0")
	}
	from := "(SELECT job_id, job_name, user_name, queue, start_ms, ended, evaluated_ms, f_heuristic, f_severity, f_body, " +
		restrictedCol + " AS f_restricted_all FROM " + s.latestAnalyses() + and(" WHERE ", where) +
		") ARRAY JOIN f_heuristic AS heuristic, f_severity AS sev, f_body AS body, f_restricted_all AS restricted, " +
		"arrayEnumerate(f_body) AS idx" + and(" WHERE ", inner)
	rows, err := s.query(ctx, "SELECT job_id, job_name, user_name, queue, start_ms, ended, evaluated_ms, heuristic, sev, body FROM "+
		from+fmt.Sprintf(" ORDER BY start_ms DESC, job_id DESC, idx LIMIT %d, %d", f.Offset, f.Limit))
	if err != nil {
		return store.FindingPage{}, fmt.Errorf("cannot list findings: %w", err)
	}
	page := store.FindingPage{Findings: []store.FindingRow{}}
	for rows.Next() {
		var r store.FindingRow
		r.JobID, r.Name, r.User, r.Queue = rows.String(), rows.String(), rows.String(), rows.String()
		r.Start, r.Ended, r.Evaluated = store.Time(rows.Int64()), rows.Bool(), store.Time(rows.Int64())
		r.Finding.Heuristic, r.Finding.Severity = rows.String(), store.Severity(int8(rows.UInt8()))
		r.Finding.Body = json.RawMessage(rows.String())
		page.Findings = append(page.Findings, r)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("cannot list findings: %w", err)
	}
	rows, err = s.query(ctx, "SELECT count() FROM "+from)
	if err != nil {
		return page, fmt.Errorf("cannot count findings: %w", err)
	}
	page.Total = int(rows.UInt64())
	return page, rows.Err()
}

// and joins conditions with AND after prefix ("" for none).
func and(prefix string, conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return prefix + strings.Join(conds, " AND ")
}

// visibleSQL is the condition of store.Visible on a table's user_name and
// queue: user_name IN (...) OR queue IN (...); an empty list matches
// nothing.
func visibleSQL(v *store.Visible) string {
	in := func(col string, vals []string) string {
		if len(vals) == 0 {
			return "0"
		}
		q := make([]string, len(vals))
		for i, x := range vals {
			q[i] = Quote(x)
		}
		return col + " IN (" + strings.Join(q, ", ") + ")"
	}
	return "(" + in("user_name", v.Users) + " OR " + in("queue", v.Queues) + ")"
}

// jobsAnalysis is what Jobs adds for the analysis filters of f: the join
// of each job's analysis (analysed, worst, heuristics, and sev: its
// severity as f takes it, the worst of the job's findings or of those of
// f.Heuristic, -1 for none), the conditions (MinSeverity is left to the
// caller, which counts without it) and the order.
func (s *Store) jobsAnalysis(f store.JobFilter) (join string, where []string, sev, order string) {
	worst, heuristics, heuristicWorst := worstCols(f.WithoutRestricted)
	sevOf := worst
	if f.Heuristic != "" {
		q := Quote(f.Heuristic)
		sevOf = "if(indexOf(" + heuristics + ", " + q + ") > 0, " + heuristicWorst + "[indexOf(" + heuristics + ", " + q + ")], -1)"
		where = append(where, "analysed AND a_sev >= 0")
	}
	join = " ANY LEFT JOIN (SELECT job_id, 1 AS analysed, " + worst + " AS a_worst, " + heuristics + " AS a_heuristics, " +
		sevOf + " AS a_sev FROM " + s.latestAnalyses() + ") USING job_id"
	sev = "if(analysed, a_sev, -1)"
	order = "first_ms DESC, job_id DESC"
	if f.BySeverity {
		order = sev + " DESC, " + order
	}
	return join, where, sev, order
}

// scanWorst reads the analysis columns Jobs adds (analysed, a_worst,
// heuristics) into j.
func scanWorst(rows *Rows, j *store.Job) {
	analysed, w, hs := rows.Bool(), store.Severity(int8(rows.UInt8())), rows.Strings()
	if analysed {
		j.WorstSeverity = &w
		if len(hs) > 0 {
			j.Heuristics = hs
		}
	}
}

// countSeverities counts the jobs of from (FROM ... WHERE ...) by sev.
func (s *Store) countSeverities(ctx context.Context, from, sev string) (store.SeverityCounts, error) {
	rows, err := s.query(ctx, "SELECT toInt8("+sev+") AS s, count() FROM "+from+" GROUP BY s")
	if err != nil {
		return nil, fmt.Errorf("cannot count jobs by severity: %w", err)
	}
	c := store.NewSeverityCounts()
	for rows.Next() {
		v, n := store.Severity(int8(rows.UInt8())), int(rows.UInt64())
		if v < 0 {
			c.Add(nil, n)
		} else {
			c.Add(&v, n)
		}
	}
	return c, rows.Err()
}

// Replicas returns the store's time and every replica's latest beat.
func (s *Store) Replicas(ctx context.Context) (int64, []store.Replica, error) {
	rows, err := s.query(ctx, "SELECT toUInt32(now()), replica, toUInt32(argMax(since, (beat, left))), toUInt32(max(beat)), "+
		"argMax(left, (beat, left)) FROM "+s.read("replicas")+" GROUP BY replica ORDER BY replica")
	if err != nil {
		return 0, nil, fmt.Errorf("cannot read the replicas: %w", err)
	}
	var now int64
	var out []store.Replica
	for rows.Next() {
		now = int64(rows.UInt32())
		r := store.Replica{ID: rows.String(), Since: int64(rows.UInt32()), Beat: int64(rows.UInt32()), Left: rows.Bool()}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("cannot read the replicas: %w", err)
	}
	if out == nil {
		// No replica yet: the time alone.
		rows, err := s.query(ctx, "SELECT toUInt32(now())")
		if err != nil {
			return 0, nil, fmt.Errorf("cannot read the replicas: %w", err)
		}
		now = int64(rows.UInt32())
		if err := rows.Err(); err != nil {
			return 0, nil, fmt.Errorf("cannot read the replicas: %w", err)
		}
	}
	return now, out, nil
}

// Beat records a replica's beat.
func (s *Store) Beat(ctx context.Context, r store.Replica) error {
	var b Block
	b.String(r.ID)
	b.UInt32(uint32(r.Since))
	b.UInt32(uint32(r.Beat))
	b.Bool(r.Left)
	b.Row()
	if err := s.insert(ctx, "replicas", []string{"replica", "since", "beat", "left"}, &b); err != nil {
		return fmt.Errorf("cannot record the beat of replica %s: %w", r.ID, err)
	}
	return nil
}
