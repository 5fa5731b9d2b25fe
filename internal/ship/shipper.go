// Package ship takes the agent's batches to the server: a bounded queue,
// an optional disk spool that keeps batches while no server answers and
// replays them in order, and one sender that posts them one at a time with
// retries, backoff with jitter, and fail-over across several server URLs.
//
// Exactly-once: every batch carries (agent id, seq). The agent id is new at
// every start ("<host>-<random>"), so sequence numbers never need to be
// persisted; spooled batches keep the id and seq they were made with. The
// server stores a batch and advances the agent's sequence in one transaction
// and answers a repeated seq with success, so a retry never duplicates.
package ship

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/taskscope/taskscope/internal/wire"
)

// Config configures a Shipper.
type Config struct {
	URLs     []string // server base URLs, tried in order, failing over on error
	Token    string   // bearer token for /api/v1/ingest; empty: none
	SpoolDir string   // empty: batches wait in memory only
	// MaxSpoolBytes bounds the spool (default 256 MiB); beyond it the oldest
	// batches are dropped and counted.
	MaxSpoolBytes int64
	// MaxMemoryBytes bounds the queue when there is no spool (default 16 MiB).
	MaxMemoryBytes int64
	Client         *http.Client
	Log            *slog.Logger
	MinBackoff     time.Duration
	MaxBackoff     time.Duration
	Host           string
	// OnOrders, when set, is given the profile orders of each answer that
	// carries some (wire.Answer), on the sender's goroutine: it must
	// return quickly.
	OnOrders func([]wire.ProfileOrder)
}

// Stats are the shipper's counters, cumulative.
type Stats struct {
	Enqueued       uint64
	Sent           uint64 // batches the server acknowledged
	SentSamples    uint64
	SentBytes      uint64 // compressed bytes acknowledged
	Duplicates     uint64 // batches the server already had (a retry after a lost answer)
	Retries        uint64
	Rejected       uint64 // batches the server refused as invalid (kept in the spool's rejected/ dir)
	DroppedBatches uint64 // dropped because the queue or spool was full
	DroppedSamples uint64
	QueuedBatches  int
	QueuedBytes    int64
	SpooledBatches int    // of the queued, those in spool files
	SpooledBytes   int64  // their compressed size
	SpoolErrors    uint64 // batches the spool could not take (kept in memory, up to MaxMemoryBytes)
}

type item struct {
	agentID string
	seq     uint64
	samples int
	raw     int    // the batch's encoded length (0: not known, a batch of an earlier run's spool)
	made    int64  // when it was queued (unix nanos): its place in the spool
	body    []byte // compressed; nil while it waits in the spool file
	size    int64
	file    string // spool file, if spooled
	gone    bool   // delivered, rejected or dropped
	// synced: the spool file is on disk (fsync), not only in the page
	// cache; cache: the body of a spooled batch kept for its first send
	// (then the file is not read back). Only a batch queued behind none
	// is spooled unsynced and cached (see Enqueue).
	synced bool
	cache  []byte
}

// Shipper delivers batches. Enqueue may be called from one goroutine while
// Run runs in another.
type Shipper struct {
	cfg     Config
	agentID string
	enc     *zstd.Encoder
	spool   *spool

	mu     sync.Mutex
	seq    uint64
	queue  []*item
	qbytes int64
	mbytes int64 // of qbytes, the bytes of batches held in memory (not spooled)
	stats  Stats
	wake   chan struct{}
	idle   chan struct{} // closed and replaced when the queue becomes empty
	url    int
	buf    []byte
	// noLists: the server does not take lists of batches (it answered
	// one 415): batches go one by one. singleUpTo: the batches up to
	// this seq go one by one (a list of them was refused: the bad one
	// is refused alone).
	noLists    bool
	singleUpTo uint64
	// spoolFailing: the last spool write failed; batches are held in
	// memory until one succeeds, and then moved to the spool.
	spoolFailing bool
}

// New makes a Shipper and, when there is a spool, loads what it holds.
func New(cfg Config) (*Shipper, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("ship: no server URL")
	}
	for i, u := range cfg.URLs {
		cfg.URLs[i] = strings.TrimRight(u, "/")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.MaxSpoolBytes <= 0 {
		cfg.MaxSpoolBytes = 256 << 20
	}
	if cfg.MaxMemoryBytes <= 0 {
		cfg.MaxMemoryBytes = 16 << 20
	}
	// One encoder, one goroutine, and a 1 MiB window (a batch is rarely
	// larger): the default window of 8 MiB makes the encoder keep a 16 MiB
	// history buffer, which alone would be most of the agent's RSS. The
	// fastest level: batches as small within 1% as the default level's, a
	// third less CPU, and a fifth of its start (tables of a third the size;
	// BenchmarkZstdLevels in package wire).
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	s := &Shipper{cfg: cfg, enc: enc, wake: make(chan struct{}, 1), idle: make(chan struct{})}
	s.agentID = cfg.Host + "-" + hex.EncodeToString(rnd[:])
	if cfg.SpoolDir != "" {
		sp, items, err := openSpool(cfg.SpoolDir)
		if err != nil {
			return nil, err
		}
		s.spool = sp
		for _, it := range items {
			s.queue = append(s.queue, it)
			s.qbytes += it.size
		}
		if len(items) > 0 {
			cfg.Log.Info("replaying spooled batches", "batches", len(items), "bytes", s.qbytes)
		}
	}
	if len(s.queue) == 0 {
		close(s.idle)
	}
	s.stats.QueuedBatches, s.stats.QueuedBytes = len(s.queue), s.qbytes
	return s, nil
}

// AgentID is this incarnation's identity.
func (s *Shipper) AgentID() string { return s.agentID }

// Stats returns the counters.
func (s *Shipper) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.QueuedBatches, st.QueuedBytes = len(s.queue), s.qbytes
	for _, it := range s.queue {
		if it.file != "" {
			st.SpooledBatches++
			st.SpooledBytes += it.size
		}
	}
	return st
}

// Enqueue stamps b with the agent id and the next seq, encodes and
// compresses it, spools it when there is a spool, and queues it. Enqueue
// and Close are called from one goroutine.
func (s *Shipper) Enqueue(b *wire.Batch) error {
	s.mu.Lock()
	s.seq++
	b.AgentID, b.Seq = s.agentID, s.seq
	s.mu.Unlock()
	now := time.Now()
	b.SentMs = now.UnixMilli()
	s.buf = wire.Marshal(s.buf[:0], b)
	body := s.enc.EncodeAll(s.buf, make([]byte, 0, len(s.buf)/4+64))
	it := &item{agentID: b.AgentID, seq: b.Seq, samples: b.SampleCount(), raw: len(s.buf), made: now.UnixNano(), body: body,
		size: int64(len(body))}
	limit := s.cfg.MaxMemoryBytes
	if s.spool != nil {
		limit = s.cfg.MaxSpoolBytes
		// A batch queued behind none is sent at once, and its file
		// removed as soon as the server has it: it is written (a SIGKILL
		// loses nothing written) but synced only if that first delivery
		// fails (Run), and its body is kept for that delivery. One queued
		// behind others waits: it is synced now.
		s.mu.Lock()
		waits := len(s.queue) > 0
		s.mu.Unlock()
		err := s.spool.write(it, waits)
		if err == nil {
			if !waits {
				it.cache = it.body
			}
			it.body = nil // read back from the file when it is sent
		}
		s.spooled(err)
	}
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.idle = make(chan struct{})
	}
	s.queue = append(s.queue, it)
	s.qbytes += it.size
	if it.body != nil {
		s.mbytes += it.size
	}
	s.stats.Enqueued++
	// Over the bound: drop the oldest batches, but never the one being sent.
	for s.qbytes > limit && len(s.queue) > 2 {
		s.drop(1, "queue full")
	}
	// Batches the spool could not take are held in memory, within its
	// bound: beyond it the oldest of them are dropped.
	for i := 1; s.mbytes > s.cfg.MaxMemoryBytes && i < len(s.queue)-1; {
		if s.queue[i].body == nil {
			i++
			continue
		}
		s.drop(i, "the spool cannot take batches and memory is full")
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// drop drops the queued batch i, counts it and says so (s.mu held).
func (s *Shipper) drop(i int, why string) {
	old := s.queue[i]
	s.queue = append(s.queue[:i], s.queue[i+1:]...)
	s.qbytes -= old.size
	if old.body != nil {
		s.mbytes -= old.size
	}
	old.gone = true
	s.stats.DroppedBatches++
	s.stats.DroppedSamples += uint64(old.samples)
	if old.file != "" {
		s.spool.remove(old)
	}
	s.cfg.Log.Warn("dropped the oldest batch: "+why, "agent_id", old.agentID, "seq", old.seq, "samples", old.samples,
		"dropped_batches", s.stats.DroppedBatches, "dropped_samples", s.stats.DroppedSamples)
}

// spooled takes the outcome of a spool write: a failure is counted and
// said when it starts; a success after failures is said, and the batches
// held in memory meanwhile go to the spool.
func (s *Shipper) spooled(err error) {
	s.mu.Lock()
	if err != nil {
		s.stats.SpoolErrors++
		if !s.spoolFailing {
			s.spoolFailing = true
			s.mu.Unlock()
			s.cfg.Log.Error("cannot write to the spool; holding batches in memory", "dir", s.cfg.SpoolDir,
				"max_memory_bytes", s.cfg.MaxMemoryBytes, "err", err)
			return
		}
		s.mu.Unlock()
		return
	}
	failing := s.spoolFailing
	s.spoolFailing = false
	s.mu.Unlock()
	if failing {
		n := s.respool()
		s.cfg.Log.Warn("the spool takes batches again", "dir", s.cfg.SpoolDir, "moved_from_memory", n)
	}
}

// respool writes the batches held in memory to the spool, each at its
// place in the order (the name says when it was queued), and returns how
// many it wrote. The batch being sent stays as it is.
func (s *Shipper) respool() int {
	s.mu.Lock()
	var held []*item
	for i, it := range s.queue {
		if i > 0 && it.body != nil && it.file == "" {
			held = append(held, it)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, it := range held {
		// it.body is only set to nil by this goroutine: reading it is safe.
		name, err := s.spool.writeFile(it, true)
		if err != nil {
			return n // full again: they stay in memory
		}
		s.mu.Lock()
		if it.gone || it.file != "" {
			os.Remove(name)
		} else {
			it.file, it.body, it.synced = name, nil, true
			s.mbytes -= it.size
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// Close is for after Run has returned: the batches still held in memory
// are written to the spool, for the next agent to send, or else said to
// be lost; those spooled unsynced are synced. It returns how many batches
// were lost.
func (s *Shipper) Close() int {
	s.mu.Lock()
	var held, unsynced []*item
	samples := 0
	for _, it := range s.queue {
		if it.body != nil && it.file == "" {
			held = append(held, it)
		}
		if it.file != "" && !it.synced {
			unsynced = append(unsynced, it)
		}
	}
	s.mu.Unlock()
	for _, it := range unsynced {
		s.sync(it)
	}
	lost := 0
	for _, it := range held {
		if s.spool != nil {
			if name, err := s.spool.writeFile(it, true); err == nil {
				s.mu.Lock()
				it.file, it.body, it.synced = name, nil, true
				s.mbytes -= it.size
				s.mu.Unlock()
				continue
			}
		}
		lost++
		samples += it.samples
	}
	if lost > 0 {
		where := "there is no spool"
		if s.spool != nil {
			where = "the spool cannot take them"
		}
		s.cfg.Log.Error("stopping with undelivered batches held in memory: lost, "+where, "batches", lost, "samples", samples)
	}
	return lost
}

// The most batches, and compressed bytes, that one request takes: when
// batches wait (the spool, after the server was away), they go as lists
// (wire.ListContentType), each stored in one commit.
const (
	maxList      = 64
	maxListBytes = 4 << 20
)

// Run sends queued batches until ctx is done.
func (s *Shipper) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		s.mu.Lock()
		var it *item
		var list []*item
		if len(s.queue) > 0 {
			it = s.queue[0]
			if len(s.queue) > 1 && !s.noLists && it.seq > s.singleUpTo {
				list = []*item{it}
				size := it.size
				for _, next := range s.queue[1:min(len(s.queue), maxList)] {
					if size += next.size; size > maxListBytes {
						break
					}
					list = append(list, next)
				}
			}
		}
		s.mu.Unlock()
		if it == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		var retryAfter time.Duration
		var err error
		if n := 0; len(list) > 1 {
			if n, retryAfter, err = s.sendList(ctx, list); err == nil {
				backoff = 0
				for _, it := range list[:n] {
					it.cache = nil
					s.done(it)
				}
				continue
			}
			it.cache = nil
			if ctx.Err() != nil {
				return
			}
			var rej *rejectedError
			if errors.As(err, &rej) || errors.Is(err, errNoList) {
				// Refused for good (or no list could be made): the
				// batches go one by one.
				s.cfg.Log.Warn("the server did not take a list of batches; sending them one by one", "batches", len(list), "err", err)
				continue
			}
		} else {
			retryAfter, err = s.send(ctx, it)
			it.cache = nil // the first delivery is over: read back from the file when sent again
			if err == nil {
				backoff = 0
				s.done(it)
				continue
			}
			if ctx.Err() != nil {
				return
			}
		}
		var rej *rejectedError
		if errors.As(err, &rej) {
			s.cfg.Log.Error("server rejected a batch; keeping it aside", "seq", it.seq, "status", rej.status, "err", rej.msg)
			s.mu.Lock()
			s.stats.Rejected++
			if s.spool != nil {
				s.spool.reject(it)
			}
			it.file = ""
			s.mu.Unlock()
			s.done(it)
			continue
		}
		s.mu.Lock()
		s.stats.Retries++
		s.url = (s.url + 1) % len(s.cfg.URLs)
		s.mu.Unlock()
		// The batch waits in the spool now: on disk, not only in memory.
		s.sync(it)
		backoff = nextBackoff(backoff, s.cfg.MinBackoff, s.cfg.MaxBackoff)
		wait := time.Duration(mrand.Int64N(int64(backoff)) + 1) // full jitter
		if retryAfter > wait {
			wait = retryAfter
		}
		s.cfg.Log.Warn("cannot deliver batch; will retry", "seq", it.seq, "in", wait.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func nextBackoff(cur, min, max time.Duration) time.Duration {
	if cur < min {
		return min
	}
	cur *= 2
	if cur > max {
		cur = max
	}
	return cur
}

func (s *Shipper) done(it *item) {
	s.mu.Lock() // it.file is read by Stats
	if it.file != "" {
		s.spool.remove(it)
	}
	if len(s.queue) > 0 && s.queue[0] == it {
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.qbytes -= it.size
		if it.body != nil {
			s.mbytes -= it.size
		}
	}
	it.gone = true
	if len(s.queue) == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
	s.mu.Unlock()
}

type rejectedError struct {
	status int
	msg    string
}

func (e *rejectedError) Error() string { return fmt.Sprintf("rejected with %d: %s", e.status, e.msg) }

// bodyOf is a queued batch's compressed body: in memory, or read back
// from its spool file.
func (s *Shipper) bodyOf(it *item) ([]byte, error) {
	s.mu.Lock()
	body, file := it.body, it.file
	s.mu.Unlock()
	if body == nil {
		body = it.cache // set and cleared by this goroutine only (Enqueue sets it before queueing)
	}
	if body == nil && file != "" {
		back, err := readSpoolFile(file)
		if err != nil {
			return nil, &rejectedError{status: 0, msg: "spool file unreadable: " + err.Error()}
		}
		body = back.body
	}
	return body, nil
}

// errNoList: the first batches waiting cannot go into a list.
var errNoList = errors.New("no list: the first batches cannot go into one")

// sendList posts batches waiting in the queue as one list (the first
// ones of it that can go into a list as they are compressed), and returns
// how many the server stored. A list refused for good (a rejectedError)
// has the batches up to its last go one by one (the bad one is then
// refused alone); a server that takes no lists (415) gets none again.
func (s *Shipper) sendList(ctx context.Context, list []*item) (int, time.Duration, error) {
	var body []byte
	n, samples, size := 0, 0, int64(0)
	for _, it := range list {
		b, err := s.bodyOf(it)
		if err != nil {
			break
		}
		next, err := wire.AppendZstdListEntry(body, b, it.raw, s.enc)
		if err != nil {
			break
		}
		body, n, samples, size = next, n+1, samples+it.samples, size+it.size
	}
	if n < 2 {
		s.singleUpTo = list[0].seq
		return 0, 0, errNoList
	}
	s.mu.Lock()
	url := s.cfg.URLs[s.url] + "/api/v1/ingest"
	s.mu.Unlock()
	status, dup, retryAfter, msg, err := s.post(ctx, url, body, wire.ListContentType, list[0])
	switch {
	case err != nil:
		return 0, 0, err
	case status/100 == 2:
		s.orders([]byte(msg))
		var rep wire.Answer
		json.Unmarshal([]byte(msg), &rep)
		s.mu.Lock()
		s.stats.Sent += uint64(n)
		s.stats.SentSamples += uint64(samples)
		s.stats.SentBytes += uint64(size)
		if dup {
			rep.Duplicates = n
		}
		s.stats.Duplicates += uint64(min(rep.Duplicates, n))
		s.mu.Unlock()
		return n, 0, nil
	case status == http.StatusUnsupportedMediaType:
		s.noLists = true
	case status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests &&
		status != http.StatusUnauthorized && status != http.StatusForbidden:
		s.singleUpTo = list[n-1].seq
	default:
		return 0, retryAfter, fmt.Errorf("%s: %d %s: %s", url, status, http.StatusText(status), msg)
	}
	return 0, 0, &rejectedError{status: status, msg: msg}
}

// post posts a body of contentType, naming it (its first batch, for a
// list) in headers; it returns the answer's status, whether it said
// duplicate, its Retry-After and its text. err is a request that got no
// answer.
func (s *Shipper) post(ctx context.Context, url string, body []byte, contentType string, it *item) (status int, dup bool,
	retryAfter time.Duration, msg string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, false, 0, "", err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Content-Encoding", "zstd")
	req.Header.Set("X-Taskscope-Agent", it.agentID)
	req.Header.Set("X-Taskscope-Seq", strconv.FormatUint(it.seq, 10))
	if s.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return 0, false, 0, "", err
	}
	defer resp.Body.Close()
	// An answer is small; one with orders is at most wire.MaxOrders of them.
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		retryAfter = time.Duration(secs) * time.Second
	}
	return resp.StatusCode, resp.Header.Get("X-Taskscope-Duplicate") == "true", retryAfter, strings.TrimSpace(string(text)), nil
}

// send posts one batch. A 4xx other than 408 and 429 is a rejection (the
// batch will never be accepted); anything else that is not 2xx is retried.
func (s *Shipper) send(ctx context.Context, it *item) (time.Duration, error) {
	s.mu.Lock()
	url := s.cfg.URLs[s.url] + "/api/v1/ingest"
	s.mu.Unlock()
	body, err := s.bodyOf(it)
	if err != nil {
		return 0, err
	}
	status, dup, ra, msg, err := s.post(ctx, url, body, wire.ContentType, it)
	switch {
	case err != nil:
		return 0, err
	case status/100 == 2:
		s.orders([]byte(msg))
		s.mu.Lock()
		s.stats.Sent++
		s.stats.SentSamples += uint64(it.samples)
		s.stats.SentBytes += uint64(it.size)
		if dup {
			s.stats.Duplicates++
		}
		s.mu.Unlock()
		return 0, nil
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status/100 == 5:
		return ra, fmt.Errorf("%s: %d %s: %s", url, status, http.StatusText(status), msg)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// A wrong token is an operator's mistake: keep the data and retry.
		return 0, fmt.Errorf("%s: %d %s (check --token-file)", url, status, http.StatusText(status))
	default:
		return 0, &rejectedError{status: status, msg: msg}
	}
}

// orders hands the profile orders of a 2xx answer's body to OnOrders. A
// body that is not an Answer (a server before them says less) has none.
func (s *Shipper) orders(body []byte) {
	if s.cfg.OnOrders == nil || !bytes.Contains(body, []byte(`"profiles"`)) {
		return
	}
	var a wire.Answer
	if err := json.Unmarshal(body, &a); err != nil {
		s.cfg.Log.Warn("cannot read the profile orders in the server's answer", "err", err)
		return
	}
	if len(a.Profiles) > wire.MaxOrders {
		a.Profiles = a.Profiles[:wire.MaxOrders]
	}
	if len(a.Profiles) > 0 {
		s.cfg.OnOrders(a.Profiles)
	}
}

// sync makes the spool file of it durable if it is not yet (a failure is
// logged: the batch is still in the file and in the page cache).
func (s *Shipper) sync(it *item) {
	s.mu.Lock()
	file := it.file
	need := file != "" && !it.synced && !it.gone
	s.mu.Unlock()
	if !need {
		return
	}
	if err := s.spool.sync(file); err != nil {
		s.cfg.Log.Warn("cannot sync a spool file", "file", file, "err", err)
		return
	}
	s.mu.Lock()
	if it.file == file {
		it.synced = true
	}
	s.mu.Unlock()
}

// Flush waits until the queue is empty or ctx is done.
func (s *Shipper) Flush(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ship: %d batches not delivered: %w", s.Stats().QueuedBatches, ctx.Err())
	}
}
