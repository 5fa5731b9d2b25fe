package duckdb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

// TestAppendersKept: the writer makes one appender a table and keeps it
// from commit to commit (appenders), through a compaction (which drops
// the fresh table it appended to and makes it again) and the summaries'
// writes; what every commit appended is there, and the store closes and
// opens again in the same process (an appender left open would keep the
// database open, and the next Open would wait for it forever).
func TestAppendersKept(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, SummaryEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g := loadgen.NewGenerator(loadgen.Config{Nodes: 4, Slots: 4, BatchTicks: 5, Seed: 1, Start: time.Now().Add(-time.Hour)})
	commits := 0
	for round := range 12 {
		if round == 6 || round == 9 {
			if err := s.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range g.Next() {
			storetest.Commit(t, s, b)
			commits++
		}
	}
	s.wmu.Lock()
	kept := len(s.apps.m)
	s.wmu.Unlock()
	if kept < 5 || s.apps.made != kept {
		t.Errorf("%d appenders made in %d commits, %d kept: want one a table, kept (at least 5 tables)", s.apps.made, commits, kept)
	}
	var fresh int
	if err := s.handle().QueryRowContext(ctx, `SELECT count(*) FROM series_fresh`).Scan(&fresh); err != nil {
		t.Fatal(err)
	}
	if fresh == 0 {
		t.Errorf("no fresh chunk after the last compaction: the kept appender of the fresh table appended nothing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s2, err := Open(Options{Dir: dir})
		if err == nil {
			err = s2.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the store did not open again within a minute of its Close: an appender kept the database open")
	}
}

// TestAppenderAcrossTransactions: an appender kept between transactions
// flushes into the one under way (a rolled-back transaction drops what it
// flushed), and to the table of its name as it is at each flush (dropped
// and made again: the new one), as the writer's kept appenders need.
func TestAppenderAcrossTransactions(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.handle().ExecContext(ctx, `CREATE TABLE kept (v INTEGER, s VARCHAR)`); err != nil {
		t.Fatal(err)
	}
	var c appenders
	defer c.close()
	err = s.wconn.Raw(func(dc any) error {
		conn := dc.(driver.Conn)
		ex := conn.(driver.ExecerContext)
		exec := func(q string) error {
			_, err := ex.ExecContext(ctx, q, nil)
			return err
		}
		put := func(v int) error {
			a, err := c.get(conn, "kept")
			if err != nil {
				return err
			}
			if err := a.AppendRow(int32(v), fmt.Sprint("row ", v)); err != nil {
				return err
			}
			return a.Flush()
		}
		for _, step := range []struct {
			v   int
			end string
		}{{1, "COMMIT"}, {2, "ROLLBACK"}, {3, "COMMIT"}, {0, "DROP"}, {4, "COMMIT"}, {5, "ROLLBACK"}, {6, "COMMIT"}} {
			if step.end == "DROP" {
				if err := exec(`DROP TABLE kept`); err != nil {
					return err
				}
				if err := exec(`CREATE TABLE kept (v INTEGER, s VARCHAR)`); err != nil {
					return err
				}
				continue
			}
			if err := exec("BEGIN TRANSACTION"); err != nil {
				return err
			}
			if err := put(step.v); err != nil {
				return fmt.Errorf("row %d: %w", step.v, err)
			}
			if err := exec(step.end); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.made != 1 {
		t.Errorf("%d appenders made, want 1 (kept)", c.made)
	}
	rows, err := s.handle().QueryContext(ctx, `SELECT v FROM kept ORDER BY v`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[4 6]" {
		t.Errorf("the table made again holds %v, want [4 6] (the committed rows appended since)", got)
	}
}
