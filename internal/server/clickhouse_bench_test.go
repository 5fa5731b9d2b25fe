package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

var (
	benchReplayNodes  = flag.Int("bench.replay-nodes", 50, "BenchmarkStoresIngest: nodes the agent's recording is replayed on")
	benchReplayPasses = flag.Int("bench.replay-passes", 1, "BenchmarkStoresIngest: passes over the recording (9 minutes each)")
	benchLists        = flag.Bool("bench.lists", false,
		"BenchmarkStoresIngest: a node's batches waiting go as lists of up to 64 (as an agent catching up sends them); false: one a request")
	benchQueryLog = flag.Bool("bench.querylog", false,
		"BenchmarkStoresIngest: the one ClickHouse server logs its queries and parts, and the run logs where its CPU went")
	benchAnalysis = flag.Bool("bench.analysis", true,
		"BenchmarkStoresIngest: the server analyses jobs in the background (false: ingest alone)")
	benchTrace = flag.Bool("bench.trace", false,
		"BenchmarkStoresIngest: log each commit on standard error: its parts' times (the ClickHouse store's \"commit\"), "+
			"the pipeline's gathering and when its batches were queued and answered (\"commit answered\")")
)

// traceLog is the log of the stores and servers a benchmark starts: with
// -bench.trace, the commits' records (their messages begin "commit") on
// standard error, else none.
func traceLog() *slog.Logger {
	if !*benchTrace {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(commitsOnly{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})})
}

// commitsOnly passes on the records whose message begins "commit".
type commitsOnly struct{ slog.Handler }

func (h commitsOnly) Handle(ctx context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "commit") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h commitsOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return commitsOnly{h.Handler.WithAttrs(as)}
}
func (h commitsOnly) WithGroup(name string) slog.Handler {
	return commitsOnly{h.Handler.WithGroup(name)}
}

// BenchmarkStoresIngest sends the same pre-encoded batches over HTTP on
// loopback, as fast as they are taken (one connection per node, each
// node's batches in order, as agents send them), to a server on each store
// in turn: the embedded one (DuckDB), ClickHouse on one server, and
// ClickHouse on 2 shards (one ZooKeeper, one replica each). Two sources:
// loadgen (nodes -bench.nodes, 8 attempts each, a batch per node every
// 5 s, minutes -bench.minutes) and the recording of a real agent beside the
// simulator (package loadgen's testdata: short tasks, 9 s at the median,
// 214 attempts in 9 minutes) replayed on -bench.replay-nodes nodes. One
// run of the test binary sends each source to the three stores in turn;
// run it several times to alternate them (-count N would run each store N
// times in a row). It reports samples/s,
// the CPU a sample took (the test process with its server and sender, and
// the ClickHouse servers' and ZooKeeper's, from /proc/PID/stat before and
// after), and the bytes a sample takes on disk (the store's Usage at the
// end: the DuckDB file, or the ClickHouse parts of every server, before
// any compaction).
//
// With few nodes the ClickHouse store is bound by its pacing, not by the
// CPU: a commit waits for InsertEvery (1 s) since the last insert, and each
// node has one batch in flight, so samples/s is at most nodes × a batch's
// samples a second; -bench.nodes=1000 measures what the CPU allows.
//
//	go test -c -o srv.test ./internal/server/ && cd internal/server && for i in 1 2; do
//	  ../../srv.test -test.run '^$' -test.bench StoresIngest -test.benchtime 1x -test.timeout 2h \
//	    -bench.nodes=1000 -bench.minutes=1 -bench.replay-nodes=100; done
func BenchmarkStoresIngest(b *testing.B) {
	sources := []struct {
		name  string
		nodes int
		path  func(b *testing.B) string
	}{
		{"loadgen", *benchNodes, func(b *testing.B) string {
			start := time.Now().Add(-time.Duration(*benchMinutes+60) * time.Minute)
			return prepareBodies(b, loadgen.Config{Nodes: *benchNodes, Slots: 8, BatchTicks: 5, Seed: 3, Start: start,
				Duration: time.Duration(*benchMinutes) * time.Minute})
		}},
		{"replay", *benchReplayNodes, func(b *testing.B) string {
			rec, err := loadgen.ReadRecordingFile("../loadgen/testdata/agent-sim.rec.zst")
			if err != nil {
				b.Fatal(err)
			}
			r := loadgen.NewReplay(rec, *benchReplayNodes)
			start := time.Now().Add(-time.Hour - time.Duration(int64(*benchReplayPasses)*r.Span())*time.Millisecond)
			p, err := loadgen.PrepareReplayFile(r, *benchReplayPasses, start, filepath.Join(b.TempDir(), "bodies"))
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("replay: %d batches, %d samples, %.2f B/sample on the wire", p.Batches, p.Samples, float64(p.Bytes)/float64(p.Samples))
			return p.Path
		}},
	}
	for _, src := range sources {
		b.Run("src="+src.name, func(b *testing.B) {
			bodies := src.path(b)
			cfg := loadgen.Config{Concurrency: src.nodes}
			if *benchLists {
				cfg.MaxList = 64
			}
			b.Run("store=duckdb", func(b *testing.B) {
				st, err := duckdb.Open(duckdb.Options{Dir: b.TempDir(), Threads: *benchThreads})
				if err != nil {
					b.Fatal(err)
				}
				ingestInto(b, st, cfg, bodies, nil)
			})
			b.Run("store=clickhouse", func(b *testing.B) {
				srv := chtest.StartWith(b, chtest.Options{QueryLog: *benchQueryLog})
				st, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: srv.URL() + "?database=bench", Log: traceLog()})
				if err != nil {
					b.Fatal(err)
				}
				ingestInto(b, st, cfg, bodies, []int{srv.Pid()})
				if *benchQueryLog {
					lines, err := srv.QueryCPU()
					if err != nil {
						b.Fatal(err)
					}
					// (On standard error: a benchmark's log is cut to a few lines.)
					fmt.Fprintf(os.Stderr, "%s: where ClickHouse's CPU went:\n%s\n", b.Name(), strings.Join(lines, "\n"))
				}
			})
			b.Run("store=clickhouse-2-shards", func(b *testing.B) {
				cl := chtest.StartCluster(b, "bench", 2, 1)
				st, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: cl.Shards[0][0].URL() + "?database=bench", Cluster: "bench",
					Log: traceLog()})
				if err != nil {
					b.Fatal(err)
				}
				ingestInto(b, st, cfg, bodies, []int{cl.ZK.Pid(), cl.Shards[0][0].Pid(), cl.Shards[1][0].Pid()})
			})
		})
	}
}

// ingestInto runs a server on st, sends the bodies, and reports.
func ingestInto(b *testing.B, st store.Store, cfg loadgen.Config, bodies string, pids []int) {
	defer st.Close()
	opt := analysis.Options{}
	if !*benchAnalysis {
		opt.Every = -1
	}
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.NewWith(st, opt), Log: traceLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	cfg.URL = srv.URL()
	cfg.Client = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	others := func() (d time.Duration) {
		for _, pid := range pids {
			d += processCPU(b, pid)
		}
		return d
	}
	threads0 := map[int]map[string]time.Duration{}
	for _, pid := range pids {
		threads0[pid] = threadCPU(pid)
	}
	stopProfile := startProfile(b)
	cpu0, other0 := cpuTime(), others()
	b.ResetTimer()
	t0 := time.Now()
	res, err := loadgen.SendFile(context.Background(), cfg, bodies)
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu, other := cpuTime()-cpu0, others()-other0
	stopProfile()
	for _, pid := range pids {
		// Each server's CPU by thread name (BackgrProcPool: merges;
		// HTTPHandler and the unnamed: queries and inserts), of the
		// threads alive at the end ("exited": the others').
		now, was := threadCPU(pid), threads0[pid]
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(now)) {
			if d := now[name] - was[name]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", name, d.Round(10*time.Millisecond)))
			}
		}
		b.Logf("pid %d's CPU by thread: %s", pid, strings.Join(parts, ", "))
	}
	b.ReportMetric(float64(res.Acks.P99.Microseconds())/1000, "ack-p99-ms")
	b.Logf("acknowledgements: %s; %d sends repeated (503 or no answer)", res.Acks, res.Retries)
	b.Logf("commits: %s", commitStats(srv.URL()))
	// (The analyses made within the run: a run that lasts longer, paced,
	// analyses its running jobs more often, and its ended ones sooner.)
	if v, err := metricSums(srv.URL(), "taskscope_analysis_jobs_total"); err == nil {
		b.Logf("analyses: %.0f", v["taskscope_analysis_jobs_total"])
	}
	if err != nil {
		b.Fatal(err)
	}
	if res.Rejected > 0 {
		b.Fatalf("%d batches rejected", res.Rejected)
	}
	if err := st.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	u, err := st.Usage(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if u.Samples != res.Samples {
		b.Errorf("%d samples stored of %d sent", u.Samples, res.Samples)
	}
	rate := float64(res.Samples) / elapsed.Seconds()
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(float64((cpu+other).Nanoseconds())/float64(res.Samples), "cpu-ns/sample")
	b.ReportMetric(float64(u.Bytes)/float64(u.Samples), "B/sample")
	b.Logf("%d samples in %s: %.0f samples/s; CPU of the test process %.0f%%, of the ClickHouse servers %.0f%% of 2 cores; %.2f B/sample on disk",
		res.Samples, elapsed.Round(time.Millisecond), rate, 100*cpu.Seconds()/elapsed.Seconds()/2,
		100*other.Seconds()/elapsed.Seconds()/2, float64(u.Bytes)/float64(u.Samples))
}

// startProfile starts a CPU profile of the test process when
// -bench.cpuprofile names a file (suffixed with the benchmark's name), and
// returns what stops it.
func startProfile(b *testing.B) func() {
	if *benchProfile == "" {
		return func() {}
	}
	name := strings.NewReplacer("/", "-", "=", "-", "+", "-").Replace(b.Name())
	f, err := os.Create(*benchProfile + "." + name)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// threadCPU is the CPU time of each of pid's threads alive now, summed by
// the threads' names, with "total" the process's (exited threads
// included).
func threadCPU(pid int) map[string]time.Duration {
	out := map[string]time.Duration{}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var st procfs.Stat
	sum := time.Duration(0)
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil || procfs.ParseStat(data, &st) != nil {
			continue
		}
		d := time.Duration(st.UTime+st.STime) * 10 * time.Millisecond
		out[string(st.Comm)] += d
		sum += d
	}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && procfs.ParseStat(data, &st) == nil {
		out["exited"] = time.Duration(st.UTime+st.STime)*10*time.Millisecond - sum
	}
	return out
}

// commitStats sums up the ingest pipeline's commits from the server's
// metrics: how many, their mean time and batches.
func commitStats(url string) string {
	v, err := metricSums(url, "taskscope_ingest_commit_seconds_sum", "taskscope_ingest_commit_seconds_count",
		"taskscope_ingest_group_batches_sum")
	if err != nil {
		return err.Error()
	}
	n := v["taskscope_ingest_commit_seconds_count"]
	return fmt.Sprintf("%.0f, %.3f s and %.1f batches each on average", n, v["taskscope_ingest_commit_seconds_sum"]/max(n, 1),
		v["taskscope_ingest_group_batches_sum"]/max(n, 1))
}

// metricSums reads metrics of the server's /metrics, each summed over
// its labels.
func metricSums(url string, names ...string) (map[string]float64, error) {
	return metricSumsAs(nil, url, names...)
}

// metricSumsAs is metricSums of a server whose /metrics asks a login:
// the request's headers h (an operator's).
func metricSumsAs(h http.Header, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", url, resp.Status)
	}
	v := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range names {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' {
				continue
			}
			f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			if err == nil {
				v[name] += f
			}
		}
	}
	return v, nil
}
