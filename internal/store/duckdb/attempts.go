package duckdb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// The tables of attempts, derived from the fields package store declares
// (store.AttemptFields): attempts holds each attempt's row, its columns
// the fields' and the store's own (attemptOwn); attempt_log each
// description an agent sent, the description fields' with the commit that
// stored it and the host of its agent (logOwn). Their DDL, what a commit
// appends, what reads select and scan, and what an open adds to a table of
// an older schema all come from the fields.

// The store's own columns of attempts: the attempt's key (of its series
// and process rows), and the first and the last commit that stored
// anything of it (store.AttemptRecord's GenFirst, GenLast).
var attemptOwn = []ownColumn{{"attempt_key", "BIGINT"}, {"gen_first", "UBIGINT"}, {"gen_last", "UBIGINT"}}

// The store's own columns of attempt_log.
var logOwn = []ownColumn{{"gen", "UBIGINT"}, {"host", "VARCHAR"}}

type ownColumn struct{ name, typ string }

// duckTypes are the column types of the fields' kinds.
var duckTypes = [...]string{store.FieldString: "VARCHAR", store.FieldInt64: "BIGINT", store.FieldInt32: "INTEGER",
	store.FieldUInt32: "UINTEGER", store.FieldBool: "BOOLEAN", store.FieldFloat64: "DOUBLE"}

// zeroSQL is the zero of a kind, as SQL (what a NULL reads back as).
func zeroSQL(k store.FieldKind) string {
	switch k {
	case store.FieldString:
		return "''"
	case store.FieldBool:
		return "false"
	}
	return "0"
}

// isLogged reports whether a field is a column of attempt_log.
func isLogged(f *store.AttemptField) bool { return f.Desc }

// attemptsDDL and attemptLogDDL make the tables.
func attemptsDDL() string {
	var cols []string
	for i := range store.AttemptFields {
		f := &store.AttemptFields[i]
		c := f.Name + " " + duckTypes[f.Kind]
		switch {
		case f.Key:
			c += " PRIMARY KEY"
		case f.Required:
			c += " NOT NULL"
		}
		cols = append(cols, c)
	}
	for _, o := range attemptOwn {
		cols = append(cols, o.name+" "+o.typ)
	}
	return `CREATE TABLE IF NOT EXISTS attempts (` + strings.Join(cols, ", ") + `)`
}

func attemptLogDDL() string {
	var cols []string
	for _, o := range logOwn {
		cols = append(cols, o.name+" "+o.typ)
	}
	for i := range store.AttemptFields {
		if f := &store.AttemptFields[i]; isLogged(f) {
			cols = append(cols, f.Name+" "+duckTypes[f.Kind])
		}
	}
	return `CREATE TABLE IF NOT EXISTS attempt_log (` + strings.Join(cols, ", ") + `)`
}

// wantColumns are the columns (name and type) a table of attempts must
// have: those the fields declare, and the store's own.
func wantColumns(table string) map[string]string {
	out := map[string]string{}
	own := attemptOwn
	if table == "attempt_log" {
		own = logOwn
	}
	for _, o := range own {
		out[o.name] = o.typ
	}
	for i := range store.AttemptFields {
		if f := &store.AttemptFields[i]; table == "attempts" || isLogged(f) {
			out[f.Name] = duckTypes[f.Kind]
		}
	}
	return out
}

// liveColumns are the columns of a table as the database has them, in
// their order: names and types.
func (s *Store) liveColumns(ctx context.Context, table string) (names, types []string, err error) {
	rows, err := s.handle().QueryContext(ctx, `SELECT column_name, data_type FROM duckdb_columns()
		WHERE table_name = ? AND database_name = current_database() AND NOT internal ORDER BY column_index`, table)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot list the columns of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, t string
		if err := rows.Scan(&n, &t); err != nil {
			return nil, nil, fmt.Errorf("cannot list the columns of %s: %w", table, err)
		}
		names, types = append(names, n), append(types, t)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("cannot list the columns of %s: %w", table, err)
	}
	return names, types, nil
}

// migrateColumns gives the tables of attempts the columns the fields
// declare that they lack (ADD COLUMN: NULL in the rows there, read as
// zero), and the type the fields declare to a column of another.
func (s *Store) migrateColumns(ctx context.Context) error {
	for _, table := range []string{"attempts", "attempt_log"} {
		names, types, err := s.liveColumns(ctx, table)
		if err != nil {
			return err
		}
		have := map[string]string{}
		for i, n := range names {
			have[n] = types[i]
		}
		want := wantColumns(table)
		var qs []string
		for _, n := range columnOrder(table) {
			switch t, ok := have[n]; {
			case !ok:
				qs = append(qs, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", table, n, want[n]))
			case t != want[n]:
				qs = append(qs, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", table, n, want[n]))
			}
		}
		for _, q := range qs {
			if _, err := s.handle().ExecContext(ctx, q); err != nil {
				return fmt.Errorf("cannot migrate %s (%s): %w", table, q, err)
			}
		}
	}
	return nil
}

// columnOrder is the columns of a table of attempts in the order its DDL
// makes them.
func columnOrder(table string) []string {
	var out []string
	if table == "attempt_log" {
		for _, o := range logOwn {
			out = append(out, o.name)
		}
	}
	for i := range store.AttemptFields {
		if f := &store.AttemptFields[i]; table == "attempts" || isLogged(f) {
			out = append(out, f.Name)
		}
	}
	if table == "attempts" {
		for _, o := range attemptOwn {
			out = append(out, o.name)
		}
	}
	return out
}

// attemptLayout is where each column of the tables of attempts is, as
// the database has them (read at open: a table of an older schema has its
// added columns last), for the appenders and the upsert.
type attemptLayout struct {
	attempts, log []*colSource
	upsert        string // the upsert of attempts from stage_attempts
}

// colSource is what a column holds: a field's value, or the store's own
// (by name; nil field and "" own: a column the store does not know, of a
// newer schema: NULL in the rows it appends).
type colSource struct {
	field *store.AttemptField
	own   string
}

func (s *Store) readLayout(ctx context.Context) error {
	var l attemptLayout
	for _, t := range []struct {
		name string
		dst  *[]*colSource
	}{{"attempts", &l.attempts}, {"attempt_log", &l.log}} {
		names, _, err := s.liveColumns(ctx, t.name)
		if err != nil {
			return err
		}
		for _, n := range names {
			c := &colSource{field: store.AttemptFieldOf(n)}
			if c.field == nil {
				c.own = n
			}
			*t.dst = append(*t.dst, c)
		}
	}
	// The upsert sets every column the store knows but the keys and what
	// never changes once written (an attempt's job): DuckDB turns an
	// update of an indexed column into a delete and an insert.
	var set []string
	for _, c := range l.attempts {
		if f := c.field; f != nil && !f.Key && f.Merge != store.MergeFirst || c.own == "attempt_key" ||
			c.own == "gen_first" || c.own == "gen_last" {
			n := c.own
			if f != nil {
				n = f.Name
			}
			set = append(set, n+" = excluded."+n)
		}
	}
	l.upsert = "INSERT INTO attempts SELECT s.* FROM stage_attempts s LEFT JOIN attempts t USING (attempt_id) " +
		"ORDER BY t.rowid NULLS LAST ON CONFLICT (attempt_id) DO UPDATE SET " + strings.Join(set, ", ")
	s.layout = l
	return nil
}

// fieldValue is a field's value in r as appended (NULL where it says
// nothing: store.AttemptField.Null).
func fieldValue(f *store.AttemptField, r *store.AttemptRow) driver.Value {
	if f.Null(r) {
		return nil
	}
	return f.Value(r)
}

// attemptValues are an attempt's values of the columns of attempts.
func (s *Store) attemptValues(st *attState) []driver.Value {
	out := make([]driver.Value, len(s.layout.attempts))
	for i, c := range s.layout.attempts {
		switch {
		case c.field != nil:
			out[i] = fieldValue(c.field, &st.AttemptRow)
		case c.own == "attempt_key":
			out[i] = keyValue(store.AttemptKey(st.Meta.AttemptID))
		case c.own == "gen_first":
			out[i] = st.GenFirst
		case c.own == "gen_last":
			out[i] = st.GenLast
		}
	}
	return out
}

// logValues are the values of the columns of attempt_log of a
// description (r's Meta) an agent of host sent, stored by commit gen.
func (s *Store) logValues(gen uint64, host string, r *store.AttemptRow) []driver.Value {
	out := make([]driver.Value, len(s.layout.log))
	for i, c := range s.layout.log {
		switch {
		case c.field != nil:
			out[i] = fieldValue(c.field, r)
		case c.own == "gen":
			out[i] = gen
		case c.own == "host":
			out[i] = nullStr(host)
		}
	}
	return out
}

// fieldsSQL selects the fields of which (each read back as its zero where
// NULL), in the order of store.AttemptFields; derived fields are not read.
func fieldsSQL(which func(f *store.AttemptField) bool) string {
	var cols []string
	for i := range store.AttemptFields {
		if f := &store.AttemptFields[i]; !f.Derived && which(f) {
			cols = append(cols, "coalesce("+f.Name+", "+zeroSQL(f.Kind)+")")
		}
	}
	return strings.Join(cols, ", ")
}

// fieldDests are the destinations in r of what fieldsSQL selects.
func fieldDests(r *store.AttemptRow, which func(f *store.AttemptField) bool) []any {
	var out []any
	for i := range store.AttemptFields {
		if f := &store.AttemptFields[i]; !f.Derived && which(f) {
			out = append(out, f.Ref(r))
		}
	}
	return out
}

func allFields(*store.AttemptField) bool { return true }

// attemptCols selects an attempt's row (scanAttemptRow reads it).
var attemptCols = fieldsSQL(allFields)

// logCols selects a description of attempt_log (scanLogged reads it).
var logCols = fieldsSQL(isLogged)

// scanAttemptRow reads a row of attemptCols into r, and extra columns
// after them.
func scanAttemptRow(sc interface{ Scan(...any) error }, r *store.AttemptRow, extra ...any) error {
	return sc.Scan(append(fieldDests(r, allFields), extra...)...)
}

// before11 brings the tables of attempts of a data directory of schema 10
// or older (its attempts kept their span, not their description's and
// summary's times, and their summary's last time as sample_ms) to the
// fields' names; migrateColumns then adds what they lack. An attempt of
// those keeps reading as it did: its description's and summary's first
// and last times are its span's.
var before11 = []string{
	`ALTER TABLE attempts RENAME COLUMN sample_ms TO sum_last_ms`,
	`ALTER TABLE attempts ADD COLUMN meta_first_ms BIGINT`,
	`ALTER TABLE attempts ADD COLUMN meta_last_ms BIGINT`,
	`ALTER TABLE attempts ADD COLUMN sum_first_ms BIGINT`,
	`ALTER TABLE attempts ADD COLUMN first_rss BIGINT`,
	`UPDATE attempts SET meta_first_ms = first_ms, meta_last_ms = last_ms, sum_first_ms = first_ms`,
	`ALTER TABLE attempt_log RENAME COLUMN first_ms TO meta_first_ms`,
	`ALTER TABLE attempt_log RENAME COLUMN last_ms TO meta_last_ms`,
}
