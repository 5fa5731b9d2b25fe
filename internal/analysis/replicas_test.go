package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// simReplicas is the store's table of beats, in a simulated clock of whole
// seconds; a replica's calls fail while it is cut off.
type simReplicas struct {
	store.Store
	mu   sync.Mutex
	now  *time.Time
	rows map[string]store.Replica
	cut  map[string]bool // reads and beats fail
	deaf map[string]bool // beats fail
}

var errCut = errors.New("cut off from the store")

func (s *simReplicas) Replicas(ctx context.Context) (int64, []store.Replica, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut[replicaOf(ctx)] {
		return 0, nil, errCut
	}
	var out []store.Replica
	for _, r := range s.rows {
		out = append(out, r)
	}
	return s.now.Unix(), out, nil
}

func (s *simReplicas) Beat(ctx context.Context, r store.Replica) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut[replicaOf(ctx)] || s.deaf[replicaOf(ctx)] {
		return errCut
	}
	s.rows[r.ID] = r
	return nil
}

type replicaKey struct{}

func replicaOf(ctx context.Context) string { s, _ := ctx.Value(replicaKey{}).(string); return s }

// TestReplicasNeverTogether simulates three replicas on one store, in
// steps of 250 ms over 6 minutes: A from the start, B from 20 s, C from
// 70 s; A dies at 130 s (its analyses run on to their lease's end); B
// leaves at 200 s (it stops starting analyses, waits for them, and says
// so), and its beats fail from 150 to 175 s (it reads the others); C is
// cut off from the store from 260 to 300 s, while A comes back (a new
// replica, A2) at 240 s. Each replica starts an analysis of every
// job it may start whenever it holds none of it, and holds it a whole
// lease. No job is ever analysed by two at once; and every job is started
// by some replica within DeadAfter and two beats of any change (none is
// lost).
func TestReplicasNeverTogether(t *testing.T) {
	timing := ReplicaTiming{Beat: time.Second, Lease: 5 * time.Second}
	timing.defaults()
	if err := timing.check(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 300e6, time.UTC)
	now := t0
	reg := &simReplicas{now: &now, rows: map[string]store.Replica{}, cut: map[string]bool{}, deaf: map[string]bool{}}
	type replica struct {
		c                *coordinator
		from, to, leave  time.Duration // lives [from, to); leaves (stops starting) at leave
		nextBeat         time.Time
		leases           map[int]time.Time // job -> end
		started, stopped bool
	}
	mk := func(id string, from, to, leave time.Duration) *replica {
		c := newCoordinator(reg, id, timing, slog.New(slog.DiscardHandler))
		c.now = func() time.Time { return now }
		return &replica{c: c, from: from, to: to, leave: leave, leases: map[int]time.Time{}}
	}
	forever := time.Hour
	rs := []*replica{mk("a", 0, 130*time.Second, forever), mk("b", 20*time.Second, forever, 200*time.Second),
		mk("c", 70*time.Second, forever, forever), mk("a2", 240*time.Second, forever, forever)}
	const jobs = 64
	lastStart := map[int]time.Time{}
	holder := map[int]string{}
	worstGap := time.Duration(0)
	for step := 0; now.Sub(t0) < 6*time.Minute; step++ {
		el := now.Sub(t0)
		reg.mu.Lock()
		reg.cut["c"] = el >= 260*time.Second && el < 300*time.Second
		reg.deaf["b"] = el >= 150*time.Second && el < 175*time.Second
		reg.mu.Unlock()
		for _, r := range rs {
			if el < r.from || el >= r.to || r.stopped {
				continue
			}
			ctx := context.WithValue(context.Background(), replicaKey{}, r.c.id)
			for j, end := range r.leases {
				if !now.Before(end) {
					delete(r.leases, j)
					delete(holder, j)
				}
			}
			if el >= r.leave {
				if len(r.leases) == 0 {
					r.c.leave(ctx)
					r.stopped = true
				}
				continue
			}
			if !now.Before(r.nextBeat) {
				r.c.beat(ctx)
				r.nextBeat = now.Add(timing.Beat)
			}
			for j := 0; j < jobs; j++ {
				if _, ok := r.leases[j]; ok {
					continue
				}
				job := fmt.Sprintf("job_%d", j)
				if _, cancel, ok := r.c.start(ctx, job); ok {
					cancel()
					if h := holder[j]; h != "" && h != r.c.id {
						t.Fatalf("at %s: %s starts %s while %s analyses it", el, r.c.id, job, h)
					}
					r.leases[j], holder[j] = now.Add(timing.Lease), r.c.id
					if !lastStart[j].IsZero() {
						worstGap = max(worstGap, now.Sub(lastStart[j]))
					}
					lastStart[j] = now
				}
			}
		}
		// A replica that died keeps its leases to their end (its
		// analyses are cut short, or not: the others do not know).
		for j, h := range holder {
			for _, r := range rs {
				if r.c.id == h && el >= r.to {
					if end := r.leases[j]; !now.Before(end) {
						delete(holder, j)
					}
				}
			}
		}
		now = now.Add(250 * time.Millisecond)
	}
	// Between two analyses of a job: a lease, then at most the time for
	// the others to call a dead replica dead, see a new one take its
	// share (Grace), or get back into the store.
	limit := timing.Lease + timing.DeadAfter + timing.Grace + 4*timing.Beat
	for j := 0; j < jobs; j++ {
		if lastStart[j].IsZero() || now.Sub(lastStart[j]) > timing.Lease+time.Second {
			t.Errorf("job_%d last started at %s", j, lastStart[j].Sub(t0))
		}
	}
	t.Logf("longest time between two starts of a job: %s (limit %s)", worstGap, limit)
	if worstGap > limit {
		t.Errorf("a job waited %s for its next analysis, more than %s", worstGap, limit)
	}
}

// TestReplicasAlone: on a store that is not shared, every job is the
// server's, at once.
func TestReplicasAlone(t *testing.T) {
	c := newCoordinator(nil, "", ReplicaTiming{}, slog.New(slog.DiscardHandler))
	if !c.mine("job_1") || c.live() != 1 {
		t.Fatal("alone, and the job is not its own")
	}
	if _, cancel, ok := c.start(context.Background(), "job_1"); !ok {
		t.Fatal("alone, and it may not start")
	} else {
		cancel()
	}
}

// TestReplicaScoresSpread: rendezvous hashing gives each of a few
// replicas, with names as alike as "a" and "b", its share of jobs named
// alike, and removing one moves only its share.
func TestReplicaScoresSpread(t *testing.T) {
	for _, names := range [][]string{{"a", "b"}, {"a", "b", "c"}, {"host1-4242-00", "host1-4242-01", "host2-17-ff"}} {
		var ms []member
		for _, n := range names {
			ms = append(ms, member{id: n, until: time.Now().Add(time.Hour)})
		}
		count := map[string]int{}
		const jobs = 3000
		moved := 0
		for i := 0; i < jobs; i++ {
			job := fmt.Sprintf("job_1796032800000_%04d", i)
			o := owner(ms, job, time.Now())
			count[o]++
			if p := owner(ms[:len(ms)-1], job, time.Now()); p != o && o != names[len(names)-1] {
				moved++
			}
		}
		for _, n := range names {
			if share := float64(count[n]) / jobs; share < 0.8/float64(len(names)) || share > 1.2/float64(len(names)) {
				t.Errorf("%v: %s owns %d of %d jobs", names, n, count[n], jobs)
			}
		}
		if moved != 0 {
			t.Errorf("%v: without %s, %d jobs of the others moved", names, names[len(names)-1], moved)
		}
	}
}

// TestReplicaGraceBacklog: while no replica takes jobs yet (each in its
// Grace after starting), every job is in the backlog of the one replica
// it will be; once one takes jobs, a job waits in none (it is that one's
// own). (taskscope_analysis_backlog read 0 through a server's first 41 s.)
func TestReplicaGraceBacklog(t *testing.T) {
	timing := ReplicaTiming{Beat: time.Second, Lease: 5 * time.Second}
	timing.defaults()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	reg := &simReplicas{now: &now, rows: map[string]store.Replica{}, cut: map[string]bool{}, deaf: map[string]bool{}}
	var cs []*coordinator
	for _, id := range []string{"a", "b"} {
		c := newCoordinator(reg, id, timing, slog.New(slog.DiscardHandler))
		c.now = func() time.Time { return now }
		cs = append(cs, c)
	}
	beat := func(cs ...*coordinator) {
		for _, c := range cs {
			c.beat(context.WithValue(context.Background(), replicaKey{}, c.id))
		}
	}
	beat(cs...)
	beat(cs...) // (each has read the other's first beat)
	const jobs = 40
	count := func(cs ...*coordinator) (mine, waiting map[string]int) {
		mine, waiting = map[string]int{}, map[string]int{}
		for j := 0; j < jobs; j++ {
			job := fmt.Sprintf("job_%d", j)
			for _, c := range cs {
				if c.mine(job) {
					mine[c.id]++
				}
				if c.waiting(job) {
					waiting[c.id]++
				}
			}
		}
		return mine, waiting
	}
	mine, waiting := count(cs...)
	if len(mine) != 0 || waiting["a"]+waiting["b"] != jobs || waiting["a"] == 0 || waiting["b"] == 0 {
		t.Fatalf("in their Grace: mine %v, waiting %v: want none mine, each job waiting in one", mine, waiting)
	}
	for end := now.Add(timing.Grace + 2*time.Second); now.Before(end); {
		now = now.Add(timing.Beat)
		beat(cs...)
	}
	mine, waiting = count(cs...)
	if len(waiting) != 0 || mine["a"]+mine["b"] != jobs {
		t.Fatalf("after their Grace: mine %v, waiting %v: want every job one's, none waiting", mine, waiting)
	}
	// A third starts: the jobs it will take stay the others' meanwhile.
	c := newCoordinator(reg, "c", timing, slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return now }
	beat(c)
	beat(append(cs, c)...)
	mine, waiting = count(append(cs, c)...)
	if len(waiting) != 0 || mine["a"]+mine["b"] != jobs || mine["c"] != 0 {
		t.Fatalf("c in its Grace: mine %v, waiting %v", mine, waiting)
	}
}
