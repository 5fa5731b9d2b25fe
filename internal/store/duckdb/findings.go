package duckdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// The jobs' analyses (store.FindingStore): a row per job, replaced by each
// analysis (an upsert on its key; the latest evaluated wins), its findings
// as lists: their heuristics and severities, by which they are selected,
// and each finding's JSON; heuristics and heuristic_worst are the
// heuristics found (store.HeuristicsFound), by which jobs are; the
// _open columns are the same of the findings that are not restricted
// (f_restricted; store.Unrestricted), for the filters' WithoutRestricted
// (NULL in a row stored before them: read as the others). A job's row is
// found by its key (the primary key's index); the lists of findings
// across jobs are unnested.
func findingsSchema() []string {
	qs := []string{
		`CREATE TABLE IF NOT EXISTS analyses (job_id VARCHAR PRIMARY KEY, job_name VARCHAR, user_name VARCHAR,
			queue VARCHAR, start_ms BIGINT, last_ms BIGINT, ended BOOLEAN, evaluated_ms BIGINT, version VARCHAR,
			settings VARCHAR, mark BIGINT, worst TINYINT, heuristics VARCHAR[], heuristic_worst TINYINT[],
			f_heuristic VARCHAR[], f_severity TINYINT[], f_body VARCHAR[], report VARCHAR)`,
	}
	for _, c := range restrictedColumns {
		qs = append(qs, `ALTER TABLE analyses ADD COLUMN IF NOT EXISTS `+c[0]+` `+c[1])
	}
	return qs
}

// restrictedColumns are the columns of restricted findings (name, type),
// added to the table of a data directory made before them as to a new one.
var restrictedColumns = [][2]string{{"worst_open", "TINYINT"}, {"heuristics_open", "VARCHAR[]"},
	{"heuristic_worst_open", "TINYINT[]"}, {"f_restricted", "BOOLEAN[]"}}

const analysisCols = `job_id, job_name, user_name, queue, start_ms, last_ms, ended, evaluated_ms, version, settings, mark,
	worst, heuristics, heuristic_worst, f_heuristic, f_severity, f_body, report, worst_open, heuristics_open,
	heuristic_worst_open, f_restricted`

// analysisSelect reads analysisCols of a row (scanAnalysis): the
// restrictions of a row stored before them are none.
const analysisSelect = `job_id, job_name, user_name, queue, start_ms, last_ms, ended, evaluated_ms, version, settings, mark,
	worst, heuristics, heuristic_worst, f_heuristic, f_severity, f_body, report,
	coalesce(f_restricted, list_transform(f_body, x -> false))`

// The analysis columns as a filter's WithoutRestricted takes them: the
// job's worst severity, heuristics found and their worst.
func worstCols(withoutRestricted bool) (worst, heuristics, heuristicWorst string) {
	if withoutRestricted {
		return "coalesce(worst_open, worst)", "coalesce(heuristics_open, heuristics)",
			"coalesce(heuristic_worst_open, heuristic_worst)"
	}
	return "worst", "heuristics", "heuristic_worst"
}

// upsertAnalysis replaces a job's row unless the row holds a later analysis.
var upsertAnalysis = upsertAnalyses(1)

// upsertAnalyses is upsertAnalysis of n rows (no two of the same job).
func upsertAnalyses(n int) string {
	row := "(?" + strings.Repeat(", ?", analysisArgs-1) + ")"
	return `INSERT INTO analyses (` + analysisCols + `) VALUES ` + row + strings.Repeat(", "+row, n-1) + onConflictAnalysis
}

// onConflictAnalysis keeps a job's row unless it holds an earlier analysis.
var onConflictAnalysis = func() string {
	var set []string
	for _, c := range strings.Split(analysisCols, ",") {
		if c = strings.TrimSpace(c); c != "job_id" {
			set = append(set, c+" = excluded."+c)
		}
	}
	return ` ON CONFLICT (job_id) DO UPDATE SET ` + strings.Join(set, ", ") +
		` WHERE excluded.evaluated_ms >= analyses.evaluated_ms`
}()

// updateAnalysis is upsertAnalysis of a job that has a row: about half
// its cost (an UPDATE by the primary key against DuckDB's ON CONFLICT),
// and most analyses are of running jobs analysed again.
var updateAnalysis = func() string {
	var set []string
	for i, c := range strings.Split(analysisCols, ",") {
		if c = strings.TrimSpace(c); c != "job_id" {
			set = append(set, fmt.Sprintf("%s = $%d", c, i+1))
		}
	}
	return `UPDATE analyses SET ` + strings.Join(set, ", ") + ` WHERE job_id = $1 AND evaluated_ms <= $8`
}()

// PutAnalysis stores a job's analysis in place of the one before: an
// update of the job's row, or, if that changed nothing (no row, or a later
// analysis in it), the upsert (prepared statements, both).
//
// It holds off checkpoints meanwhile (ckmu), as PutAnalyses does: storing
// analyses is the one write made outside the writer's lock, and DuckDB
// refuses a CHECKPOINT beside an UPDATE.
func (s *Store) PutAnalysis(ctx context.Context, a *store.Analysis) error {
	upd, ups, err := s.analysisStmts(ctx)
	if err == nil {
		s.anmu.Lock()
		s.ckmu.RLock()
		err = putAnalysis(ctx, upd, ups, a)
		s.ckmu.RUnlock()
		s.anmu.Unlock()
	}
	if err != nil {
		return mapErr(s.failed(fmt.Errorf("cannot store the analysis of job %s: %w", a.JobID, err)))
	}
	return nil
}

// analysisStmts are the prepared statements of updateAnalysis and
// upsertAnalysis.
func (s *Store) analysisStmts(ctx context.Context) (upd, ups *sql.Stmt, err error) {
	if upd, err = s.prepared(ctx, updateAnalysis); err != nil {
		return nil, nil, err
	}
	if ups, err = s.prepared(ctx, upsertAnalysis); err != nil {
		return nil, nil, err
	}
	return upd, ups, nil
}

// PutAnalyses stores analyses as PutAnalysis does, in one transaction
// (store.AnalysesPutter): one commit for them all, and one upsert of many
// rows (upsertAnalyses) for up to maxRowsUpsert of them rather than a
// statement each (each took about 2.6 ms beside ingest: DuckDB updates a
// row with lists by deleting and inserting it, statement by statement).
func (s *Store) PutAnalyses(ctx context.Context, as []*store.Analysis) error {
	if err := s.putAnalyses(ctx, latestOfEach(as)); err != nil {
		return mapErr(s.failed(fmt.Errorf("cannot store the analyses of %d jobs: %w", len(as), err)))
	}
	return nil
}

// latestOfEach is as with one analysis a job: what putting them one by one
// leaves stored (the latest evaluated; of two alike, the later put), in
// their order. (An upsert may not meet a key twice.)
func latestOfEach(as []*store.Analysis) []*store.Analysis {
	at := make(map[string]int, len(as))
	for i, a := range as {
		if j, ok := at[a.JobID]; !ok || a.Evaluated >= as[j].Evaluated {
			at[a.JobID] = i
		}
	}
	if len(at) == len(as) {
		return as
	}
	out := make([]*store.Analysis, 0, len(at))
	for i, a := range as {
		if at[a.JobID] == i {
			out = append(out, a)
		}
	}
	return out
}

// maxRowsUpsert is the most rows one upsertAnalyses takes: a batch is
// stored by statements of 64, 32, ... 1 rows (its size in binary), so that
// at most seven statements are prepared.
const maxRowsUpsert = 64

// putAnalyses is PutAnalyses' transaction, holding off checkpoints and
// the other writers of analyses (not while s.failed takes the writer's
// lock: a checkpoint takes that lock before ckmu).
func (s *Store) putAnalyses(ctx context.Context, as []*store.Analysis) error {
	s.anmu.Lock()
	defer s.anmu.Unlock()
	s.ckmu.RLock()
	defer s.ckmu.RUnlock()
	tx, err := s.handle().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for len(as) > 0 {
		n := maxRowsUpsert
		for n > len(as) {
			n /= 2
		}
		q := upsertAnalyses(n)
		st, err := s.prepared(ctx, q)
		if err != nil {
			tx.Rollback()
			return err
		}
		args := make([]any, 0, n*analysisArgs)
		for _, a := range as[:n] {
			args = append(args, analysisValues(a)...)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			tx.Rollback()
			s.dropStmt(ctx, q, st)
			if n == 1 {
				return fmt.Errorf("job %s: %w", as[0].JobID, err)
			}
			return fmt.Errorf("jobs %s to %s: %w", as[0].JobID, as[n-1].JobID, err)
		}
		as = as[n:]
	}
	return tx.Commit()
}

// putAnalysis stores a job's analysis by the statements of
// updateAnalysis (upd) and upsertAnalysis (ups).
func putAnalysis(ctx context.Context, upd, ups *sql.Stmt, a *store.Analysis) error {
	args := analysisValues(a)
	res, err := upd.ExecContext(ctx, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	_, err = ups.ExecContext(ctx, args...)
	return err
}

// analysisArgs is how many values analysisValues gives.
const analysisArgs = 22

// analysisValues are a job's analysis as the values of analysisCols.
func analysisValues(a *store.Analysis) []any {
	names, ws := heuristicsFound(a.Findings)
	open, worstOpen := store.Unrestricted(a.Findings)
	namesOpen, wsOpen := heuristicsFound(open)
	n := len(a.Findings)
	fh, fs, fb, fr := make([]string, n), make([]int8, n), make([]string, n), make([]bool, n)
	for i, f := range a.Findings {
		fh[i], fs[i], fb[i], fr[i] = f.Heuristic, int8(f.Severity), string(f.Body), f.Restricted
	}
	return []any{a.JobID, a.Name, a.User, a.Queue, int64(a.Start), int64(a.LastSeen), a.Ended, int64(a.Evaluated),
		a.Version, a.Settings, int64(a.Mark), int8(a.Worst), names, ws, fh, fs, fb, string(a.Report), int8(worstOpen),
		namesOpen, wsOpen, fr}
}

// heuristicsFound is store.HeuristicsFound as the columns take it.
func heuristicsFound(fs []store.StoredFinding) ([]string, []int8) {
	names, worst := store.HeuristicsFound(fs)
	ws := make([]int8, len(worst))
	for i, w := range worst {
		ws[i] = int8(w)
	}
	if names == nil {
		names = []string{}
	}
	return names, ws
}

// Analysis returns a job's stored analysis.
func (s *Store) Analysis(ctx context.Context, jobID string) (*store.Analysis, error) {
	st, err := s.prepared(ctx, `SELECT `+analysisSelect+` FROM analyses WHERE job_id = ?`)
	if err != nil {
		return nil, err
	}
	a, err := scanAnalysis(st.QueryRowContext(ctx, jobID))
	if isNoRows(err) {
		return nil, fmt.Errorf("analysis of job %s: %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the analysis of job %s: %w", jobID, err)
	}
	return a, nil
}

func scanAnalysis(sc interface{ Scan(...any) error }) (*store.Analysis, error) {
	a := &store.Analysis{}
	var start, last, evaluated, mark int64
	var worst int8
	var heuristics, hworst, fh, fs, fb, fr []any
	var report string
	err := sc.Scan(&a.JobID, &a.Name, &a.User, &a.Queue, &start, &last, &a.Ended, &evaluated, &a.Version,
		&a.Settings, &mark, &worst, &heuristics, &hworst, &fh, &fs, &fb, &report, &fr)
	if err != nil {
		return nil, err
	}
	a.Mark = uint64(mark)
	a.Start, a.LastSeen, a.Evaluated, a.Worst = store.Time(start), store.Time(last), store.Time(evaluated), store.Severity(worst)
	if len(fh) != len(fs) || len(fh) != len(fb) || len(fh) != len(fr) {
		return nil, fmt.Errorf("analysis of job %s: %d heuristics, %d severities, %d restrictions, %d findings", a.JobID,
			len(fh), len(fs), len(fr), len(fb))
	}
	for i := range fh {
		h, _ := fh[i].(string)
		sev, _ := fs[i].(int8)
		body, _ := fb[i].(string)
		restricted, _ := fr[i].(bool)
		a.Findings = append(a.Findings, store.StoredFinding{Heuristic: h, Severity: store.Severity(sev), Body: json.RawMessage(body),
			Restricted: restricted})
	}
	if report != "" {
		a.Report = json.RawMessage(report)
	}
	return a, nil
}

// AnalysisStates returns the jobs written since `since` (stored_ms) with
// the stamps of their analyses made since then. Neither table is read
// whole: rows are appended as jobs come and as they are first analysed,
// and updated while they run, so the zone maps of stored_ms and
// evaluated_ms leave out the row groups of the jobs of long ago.
func (s *Store) AnalysisStates(ctx context.Context, since int64, limit int) ([]store.AnalysisState, error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT `+jobCols+`, coalesce(by_type, ''), stored_ms, a.job_id IS NOT NULL,
		coalesce(a.evaluated_ms, 0), coalesce(a.version, ''), coalesce(a.settings, ''), coalesce(a.mark, 0),
		coalesce(a.ended, false), coalesce(a.seen_ms, 0)
		FROM (SELECT * FROM jobs WHERE attempts > 0 AND stored_ms >= ?) LEFT JOIN
			(SELECT job_id, evaluated_ms, version, settings, mark, ended, last_ms AS seen_ms FROM analyses WHERE evaluated_ms >= ?) a
			USING (job_id)
		ORDER BY stored_ms DESC, job_id LIMIT ?`, since, since, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list the jobs to analyse: %w", err)
	}
	defer rows.Close()
	var out []store.AnalysisState
	for rows.Next() {
		var byType string
		var has bool
		var st store.AnalysisStamp
		var evaluated, mark, seen, changed int64
		j, err := s.scanJob(rows, &byType, &changed, &has, &evaluated, &st.Version, &st.Settings, &mark, &st.Ended, &seen)
		if err != nil {
			return nil, fmt.Errorf("cannot list the jobs to analyse: %w", err)
		}
		if byType != "" {
			j.ByType = store.ParseByType(byType)
		}
		as := store.AnalysisState{Job: j, Changed: store.Time(changed)}
		if has {
			st.Evaluated, st.Mark, st.LastSeen = store.Time(evaluated), uint64(mark), store.Time(seen)
			as.Stored = &st
		}
		out = append(out, as)
	}
	return out, rows.Err()
}

// Findings lists stored findings across jobs.
func (s *Store) Findings(ctx context.Context, f store.FindingFilter) (store.FindingPage, error) {
	f.Limit = min(max(f.Limit, 0), 1000)
	if f.Limit == 0 {
		f.Limit = 100
	}
	// The conditions on a job's row (where) and on its findings (inner),
	// their arguments in that order.
	var where, inner []string
	var args, innerArgs []any
	if f.User != "" {
		where, args = append(where, "user_name = ?"), append(args, f.User)
	}
	if f.Queue != "" {
		where, args = append(where, "queue = ?"), append(args, f.Queue)
	}
	if f.Visible != nil {
		c, a := visibleSQL(f.Visible)
		where, args = append(where, c), append(args, a...)
	}
	if f.From > 0 {
		where, args = append(where, "last_ms >= ?"), append(args, f.From)
	}
	if f.To > 0 {
		where, args = append(where, "start_ms < ?"), append(args, f.To)
	}
	worst, _, _ := worstCols(f.WithoutRestricted)
	if f.MinSeverity != nil {
		where, args = append(where, worst+" >= ?"), append(args, int8(*f.MinSeverity))
		inner, innerArgs = append(inner, "sev >= ?"), append(innerArgs, int8(*f.MinSeverity))
	}
	if f.Heuristic != "" {
		where, args = append(where, "list_contains(f_heuristic, ?)"), append(args, f.Heuristic)
		inner, innerArgs = append(inner, "heuristic = ?"), append(innerArgs, f.Heuristic)
	}
	if f.WithoutRestricted {
		inner = append(inner, "NOT restricted")
	}
	args = append(args, innerArgs...)
	q := `SELECT job_id, job_name, user_name, queue, start_ms, ended, evaluated_ms, heuristic, sev, body, count(*) OVER ()
		FROM (SELECT job_id, job_name, user_name, queue, start_ms, ended, evaluated_ms, unnest(f_heuristic) AS heuristic,
			unnest(f_severity) AS sev, unnest(f_body) AS body, unnest(range(len(f_body))) AS idx,
			unnest(coalesce(f_restricted, list_transform(f_body, x -> false))) AS restricted
			FROM analyses` + and(" WHERE ", where) + `)` + and(" WHERE ", inner) +
		` ORDER BY start_ms DESC, job_id DESC, idx LIMIT ? OFFSET ?`
	rows, err := s.handle().QueryContext(ctx, q, append(args, f.Limit, f.Offset)...)
	if err != nil {
		return store.FindingPage{}, fmt.Errorf("cannot list findings: %w", err)
	}
	defer rows.Close()
	page := store.FindingPage{Findings: []store.FindingRow{}}
	for rows.Next() {
		var r store.FindingRow
		var start, evaluated int64
		var sev int8
		var body string
		if err := rows.Scan(&r.JobID, &r.Name, &r.User, &r.Queue, &start, &r.Ended, &evaluated, &r.Finding.Heuristic, &sev,
			&body, &page.Total); err != nil {
			return page, fmt.Errorf("cannot list findings: %w", err)
		}
		r.Start, r.Evaluated, r.Finding.Severity, r.Finding.Body = store.Time(start), store.Time(evaluated),
			store.Severity(sev), json.RawMessage(body)
		page.Findings = append(page.Findings, r)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("cannot list findings: %w", err)
	}
	if len(page.Findings) == 0 && f.Offset > 0 {
		// Past the end: still say how many match.
		err := s.handle().QueryRowContext(ctx, `SELECT count(*) FROM (SELECT unnest(f_heuristic) AS heuristic,
			unnest(f_severity) AS sev, unnest(coalesce(f_restricted, list_transform(f_body, x -> false))) AS restricted
			FROM analyses`+and(" WHERE ", where)+`)`+and(" WHERE ", inner), args...).Scan(&page.Total)
		if err != nil {
			return page, fmt.Errorf("cannot count findings: %w", err)
		}
	}
	return page, nil
}

// and joins conditions with AND after prefix ("" for none).
func and(prefix string, conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return prefix + strings.Join(conds, " AND ")
}

// visibleSQL is the condition of store.Visible on a table's user_name and
// queue: user_name IN (...) OR queue IN (...), an empty list matching
// nothing. (Not a parameter of NULL: duckdb-go fails to bind one whose
// type DuckDB left unknown.)
func visibleSQL(v *store.Visible) (string, []any) {
	var args []any
	in := func(col string, vals []string) string {
		if len(vals) == 0 {
			return "FALSE"
		}
		for _, x := range vals {
			args = append(args, x)
		}
		return col + " IN (?" + strings.Repeat(", ?", len(vals)-1) + ")"
	}
	cond := "(" + in("user_name", v.Users) + " OR " + in("queue", v.Queues) + ")"
	return cond, args
}

// jobsAnalysis is what Jobs adds for the analysis filters of f: the join
// of each job's analysis (a.sev its severity as f takes it: the worst of
// the job's findings, or of those of f.Heuristic), with the arguments
// that come before the others; the conditions (MinSeverity is left to
// the caller, which counts without it) and the order.
func jobsAnalysis(f store.JobFilter) (join string, joinArgs []any, where []string, order string) {
	worst, heuristics, heuristicWorst := worstCols(f.WithoutRestricted)
	sev := worst
	if f.Heuristic != "" {
		sev = "CASE WHEN coalesce(list_position(" + heuristics + ", ?), 0) > 0 THEN " + heuristicWorst +
			"[list_position(" + heuristics + ", ?)] END"
		joinArgs = []any{f.Heuristic, f.Heuristic}
		where = append(where, "a.sev IS NOT NULL")
	}
	join = ` LEFT JOIN (SELECT job_id, ` + worst + ` AS worst, ` + heuristics + ` AS heuristics, ` + sev +
		` AS sev FROM analyses) a USING (job_id)`
	order = "first_ms DESC NULLS LAST, job_id DESC"
	if f.BySeverity {
		order = "a.sev DESC NULLS LAST, " + order
	}
	return join, joinArgs, where, order
}

// scanWorst reads the analysis columns Jobs adds (a.worst, a.heuristics)
// into j.
func scanWorst(j *store.Job, worst sql.NullInt16, heuristics []any) {
	if !worst.Valid {
		return
	}
	w := store.Severity(worst.Int16)
	j.WorstSeverity = &w
	for _, h := range heuristics {
		if s, ok := h.(string); ok {
			j.Heuristics = append(j.Heuristics, s)
		}
	}
}

// countSeverities counts the jobs of the condition cond (FROM ... WHERE
// ..., with a.sev) by a.sev.
func (s *Store) countSeverities(ctx context.Context, cond string, args []any) (store.SeverityCounts, error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT a.sev, count(*)`+cond+` GROUP BY a.sev`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot count jobs by severity: %w", err)
	}
	defer rows.Close()
	c := store.NewSeverityCounts()
	for rows.Next() {
		var sev sql.NullInt16
		var n int
		if err := rows.Scan(&sev, &n); err != nil {
			return nil, fmt.Errorf("cannot count jobs by severity: %w", err)
		}
		if sev.Valid {
			v := store.Severity(sev.Int16)
			c.Add(&v, n)
		} else {
			c.Add(nil, n)
		}
	}
	return c, rows.Err()
}
