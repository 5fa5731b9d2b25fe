package analysis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskscope/taskscope/internal/store"
)

// Several servers on one store (ClickHouse behind several taskscope
// replicas, store.Replicas) split the jobs between them: each job is
// analysed by the live replica that rendezvous hashing of its id names
// (the replica of the highest hash of its name and the job's id), so
// that a replica that comes or goes moves only its share of the jobs.
// Liveness is a lease: every replica records a beat in the store every
// Beat, in the store's clock, and reads the others'; one not heard of for
// DeadAfter is dead, and its jobs are the others'. Nothing is locked (the
// store has no locks), so the timing is what keeps two replicas from
// analysing one job at once:
//
//   - an analysis takes at most Lease (it is cancelled then, and nothing
//     of it is stored);
//   - a replica starts one only while its own last beat is recent
//     enough that it ends before anyone can call it dead (its start, plus
//     Lease, plus a Beat, is within DeadAfter of its last recorded beat),
//     and while it read the others within two Beats;
//   - a replica that starts takes jobs only Grace after its first beat
//     (Grace is more than Lease and two Beats, so the others have seen it
//     by then), and the others do not start a job it is to take within
//     Lease of that moment; one whose beats failed long enough for the
//     others to call it dead starts so again;
//   - a replica that stops ends its analyses, then records that it left:
//     its jobs are the others' at once.
//
// A job whose replica died is analysed by another after DeadAfter: it is
// still due (its analysis was not stored), and its new owner finds it so
// at its next poll.

// ReplicaTiming is the timing of the split (zero fields: the defaults).
type ReplicaTiming struct {
	Beat      time.Duration // default 3 s (the store's clock counts seconds)
	Lease     time.Duration // default 30 s
	DeadAfter time.Duration // default 45 s: more than Lease and two Beats
	Grace     time.Duration // default 40 s: more than Lease and two Beats
}

func (t *ReplicaTiming) defaults() {
	if t.Beat <= 0 {
		t.Beat = 3 * time.Second
	}
	if t.Lease <= 0 {
		t.Lease = 30 * time.Second
	}
	if t.DeadAfter <= 0 {
		t.DeadAfter = t.Lease + 3*t.Beat + 2*time.Second
	}
	if t.Grace <= 0 {
		t.Grace = t.Lease + 2*t.Beat + 2*time.Second
	}
}

// check reports timing that would let two replicas analyse a job at once.
func (t ReplicaTiming) check() error {
	if t.DeadAfter < t.Lease+2*t.Beat+2*time.Second || t.Grace < t.Lease+2*t.Beat+2*time.Second {
		return fmt.Errorf("replica timing: DeadAfter (%s) and Grace (%s) must be at least Lease (%s) + 2 Beats (%s) + 2 s",
			t.DeadAfter, t.Grace, t.Lease, t.Beat)
	}
	return nil
}

// member is a replica as this one last saw it: from when it takes jobs
// and until when it is alive, in this server's clock.
type member struct {
	id          string
	from, until time.Time
}

// coordinator is this server's part in the split. With a store that is
// not shared it is alone: every job is its own.
type coordinator struct {
	reg store.Replicas // nil: alone
	id  string
	t   ReplicaTiming
	log *slog.Logger
	now func() time.Time // this server's clock

	mu       sync.Mutex
	since    int64     // its first beat (store clock, s)
	beatAt   time.Time // when its last recorded beat was read (this clock)
	readAt   time.Time // when it last read the others
	members  []member  // the live ones, itself among them
	beats    int64     // beats recorded
	failures int64     // beats or reads that failed
	logged   time.Time
}

func newCoordinator(st store.Store, id string, t ReplicaTiming, log *slog.Logger) *coordinator {
	c := &coordinator{id: id, t: t, log: log, now: time.Now}
	if r, ok := store.ReplicasOf(st); ok {
		c.reg = r
	}
	if c.id == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		c.id = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return c
}

// run beats and reads the others every Beat until ctx ends.
func (c *coordinator) run(ctx context.Context) {
	if c.reg == nil {
		return
	}
	t := time.NewTicker(c.t.Beat)
	defer t.Stop()
	for {
		c.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat reads the replicas and records this one's beat.
func (c *coordinator) beat(ctx context.Context) {
	local := c.now()
	now, rs, err := c.reg.Replicas(ctx)
	if err == nil {
		c.mu.Lock()
		if c.since == 0 || local.Sub(c.beatAt) >= c.t.DeadAfter-c.t.Beat {
			// First, or back after the others may have called it dead
			// (and taken its jobs): it takes jobs Grace after now.
			c.since = now
		}
		since := c.since
		c.mu.Unlock()
		err = c.reg.Beat(ctx, store.Replica{ID: c.id, Since: since, Beat: now})
		if err == nil {
			c.seen(local, now, rs)
		}
	}
	if err != nil && ctx.Err() == nil {
		c.mu.Lock()
		c.failures++
		log := time.Since(c.logged) > time.Minute
		if log {
			c.logged = time.Now()
		}
		c.mu.Unlock()
		if log {
			c.log.Error("cannot beat among the replicas: analysing nothing until it can", "replica", c.id, "err", err)
		}
	}
}

// seen takes in what a read at local time local said: the store's time
// now and the replicas' beats (this one's just recorded at now).
func (c *coordinator) seen(local time.Time, now int64, rs []store.Replica) {
	at := func(s int64) time.Time { return local.Add(time.Duration(s-now) * time.Second) }
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beatAt, c.readAt = local, local
	c.beats++
	ms := []member{{id: c.id, from: at(c.since).Add(c.t.Grace + time.Second), until: local.Add(c.t.DeadAfter)}}
	for _, r := range rs {
		if r.ID == c.id || r.Left {
			continue
		}
		// Its beat is read a second early at most (whole seconds): it
		// is alive a second longer, and takes jobs a second earlier,
		// than it says.
		m := member{id: r.ID, from: at(r.Since).Add(c.t.Grace - time.Second), until: at(r.Beat).Add(c.t.DeadAfter + time.Second)}
		if m.until.After(local) {
			ms = append(ms, m)
		}
	}
	c.members = ms
}

// owner is the member that job belongs to at time t, of those taking jobs
// then ("" if none).
func owner(ms []member, job string, t time.Time) string {
	best, bestH := "", uint64(0)
	for _, m := range ms {
		if m.from.After(t) || !m.until.After(t) {
			continue
		}
		if v := score(m.id, job); best == "" || v > bestH || v == bestH && m.id > best {
			best, bestH = m.id, v
		}
	}
	return best
}

// score is a replica's weight for a job: the two names' hashes mixed
// (splitmix64's finalizer), so that every bit of each moves the order.
// (FNV-1a of the two names joined ranked one replica first for every job
// when the names differed in their first byte only.)
func score(replica, job string) uint64 {
	h := func(s string) uint64 {
		f := fnv.New64a()
		f.Write([]byte(s))
		return f.Sum64()
	}
	x := h(replica)*0x9e3779b97f4a7c15 ^ h(job)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// mine reports whether a job is this replica's now (the poll queues only
// those).
func (c *coordinator) mine(job string) bool {
	if c.reg == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return owner(c.members, job, c.now()) == c.id
}

// waiting reports whether a job is no replica's now, while replicas are
// in their Grace after starting, and will be this one's once they take
// jobs: its backlog, not yet queued (each such job counts in one
// replica's backlog).
func (c *coordinator) waiting(job string) bool {
	if c.reg == nil {
		return false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if owner(c.members, job, now) != "" {
		return false
	}
	soon := append([]member(nil), c.members...)
	for i := range soon {
		soon[i].from = now
	}
	return owner(soon, job, now) == c.id
}

// start is the context of an analysis of job, if this replica may start
// it now: it ends by Lease, before the job could be another's.
func (c *coordinator) start(ctx context.Context, job string) (context.Context, context.CancelFunc, bool) {
	if c.reg == nil {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, true
	}
	now := c.now()
	end := now.Add(c.t.Lease)
	c.mu.Lock()
	ok := !c.beatAt.IsZero() && !end.Add(c.t.Beat).After(c.beatAt.Add(c.t.DeadAfter)) &&
		now.Sub(c.readAt) <= 2*c.t.Beat && owner(c.members, job, now) == c.id
	if ok {
		// No other replica that takes jobs within the lease is to take it.
		later := append([]member(nil), c.members...)
		for i := range later {
			if later[i].from.After(now) && !later[i].from.After(end) {
				later[i].from = now
			}
		}
		ok = owner(later, job, now) == c.id
	}
	c.mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, c.t.Lease)
	return ctx, cancel, true
}

// leave records that this replica left (its analyses have ended).
func (c *coordinator) leave(ctx context.Context) {
	c.mu.Lock()
	since := c.since
	c.mu.Unlock()
	if c.reg == nil || since == 0 {
		return
	}
	now, _, err := c.reg.Replicas(ctx)
	if err == nil {
		err = c.reg.Beat(ctx, store.Replica{ID: c.id, Since: since, Beat: now, Left: true})
	}
	if err != nil {
		c.log.Warn("cannot record that this replica left: the others take its jobs when its beats are old", "replica", c.id, "err", err)
	}
}

// live is how many replicas this one sees taking jobs now.
func (c *coordinator) live() int {
	if c.reg == nil {
		return 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, now := 0, c.now()
	for _, m := range c.members {
		if !m.from.After(now) && m.until.After(now) {
			n++
		}
	}
	return n
}

// coordCollector exports the replicas this one sees.
func (b *background) coordCollector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "taskscope_analysis_replicas",
		Help: "Replicas that this server sees analysing jobs, itself included (1 on a store no other server shares)."},
		func() float64 { return float64(b.coord.live()) })
}
