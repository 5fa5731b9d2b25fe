package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Live tells browsers, as server-sent events, that new data arrived: at
// most one "update" event per interval, carrying a counter. Pages that show
// running jobs refetch what they show when it changes. Each reader's
// counter moves only with data of jobs they may see (an operator's, and
// everyone's when reads need no login, with all data): the sum of the
// counts of changes to the jobs of each user and each queue the reader is
// granted, kept per user and per queue as data arrives, so that no reader
// costs a query per change (Stored, Committed). The connections it holds
// are bounded, in all and per client.
type Live struct {
	mu       sync.Mutex
	all      uint64            // every change
	byUser   map[string]uint64 // changes of the jobs of each owner
	byQueue  map[string]uint64 // and of each queue
	changed  chan struct{}
	interval time.Duration
	o        LiveOptions
	conns    int
	per      map[string]int

	// Whose the data stored is: the jobs and attempts of the batches
	// stored since the last attribution, and what is known of whose
	// they are (from the batches' descriptions, else from the store).
	amu       sync.Mutex
	pending   touched
	retry     map[string]int // jobs whose owner is not known yet: rounds tried
	attJob    map[string]string
	owners    map[string]store.Owner
	unflushed map[store.Owner]bool // attributed since the last Flushed
	resolving atomic.Bool
	overflow  atomic.Int64 // ids left out of a full pending set
}

// touched are the jobs, and the attempts whose job is not known yet, of
// data stored.
type touched struct {
	jobs     map[string]bool
	attempts map[string]bool
}

// Bounds of what Live keeps, whatever agents send: the users and queues it
// counts changes of (beyond them, changes of a new user's or queue's jobs
// move operators' counters only), the ids waiting to be attributed, and
// the attempts' jobs and jobs' owners it remembers (forgotten all at once
// when full: then asked again of the store).
const (
	maxLiveKeys    = 1 << 16
	maxLivePending = 1 << 14
	maxLiveCached  = 1 << 17
	liveRetries    = 5 // attributions a job's owner is looked for (the next commits', and summaries' writes)
)

// LiveOptions bound the connections a Live holds.
type LiveOptions struct {
	MaxConns     int // in all (default 1000)
	MaxPerClient int // per client (default 16: a browser's tabs)
	// Client names the client of a request (default: the logged-in user,
	// or the request's address without its port when reads need no login:
	// behind an SSO proxy every request comes from the proxy).
	Client func(r *http.Request) string
	// Store says whose the jobs of stored data are, when the batches do
	// not (nil: from the batches' descriptions alone).
	Store store.Store
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
	return &Live{changed: make(chan struct{}), interval: interval, o: o, per: map[string]int{},
		byUser: map[string]uint64{}, byQueue: map[string]uint64{}, pending: newTouched(), retry: map[string]int{},
		attJob: map[string]string{}, owners: map[string]store.Owner{}, unflushed: map[store.Owner]bool{}}
}

func newTouched() touched { return touched{jobs: map[string]bool{}, attempts: map[string]bool{}} }

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

// Stored notes whose data a stored batch holds: the jobs of its attempts'
// descriptions, series, memberships and events (the ingest pipeline calls
// it for each batch of a commit, before Committed; it keeps nothing of b).
func (l *Live) Stored(b *wire.Batch) {
	l.amu.Lock()
	defer l.amu.Unlock()
	if len(l.attJob) > maxLiveCached || len(l.owners) > maxLiveCached {
		clear(l.attJob)
		clear(l.owners)
	}
	for i := range b.Attempts {
		a := &b.Attempts[i]
		if a.JobID == "" {
			l.touchAttempt(a.AttemptID)
			continue
		}
		l.attJob[strings.Clone(a.AttemptID)] = strings.Clone(a.JobID)
		if a.User != "" || a.Queue != "" {
			// The latest description that says each wins, as in the store.
			o := l.owners[a.JobID]
			if a.User != "" {
				o.User = strings.Clone(a.User)
			}
			if a.Queue != "" {
				o.Queue = strings.Clone(a.Queue)
			}
			l.owners[strings.Clone(a.JobID)] = o
		}
		l.touchJob(a.JobID)
	}
	for i := range b.AttemptSeries {
		l.touchAttempt(b.AttemptSeries[i].AttemptID)
	}
	for i := range b.Members {
		l.touchAttempt(b.Members[i].AttemptID)
	}
	for i := range b.Events {
		if e := &b.Events[i]; e.JobID != "" {
			l.touchJob(e.JobID)
		} else {
			l.touchAttempt(e.AttemptID)
		}
	}
}

func (l *Live) full() bool {
	if len(l.pending.jobs)+len(l.pending.attempts) >= maxLivePending {
		l.overflow.Add(1)
		return true
	}
	return false
}

func (l *Live) touchJob(job string) {
	if job != "" && !l.pending.jobs[job] && !l.full() {
		l.pending.jobs[strings.Clone(job)] = true
	}
}

func (l *Live) touchAttempt(id string) {
	if id == "" {
		return
	}
	if job, ok := l.attJob[id]; ok {
		l.touchJob(job)
	} else if !l.pending.attempts[id] && !l.full() {
		l.pending.attempts[strings.Clone(id)] = true
	}
}

// Committed records that the batches given to Stored since are stored:
// operators' counters move at once, the others' once the owners of the
// data's jobs are known (in the background: from what the batches
// described, else from the store).
func (l *Live) Committed() {
	l.bump(nil)
	l.attribute()
}

// Flushed records that the store wrote its summaries: the counters of
// the jobs attributed since the last time move again (pages that
// refetched at the commit saw the old summaries), and the jobs whose
// owner was not known are looked for again (a store that writes a job's
// owner with its summary answers it now).
func (l *Live) Flushed() {
	l.amu.Lock()
	owners := make([]store.Owner, 0, len(l.unflushed))
	for o := range l.unflushed {
		owners = append(owners, o)
	}
	clear(l.unflushed)
	l.amu.Unlock()
	l.bump(owners)
	l.attribute()
}

// Changed records a change of the jobs of owners (and, for operators, of
// anything).
func (l *Live) Changed(owners ...store.Owner) { l.bump(owners) }

// bump counts a change of the jobs of owners (each user and queue once)
// and of everything, and wakes the streams.
func (l *Live) bump(owners []store.Owner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all++
	count := func(m map[string]uint64, k string, seen map[string]bool) {
		if seen[k] {
			return
		}
		seen[k] = true
		if _, ok := m[k]; ok || len(m) < maxLiveKeys {
			m[k]++
		}
	}
	users, queues := map[string]bool{}, map[string]bool{}
	for _, o := range owners {
		count(l.byUser, o.User, users)
		count(l.byQueue, o.Queue, queues)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// attribute finds the owners of the pending jobs and attempts, in the
// background (one goroutine at a time, until nothing is pending), and
// counts their changes.
func (l *Live) attribute() {
	if !l.resolving.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			l.attributeOnce()
			l.resolving.Store(false)
			l.amu.Lock()
			more := len(l.pending.jobs)+len(l.pending.attempts) > 0
			l.amu.Unlock()
			if !more || !l.resolving.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

func (l *Live) attributeOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.amu.Lock()
	p := l.pending
	l.pending = newTouched()
	for job := range l.retry {
		p.jobs[job] = true
	}
	l.amu.Unlock()
	for id := range p.attempts {
		l.amu.Lock()
		job, ok := l.attJob[id]
		l.amu.Unlock()
		if !ok && l.o.Store != nil {
			var err error
			if job, err = store.ReadAttemptJob(ctx, l.o.Store, id); err == nil {
				l.amu.Lock()
				l.attJob[id] = job
				l.amu.Unlock()
				ok = true
			}
		}
		if ok {
			p.jobs[job] = true
		}
	}
	var owners []store.Owner
	for job := range p.jobs {
		l.amu.Lock()
		o, ok := l.owners[job]
		l.amu.Unlock()
		if !ok && l.o.Store != nil {
			var err error
			if o, err = store.ReadJobOwner(ctx, l.o.Store, job); err == nil {
				l.amu.Lock()
				l.owners[job] = o
				l.amu.Unlock()
				ok = true
			}
		}
		l.amu.Lock()
		if ok {
			delete(l.retry, job)
			owners = append(owners, o)
			if len(l.unflushed) < maxLivePending {
				l.unflushed[o] = true
			}
		} else if l.retry[job]++; l.retry[job] >= liveRetries || len(l.retry) > maxLivePending {
			delete(l.retry, job)
		}
		l.amu.Unlock()
	}
	if len(owners) > 0 {
		l.bump(owners)
	}
}

// Version is the counter the stream of the reader id shows now.
func (l *Live) Version(id *auth.Identity) uint64 {
	v, _ := l.state(id)
	return v
}

// state is the reader id's counter now, and the channel closed at the next
// change: an operator's counts every change; another reader's, the
// changes of the jobs of the users and queues they are granted.
func (l *Live) state(id *auth.Identity) (uint64, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id.Operator {
		return l.all, l.changed
	}
	var v uint64
	for _, u := range id.Users {
		v += l.byUser[u]
	}
	for _, q := range id.Queues {
		v += l.byQueue[q]
	}
	return v, l.changed
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
	id := auth.FromContext(r.Context())
	if id == nil {
		id = auth.Open // (served without a login: as everyone when reads need none)
	}
	v, ch := l.state(id)
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
			var now uint64
			if now, ch = l.state(id); now == v {
				continue // others' data: nothing to say
			}
			v = now
			fmt.Fprintf(w, "event: update\ndata: %d\n\n", v)
			fl.Flush()
		}
	}
}
