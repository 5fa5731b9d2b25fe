package duckdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	duck "github.com/duckdb/duckdb-go/v2"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// proc_log rows (schema.go): what a commit stores of an attempt's
// processes.

type rowKey struct {
	att  string
	proc uint64
}

// procRow is one attempt's and process's row of this commit: the latest
// process record, and the memberships merged.
type procRow struct {
	att    string // "" : no attempt known
	key    uint64
	host   string
	proc   *wire.Process
	cmd    bool // the row logs proc's command line
	member bool
	m      wire.Membership
}

// row returns this commit's row of an attempt and process.
func (k *sink) row(att string, key uint64) *procRow {
	rk := rowKey{att, key}
	if r := k.rowIdx[rk]; r != nil {
		return r
	}
	if k.rowIdx == nil {
		k.rowIdx = map[rowKey]*procRow{}
	}
	r := &procRow{att: att, key: key}
	k.rowIdx[rk] = r
	k.procRows = append(k.procRows, r)
	return r
}

// process takes a process record (a later one in the commit replaces an
// earlier one, but a command line logged stays logged, and an end stays).
func (r *procRow) process(p *wire.Process, host string, logCmd bool) {
	if r.proc != nil && r.proc.EndMs != 0 && p.EndMs == 0 {
		cp := *p
		cp.EndMs = r.proc.EndMs
		p = &cp
	}
	r.proc, r.host = p, host
	r.cmd = r.cmd || logCmd
}

// addMember merges a membership record: the earliest start, the latest end.
func (r *procRow) addMember(m *wire.Membership) {
	if !r.member {
		r.member, r.m = true, *m
		return
	}
	if m.FromMs != 0 && (r.m.FromMs == 0 || m.FromMs < r.m.FromMs) {
		r.m.FromMs = m.FromMs
	}
	r.m.ToMs = max(r.m.ToMs, m.ToMs)
	r.m.CPUBaseMs = min(r.m.CPUBaseMs, m.CPUBaseMs)
	if m.Role != "" {
		r.m.Role = m.Role
	}
}

// writeProcRows appends the commit's proc_log rows, and the command line
// templates they use that cmd_templates does not hold yet.
func (t *tx) writeProcRows(conn driver.Conn) error {
	procRows := t.rows.procRows
	if len(procRows) == 0 {
		return nil
	}
	// An attempt's rows side by side: attempt_key compresses to runs.
	slices.SortStableFunc(procRows, func(a, b *procRow) int { return strings.Compare(a.att, b.att) })
	type cmdVals struct{ text, tmpl, args driver.Value }
	vals := make([]cmdVals, len(procRows))
	var newTmpls []*cmdShape
	seen := map[uint64]*cmdShape{}
	var buf []byte
	for i, r := range procRows {
		if r.proc == nil || !r.cmd {
			continue
		}
		c := r.proc.Cmdline
		if len(c) < minTemplated {
			vals[i].text = c
			continue
		}
		sh := shapeOf(c)
		tmpl := seen[sh.key]
		if tmpl == nil {
			var err error
			if tmpl, err = t.s.tmpls.byShape(t.ctx, t.s.handle(), sh.key); err != nil {
				return err
			}
		}
		if tmpl == nil {
			// A new template: this command line.
			tmpl = &sh
			tmpl.id = t.s.tmpls.next() + int32(len(newTmpls))
			newTmpls = append(newTmpls, tmpl)
		}
		seen[sh.key] = tmpl
		if !sameShape(tmpl, &sh) {
			vals[i].text = c // two shapes of one hash
			continue
		}
		buf = encodeArgs(buf[:0], tmpl, &sh)
		vals[i].tmpl, vals[i].args = tmpl.id, append([]byte{}, buf...)
	}
	err := t.appendRows(conn, "cmd_templates", len(newTmpls), func(i int, a *duck.Appender) error {
		return a.AppendRow(newTmpls[i].id, keyValue(newTmpls[i].key), newTmpls[i].text)
	})
	if err != nil {
		return err
	}
	t.newTmpls = newTmpls
	return t.appendRows(conn, "proc_log", len(procRows), func(i int, a *duck.Appender) error {
		r := procRows[i]
		var attKey driver.Value = int64(0)
		if r.att != "" {
			attKey = keyValue(store.AttemptKey(r.att))
		}
		row := []driver.Value{t.gen, attKey, keyValue(r.key), r.member}
		if p := r.proc; p != nil {
			row = append(row, r.host, p.PID, p.PPID, p.SID, nullMs(p.StartMs), nullMs(p.EndMs), vals[i].tmpl, vals[i].args,
				vals[i].text, p.Comm, nullStr(p.Role), p.UID, nullStr(p.User))
		} else {
			row = append(row, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
		}
		if r.member {
			m := &r.m
			row = append(row, nullMs(m.FromMs), nullMs(m.ToMs), m.CPUBaseMs, nullStr(m.Role))
		} else {
			row = append(row, nil, nil, nil, nil)
		}
		return a.AppendRow(row...)
	})
}

// attemptRange is where an attempt's rows are: the commits of its row in
// attempts, and those after the last summary write (which its row does not
// count yet). ErrNotFound if the attempt is not known.
type attemptRange struct {
	key           int64
	lo, hi, after uint64
}

func (s *Store) attemptRange(ctx context.Context, id string) (attemptRange, error) {
	r := attemptRange{key: keyValue(store.AttemptKey(id))}
	var flushed string
	err := s.queryRow(ctx, `SELECT coalesce(gen_first, 0), coalesce(gen_last, 0),
		(SELECT value FROM meta WHERE key = 'flushed_gen') FROM attempts WHERE attempt_id = ?`, id).Scan(&r.lo, &r.hi, &flushed)
	if isNoRows(err) {
		return r, store.ErrNotFound
	}
	if err != nil {
		return r, err
	}
	f, _ := strconv.ParseUint(flushed, 10, 64)
	r.after = max(r.hi, f)
	return r, nil
}

// where selects the attempt's rows (with the arguments it takes, twice:
// the commits its row counts, and those after).
func (r attemptRange) where(extra string) string {
	return `SELECT ` + procLogCols + ` FROM proc_log WHERE attempt_key = ? AND gen BETWEEN ?::UBIGINT AND ?::UBIGINT` + extra +
		` UNION ALL SELECT ` + procLogCols + ` FROM proc_log WHERE attempt_key = ? AND gen > ?::UBIGINT` + extra
}

func (r attemptRange) args(extra ...any) []any {
	out := append([]any{r.key, r.lo, r.hi}, extra...)
	return append(append(out, r.key, r.after), extra...)
}

const procLogCols = `gen, proc_key, member, host, pid, ppid, sid, start_ms, end_ms, cmd_tmpl, cmd_args, cmdline, comm,
	role, uid, user_name, from_ms, to_ms, cpu_base_ms, member_role`

// procView merges the rows of one process (store.ProcessView), with the
// command line of the latest row that logged one, still encoded.
type procView struct {
	store.ProcessView
	cmd cmdline
}

// add merges a row of proc_log (procLogCols): a description where pid is
// set, a membership where member is.
func (v *procView) add(r *procLogRow) {
	if r.pid.Valid {
		v.Describe(r.gen, r.host.String, &wire.Process{PID: r.pid.Int32, PPID: r.ppid.Int32, SID: r.sid.Int32,
			StartMs: r.start.Int64, EndMs: r.end.Int64, Comm: r.comm.String, Role: r.role.String, UID: uint32(r.uid.Int64),
			User: r.user.String})
	}
	if (r.cmd.text.Valid || r.cmd.tmpl.Valid) && v.LatestCmd(r.gen) {
		v.cmd = r.cmd
	}
	if r.member.Valid && r.member.Bool {
		v.Join(r.gen, &wire.Membership{FromMs: r.from.Int64, ToMs: r.to.Int64, CPUBaseMs: r.base.Int64, Role: r.mrole.String})
	}
}

// readProcViews reads proc_log rows (procLogCols) into views by process,
// in the order processes first appear.
func readProcViews(rows *sql.Rows, views map[uint64]*procView, order *[]uint64) error {
	defer rows.Close()
	for rows.Next() {
		var r procLogRow
		if err := rows.Scan(r.dest()...); err != nil {
			return err
		}
		r.addTo(views, order)
	}
	return rows.Err()
}

// procLogRow is a row of proc_log as procLogCols reads it (and, for reads of
// many attempts, its attempt_key first).
type procLogRow struct {
	attKey                    int64
	gen                       uint64
	key                       int64
	member                    sql.NullBool
	host, comm, role, user    sql.NullString
	mrole                     sql.NullString
	pid, ppid, sid            sql.NullInt32
	start, end, uid, from, to sql.NullInt64
	base                      sql.NullInt64
	cmd                       cmdline
}

func (r *procLogRow) dest() []any {
	return []any{&r.gen, &r.key, &r.member, &r.host, &r.pid, &r.ppid, &r.sid, &r.start, &r.end, &r.cmd.tmpl, &r.cmd.args,
		&r.cmd.text, &r.comm, &r.role, &r.uid, &r.user, &r.from, &r.to, &r.base, &r.mrole}
}

func (r *procLogRow) addTo(views map[uint64]*procView, order *[]uint64) {
	v := views[uint64(r.key)]
	if v == nil {
		v = &procView{}
		views[uint64(r.key)] = v
		*order = append(*order, uint64(r.key))
	}
	v.add(r)
}

// processesQuery is the statement (and its arguments) that reads the
// rows of attempts keys from proc_log: those of the commits [lo, hi] and
// after after (the union of the attempts' ranges). The commits are
// UBIGINT arguments, as gen is: compared with a BIGINT, DuckDB casts the
// column to HUGEINT, which its zone maps cannot prune by, and scans the
// whole log (TestGenRangesPruned).
func processesQuery(lo, hi, after uint64, keys []any) (string, []any) {
	in := ` AND attempt_key IN (` + placeholders(len(keys)) + `)`
	q := `SELECT attempt_key, ` + procLogCols + ` FROM proc_log WHERE gen BETWEEN ?::UBIGINT AND ?::UBIGINT` + in +
		` UNION ALL SELECT attempt_key, ` + procLogCols + ` FROM proc_log WHERE gen > ?::UBIGINT AND gen NOT BETWEEN ?::UBIGINT AND ?::UBIGINT` + in +
		` ORDER BY gen`
	args := append(append([]any{lo, hi}, keys...), after, lo, hi)
	return q, append(args, keys...)
}

// attemptsProcesses lists the processes of attempts ids (those of their
// memberships), with their latest descriptions, read in one scan of
// proc_log over the union of their ranges of commits: the rows of each
// attempt are those attemptRange selects. A member whose records are not
// among the attempt's rows (a record logged before the store knew the
// process's attempt, as after a restart) is looked for in the whole log.
// Attempts not known are absent.
func (s *Store) attemptsProcesses(ctx context.Context, ids []string) (map[string][]store.Process, error) {
	out := map[string][]store.Process{}
	if len(ids) == 0 {
		return out, nil
	}
	// The last summary write read with the ranges, as attemptRange does.
	rows, err := s.handle().QueryContext(ctx, `SELECT attempt_id, coalesce(gen_first, 0), coalesce(gen_last, 0),
		(SELECT value FROM meta WHERE key = 'flushed_gen') FROM attempts WHERE attempt_id IN (`+placeholders(len(ids))+`)`,
		idArgs(ids)...)
	if err != nil {
		return nil, err
	}
	type att struct {
		id    string
		r     attemptRange
		views map[uint64]*procView
		order []uint64
	}
	byKey := map[int64]*att{}
	var keys []any
	// The union of the attempts' ranges, as attemptRange.where selects
	// them: [lo, hi] and after.
	lo, hi, after := uint64(1<<63-1), uint64(0), uint64(1<<63-1)
	for rows.Next() {
		var a att
		var flushed string
		if err := rows.Scan(&a.id, &a.r.lo, &a.r.hi, &flushed); err != nil {
			rows.Close()
			return nil, err
		}
		f, _ := strconv.ParseUint(flushed, 10, 64)
		a.r.key = keyValue(store.AttemptKey(a.id))
		a.r.after = max(a.r.hi, f)
		a.views = map[uint64]*procView{}
		byKey[a.r.key] = &a
		keys = append(keys, a.r.key)
		lo, hi, after = min(lo, a.r.lo), max(hi, a.r.hi), min(after, a.r.after)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return out, nil
	}
	q, qargs := processesQuery(lo, hi, after, keys)
	rows, err = s.handle().QueryContext(ctx, q, qargs...)
	if err != nil {
		return nil, fmt.Errorf("cannot list processes: %w", err)
	}
	for rows.Next() {
		var r procLogRow
		if err := rows.Scan(append([]any{&r.attKey}, r.dest()...)...); err != nil {
			rows.Close()
			return nil, err
		}
		a := byKey[r.attKey]
		if a == nil || !(r.gen >= a.r.lo && r.gen <= a.r.hi || r.gen > a.r.after) {
			continue // not a row attemptRange selects
		}
		r.addTo(a.views, &a.order)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, a := range byKey {
		l, err := s.processesOf(ctx, a.views, a.order)
		if err != nil {
			return nil, err
		}
		out[a.id] = l
	}
	return out, nil
}

// processesOf turns the views of an attempt's rows into its processes: its
// members, described (from the whole log for those its rows do not
// describe), ordered by start and pid.
func (s *Store) processesOf(ctx context.Context, views map[uint64]*procView, order []uint64) ([]store.Process, error) {
	var missing []any
	for _, k := range order {
		if v := views[k]; v.Member() && !v.Described() {
			missing = append(missing, keyValue(k))
		}
	}
	if len(missing) > 0 {
		rows, err := s.handle().QueryContext(ctx, `SELECT `+procLogCols+` FROM proc_log WHERE pid IS NOT NULL
			AND proc_key IN (`+placeholders(len(missing))+`) ORDER BY gen`, missing...)
		if err != nil {
			return nil, err
		}
		others := map[uint64]*procView{}
		var o []uint64
		if err := readProcViews(rows, others, &o); err != nil {
			return nil, err
		}
		for k, ov := range others {
			v := views[k]
			if v.DescribeFrom(&ov.ProcessView) {
				v.cmd = ov.cmd
			}
		}
	}
	out := []store.Process{}
	for _, k := range order {
		v := views[k]
		if !v.Member() || !v.Described() {
			continue
		}
		p := v.Process(store.Key(k))
		c, _, err := v.cmd.decode(ctx, s.handle(), s.tmpls)
		if err != nil {
			return nil, fmt.Errorf("process %s: %w", p.Key, err)
		}
		p.Cmdline = c
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].PID < out[j].PID
	})
	return out, nil
}

// attemptProcKeys lists the keys of the attempt's member processes.
func (s *Store) attemptProcKeys(ctx context.Context, r attemptRange) ([]any, error) {
	return column[int64](ctx, s.handle(), `SELECT DISTINCT proc_key FROM (`+r.where(" AND member")+`)`, r.args()...)
}

// describeMembers gives a process's description to the row of an attempt
// it joins without a record of it beside the membership (a reused JVM or
// container starting its next attempt): from another row of this commit,
// or from the rows of the other attempts the process is known in.
func (t *tx) describeMembers() error {
	described := map[uint64]*procRow{}
	for _, r := range t.rows.procRows {
		if r.proc != nil {
			described[r.key] = r
		}
	}
	need := map[uint64][]*procRow{}
	var keys []any
	lo, hi := uint64(1<<63), uint64(0)
	for _, r := range t.rows.procRows {
		if !r.member || r.proc != nil {
			continue
		}
		st := t.f.Attempt(r.att)
		if st == nil || st.CmdLogged(r.key) {
			continue // its command line was logged in this attempt's rows: it is described there
		}
		if d := described[r.key]; d != nil {
			t.describe(r, d.proc, d.host, st)
			continue
		}
		found := false
		for _, id := range t.f.LiveAttempts(r.key) {
			if o := t.f.Attempt(id); id != r.att && o != nil && o.GenFirst > 0 {
				lo, hi, found = min(lo, o.GenFirst), max(hi, o.GenLast), true
			}
		}
		if !found {
			continue
		}
		if need[r.key] == nil {
			keys = append(keys, keyValue(r.key))
		}
		need[r.key] = append(need[r.key], r)
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := t.s.handle().QueryContext(t.ctx, `SELECT `+procLogCols+` FROM proc_log WHERE gen BETWEEN ?::UBIGINT AND ?::UBIGINT
		AND pid IS NOT NULL AND proc_key IN (`+placeholders(len(keys))+`) ORDER BY gen`, append([]any{lo, hi}, keys...)...)
	if err != nil {
		return fmt.Errorf("cannot read process descriptions: %w", err)
	}
	views := map[uint64]*procView{}
	var order []uint64
	if err := readProcViews(rows, views, &order); err != nil {
		return fmt.Errorf("cannot read process descriptions: %w", err)
	}
	for _, k := range order {
		v := views[k]
		c, ok, err := v.cmd.decode(t.ctx, t.s.handle(), t.s.tmpls)
		if err != nil || !ok {
			continue
		}
		p, host := v.Description()
		p.Key, p.Cmdline = k, c
		for _, r := range need[k] {
			t.describe(r, &p, host, t.f.Attempt(r.att))
		}
	}
	return nil
}

// describe puts a process record in r, an attempt's row of a member that
// was not described in its rows.
func (t *tx) describe(r *procRow, p *wire.Process, host string, st *attState) {
	r.process(p, host, true)
	st.TakeCmd(r.key, p.Cmdline)
}
