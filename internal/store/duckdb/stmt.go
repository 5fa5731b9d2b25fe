package duckdb

import (
	"context"
	"database/sql"
	"sync"
)

// stmts are the reads the API makes over and over (a page's detail and
// series at every live update), each prepared once per database handle
// rather than at each call: DuckDB parses and plans a query when it is
// prepared, which costs a wide one (the attempts' 33 columns) more than
// running it. Only queries whose text is fixed go through them; those
// with a list of keys of any length are prepared at each call.
type stmts struct {
	mu sync.Mutex
	db *sql.DB // the handle they were prepared on
	m  map[string]*sql.Stmt
}

// prepared returns the statement of q on the current handle, preparing it
// the first time.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	db := s.handle()
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db != db {
		// A reopened database: the old statements went with its handle.
		c.db, c.m = db, map[string]*sql.Stmt{}
	}
	if st := c.m[q]; st != nil {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.m[q] = st
	return st, nil
}

// query runs q, a query of fixed text, by its prepared statement.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// queryRow is query for one row.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := s.prepared(ctx, q)
	if err != nil {
		// A Row that carries the error, as QueryRowContext's would.
		return s.handle().QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}
