package simulator

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestOnCPU0: the first OnCPU0Maps maps' processes run on CPU 0 alone,
// last in line (their session's autogroup at nice 19), the others
// wherever they may; OnCPU0 puts a Spark executor there.
func TestOnCPU0(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	c := startCluster(t, Options{Nodes: 1, MapSlots: 3, ReduceSlots: 1})
	allowed := func(pid int) string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	for _, spec := range []JobSpec{
		{Kind: JobMapReduce, Maps: 2, NoReduces: true, TaskCPU: 100 * time.Millisecond, Hold: 3 * time.Second, OnCPU0Maps: 1},
		{Kind: JobSpark, Executors: 1, Maps: 1, TaskCPU: 100 * time.Millisecond, Hold: 3 * time.Second, OnCPU0: true},
	} {
		ctx := testCtx(t, 60*time.Second)
		j, err := c.Submit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{} // unit -> on CPU 0 alone
		jvm := map[string]int{}
		if _, err := j.WaitFor(ctx, func(rs []AttemptResult) bool {
			n := 0
			for _, r := range rs {
				if r.Type == "am" || r.JVMPID <= 0 || r.Done() {
					continue
				}
				if _, seen := want[r.Unit]; !seen {
					got := allowed(r.JVMPID)
					want[r.Unit] = got == strconv.Itoa(firstCPU())
					jvm[r.Unit] = r.JVMPID
					t.Logf("%s %s: CPUs %s", r.Unit, r.Type, got)
				}
				n++
			}
			return n == len(want) && n >= min(spec.Maps, 2) || spec.Kind == JobSpark && n >= 1
		}); err != nil {
			t.Fatal(err)
		}
		for unit, on0 := range want {
			if exp := spec.OnCPU0 || strings.HasSuffix(unit, "_m_000000_0"); on0 != exp {
				t.Errorf("%s on CPU 0 alone: %v, want %v", unit, on0, exp)
			}
		}
		for unit, pid := range jvm {
			if !strings.HasSuffix(unit, "_m_000000_0") {
				continue
			}
			var ag string
			if !testsrv.Poll(5*time.Second, func() bool {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/autogroup")
				ag = strings.TrimSpace(string(b))
				return strings.HasSuffix(ag, " nice 19")
			}) {
				t.Errorf("%s: autogroup %q, want nice 19", unit, ag)
			}
		}
		if _, err := j.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
