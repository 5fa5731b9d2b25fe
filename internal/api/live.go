package api

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Live tells browsers, as server-sent events, that new data arrived: at
// most one "update" event per interval, carrying a counter. Pages that show
// running jobs refetch what they show when it changes.
type Live struct {
	mu       sync.Mutex
	version  uint64
	changed  chan struct{}
	interval time.Duration
}

// NewLive returns a Live that sends at most one update per interval.
func NewLive(interval time.Duration) *Live {
	return &Live{changed: make(chan struct{}), interval: interval}
}

// Changed records that data changed (the ingest pipeline calls it after a commit).
func (l *Live) Changed() {
	l.mu.Lock()
	l.version++
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

func (l *Live) state() (uint64, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version, l.changed
}

// ServeHTTP streams events until the client goes.
func (l *Live) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	v, ch := l.state()
	fmt.Fprintf(w, "retry: 3000\nevent: update\ndata: %d\n\n", v)
	fl.Flush()
	keepAlive := time.NewTicker(25 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case <-ch:
			// Coalesce: wait out the interval, then report the newest version.
			select {
			case <-time.After(l.interval):
			case <-r.Context().Done():
				return
			}
			v, ch = l.state()
			fmt.Fprintf(w, "event: update\ndata: %d\n\n", v)
			fl.Flush()
		}
	}
}
