package duckdb

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testfs"
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

// TestDiskFull fills the store's disk for real (a tmpfs with a ballast
// file): commits fail with ENOSPC, a checkpoint that cannot write the file
// is fatal to DuckDB (it invalidates the database), and the store reopens
// its database once there is room again. Nothing committed is lost and
// nothing is stored twice: the rounds that failed are appended again, as
// the agents send them again, and the store holds every sample once.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a filesystem")
	}
	testfs.Run(t, 32<<20, func(t *testing.T, dir string) {
		var log lockedBuffer
		opt := Options{Dir: dir, Log: slog.New(slog.NewTextHandler(&log, nil))}
		st, err := Open(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			st.Close()
			if t.Failed() || testing.Verbose() {
				t.Logf("store log:\n%s", log.String())
			}
		}()
		ctx := context.Background()
		g := loadgen.NewGenerator(loadgen.Config{Nodes: 10, Slots: 3, BatchTicks: 5, Seed: 7,
			Start: time.Now().Add(-3 * time.Hour).Truncate(time.Second)})
		var samples int64
		seq := uint64(0)
		// next makes a round, one batch per node, each node an agent.
		next := func() []*wire.Batch {
			seq++
			r := g.Next()
			for _, b := range r {
				b.AgentID, b.Seq = "agent-"+b.Host, seq
			}
			return r
		}
		commit := func(r []*wire.Batch) error {
			app, err := st.Begin(ctx)
			if err != nil {
				return err
			}
			for _, b := range r {
				if dup, err := app.Append(b); err != nil || dup {
					app.Rollback()
					t.Fatalf("append %s/%d: dup %v, %v", b.AgentID, b.Seq, dup, err)
				}
			}
			return app.Commit()
		}
		count := func(r []*wire.Batch) {
			for _, b := range r {
				for _, s := range b.ProcSeries {
					samples += int64(len(s.Times))
				}
			}
		}
		for range 20 {
			r := next()
			if err := commit(r); err != nil {
				t.Fatal(err)
			}
			count(r)
		}
		if err := st.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ballast := testfs.Fill(t, dir, 256<<10)
		// Commits until the disk is full.
		var pending []*wire.Batch
		for i := 0; ; i++ {
			if i == 2000 {
				t.Fatalf("2000 rounds committed on a full disk (%d bytes free)", testfs.Free(t, dir))
			}
			r := next()
			err := commit(r)
			if err != nil {
				if !store.DiskFull(err) {
					t.Fatalf("a commit on a full disk failed with %v, not ENOSPC", err)
				}
				t.Logf("round %d failed: %v", i, err)
				pending = r
				break
			}
			count(r)
		}
		// A checkpoint cannot write the WAL into the file: DuckDB
		// invalidates the database.
		err = st.Checkpoint(ctx)
		if err == nil || !store.DiskFull(err) || !isFatal(err) {
			t.Fatalf("a checkpoint on a full disk: %v; want a fatal ENOSPC", err)
		}
		t.Logf("checkpoint: %v", err)
		// Writes now fail at once, and say why.
		t0 := time.Now()
		err = commit(pending)
		if err == nil || !store.DiskFull(err) {
			t.Fatalf("a commit while the database is reopened: %v", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("a commit while the database is reopened took %v to fail", d)
		}
		if err := st.Maintain(ctx, time.Now()); err == nil || !store.DiskFull(err) {
			t.Errorf("maintenance while the database is reopened: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // a reopening or two fails
		// Room again: the store reopens its database, and the round that
		// failed goes in (once).
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		for {
			err := commit(pending)
			if err == nil {
				break
			}
			if time.Since(t1) > 30*time.Second {
				t.Fatalf("the store did not take writes again within 30 s of making room: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("writes again %v after making room", time.Since(t1).Round(time.Millisecond))
		count(pending)
		if !strings.Contains(log.String(), "database reopened") {
			t.Errorf("no reopening in the store's log:\n%s", log.String())
		}
		for range 5 {
			r := next()
			if err := commit(r); err != nil {
				t.Fatal(err)
			}
			count(r)
		}
		if err := st.Maintain(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		check := func(st *Store, when string) {
			t.Helper()
			u, err := st.Usage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if u.Samples != samples {
				t.Errorf("%s: the store holds %d process samples, %d were committed", when, u.Samples, samples)
			}
		}
		check(st, "after the disk was full")
		// The sequences survived: the last round again is a duplicate.
		app, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range pending {
			if dup, err := app.Append(b); err != nil || !dup {
				t.Errorf("%s/%d again: dup %v, %v", b.AgentID, b.Seq, dup, err)
			}
		}
		app.Rollback()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		st, err = Open(opt)
		if err != nil {
			t.Fatal(err)
		}
		check(st, "opened again")
	})
}
