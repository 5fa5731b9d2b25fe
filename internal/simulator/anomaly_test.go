package simulator

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestAnomalies runs jobs with each kind of anomaly side by side and checks
// that the processes show it.
func TestAnomalies(t *testing.T) {
	c := startCluster(t, Options{Nodes: 2, Scale: 0.3})
	ctx := testCtx(t, 120*time.Second)
	skewed, err := c.Submit(ctx, JobSpec{Kind: JobMapReduce, Name: "skewed", Maps: 2, Reduces: 2, TaskCPU: time.Second,
		Straggler: true, Skew: 2, FailMaps: 1, Oversized: true, IOMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	leaky, err := c.Submit(ctx, JobSpec{Kind: JobMapReduce, Name: "leaky", Maps: 1, NoReduces: true, TaskCPU: time.Second,
		Hold: 20 * time.Second, Leak: true})
	if err != nil {
		t.Fatal(err)
	}
	steady, err := c.Submit(ctx, JobSpec{Kind: JobMapReduce, Name: "steady", Maps: 1, NoReduces: true, TaskCPU: time.Second,
		Hold: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gc, err := c.Submit(ctx, JobSpec{Kind: JobMapReduce, Name: "gc-bound", Maps: 1, NoReduces: true, TaskCPU: 2 * time.Second, GCBound: true})
	if err != nil {
		t.Fatal(err)
	}
	// The leaking JVM's RSS grows while it runs (16 MB/s); the steady one's does not.
	growth := func(j *Job) int64 {
		ps, err := j.WaitFor(ctx, func(rs []AttemptResult) bool {
			_, ok := findProc(rs, func(r AttemptResult) bool { return r.Type == "map" && r.JVMPID > 0 })
			return ok
		})
		if err != nil {
			t.Error(err)
			return 0
		}
		m, _ := findProc(ps, func(r AttemptResult) bool { return r.Type == "map" })
		// From the end of the task's CPU burn, when it only holds on.
		testsrv.Poll(20*time.Second, func() bool {
			b, _ := os.ReadFile(filepath.Join(m.LogDir, "syslog"))
			return strings.Contains(string(b), "holding on for")
		})
		r0 := rssOf(m.JVMPID)
		// What is measured: how much its RSS grows in 1.2 s of holding on
		// (a leaking task's grows, a steady one's does not).
		time.Sleep(1200 * time.Millisecond)
		r1 := rssOf(m.JVMPID)
		if r0 == 0 || r1 == 0 {
			t.Errorf("cannot read the RSS of %s's JVM", j.Spec.Name)
		}
		return r1 - r0
	}
	var leakGrowth, steadyGrowth int64
	measured := make(chan struct{}, 2)
	go func() { leakGrowth = growth(leaky); measured <- struct{}{} }()
	go func() { steadyGrowth = growth(steady); measured <- struct{}{} }()
	byAttempt := func(j *Job) map[string]AttemptResult {
		res, err := j.Wait(ctx)
		if err != nil {
			t.Fatalf("%s: %v", j.Spec.Name, err)
		}
		m := map[string]AttemptResult{}
		for _, a := range res.Attempts {
			if a.Type != "am" {
				m[a.AttemptID] = a
			}
		}
		return m
	}
	cpu := c.scaled(time.Second)
	as := byAttempt(skewed)
	at := func(typ string, task, n int) AttemptResult {
		a, ok := as[attemptID(c.ts, skewed.seq, typ, task, n)]
		if !ok {
			t.Fatalf("no attempt %s %d %d in %v", typ, task, n, as)
		}
		return a
	}
	if a := at("m", 0, 0); a.ExitCode != 1 {
		t.Errorf("the failing map's first attempt exited %d", a.ExitCode)
	}
	wantCPU(t, "straggler, first attempt", at("m", 0, 0), 5*cpu)
	wantCPU(t, "straggler, retry", at("m", 0, 1), 5*cpu)
	wantCPU(t, "other map", at("m", 1, 0), cpu)
	wantCPU(t, "skewed reduce", at("r", 0, 0), 3*cpu)
	wantCPU(t, "other reduce", at("r", 1, 0), cpu)
	if len(as) != 5 {
		t.Errorf("%d attempts, want 5", len(as))
	}
	retry := at("m", 0, 1)
	if retry.ExitCode != 0 || retry.ContainerID == at("m", 0, 0).ContainerID {
		t.Errorf("retry exit %d container %s", retry.ExitCode, retry.ContainerID)
	}
	jc := readConf(t, filepath.Join(retry.WorkDir, "job.xml")).JobConfFor("map")
	if jc.MemoryMB != 4096 || jc.XmxBytes != 96<<20 {
		t.Errorf("oversized job: container %d MB for a %d byte heap", jc.MemoryMB, jc.XmxBytes)
	}
	if log := mustRead(t, filepath.Join(retry.LogDir, "syslog")); strings.Contains(log, "io: ") {
		t.Errorf("file IO failed:\n%s", log)
	}

	<-measured
	<-measured
	if g, s := leakGrowth, steadyGrowth; g < 8<<20 || s > 4<<20 {
		t.Errorf("RSS grew by %d MB in the leaking JVM, by %d MB in the steady one", g>>20, s>>20)
	} else {
		t.Logf("RSS grew by %d MB in the leaking JVM, by %d MB in the steady one", g>>20, s>>20)
	}
	byAttempt(leaky)
	byAttempt(steady)

	for _, a := range byAttempt(gc) {
		wantCPU(t, "GC-bound task", a, 2*cpu)
		m := regexp.MustCompile(`gc: (\d+) collections, (\d+) ms`).FindStringSubmatch(mustRead(t, filepath.Join(a.LogDir, "syslog")))
		if m == nil {
			t.Fatalf("the GC-bound task logged no GC figures")
		}
		n, _ := strconv.Atoi(m[1])
		ms, _ := strconv.Atoi(m[2])
		// A fifth of its CPU in collections is GC-bound (the analysis calls
		// 15 % severe); the share moves with the machine's load.
		if work := a.CPU - startCPU(t, a); n < 20 || time.Duration(ms)*time.Millisecond < work/5 {
			t.Errorf("GC-bound task: %d collections taking %d ms of %v CPU", n, ms, a.CPU)
		} else {
			t.Logf("GC-bound task: %d collections taking %d ms of %v CPU", n, ms, a.CPU)
		}
	}
}

// rssOf reads VmRSS of a process, in bytes (0 if it cannot).
func rssOf(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
