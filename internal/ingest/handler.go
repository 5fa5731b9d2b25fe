package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/redact"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// HandlerOptions configure the endpoint.
type HandlerOptions struct {
	// Tokens are the accepted bearer tokens (none: no authentication). A
	// token followed by a host name writes only that host's data.
	Tokens *auth.Tokens
	// MaxBodyBytes bounds the request body as sent (default 32 MiB);
	// MaxDecodedBytes bounds it decompressed (default 64 MiB).
	MaxBodyBytes    int64
	MaxDecodedBytes int64
	// MaxRequestBytes bounds the memory one request takes: its body as
	// sent, decompressed and decoded (default 128 MiB).
	MaxRequestBytes int64
	// Budget is the memory all requests' bodies take together (default:
	// a budget of 256 MiB of the handler's own).
	Budget *Budget
	// BodyTimeout is how long a request may take to send its body
	// (default 30 s): a client that sends a byte now and then is cut off.
	BodyTimeout time.Duration
	Limits      wire.Limits
	Timeout     time.Duration // how long a request waits for its commit (default 30 s)
	// Redact masks secrets in what agents send (nil: redact.Default()).
	Redact *redact.Masker
	// Orders, when set, gives the profile orders for a host's agent,
	// carried in the answer to each of its batches that is stored (or a
	// duplicate): the server's way to the nodes, through the agents' own
	// requests.
	Orders   func(host string) []wire.ProfileOrder
	Registry prometheus.Registerer
}

// What a decompression in flight is charged beside its output: the
// decoder's own buffers. gzip keeps a window of 32 KiB. zstd decodes a
// stream into a ring of its frame's window and two blocks (zstdRing), beside
// tables and a block's literals and sequences (zstdCharge).
const (
	gzipCharge = 64 << 10
	zstdCharge = 1 << 20
	zstdBlock  = 128<<10 + 64 // zstd's largest block, and what its decoder writes beyond
	// zstdMinWindow is the window any frame of a body may use, whatever
	// its first frame's: a larger one may be as large as the first's.
	zstdMinWindow = 1 << 20
	// zstdKeepWindow: decoders whose ring held a window up to this are kept
	// for the next requests (a few); larger ones are let go.
	zstdKeepWindow = 8 << 20
)

// zstdRing is what a zstd stream decoder allocates for a window of w
// bytes: the window and room for two blocks (of at most the window).
func zstdRing(w int64) int64 { return w + 2*min(w+64, zstdBlock) }

// Handler serves POST /api/v1/ingest.
type Handler struct {
	p        *Pipeline
	o        HandlerOptions
	zstd     chan *zstd.Decoder // decoders kept for the next requests (a few)
	rejected *prometheus.CounterVec
	received prometheus.Counter
}

// NewHandler returns the endpoint writing to p.
func NewHandler(p *Pipeline, o HandlerOptions) *Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 32 << 20
	}
	if o.MaxDecodedBytes <= 0 {
		o.MaxDecodedBytes = 64 << 20
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 128 << 20
	}
	if o.Budget == nil {
		o.Budget = NewBudget(256 << 20)
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	if o.Limits.MaxPoints == 0 {
		o.Limits = wire.DefaultLimits
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Redact == nil {
		o.Redact = redact.Default()
	}
	h := &Handler{p: p, o: o, zstd: make(chan *zstd.Decoder, 4),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_ingest_rejected_total",
			Help: "Requests refused, by reason."}, []string{"reason"}),
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskscope_ingest_received_bytes_total",
			Help: "Request body bytes received, as sent."}),
	}
	if o.Registry != nil {
		o.Registry.MustRegister(h.rejected, h.received,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_ingest_memory_bytes",
				Help: "Memory that request bodies take now, read, decompressed and decoded (of the budget)."},
				func() float64 { return float64(o.Budget.InUse()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_ingest_memory_budget_bytes",
				Help: "The memory request bodies may take together."},
				func() float64 { return float64(o.Budget.Max()) }))
	}
	return h
}

// reply is the answer's body (docs/wire.md, "The answer").
type reply = wire.Answer

func (h *Handler) fail(w http.ResponseWriter, code int, reason, msg string) {
	h.rejected.WithLabelValues(reason).Inc()
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, reply{Status: "error", Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// authorized reports whether r carries an accepted token, and the host it
// is bound to ("" for any).
func (h *Handler) authorized(r *http.Request) (host string, ok bool) {
	if h.o.Tokens.Len() == 0 {
		return "", true
	}
	tok, ok := h.o.Tokens.Lookup(auth.Bearer(r.Header.Get("Authorization")))
	if !ok {
		return "", false
	}
	if len(tok.Fields) > 0 {
		host = tok.Fields[0]
	}
	return host, true
}

// ownHost checks that a batch sent with a token bound to host writes only
// that host's data: it names the host, its agent is the host's (agent_id
// is the host name, or starts with it and a dash), and the processes it
// describes are the host's (their keys are wire.ProcessKey of the host).
func ownHost(b *wire.Batch, host string) error {
	if b.Host != host {
		return fmt.Errorf("this token writes host %s's data, not %s's", host, b.Host)
	}
	if b.AgentID != host && !strings.HasPrefix(b.AgentID, host+"-") {
		return fmt.Errorf("this token's agents are host %s's: agent_id must be %s or start with %s-, not %q", host, host, host, b.AgentID)
	}
	for i := range b.Processes {
		p := &b.Processes[i]
		if p.Key != wire.ProcessKey(host, p.PID, p.StartMs-b.KeyStartOffsetMs) {
			return fmt.Errorf("processes[%d] (pid %d): key %016x is not host %s's process key of that pid and start", i, p.PID, p.Key, host)
		}
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.fail(w, http.StatusMethodNotAllowed, "method", "ingest takes POST")
		return
	}
	host, ok := h.authorized(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskscope ingest"`)
		h.fail(w, http.StatusUnauthorized, "auth", "missing or wrong bearer token")
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != wire.ContentType && mt != wire.ListContentType {
		h.fail(w, http.StatusUnsupportedMediaType, "content_type", "Content-Type must be "+wire.ContentType+" (a batch) or "+
			wire.ListContentType+" (a list of batches)")
		return
	}
	if r.ContentLength > h.o.MaxBodyBytes {
		h.fail(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body of %d bytes exceeds the limit of %d", r.ContentLength, h.o.MaxBodyBytes))
		return
	}
	// On its way to the pipeline: a commit that gathers waits for it.
	arrived := h.p.Arriving()
	defer arrived()
	// Everything this request allocates for its body is taken from the
	// budget first, and given back when it is answered.
	l := &lease{b: h.o.Budget, max: h.o.MaxRequestBytes}
	defer l.release()
	body, err := h.readBody(w, r, l)
	if err != nil {
		h.failBody(w, err)
		return
	}
	defer body.drop()
	h.received.Add(float64(len(body.b)))
	data, inflated, err := h.inflate(r.Header.Get("Content-Encoding"), body, l)
	if err != nil {
		h.failBody(w, err)
		return
	}
	defer inflated.drop()
	lim := h.o.Limits
	lim.Reserve, lim.Release = l.take, l.give
	list := mt == wire.ListContentType
	parts, err := wire.Bodies(mt, data)
	if err != nil {
		h.fail(w, http.StatusBadRequest, "malformed", err.Error())
		return
	}
	bs := make([]*wire.Batch, 0, len(parts))
	for i, part := range parts {
		b, err := wire.Unmarshal(part, lim)
		if err == nil {
			err = wire.Validate(b)
		}
		if err != nil && h.storedBefore(r.Context(), part) {
			// As docs/wire.md says: a (agent_id, seq) stored before is a
			// duplicate, whatever the rest of the body.
			continue
		}
		if err != nil {
			if list {
				err = fmt.Errorf("batches[%d]: %w", i, err)
			}
			switch {
			case errors.Is(err, errBusy), errors.Is(err, errRequestMemory):
				h.failBody(w, err)
			case errors.Is(err, wire.ErrWireType), errors.Is(err, wire.ErrInvalid):
				// Protobuf, but a known field holds the wrong type, or a
				// rule is broken.
				h.fail(w, http.StatusUnprocessableEntity, "invalid", err.Error())
			default:
				h.fail(w, http.StatusBadRequest, "malformed", err.Error())
			}
			return
		}
		bs = append(bs, b)
	}
	// The batches hold no reference to the bytes: they go back at once.
	inflated.drop()
	body.drop()
	if len(bs) == 0 {
		h.duplicate(w, nil)
		return
	}
	last := map[string]uint64{}
	for i, b := range bs {
		if host != "" {
			if err := ownHost(b, host); err != nil {
				if list {
					err = fmt.Errorf("batches[%d]: %w", i, err)
				}
				h.fail(w, http.StatusForbidden, "host", err.Error())
				return
			}
		}
		if seq, ok := last[b.AgentID]; ok && b.Seq <= seq {
			h.fail(w, http.StatusUnprocessableEntity, "invalid", fmt.Sprintf("%v: batches[%d]: seq %d of agent %q after its seq %d: "+
				"a list holds each agent's batches in the order of their sequences", wire.ErrInvalid, i, b.Seq, b.AgentID, seq))
			return
		}
		last[b.AgentID] = b.Seq
		// Other agents may not mask what the reference agent masks.
		h.o.Redact.Batch(b)
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	arrived()
	res := h.p.SubmitMany(ctx, bs)
	what, them := "the batch is", "the batch"
	if list {
		what, them = "the batches are", "the batches"
	}
	switch {
	case errors.Is(res.Err, ErrBusy):
		h.fail(w, http.StatusServiceUnavailable, "busy", "the server is busy writing; retry")
	case errors.Is(res.Err, store.ErrDiskFull):
		// Not stored: the agent keeps the batch and retries.
		h.fail(w, http.StatusServiceUnavailable, "disk_full", "the server's disk is full, "+what+" not stored; retry: "+res.Err.Error())
	case errors.Is(res.Err, store.ErrUnavailable):
		// Not stored: the agent keeps the batch and retries. (The store's
		// address is the server's to know: the reason names none.)
		h.fail(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable ("+store.UnavailableReason(res.Err)+
			"), "+what+" not stored; retry")
	case res.Err != nil:
		// Not stored (or not known to be): the agent keeps the batch and retries.
		h.fail(w, http.StatusServiceUnavailable, "store", "cannot store "+them+" now: "+res.Err.Error())
	case res.Duplicate && len(bs) == len(parts):
		h.duplicate(w, h.orders(bs[0].Host))
	default:
		samples := 0
		for _, b := range bs {
			samples += b.SampleCount()
		}
		rep := reply{Status: "stored", Samples: samples, Profiles: h.orders(bs[0].Host)}
		if list {
			rep.Batches, rep.Duplicates = len(parts), res.Duplicates+len(parts)-len(bs)
		}
		writeJSON(w, http.StatusOK, rep)
	}
}

func (h *Handler) duplicate(w http.ResponseWriter, orders []wire.ProfileOrder) {
	w.Header().Set("X-Taskscope-Duplicate", "true")
	writeJSON(w, http.StatusOK, reply{Status: "duplicate", Profiles: orders})
}

// orders are the profile orders for host's agent (none without Orders).
func (h *Handler) orders(host string) []wire.ProfileOrder {
	if h.o.Orders == nil {
		return nil
	}
	os := h.o.Orders(host)
	if len(os) > wire.MaxOrders {
		os = os[:wire.MaxOrders]
	}
	return os
}

// storedBefore reports whether a body that cannot be taken names an
// (agent_id, seq) that was stored before (a retry whose first try got
// through, changed since): then it is answered as a duplicate. Only stores
// that say their agents' sequences (store.ReadAgentSeq) are asked.
func (h *Handler) storedBefore(ctx context.Context, data []byte) bool {
	agent, seq, ok := wire.PeekID(data)
	if !ok {
		return false
	}
	stored, can, err := store.ReadAgentSeq(ctx, h.p.st, agent)
	return can && err == nil && seq <= stored
}

var (
	errTooLarge    = errors.New("decompressed body too large")
	errBodyTooBig  = errors.New("body too large")
	errBodyTimeout = errors.New("body not received in time")
	errEncoding    = errors.New("unsupported Content-Encoding")
)

// failBody answers a body that could not be read, decompressed or decoded
// within the limits.
func (h *Handler) failBody(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errBusy):
		h.fail(w, http.StatusServiceUnavailable, "memory", err.Error())
	case errors.Is(err, errRequestMemory), errors.Is(err, errTooLarge), errors.Is(err, errBodyTooBig):
		h.fail(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
	case errors.Is(err, errBodyTimeout):
		h.fail(w, http.StatusRequestTimeout, "timeout", err.Error())
	case errors.Is(err, errEncoding):
		h.fail(w, http.StatusUnsupportedMediaType, "encoding", err.Error())
	default:
		h.fail(w, http.StatusBadRequest, "encoding", err.Error())
	}
}

// readBody reads the request's body within BodyTimeout, MaxBodyBytes and
// the lease: its buffer grows with what arrives, whatever the request
// announced.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, l *lease) (*buffer, error) {
	rc := http.NewResponseController(w)
	// The deadline is for the body only: cleared once it is in (the
	// connection is then read in the background for its closing).
	rc.SetReadDeadline(time.Now().Add(h.o.BodyTimeout))
	defer rc.SetReadDeadline(time.Time{})
	buf, err := newBuffer(l)
	if err != nil {
		return nil, err
	}
	src := http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes)
	for {
		if err := buf.room(int(h.o.MaxBodyBytes) + 1); err != nil {
			buf.drop()
			return nil, err
		}
		n, err := src.Read(buf.b[len(buf.b):cap(buf.b)])
		buf.b = buf.b[:len(buf.b)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			buf.drop()
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				return nil, fmt.Errorf("%w: body exceeds the limit of %d bytes", errBodyTooBig, h.o.MaxBodyBytes)
			case errors.Is(err, os.ErrDeadlineExceeded):
				return nil, fmt.Errorf("%w: the body did not arrive within %v", errBodyTimeout, h.o.BodyTimeout)
			}
			return nil, fmt.Errorf("cannot read body: %w", err)
		}
	}
}

// inflate returns the body decompressed as Content-Encoding says, and the
// buffer that holds it (nil when the body is not compressed: then it is
// the body itself).
func (h *Handler) inflate(enc string, body *buffer, l *lease) ([]byte, *buffer, error) {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "", "identity":
		return body.b, nil, nil
	case "zstd":
		return h.unzstd(body.b, l)
	case "gzip":
		return h.gunzip(body.b, l)
	}
	return nil, nil, fmt.Errorf("%w %q: use zstd, gzip or identity", errEncoding, enc)
}

func (h *Handler) tooLarge() error {
	return fmt.Errorf("%w: limit %d bytes", errTooLarge, h.o.MaxDecodedBytes)
}

// unzstd decodes b as a stream into a buffer that grows with what comes
// out (sized from the first frame's content size when it says), up to
// MaxDecodedBytes: each byte is decoded once, and a bomb is refused having
// taken at most the limit and the decoder's window, whatever it expands to.
// The window is bounded too: any frame may use the first frame's (within
// the limit) or zstdMinWindow, whichever is larger, and that is charged.
func (h *Handler) unzstd(b []byte, l *lease) ([]byte, *buffer, error) {
	limit := h.o.MaxDecodedBytes
	window, size := int64(zstdMinWindow), 0
	var hdr zstd.Header
	if hdr.Decode(b) == nil && !hdr.Skippable {
		w := int64(min(hdr.WindowSize, uint64(limit)+1))
		if hdr.SingleSegment {
			// (Its window is its content.)
			w = int64(min(hdr.FrameContentSize, uint64(limit)+1))
		}
		if hdr.HasFCS {
			if hdr.FrameContentSize > uint64(limit) {
				return nil, nil, h.tooLarge()
			}
			size = int(hdr.FrameContentSize)
		}
		if w > limit {
			return nil, nil, h.windowTooLarge(limit)
		}
		window = max(window, w)
	}
	window = min(window, limit)
	charge := zstdCharge + zstdRing(window)
	if err := l.take(charge); err != nil {
		return nil, nil, err
	}
	defer l.give(charge)
	d, err := h.zstdDecoder()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot decompress zstd body: %w", err)
	}
	defer h.putZstd(d, window)
	if err := d.ResetWithOptions(bytes.NewReader(b), zstd.WithDecoderMaxWindow(uint64(window))); err != nil {
		return nil, nil, fmt.Errorf("cannot decompress zstd body: %w", err)
	}
	out, err := readAll(d, l, size, int(limit))
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		// (A stream's window, as the decoder says it.)
		return nil, nil, h.windowTooLarge(window)
	}
	return h.inflated(out, err, "zstd")
}

// inflated is what a decompression read by readAll gives: the body, or
// errFull as the decompressed limit's 413, the budget's errors as they
// are, any other as the body's.
func (h *Handler) inflated(out *buffer, err error, format string) ([]byte, *buffer, error) {
	switch {
	case err == nil:
		return out.b, out, nil
	case errors.Is(err, errFull):
		return nil, nil, h.tooLarge()
	case errors.Is(err, errBusy), errors.Is(err, errRequestMemory):
		return nil, nil, err
	}
	return nil, nil, fmt.Errorf("cannot decompress %s body: %w", format, err)
}

func (h *Handler) windowTooLarge(w int64) error {
	return fmt.Errorf("%w: a zstd frame needs a window of more than %d bytes (the first frame's, or 1 MiB, within the limit of %d)",
		errTooLarge, w, h.o.MaxDecodedBytes)
}

// zstdDecoder returns a stream decoder (one kept from an earlier request,
// or a new one) that decodes on the request's goroutine.
func (h *Handler) zstdDecoder() (*zstd.Decoder, error) {
	select {
	case d := <-h.zstd:
		return d, nil
	default:
	}
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(uint64(h.o.MaxDecodedBytes)), zstd.WithDecoderMaxWindow(uint64(h.o.MaxDecodedBytes)))
}

// putZstd keeps d for the next requests, unless its ring may hold more than
// zstdKeepWindow (kept, it would be live memory no request is charged for).
func (h *Handler) putZstd(d *zstd.Decoder, window int64) {
	d.Reset(nil) // (lets go of the body)
	if window <= zstdKeepWindow {
		select {
		case h.zstd <- d:
			return
		default:
		}
	}
	d.Close()
}

// gunzip decodes b as it streams, into a buffer that grows with what
// comes out, up to MaxDecodedBytes.
func (h *Handler) gunzip(b []byte, l *lease) ([]byte, *buffer, error) {
	if err := l.take(gzipCharge); err != nil {
		return nil, nil, err
	}
	defer l.give(gzipCharge)
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("cannot decompress gzip body: %w", err)
	}
	out, err := readAll(zr, l, 0, int(h.o.MaxDecodedBytes))
	return h.inflated(out, err, "gzip")
}

// readAll reads r to its end into a buffer charged to l: first of size
// bytes (0: a small one), then in further chunks, each twice the last, up
// to limit bytes in all; errFull when r has more. A chunk is added only
// when more does come (a byte read aside tells), so a size that is right
// is allocated once; chunks are joined at the end (a body that is refused,
// a bomb, never is: it allocates the limit, not twice as growing one buffer
// would).
func readAll(r io.Reader, l *lease, size, limit int) (*buffer, error) {
	out, err := newBuffer(l)
	if err != nil {
		return nil, err
	}
	var done []*buffer // full chunks before out
	total := 0         // bytes in them
	fail := func(err error) (*buffer, error) {
		for _, c := range done {
			c.drop()
		}
		out.drop()
		return nil, err
	}
	if size > cap(out.b) {
		if err := out.grow(min(size, limit)); err != nil {
			return fail(err)
		}
	}
	var one [1]byte
	for {
		var n int
		if len(out.b) < cap(out.b) {
			n, err = r.Read(out.b[len(out.b):cap(out.b)])
			out.b = out.b[:len(out.b)+n]
		} else if n, err = r.Read(one[:]); n > 0 {
			left := limit - total - len(out.b)
			if left <= 0 {
				return fail(errFull)
			}
			next := &buffer{l: l}
			if gerr := next.grow(min(max(2*cap(out.b), minGrow), left)); gerr != nil {
				next.drop()
				return fail(gerr)
			}
			done, total = append(done, out), total+len(out.b)
			out = next
			out.b = append(out.b, one[0])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
	}
	if len(done) == 0 {
		return out, nil
	}
	all := &buffer{l: l}
	if err := all.grow(total + len(out.b)); err != nil {
		return fail(err)
	}
	for _, c := range append(done, out) {
		all.b = append(all.b, c.b...)
		c.drop()
	}
	return all, nil
}
