package server

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/taskscope/taskscope/internal/store"
)

// writeHealth follows whether the store can write: every ingest commit that
// fails and every summary write or maintenance that fails says it cannot; a
// commit that stores a batch says it can again. It logs the change each
// way, and while writes fail a reminder every minute (not a line per
// refused batch: with the disk full every agent's batch is refused at each
// retry). /healthz and the metrics read it.
type writeHealth struct {
	log *slog.Logger
	dir string // the store's data directory, "" if it has none

	mu      sync.Mutex
	err     error     // the last failure; nil once a write succeeds
	since   time.Time // the first failure since the last success
	refused int64     // batches refused since then
	logged  time.Time
}

// remindEvery is how often the log says again that writes still fail.
const remindEvery = time.Minute

// failed records a write that failed, refusing batches batches.
func (h *writeHealth) failed(err error, batches int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.err == nil {
		h.err, h.since, h.refused, h.logged = err, now, int64(batches), now
		if errors.Is(err, store.ErrDiskFull) {
			h.log.Error("disk full: the store cannot write; agents keep their batches and retry", "data_dir", h.dir,
				"free_bytes", h.free(), "err", err)
		} else {
			h.log.Error("the store cannot write; agents keep their batches and retry", "err", err)
		}
		return
	}
	h.err = err
	h.refused += int64(batches)
	if now.Sub(h.logged) >= remindEvery {
		h.logged = now
		h.log.Error("the store still cannot write", "disk_full", errors.Is(err, store.ErrDiskFull), "for", now.Sub(h.since).Round(time.Second),
			"batches_refused", h.refused, "free_bytes", h.free(), "err", err)
	}
}

// ok records a write that succeeded.
func (h *writeHealth) ok() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return
	}
	h.log.Warn("the store writes again", "after", time.Since(h.since).Round(time.Millisecond), "batches_refused", h.refused,
		"free_bytes", h.free())
	h.err = nil
}

// state is the last failure (nil: the store writes) and when failures began.
func (h *writeHealth) state() (error, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err, h.since
}

// free is what the data directory's filesystem has available (-1: unknown).
func (h *writeHealth) free() int64 {
	free, _ := diskSpace(h.dir)
	return free
}

// diskSpace is the available and total bytes of the filesystem of dir
// (-1, -1 without a directory or when statfs fails).
func diskSpace(dir string) (free, size int64) {
	if dir == "" {
		return -1, -1
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1, -1
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize
}

// message is what /healthz says while writes fail.
func (h *writeHealth) message() string {
	err, since := h.state()
	if err == nil {
		return ""
	}
	what, detail := "the store cannot write", ": "+err.Error()
	switch {
	case errors.Is(err, store.ErrDiskFull):
		what = "disk full: the store cannot write"
	case errors.Is(err, store.ErrUnavailable):
		// (its reason only: the error names the store's address)
		what, detail = "the store is unavailable ("+store.UnavailableReason(err)+")", ""
	}
	msg := fmt.Sprintf("%s since %s (%s)%s", what, since.UTC().Format(time.RFC3339), time.Since(since).Round(time.Second), detail)
	if free := h.free(); free >= 0 {
		msg += fmt.Sprintf("; %d bytes free in %s", free, h.dir)
	}
	return msg
}

var (
	healthWritable = prometheus.NewDesc("taskscope_store_writable",
		"1 while the store writes, 0 while its writes fail (ingest answers 503 meanwhile).", nil, nil)
	healthDiskFull = prometheus.NewDesc("taskscope_store_disk_full",
		"1 while the store's writes fail because its disk is full.", nil, nil)
	healthFailing = prometheus.NewDesc("taskscope_store_write_failing_seconds",
		"How long the store's writes have been failing (0 while it writes).", nil, nil)
	diskFree = prometheus.NewDesc("taskscope_store_disk_free_bytes",
		"Bytes available on the filesystem of the data directory.", nil, nil)
	diskSize = prometheus.NewDesc("taskscope_store_disk_size_bytes",
		"Size of the filesystem of the data directory.", nil, nil)
)

// Describe implements prometheus.Collector.
func (h *writeHealth) Describe(ch chan<- *prometheus.Desc) {
	ch <- healthWritable
	ch <- healthDiskFull
	ch <- healthFailing
	ch <- diskFree
	ch <- diskSize
}

// Collect implements prometheus.Collector.
func (h *writeHealth) Collect(ch chan<- prometheus.Metric) {
	err, since := h.state()
	writable, full, failing := 1.0, 0.0, 0.0
	if err != nil {
		writable, failing = 0, time.Since(since).Seconds()
		if errors.Is(err, store.ErrDiskFull) {
			full = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(healthWritable, prometheus.GaugeValue, writable)
	ch <- prometheus.MustNewConstMetric(healthDiskFull, prometheus.GaugeValue, full)
	ch <- prometheus.MustNewConstMetric(healthFailing, prometheus.GaugeValue, failing)
	if free, size := diskSpace(h.dir); free >= 0 {
		ch <- prometheus.MustNewConstMetric(diskFree, prometheus.GaugeValue, float64(free))
		ch <- prometheus.MustNewConstMetric(diskSize, prometheus.GaugeValue, float64(size))
	}
}
