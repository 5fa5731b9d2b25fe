package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// severed is a store that a test cuts off: from then on every call of
// the analysis (and every beat) fails, as they would for a server killed
// or cut off from ClickHouse while it still tries.
type severed struct {
	*clickhouse.Store
	cut atomic.Bool
}

var errSevered = errors.New("severed from the store")

func (s *severed) PutAnalysis(ctx context.Context, a *store.Analysis) error {
	if s.cut.Load() {
		return errSevered
	}
	return s.Store.PutAnalysis(ctx, a)
}

func (s *severed) AnalysisStates(ctx context.Context, since int64, limit int) ([]store.AnalysisState, error) {
	if s.cut.Load() {
		return nil, errSevered
	}
	return s.Store.AnalysisStates(ctx, since, limit)
}

func (s *severed) Job(ctx context.Context, id string) (*store.JobDetail, error) {
	if s.cut.Load() {
		return nil, errSevered
	}
	return s.Store.Job(ctx, id)
}

func (s *severed) Replicas(ctx context.Context) (int64, []store.Replica, error) {
	if s.cut.Load() {
		return 0, nil, errSevered
	}
	return s.Store.Replicas(ctx)
}

func (s *severed) Beat(ctx context.Context, r store.Replica) error {
	if s.cut.Load() {
		return errSevered
	}
	return s.Store.Beat(ctx, r)
}

// analysed is one analysis a replica told its listeners of.
type analysed struct {
	replica, job string
	ended        bool
	at           time.Time // when the listener was told
}

// TestClickHouseAnalysisReplicas: two taskscope servers on one ClickHouse,
// behind a round-robin balancer, analyse the jobs of a loadgen cluster
// between them: every job that ended is analysed once, as ended, by one
// of them, and each analyses some. Then one is cut off from ClickHouse
// (every call its analysis makes fails from then on, its beats included,
// as for a server killed mid-analysis): the other takes its share once
// its beats are old, and in the end every ended job is analysed, once,
// none lost.
func TestClickHouseAnalysisReplicas(t *testing.T) {
	ch := chtest.Start(t)
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	var acked atomic.Int64 // the data's clock: the newest batch stored
	acked.Store(start.UnixMilli())
	now := func() time.Time { return time.UnixMilli(acked.Load()) }
	const settle = 2 * time.Second
	const workers = 2
	const lease = 20 * time.Second
	var mu sync.Mutex
	var told []analysed
	type replica struct {
		st  *severed
		srv *Server
	}
	var rs []replica
	for _, name := range []string{"a", "b"} {
		cst, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: ch.URL() + "?database=replicas",
			InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		cst.SetClock(store.Clock{Now: now, StaleAfter: 2 * time.Minute})
		defer cst.Close()
		st := &severed{Store: cst}
		an := analysis.NewWith(st, analysis.Options{Poll: 200 * time.Millisecond, Settle: settle, Every: time.Minute,
			Window: time.Hour, Workers: workers, Replica: name, Now: now, Replicas: analysis.ReplicaTiming{Beat: time.Second, Lease: lease},
			Listeners: []analysis.Listener{func(_ context.Context, a *analysis.Analysed) {
				mu.Lock()
				told = append(told, analysed{name, a.JobID, a.Ended, time.Now()})
				mu.Unlock()

			}}})
		srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: an, MaintainEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown(context.Background())
		rs = append(rs, replica{st, srv})
	}
	lb := &balancer{backends: []string{rs[0].srv.URL(), rs[1].srv.URL()}, client: &http.Client{Timeout: 30 * time.Second}}
	lbSrv := &http.Server{Handler: lb}
	ln, err := netListen(testsrv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	go lbSrv.Serve(ln)
	defer lbSrv.Close()

	cfg := loadgen.Config{Nodes: 4, Slots: 8, BatchTicks: 15, Seed: 11, Start: start, Duration: 40 * time.Minute,
		URL: "http://" + ln.Addr().String(), Concurrency: 4}
	bodies := loadgen.Prepare(cfg)
	// send sends rounds of the nodes' batches a few at a time, the clock
	// moved to the end of each few once all of them are stored: the data
	// is whole up to the clock, as it is live (a node's batches that lag
	// the others' would make its attempts look lost).
	send := func(part []loadgen.Body) {
		t.Helper()
		for len(part) > 0 {
			n := min(len(part), 8*cfg.Nodes)
			res, err := loadgen.SendAll(context.Background(), cfg, part[:n])
			if err != nil || res.Rejected > 0 {
				t.Fatalf("%+v, %v", res, err)
			}
			for _, b := range part[:n] {
				acked.Store(max(acked.Load(), b.SentMs))
			}
			part = part[n:]
		}
	}
	// done: every job that ended settle ago is stored analysed as it is;
	// it returns how many.
	reader := rs[0].st.Store
	done := func() (int, bool) {
		page, err := reader.Jobs(context.Background(), store.JobFilter{State: store.StateFinished, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, j := range page.Jobs {
			if now().Sub(time.UnixMilli(int64(j.LastSeen))) < settle {
				continue
			}
			a, err := reader.Analysis(context.Background(), j.JobID)
			if err != nil || !a.Ended || a.Mark != analysis.Mark(&j) {
				return n, false
			}
			n++
		}
		return n, true
	}
	// byReplica counts the analyses of each replica, of ended jobs and all.
	byReplica := func() (ended, all map[string]int) {
		mu.Lock()
		defer mu.Unlock()
		ended, all = map[string]int{}, map[string]int{}
		for _, a := range told {
			all[a.replica]++
			if a.ended {
				ended[a.replica]++
			}
		}
		return ended, all
	}
	half := len(bodies) / 2
	t0 := time.Now()
	send(bodies[:half])
	t.Logf("the first half of %d batches sent in %s", len(bodies), time.Since(t0).Round(time.Millisecond))
	var ended int
	if !testsrv.Poll(3*time.Minute, func() bool {
		var ok bool
		ended, ok = done()
		return ok && ended > 0
	}) {
		page, _ := reader.Jobs(context.Background(), store.JobFilter{Limit: 1000})
		states, _ := reader.AnalysisStates(context.Background(), 0, 1000)
		marks := map[string]uint64{}
		for _, s := range states {
			marks[s.Job.JobID] = analysis.Mark(&s.Job)
		}
		for _, j := range page.Jobs {
			a, err := reader.Analysis(context.Background(), j.JobID)
			if err == nil {
				t.Logf("%s %s last %s: stored ended %v mark %d; Jobs' mark %d, AnalysisStates' %d", j.JobID, j.State,
					time.UnixMilli(int64(j.LastSeen)).Sub(now()), a.Ended, a.Mark, analysis.Mark(&j), marks[j.JobID])
			} else {
				t.Logf("%s %s: %v", j.JobID, j.State, err)
			}
		}
		for _, r := range rs {
			resp, err := http.Get(r.srv.URL() + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "taskscope_analysis_") && !strings.Contains(l, "_bucket") && !strings.Contains(l, "findings") {
						t.Log(r.srv.URL(), l)
					}
				}
			}
		}
		e, a := byReplica()
		t.Fatalf("timed out waiting for the ended jobs analysed; told %v of ended jobs, %v in all", e, a)
	}
	split, all := byReplica()
	t.Logf("first half: %d jobs ended, analysed as ended by replica a %d, b %d; %v analyses in all", ended, split["a"],
		split["b"], all)
	if all["a"] == 0 || all["b"] == 0 {
		t.Errorf("one replica analysed all: %v", all)
	}
	// Replica b is cut off from the analysis' reads and writes (its
	// ingest goes on: what matters here is who analyses); its share goes
	// to a.
	rs[1].st.cut.Store(true)
	cutAt := time.Now()
	send(bodies[half:])
	testsrv.WaitUntil(t, "every ended job analysed after the cut", 3*time.Minute, func() bool {
		var ok bool
		ended, ok = done()
		return ok
	})
	after, allAfter := byReplica()
	t.Logf("in the end: %d jobs ended, analysed as ended by replica a %d, b %d (%s after the cut)", ended, after["a"],
		after["b"], time.Since(cutAt).Round(time.Second))
	// b analyses no job after the cut but in the passes in flight then:
	// a running job's pass whose reads were done tells its listeners
	// without storing when its findings did not change (CI once saw
	// one), and a worker passes up to Options.Batch running jobs at once.
	// Those passes end within their lease. An ended job's analysis is
	// stored before it is told: none.
	if after["b"] != split["b"] || after["a"] <= split["a"] {
		t.Errorf("after the cut: %v (%v in all), before %v (%v)", after, allAfter, split, all)
	}
	mu.Lock()
	for _, a := range told {
		if a.replica == "b" && a.at.After(cutAt.Add(lease)) {
			t.Errorf("b told of %s %s after the cut and its lease", a.job, a.at.Sub(cutAt).Round(time.Millisecond))
		}
	}
	mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	once := map[string][]string{}
	for _, a := range told {
		if a.ended {
			once[a.job] = append(once[a.job], a.replica)
		}
	}
	if len(once) != ended {
		t.Errorf("%d jobs analysed as ended, %d ended", len(once), ended)
	}
	for job, by := range once {
		if len(by) != 1 {
			t.Errorf("%s analysed as ended %d times, by %v", job, len(by), by)
		}
	}
}
