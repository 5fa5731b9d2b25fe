package api

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/auth"
)

// Live tells browsers, as server-sent events, that new data arrived: at
// most one "update" event per interval, carrying a counter. Pages that show
// running jobs refetch what they show when it changes. The connections it
// holds are bounded, in all and per client.
type Live struct {
	mu       sync.Mutex
	version  uint64
	changed  chan struct{}
	interval time.Duration
	o        LiveOptions
	conns    int
	per      map[string]int
}

// LiveOptions bound the connections a Live holds.
type LiveOptions struct {
	MaxConns     int // in all (default 1000)
	MaxPerClient int // per client (default 16: a browser's tabs)
	// Client names the client of a request (default: the logged-in user,
	// or the request's address without its port when reads need no login:
	// behind an SSO proxy every request comes from the proxy).
	Client func(r *http.Request) string
}

// NewLive returns a Live that sends at most one update per interval.
func NewLive(interval time.Duration, o LiveOptions) *Live {
	if o.MaxConns <= 0 {
		o.MaxConns = 1000
	}
	if o.MaxPerClient <= 0 {
		o.MaxPerClient = 16
	}
	if o.Client == nil {
		o.Client = client
	}
	return &Live{changed: make(chan struct{}), interval: interval, o: o, per: map[string]int{}}
}

func client(r *http.Request) string {
	if id := auth.FromContext(r.Context()); id != nil && id.Via != auth.Open.Via {
		return "user " + id.User
	}
	return auth.PeerHost(r.RemoteAddr)
}

// enter counts a connection of client in; it says why not when one is too many.
func (l *Live) enter(client string) (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per[client] >= l.o.MaxPerClient {
		return http.StatusTooManyRequests, fmt.Sprintf("too many live connections from this client: at most %d", l.o.MaxPerClient)
	}
	if l.conns >= l.o.MaxConns {
		return http.StatusServiceUnavailable, fmt.Sprintf("too many live connections: at most %d in all", l.o.MaxConns)
	}
	l.conns++
	l.per[client]++
	return 0, ""
}

func (l *Live) leave(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns--
	if l.per[client]--; l.per[client] == 0 {
		delete(l.per, client)
	}
}

// Conns is the number of connections held now.
func (l *Live) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns
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
	client := l.o.Client(r)
	if code, msg := l.enter(client); code != 0 {
		w.Header().Set("Retry-After", "30")
		writeJSON(w, code, Error{msg})
		return
	}
	defer l.leave(client)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		// The headers alone: a stream that no one reads would hold its
		// connection, which the client thinks free, for ever.
		return
	}
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
