// Package loadgen sends realistic agent batches from many simulated nodes:
// jobs of maps and reduces spread over the nodes, each attempt a wrapper, a
// task JVM and for Streaming jobs a child, with metrics that move together
// as they do on a real node (model.go). It can also replay what a real agent
// recorded (recording.go), and run a loop of API queries beside the load
// (queries.go). It is the ingest benchmark and a source of data for
// developing the UI.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/wire"
)

// Config configures a run.
type Config struct {
	URL         string
	Token       string
	Nodes       int
	Slots       int           // attempts running at once per node
	Interval    time.Duration // simulated sampling interval
	BatchTicks  int           // ticks per batch
	Duration    time.Duration // simulated time to cover
	Realtime    bool          // tick at the wall clock (for a live UI); else as fast as the server takes it
	Concurrency int           // batches in flight (fast mode); a node's batches go one at a time, in order
	Start       time.Time     // simulated start (default: now - Duration in fast mode, now in realtime)
	Seed        uint64
	Client      *http.Client
	// Acked, if set, counts the process samples acknowledged, as they are
	// (for a benchmark that watches the rate while it runs).
	Acked *atomic.Int64
	// AckedMs, if set, is raised to the SentMs of each batch acknowledged:
	// the simulated time the server has data up to (a benchmark's clock).
	AckedMs *atomic.Int64
	// Endpoint is where and how the bodies are posted (default: taskscope's
	// ingest, TaskscopeIngest).
	Endpoint Endpoint
	// MaxList is the most bodies a sender posts in one request, as a list
	// (Endpoint.ListContentType), when several wait for it, as an agent
	// sends what waited in its spool; 0 or 1: one a request.
	MaxList int
}

// Endpoint is the path the bodies are posted to and their headers.
type Endpoint struct {
	Path, ContentType, ContentEncoding string
	// ListContentType, if set, is the media type of a list of zstd
	// bodies (wire.ListContentType): see Config.MaxList.
	ListContentType string
}

// TaskscopeIngest is taskscope's ingest: wire batches, zstd, and lists of
// them.
var TaskscopeIngest = Endpoint{Path: "/api/v1/ingest", ContentType: wire.ContentType, ContentEncoding: "zstd",
	ListContentType: wire.ListContentType}

// Result sums up a run.
type Result struct {
	Batches    int64 // batches the server acknowledged
	Samples    int64 // process samples in them
	Bytes      int64 // compressed bytes sent
	Elapsed    time.Duration
	Rejected   int64 // batches refused for good (4xx)
	Retries    int64 // sends that got 503/429 or no answer and were repeated
	Duplicates int64 // acknowledged as already stored (a retry whose first try got through)
	// Acks are the times batches took from their first send to their
	// acknowledgement (retries included): the latency an agent sees.
	Acks Latencies
}

// SamplesPerSec is the accepted sample rate.
func (r Result) SamplesPerSec() float64 { return float64(r.Samples) / r.Elapsed.Seconds() }

func defaults(cfg *Config) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 10
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 8
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.BatchTicks <= 0 {
		cfg.BatchTicks = 5
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	}
	if cfg.Endpoint.Path == "" {
		cfg.Endpoint = TaskscopeIngest
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Now()
		if !cfg.Realtime {
			cfg.Start = cfg.Start.Add(-cfg.Duration)
		}
	}
}

// Generator makes batches without sending them (for store benchmarks).
type Generator struct {
	c    *cluster
	tick int
}

// NewGenerator returns a generator of cfg's cluster (Duration is ignored).
func NewGenerator(cfg Config) *Generator {
	defaults(&cfg)
	return &Generator{c: newCluster(cfg)}
}

// Next returns the next BatchTicks ticks: one batch per node.
func (g *Generator) Next() []*wire.Batch {
	g.c.schedule(g.tick)
	out := make([]*wire.Batch, 0, len(g.c.nodes))
	for _, n := range g.c.nodes {
		out = append(out, n.batch(g.tick, g.tick+g.c.cfg.BatchTicks))
	}
	g.tick += g.c.cfg.BatchTicks
	return out
}

// Body is one batch, encoded and compressed as the agent sends it.
type Body struct {
	Agent   string
	Seq     uint64
	SentMs  int64
	Samples int
	Data    []byte
}

// Encoder turns batches into Bodies (zstd, as the agent compresses them).
type Encoder struct {
	enc *zstd.Encoder
	buf []byte
}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	return &Encoder{enc: enc}
}

// Encode encodes one batch.
func (e *Encoder) Encode(b *wire.Batch) Body {
	e.buf = wire.Marshal(e.buf[:0], b)
	return Body{Agent: b.AgentID, Seq: b.Seq, SentMs: b.SentMs, Samples: b.SampleCount(), Data: e.enc.EncodeAll(e.buf, nil)}
}

// Prepare generates cfg.Duration of simulated time and encodes it, so that
// a benchmark's client spends its CPU on sending only.
func Prepare(cfg Config) []Body {
	return encodeAll(generate(cfg))
}

// generate runs a generator of cfg for cfg.Duration of simulated time, on
// a goroutine of its own, and sends its rounds of batches (cfg with its
// defaults set).
func generate(cfg Config) <-chan []*wire.Batch {
	defaults(&cfg)
	g := NewGenerator(cfg)
	rounds := int(cfg.Duration/cfg.Interval) / cfg.BatchTicks
	batches := make(chan []*wire.Batch, 4)
	go func() {
		for i := 0; i < rounds; i++ {
			batches <- g.Next()
		}
		close(batches)
	}()
	return batches
}

// PrepareBatches encodes batches already made (a Replay's passes).
func PrepareBatches(rounds ...[]*wire.Batch) []Body {
	ch := make(chan []*wire.Batch, len(rounds))
	for _, r := range rounds {
		ch <- r
	}
	close(ch)
	return encodeAll(ch)
}

// encodeAll encodes rounds as they come (the generator runs beside it, on
// the other core), and drops the batches.
func encodeAll(rounds <-chan []*wire.Batch) []Body {
	e := NewEncoder()
	var out []Body
	for r := range rounds {
		for _, b := range r {
			out = append(out, e.Encode(b))
		}
	}
	return out
}

// Run generates batches and sends them until the simulated duration is
// covered (or ctx ends).
func Run(ctx context.Context, cfg Config) (Result, error) {
	defaults(&cfg)
	g := NewGenerator(cfg)
	ticks := int(cfg.Duration / cfg.Interval)
	bodies := make(chan Body, cfg.Nodes*2)
	go func() {
		defer close(bodies)
		e := NewEncoder()
		for t := 0; t < ticks && ctx.Err() == nil; t += cfg.BatchTicks {
			if cfg.Realtime {
				due := cfg.Start.Add(time.Duration(t+cfg.BatchTicks) * cfg.Interval)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(due)):
				}
			}
			for _, b := range g.Next() {
				select {
				case bodies <- e.Encode(b):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return Send(ctx, cfg, bodies)
}

// SendAll sends prepared bodies.
func SendAll(ctx context.Context, cfg Config, bodies []Body) (Result, error) {
	ch := make(chan Body, 1024)
	go func() {
		defer close(ch)
		for _, b := range bodies {
			select {
			case ch <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return Send(ctx, cfg, ch)
}

// Send posts bodies with cfg.Concurrency senders. Every agent's batches go
// through one sender, in order, each retried until the server takes it, as
// the agent does: the server keeps one high-water mark per agent, so a
// batch overtaken by a later one of the same agent would be taken for a
// duplicate.
func Send(ctx context.Context, cfg Config, bodies <-chan Body) (Result, error) {
	defaults(&cfg)
	var res Result
	start := time.Now()
	queues := make([]chan Body, cfg.Concurrency)
	acks := make([][]time.Duration, cfg.Concurrency)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := range queues {
		queues[w] = make(chan Body, 64)
		wg.Add(1)
		go func(q <-chan Body, acks *[]time.Duration) {
			defer wg.Done()
			var enc *zstd.Encoder // a list's head frames
			if cfg.Endpoint.ListContentType != "" && cfg.MaxList > 1 {
				enc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
				defer enc.Close()
			}
			var group []Body
			for b := range q {
				// The bodies waiting behind b go with it, as a list.
				group = append(group[:0], b)
			more:
				for enc != nil && len(group) < cfg.MaxList {
					select {
					case nb, ok := <-q:
						if !ok {
							break more
						}
						group = append(group, nb)
					default:
						break more
					}
				}
				for len(group) > 0 {
					body, ct, n := listOf(group, cfg.Endpoint.ListContentType, enc)
					if n == 1 {
						body, ct = group[0].Data, cfg.Endpoint.ContentType
					}
					t0 := time.Now()
					out, dups, err := post(ctx, cfg, body, ct, &res.Retries)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						if out == outRejected {
							atomic.AddInt64(&res.Rejected, int64(n))
							group = group[n:]
							continue
						}
						// The server is gone or ctx ended: drain.
						for range q {
						}
						return
					}
					if out == outDuplicate {
						dups = n
					}
					atomic.AddInt64(&res.Duplicates, int64(dups))
					for _, b := range group[:n] {
						*acks = append(*acks, time.Since(t0))
						res.acked(cfg, b)
					}
					group = group[n:]
				}
			}
		}(queues[w], &acks[w])
	}
	owner := map[string]int{}
	for b := range bodies {
		w, ok := owner[b.Agent]
		if !ok {
			w = len(owner) % len(queues)
			owner[b.Agent] = w
		}
		queues[w] <- b
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Acks = percentiles("ack", slices.Concat(acks...), 0)
	if err, _ := firstErr.Load().(error); err != nil {
		return res, err
	}
	return res, nil
}

type outcome int

const (
	outStored outcome = iota
	outDuplicate
	outRejected
	outFailed
)

// acked counts a body acknowledged.
func (res *Result) acked(cfg Config, b Body) {
	atomic.AddInt64(&res.Batches, 1)
	atomic.AddInt64(&res.Samples, int64(b.Samples))
	if cfg.Acked != nil {
		cfg.Acked.Add(int64(b.Samples))
	}
	if cfg.AckedMs != nil {
		for {
			cur := cfg.AckedMs.Load()
			if b.SentMs <= cur || cfg.AckedMs.CompareAndSwap(cur, b.SentMs) {
				break
			}
		}
	}
	atomic.AddInt64(&res.Bytes, int64(len(b.Data)))
}

// listOf is the first bodies of group that can go into a list as they are
// compressed, as a list (wire.AppendZstdListEntry), and how many; n is 1
// when enc is nil or the first two cannot.
func listOf(group []Body, listType string, enc *zstd.Encoder) (body []byte, contentType string, n int) {
	if enc == nil || len(group) < 2 {
		return nil, "", 1
	}
	for _, b := range group {
		next, err := wire.AppendZstdListEntry(body, b.Data, 0, enc)
		if err != nil {
			break
		}
		body, n = next, n+1
	}
	if n < 2 {
		return nil, "", 1
	}
	return body, listType, n
}

// post sends one body of contentType until the server takes it (or
// refuses it for good); dups is, for a list, the batches of it that the
// server had stored before.
func post(ctx context.Context, cfg Config, body []byte, contentType string, retries *int64) (_ outcome, dups int, _ error) {
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return outFailed, 0, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL+cfg.Endpoint.Path, bytes.NewReader(body))
		if err != nil {
			return outFailed, 0, err
		}
		req.Header.Set("Content-Type", contentType)
		if cfg.Endpoint.ContentEncoding != "" {
			req.Header.Set("Content-Encoding", cfg.Endpoint.ContentEncoding)
		}
		if cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
		}
		wait := time.Duration(20+rand.IntN(80)) * time.Millisecond
		resp, err := cfg.Client.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
			resp.Body.Close()
			switch {
			case resp.StatusCode/100 == 2:
				if resp.Header.Get("X-Taskscope-Duplicate") == "true" {
					return outDuplicate, 0, nil
				}
				var rep struct {
					Duplicates int `json:"duplicates"`
				}
				json.Unmarshal(msg, &rep)
				return outStored, rep.Duplicates, nil
			case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests ||
				resp.StatusCode == http.StatusRequestTimeout:
				if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 && s < 60 {
					wait = time.Duration(s)*time.Second/4 + wait
				}
				last = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
			default:
				return outRejected, 0, fmt.Errorf("server refused a batch: %s: %s", resp.Status, bytes.TrimSpace(msg))
			}
		} else {
			last = err
		}
		if attempt > 600 {
			return outFailed, 0, fmt.Errorf("server unavailable: %w", errors.Join(last))
		}
		atomic.AddInt64(retries, 1)
		select {
		case <-ctx.Done():
			return outFailed, 0, ctx.Err()
		case <-time.After(wait):
		}
	}
}
