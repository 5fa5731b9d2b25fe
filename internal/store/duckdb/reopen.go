package duckdb

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	duck "github.com/duckdb/duckdb-go/v2"
	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/store"
)

// What the store does when DuckDB invalidates its database. Some errors
// are fatal to a DuckDB instance — a checkpoint that cannot write the file
// because the disk is full is one — and from then on every statement fails
// with "database has been invalidated because of a previous fatal error.
// The database must be restarted". What was committed is safe in the file
// and the WAL, and a new instance replays it. So on a fatal error the store
// closes the database and opens the file again, in the background, until it
// can (opening replays the WAL and checkpoints it: with the disk still full
// that fails, and is tried again later, or as soon as room is made).
// Meanwhile writes fail at once with an error that names the first one,
// and queries fail.

// isFatal reports whether err invalidated the database.
func isFatal(err error) bool {
	if err == nil {
		return false
	}
	var de *duck.Error
	if errors.As(err, &de) && de.Type == duck.ErrorTypeFatal {
		return true
	}
	return strings.Contains(err.Error(), "database has been invalidated")
}

// failed passes err on, and starts the reopening if it is fatal.
func (s *Store) failed(err error) error {
	if isFatal(err) {
		s.wmu.Lock()
		s.failedLocked(err)
		s.wmu.Unlock()
	}
	return err
}

// failedLocked is failed with wmu held.
func (s *Store) failedLocked(err error) {
	if !isFatal(err) || s.closed {
		return
	}
	select {
	case <-s.stop:
		return // closing
	default:
	}
	if s.broken == nil {
		s.broken = err
	}
	if !s.reopening {
		s.reopening = true
		s.opt.Log.Error("the database was invalidated by a fatal error; reopening it", "err", err)
		s.bg.Add(1)
		go s.reopen()
	}
}

// unavailableLocked is the error of a write while the database is being
// reopened (nil otherwise); wmu held.
func (s *Store) unavailableLocked() error {
	if s.broken == nil {
		return nil
	}
	return store.Unavailable("its database is being opened again after a fatal error",
		mapErr(fmt.Errorf("store unavailable while its database is reopened, after: %w", s.broken)))
}

// reopen closes the invalidated database and opens it again until it can.
func (s *Store) reopen() {
	defer s.bg.Done()
	wait := 100 * time.Millisecond
	start := time.Now()
	var logged time.Time
	for attempt := 1; ; attempt++ {
		select {
		case <-s.stop:
			return
		default:
		}
		// No maintenance and no writer while the instances change: compaction
		// holds connections of its own.
		s.mmu.Lock()
		s.wmu.Lock()
		if s.closed {
			s.wmu.Unlock()
			s.mmu.Unlock()
			return
		}
		if s.wconn != nil {
			s.apps.close() // (the database is broken: they say only that)
			s.wconn.Close()
			s.handle().Close()
			s.wconn = nil
		}
		s.wmu.Unlock()
		opt := s.opt
		if attempt > 1 {
			// Open's own warnings (summaries recovered) were said at the
			// first attempt.
			opt.Log = slog.New(slog.DiscardHandler)
		}
		ns, err := Open(opt)
		s.wmu.Lock()
		if err == nil {
			s.adopt(ns)
			first := s.broken
			s.broken, s.reopening = nil, false
			s.wmu.Unlock()
			s.mmu.Unlock()
			s.opt.Log.Warn("database reopened", "after", time.Since(start).Round(time.Millisecond), "attempts", attempt,
				"first_err", first)
			return
		}
		s.wmu.Unlock()
		s.mmu.Unlock()
		if attempt == 1 || time.Since(logged) >= time.Minute {
			logged = time.Now()
			s.opt.Log.Error("cannot reopen the database yet", "err", err, "attempt", attempt, "retry_in", wait)
		}
		if !s.waitForRoom(wait) {
			return
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// waitForRoom waits d, or less if room is made on the data directory's
// filesystem meanwhile (a failed open costs a replay of the WAL: it is not
// tried again every few seconds while the disk stays full, but at once
// when someone frees space). It reports false if the store is closing.
func (s *Store) waitForRoom(d time.Duration) bool {
	before := freeBytes(s.opt.Dir)
	deadline := time.Now().Add(d)
	for {
		step := min(time.Until(deadline), 200*time.Millisecond)
		if step <= 0 {
			return true
		}
		select {
		case <-s.stop:
			return false
		case <-time.After(step):
		}
		if before >= 0 && freeBytes(s.opt.Dir) > before+1<<20 {
			return true
		}
	}
}

// freeBytes is what the filesystem of dir has available (-1: unknown).
func freeBytes(dir string) int64 {
	var st unix.Statfs_t
	if dir == "" || unix.Statfs(dir, &st) != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// adopt takes over the database of ns, a store just opened on the same
// file, and the state open made of it (wmu held): every field open sets.
func (s *Store) adopt(ns *Store) {
	s.db.Store(ns.handle())
	s.wconn, s.fresh, s.pendingFirst = ns.wconn, ns.fresh, ns.pendingFirst
	s.apps.take(&ns.apps)
	s.fold.Take(ns.fold)
	s.gen, s.flushedGen, s.lastFlush, s.logged = ns.gen, ns.flushedGen, ns.lastFlush, ns.logged
	s.tmpls.adopt(ns.tmpls)
	s.stmts.adopt(&ns.stmts)
	s.ext.Replace(&ns.ext)
}

// stopReopening ends a reopening (Close), and waits for it.
func (s *Store) stopReopening() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.bg.Wait()
}
