package sampler

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/testjvm"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// report is one of the JVM's "done" lines: its hot loop's rounds so far,
// when (its nanoTime) and its CPU time then.
type report struct{ rounds, ns, cpuNs int64 }

// done reads the JVM's last report (waiting for its first).
func done(t testing.TB, j *testjvm.JVM) report {
	t.Helper()
	var r report
	testsrv.WaitUntil(t, "the JVM's report of its work", 10*time.Second, func() bool {
		lines := strings.Split(strings.TrimSpace(j.Out.String()), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			f := strings.Fields(lines[i])
			if len(f) != 4 || f[0] != "done" {
				continue
			}
			var err [3]error
			r.rounds, err[0] = strconv.ParseInt(f[1], 10, 64)
			r.ns, err[1] = strconv.ParseInt(f[2], 10, 64)
			r.cpuNs, err[2] = strconv.ParseInt(f[3], 10, 64)
			if err[0] == nil && err[1] == nil && err[2] == nil {
				return true
			}
		}
		return false
	})
	return r
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProfile measures what a profile costs, for JVMs of 20 and 200
// threads (the task's main thread in a hot loop, the rest idle), profiled
// every 200 ms and every 50 ms. Each run is two windows of 5 s of the same
// JVM, one profiled and one not, in turn (the profiled one first every
// other run): the machine's speed drifts, the pair's two windows share it.
// Its metrics: work/s and base-work/s, the task's rounds of its hot loop a
// second profiled and not; slowdown-%, 100 × (1 − work/base-work), the
// task's slowdown (on a busy machine, the scheduler's share of a CPU it
// got moves it more than the profile); cpu-slowdown-%, the same of its
// rounds a second of the JVM's CPU time (what the dumps cost the JVM in
// CPU, whatever share it got); pause-µs/dump, the time the JVM stopped for each dump
// (its safepoint counters); ms/dump, the window over the dumps taken (the
// interval asked for, or longer when dumps stop the JVM for more than
// PauseShare of the time); stopped-%, the share of the window the JVM was
// stopped for them; agent-cpu-%, the profiler's CPU over the window (this
// process's CPU: reading /proc, the dumps, parsing, folding); batch-B, the
// profile's size in a batch, zstd as the agent sends it. Compare with
// benchstat: go test -run xxx -bench BenchmarkProfile -benchtime 1x
// -count 4 ./internal/sampler/ (docs/operations.md).
func BenchmarkProfile(b *testing.B) {
	window := 5 * time.Second
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		b.Fatal(err)
	}
	for _, threads := range []int{20, 200} {
		// The JVM has some 18 threads of its own, beside main, holder,
		// waiter and reader.
		j := testjvm.Start(b, testjvm.Options{Classes: testjvm.Classes(b, "testdata/Work.java"), Class: "Work",
			Args: []string{"0", strconv.Itoa(max(threads-22, 0)), "100"}})
		for _, interval := range []time.Duration{200 * time.Millisecond, 50 * time.Millisecond} {
			runs := 0 // of this sub-benchmark, over -count: which window comes first
			b.Run(fmt.Sprintf("threads=%d/interval=%s", threads, interval), func(b *testing.B) {
				var work, base, workCPU, baseCPU, pause, cpu, size float64
				var dumps uint32
				// rate runs one window, profiled or not, and returns the
				// task's rounds a second in it, and a second of its CPU.
				rate := func(profiled bool) (perS, perCPUS float64) {
					r0 := done(b, j)
					if profiled {
						c0 := cpuTime()
						// A fresh budget: the benchmark pauses the JVM for longer than one.
						ps := Profile(context.Background(), Config{Interval: interval, Window: window, Budget: NewBudget(time.Hour)},
							[]Target{{ProfileID: "bench", AttemptID: "a", PID: j.PID, Process: 1}})
						cpu += float64(cpuTime() - c0)
						p := &ps[0]
						if p.Status != wire.ProfileComplete {
							b.Fatalf("profile %s: %s", p.Status, p.Error)
						}
						dumps += p.Dumps
						pause += float64(p.PausedUs)
						size += float64(len(enc.EncodeAll(wire.MarshalProfile(nil, p), nil)))
					} else {
						time.Sleep(window) // the baseline: the same window, not profiled
					}
					time.Sleep(200 * time.Millisecond) // the next report line
					r1 := done(b, j)
					rounds := float64(r1.rounds - r0.rounds)
					return rounds / (float64(r1.ns-r0.ns) / 1e9), rounds / (float64(r1.cpuNs-r0.cpuNs) / 1e9)
				}
				add := func(profiled bool) {
					s, c := rate(profiled)
					if profiled {
						work, workCPU = work+s, workCPU+c
					} else {
						base, baseCPU = base+s, baseCPU+c
					}
				}
				for i := 0; i < b.N; i++ {
					runs++
					add(runs%2 == 0)
					add(runs%2 != 0)
				}
				n := float64(b.N)
				b.ReportMetric(work/n, "work/s")
				b.ReportMetric(base/n, "base-work/s")
				b.ReportMetric(100*(1-work/base), "slowdown-%")
				b.ReportMetric(100*(1-workCPU/baseCPU), "cpu-slowdown-%")
				b.ReportMetric(pause/float64(dumps), "pause-µs/dump")
				b.ReportMetric(n*float64(window.Milliseconds())/float64(dumps), "ms/dump")
				b.ReportMetric(100*pause*1000/n/float64(window), "stopped-%")
				b.ReportMetric(100*cpu/n/float64(window), "agent-cpu-%")
				b.ReportMetric(size/n, "batch-B")
				b.ReportMetric(0, "ns/op")
			})
		}
		// Its hot loop would take a CPU from the next JVM's runs.
		j.Cmd.Process.Kill()
		<-j.Done
	}
}
