package duckdb

import (
	"context"
	"database/sql"
	"sync"
)

// stmts are the reads the API makes over and over (a page's detail and
// series at every live update), each prepared on a database handle once
// rather than at each call: DuckDB parses and plans a query when it is
// prepared, which costs a wide one (the attempts' 33 columns) more than
// running it. (database/sql prepares a statement again on each pooled
// connection it runs on; the pool keeps maxIdleConns.) Only queries whose
// text is fixed go through them; those with a list of keys of any length
// are prepared at each call.
type stmts struct {
	mu sync.Mutex
	db *sql.DB // the handle they were prepared on
	m  map[string]*sql.Stmt
}

// maxIdleConns is how many of the database's connections its pool keeps
// open between queries (database/sql keeps 2 by default): the API's
// readers, ingest's reads and maintenance run side by side, and a
// connection closed takes its prepared statements with it.
const maxIdleConns = 16

// prepared returns the statement of q on the current handle, preparing it
// the first time (not under the lock: a slow prepare holds up no other
// reader).
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	c := &s.stmts
	c.mu.Lock()
	db := s.handle()
	c.resetLocked(db)
	st := c.m[q]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db != db {
		// Reopened meanwhile: this one is of the old handle.
		return st, nil
	}
	if had := c.m[q]; had != nil {
		st.Close()
		return had, nil
	}
	c.m[q] = st
	return st, nil
}

// resetLocked drops the statements of a handle other than db (the
// database was reopened: they went with the old handle).
func (c *stmts) resetLocked(db *sql.DB) {
	if c.db == db {
		return
	}
	for _, st := range c.m {
		st.Close()
	}
	c.db, c.m = db, map[string]*sql.Stmt{}
}

// adopt takes over o's statements, those of the handle a reopening adopts
// (o is the store it was opened as).
func (c *stmts) adopt(o *stmts) {
	o.mu.Lock()
	db, m := o.db, o.m
	o.db, o.m = nil, nil
	o.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked(db)
	for q, st := range m {
		c.m[q] = st
	}
}

// dropStmt drops the statement of q after a failure not of its context:
// it is prepared again at the next call.
func (s *Store) dropStmt(ctx context.Context, q string, st *sql.Stmt) {
	if ctx.Err() != nil {
		return
	}
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[q] == st {
		delete(c.m, q)
		st.Close()
	}
}

// query runs q, a query of fixed text, by its prepared statement.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		s.dropStmt(ctx, q, st)
	}
	return rows, err
}

// queryRow is query for one row. A statement that cannot be prepared
// leaves the query to QueryRowContext, whose Row then says why.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := s.prepared(ctx, q)
	if err != nil {
		return s.handle().QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}
