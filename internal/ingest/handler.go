package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// HandlerOptions configure the endpoint.
type HandlerOptions struct {
	Tokens []string // accepted bearer tokens; empty: no authentication
	// MaxBodyBytes bounds the request body as sent (default 32 MiB);
	// MaxDecodedBytes bounds it decompressed (default 256 MiB).
	MaxBodyBytes    int64
	MaxDecodedBytes int64
	Limits          wire.Limits
	Timeout         time.Duration // how long a request waits for its commit (default 30 s)
	Registry        prometheus.Registerer
}

// Handler serves POST /api/v1/ingest.
type Handler struct {
	p        *Pipeline
	o        HandlerOptions
	zdec     *zstd.Decoder
	rejected *prometheus.CounterVec
	received prometheus.Counter
}

// NewHandler returns the endpoint writing to p.
func NewHandler(p *Pipeline, o HandlerOptions) *Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 32 << 20
	}
	if o.MaxDecodedBytes <= 0 {
		o.MaxDecodedBytes = 256 << 20
	}
	if o.Limits == (wire.Limits{}) {
		o.Limits = wire.DefaultLimits
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	zdec, _ := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(uint64(o.MaxDecodedBytes)), zstd.WithDecoderConcurrency(0))
	h := &Handler{p: p, o: o, zdec: zdec,
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskscope_ingest_rejected_total",
			Help: "Requests refused, by reason."}, []string{"reason"}),
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskscope_ingest_received_bytes_total",
			Help: "Request body bytes received, as sent."}),
	}
	if o.Registry != nil {
		o.Registry.MustRegister(h.rejected, h.received)
	}
	return h
}

// LoadTokens reads a token file: one token per line; blank lines and lines
// starting with # are ignored.
func LoadTokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read ingest tokens: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ingest token file %s holds no token", path)
	}
	return out, nil
}

type reply struct {
	Status  string `json:"status"`
	Samples int    `json:"samples,omitempty"`
	Error   string `json:"error,omitempty"`
}

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

func (h *Handler) authorized(r *http.Request) bool {
	if len(h.o.Tokens) == 0 {
		return true
	}
	// The scheme is case-insensitive (RFC 9110 11.1).
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got = strings.TrimLeft(got, " ")
	match := 0
	for _, t := range h.o.Tokens {
		// Compare with every token, always: the time taken tells nothing.
		match |= subtle.ConstantTimeCompare([]byte(got), []byte(t))
	}
	return match == 1
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.fail(w, http.StatusMethodNotAllowed, "method", "ingest takes POST")
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="taskscope ingest"`)
		h.fail(w, http.StatusUnauthorized, "auth", "missing or wrong bearer token")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != wire.ContentType {
		h.fail(w, http.StatusUnsupportedMediaType, "content_type", "Content-Type must be "+wire.ContentType)
		return
	}
	if r.ContentLength > h.o.MaxBodyBytes {
		h.fail(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body of %d bytes exceeds the limit of %d", r.ContentLength, h.o.MaxBodyBytes))
		return
	}
	// The body and its decompressed bytes are read into buffers used again
	// by later requests: Unmarshal copies out what it keeps.
	bodyBuf, dataBuf := getBuf(), getBuf()
	defer putBuf(bodyBuf)
	defer putBuf(dataBuf)
	body, err := readAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes), (*bodyBuf)[:0], r.ContentLength)
	*bodyBuf = body
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.fail(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body exceeds the limit of %d bytes", h.o.MaxBodyBytes))
			return
		}
		h.fail(w, http.StatusBadRequest, "read", "cannot read body: "+err.Error())
		return
	}
	h.received.Add(float64(len(body)))
	data, err := h.decode(r.Header.Get("Content-Encoding"), body, (*dataBuf)[:0])
	if len(data) > 0 && &data[0] != &body[0] {
		*dataBuf = data
	}
	if err != nil {
		code, reason := http.StatusBadRequest, "encoding"
		if errors.Is(err, errTooLarge) {
			code, reason = http.StatusRequestEntityTooLarge, "too_large"
		} else if errors.Is(err, errEncoding) {
			code = http.StatusUnsupportedMediaType
		}
		h.fail(w, code, reason, err.Error())
		return
	}
	b, err := wire.Unmarshal(data, h.o.Limits)
	if err != nil {
		if errors.Is(err, wire.ErrWireType) {
			// Protobuf, but a known field holds the wrong type.
			h.fail(w, http.StatusUnprocessableEntity, "invalid", err.Error())
			return
		}
		h.fail(w, http.StatusBadRequest, "malformed", err.Error())
		return
	}
	if err := wire.Validate(b); err != nil {
		h.fail(w, http.StatusUnprocessableEntity, "invalid", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	res := h.p.Submit(ctx, b)
	switch {
	case errors.Is(res.Err, ErrBusy):
		h.fail(w, http.StatusServiceUnavailable, "busy", "the server is busy writing; retry")
	case errors.Is(res.Err, store.ErrDiskFull):
		// Not stored: the agent keeps the batch and retries.
		h.fail(w, http.StatusServiceUnavailable, "disk_full", "the server's disk is full, the batch is not stored; retry: "+res.Err.Error())
	case res.Err != nil:
		// Not stored (or not known to be): the agent keeps the batch and retries.
		h.fail(w, http.StatusServiceUnavailable, "store", "cannot store the batch now: "+res.Err.Error())
	case res.Duplicate:
		w.Header().Set("X-Taskscope-Duplicate", "true")
		writeJSON(w, http.StatusOK, reply{Status: "duplicate"})
	default:
		writeJSON(w, http.StatusOK, reply{Status: "stored", Samples: b.SampleCount()})
	}
}

// Request buffers, kept for the next requests (up to maxPooledBuf each).
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuf = 4 << 20

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

// readAll is io.ReadAll into buf, sized from the request's Content-Length
// when it gives one.
func readAll(r io.Reader, buf []byte, length int64) ([]byte, error) {
	if length > 0 && int64(cap(buf)) < length+1 {
		buf = make([]byte, 0, length+1) // +1: EOF is seen without growing
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return buf, err
		}
	}
}

var (
	errTooLarge = errors.New("decompressed body too large")
	errEncoding = errors.New("unsupported Content-Encoding")
)

// decode returns the body decompressed (in buf when it is zstd).
func (h *Handler) decode(enc string, body, buf []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "", "identity":
		return body, nil
	case "zstd":
		out, err := h.zdec.DecodeAll(body, buf)
		if err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
				return nil, fmt.Errorf("%w: limit %d bytes", errTooLarge, h.o.MaxDecodedBytes)
			}
			return nil, fmt.Errorf("cannot decompress zstd body: %v", err)
		}
		if int64(len(out)) > h.o.MaxDecodedBytes {
			return nil, fmt.Errorf("%w: limit %d bytes", errTooLarge, h.o.MaxDecodedBytes)
		}
		return out, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("cannot decompress gzip body: %v", err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, h.o.MaxDecodedBytes+1))
		if err != nil {
			return nil, fmt.Errorf("cannot decompress gzip body: %v", err)
		}
		if int64(len(out)) > h.o.MaxDecodedBytes {
			return nil, fmt.Errorf("%w: limit %d bytes", errTooLarge, h.o.MaxDecodedBytes)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w %q: use zstd, gzip or identity", errEncoding, enc)
}
