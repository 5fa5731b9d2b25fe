package duckdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testfs"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// lockedBuffer is a log the store's goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fullDisk is a store whose disk was filled until a commit failed, and
// whose database a checkpoint then invalidated.
type fullDisk struct {
	st      *Store
	opt     Options
	log     *lockedBuffer
	g       *loadgen.Generator
	seq     uint64
	samples int64         // committed
	pending []*wire.Batch // the round that failed, to send again
	ballast string
}

// read asks what a job's page asks (its detail, an attempt's series): the
// statements it prepares on the database's handle must serve the next one
// after a reopening.
func (f *fullDisk) read(ctx context.Context) error {
	page, err := f.st.Jobs(ctx, store.JobFilter{Limit: 1})
	if err != nil || len(page.Jobs) == 0 {
		return fmt.Errorf("jobs: %d, %v", len(page.Jobs), err)
	}
	d, err := f.st.Job(ctx, page.Jobs[0].JobID)
	if err != nil || len(d.AttemptList) == 0 {
		return fmt.Errorf("job: %v", err)
	}
	a := d.AttemptList[0]
	_, err = f.st.Series(ctx, store.SeriesQuery{Scope: store.ScopeAttempt, AttemptID: a.AttemptID,
		Metrics: []string{"cpu_percent"}, From: int64(a.Start), To: int64(a.LastSeen) + 1, Step: 1000})
	return err
}

// next makes a round, one batch per node, each node an agent.
func (f *fullDisk) next() []*wire.Batch {
	f.seq++
	r := f.g.Next()
	for _, b := range r {
		b.AgentID, b.Seq = "agent-"+b.Host, f.seq
	}
	return r
}

func (f *fullDisk) commit(t *testing.T, r []*wire.Batch) error {
	app, err := f.st.Begin(context.Background())
	if err != nil {
		return err
	}
	for _, b := range r {
		if dup, err := app.Append(b); err != nil || dup {
			app.Rollback()
			t.Fatalf("append %s/%d: dup %v, %v", b.AgentID, b.Seq, dup, err)
		}
	}
	if err := app.Commit(); err != nil {
		return err
	}
	for _, b := range r {
		for _, s := range b.ProcSeries {
			f.samples += int64(len(s.Times))
		}
	}
	return nil
}

// fill opens a store in dir, commits rounds, fills the disk until a commit
// fails with ENOSPC, and checkpoints: DuckDB cannot write the WAL into the
// file and invalidates the database.
func fill(t *testing.T, dir string) *fullDisk {
	f := &fullDisk{log: &lockedBuffer{}}
	f.opt = Options{Dir: dir, Log: slog.New(slog.NewTextHandler(f.log, nil))}
	var err error
	if f.st, err = Open(f.opt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.st.Close()
		if t.Failed() || testing.Verbose() {
			t.Logf("store log:\n%s", f.log.String())
		}
	})
	f.g = loadgen.NewGenerator(loadgen.Config{Nodes: 10, Slots: 3, BatchTicks: 5, Seed: 7,
		Start: time.Now().Add(-3 * time.Hour).Truncate(time.Second)})
	for range 20 {
		if err := f.commit(t, f.next()); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.read(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.ballast = testfs.Fill(t, dir, 256<<10)
	for i := 0; ; i++ {
		if i == 2000 {
			t.Fatalf("2000 rounds committed on a full disk (%d bytes free)", testfs.Free(t, dir))
		}
		r := f.next()
		if err := f.commit(t, r); err != nil {
			if !errors.Is(err, store.ErrDiskFull) {
				t.Fatalf("a commit on a full disk failed with %v, not ENOSPC", err)
			}
			t.Logf("round %d failed: %v", i, err)
			f.pending = r
			break
		}
	}
	err = f.st.Checkpoint(context.Background())
	if err == nil || !errors.Is(err, store.ErrDiskFull) || !isFatal(err) {
		t.Fatalf("a checkpoint on a full disk: %v; want a fatal ENOSPC", err)
	}
	t.Logf("checkpoint: %v", err)
	return f
}

// check opens the store again (closed) and counts its samples.
func (f *fullDisk) check(t *testing.T) {
	t.Helper()
	st, err := Open(f.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	u, err := st.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if u.Samples != f.samples {
		t.Errorf("opened again, the store holds %d process samples, %d were committed", u.Samples, f.samples)
	}
}

// TestDiskFull fills the store's disk for real (a tmpfs with a ballast
// file): commits fail with ENOSPC, and a checkpoint that cannot write the
// file is fatal to DuckDB (it invalidates the database). The store reopens
// its database once there is room again, and takes the round that failed
// (agents send it again); or it is closed while the disk is still full. In
// both cases nothing committed is lost and nothing is stored twice.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a filesystem")
	}
	testfs.Run(t, 32<<20, func(t *testing.T, dir string) {
		f := fill(t, dir)
		ctx := context.Background()
		// Writes now fail at once, and say why.
		t0 := time.Now()
		if err := f.commit(t, f.pending); err == nil || !errors.Is(err, store.ErrDiskFull) {
			t.Fatalf("a commit while the database is reopened: %v", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("a commit while the database is reopened took %v to fail", d)
		}
		if err := f.st.Maintain(ctx, time.Now()); err == nil || !errors.Is(err, store.ErrDiskFull) {
			t.Errorf("maintenance while the database is reopened: %v", err)
		}
		waitLog(t, f.log, "cannot reopen the database yet")
		// Room again: the store reopens its database, and the round that
		// failed goes in (once).
		if err := os.Remove(f.ballast); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		var err error
		if !testsrv.Poll(30*time.Second, func() bool { err = f.commit(t, f.pending); return err == nil }) {
			t.Fatalf("the store did not take writes again within 30 s of making room: %v", err)
		}
		t.Logf("writes again %v after making room", time.Since(t1).Round(time.Millisecond))
		if !strings.Contains(f.log.String(), "database reopened") {
			t.Errorf("no reopening in the store's log:\n%s", f.log.String())
		}
		if err := f.read(ctx); err != nil {
			t.Errorf("a job's page after the reopening: %v", err)
		}
		for range 5 {
			if err := f.commit(t, f.next()); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.st.Maintain(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if u, err := f.st.Usage(ctx); err != nil || u.Samples != f.samples {
			t.Errorf("the store holds %+v (%v), %d samples were committed", u, err, f.samples)
		}
		// The sequences survived: the round that failed is now a duplicate.
		app, err := f.st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range f.pending {
			if dup, err := app.Append(b); err != nil || !dup {
				t.Errorf("%s/%d again: dup %v, %v", b.AgentID, b.Seq, dup, err)
			}
		}
		app.Rollback()
		if err := f.st.Close(); err != nil {
			t.Fatal(err)
		}
		f.check(t)
	})
}

// TestDiskFullClose: a store closed while its database cannot be reopened
// (the disk is still full) closes, and what was committed is there when it
// is opened again with room.
func TestDiskFullClose(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a filesystem")
	}
	testfs.Run(t, 32<<20, func(t *testing.T, dir string) {
		f := fill(t, dir)
		waitLog(t, f.log, "cannot reopen the database yet")
		done := make(chan error, 1)
		go func() { done <- f.st.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("close on a full disk: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("close on a full disk did not return within 30 s")
		}
		if err := os.Remove(f.ballast); err != nil {
			t.Fatal(err)
		}
		f.check(t)
	})
}

func waitLog(t *testing.T, log *lockedBuffer, what string) {
	t.Helper()
	if !testsrv.Poll(10*time.Second, func() bool { return strings.Contains(log.String(), what) }) {
		t.Fatalf("the store's log does not say %q:\n%s", what, log.String())
	}
}
