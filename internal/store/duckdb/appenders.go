package duckdb

import (
	"database/sql/driver"
	"errors"
	"fmt"

	duck "github.com/duckdb/duckdb-go/v2"
)

// appenders are the writer's appenders, one a table, made on its
// connection (s.wconn) at the first commit that appends to the table and
// kept for the next ones: making one (DuckDB binds the table, the driver
// allocates a vector of 2,048 rows for each column) cost some 0.1-0.3 ms of
// CPU, and a commit appended to 5-8 tables (chunks, process rows,
// templates, events, the agents' sequences, the summaries' stage tables),
// so that a commit of a few batches paid about a millisecond for its
// appenders alone. An appender binds its table at each flush by name, in
// the transaction under way (a fresh table dropped and made again by a
// compaction is the new one); each commit flushes what it appended
// (flushed rows are the transaction's: a rollback drops them). Only the
// writer uses them, under wmu. They hold the connection's context, and
// with it the database open: they are closed before the connection
// (close).
type appenders struct {
	conn driver.Conn // the connection they were made on
	m    map[string]*duck.Appender
	made int // appenders made so far (tests)
}

// get returns the appender of table on conn, made the first time (or
// when conn is not the one the others were made on).
func (c *appenders) get(conn driver.Conn, table string) (*duck.Appender, error) {
	if c.conn != conn {
		c.close()
		c.conn = conn
	}
	if a := c.m[table]; a != nil {
		return a, nil
	}
	a, err := newAppender(conn, table)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*duck.Appender{}
	}
	c.m[table] = a
	c.made++
	return a, nil
}

// drop forgets table's appender after a row or a flush it refused: what
// it holds unflushed is cleared, and it is closed (made again at the next
// commit).
func (c *appenders) drop(table string) {
	a := c.m[table]
	if a == nil {
		return
	}
	delete(c.m, table)
	// (Its errors are the failure the caller returns: the appender, and
	// what it held, are gone either way.)
	a.Clear()
	a.Close()
}

// close closes every appender (before their connection closes, or when
// it changes). An appender holds nothing between commits: its errors
// here say only that the connection went first.
func (c *appenders) close() error {
	var errs []error
	for table, a := range c.m {
		if err := a.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cannot close the appender of %s: %w", table, err))
		}
	}
	c.m, c.conn = nil, nil
	return errors.Join(errs...)
}

// take takes over o's appenders (reopen: the store adopts the connection
// they were made on).
func (c *appenders) take(o *appenders) {
	c.close()
	c.conn, c.m = o.conn, o.m
	c.made += o.made
	*o = appenders{}
}

func newAppender(conn driver.Conn, table string) (*duck.Appender, error) {
	a, err := duck.NewAppenderFromConn(conn, "", table)
	if err != nil {
		return nil, fmt.Errorf("cannot append to %s: %w", table, err)
	}
	return a, nil
}

// appendRows appends n rows to table by the writer's appender of it, and
// flushes them into the transaction under way; none: nothing (no
// appender is made).
func (t *tx) appendRows(conn driver.Conn, table string, n int, row func(i int, a *duck.Appender) error) error {
	if n == 0 {
		return nil
	}
	c := &t.s.apps
	a, err := c.get(conn, table)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := row(i, a); err != nil {
			c.drop(table)
			return fmt.Errorf("cannot append to %s: %w", table, err)
		}
	}
	if err := a.Flush(); err != nil {
		c.drop(table)
		return fmt.Errorf("cannot append to %s: %w", table, err)
	}
	return nil
}
