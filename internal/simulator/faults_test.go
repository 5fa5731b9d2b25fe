package simulator

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFaults: each fault ends its attempt as a real node would show it:
// the launcher's exit code (the exit-code file's), the NodeManager's
// exitCode and diagnostics; failed and killed attempts are retried, and a
// speculative copy runs beside its original.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs")
	}
	faults := []Fault{FaultExit1, FaultKill9, FaultPmem, FaultSpeculate}
	o := Options{Nodes: 1, MapSlots: 3, ReduceSlots: 1}
	if os.Geteuid() == 0 {
		if _, err := detectCgroups(); err == nil {
			o.Cgroups = true
			faults = append(faults, FaultOOM)
		}
	}
	if !o.Cgroups {
		t.Log("no cgroups here: the OOM killer's fault is not run")
	}
	c := startCluster(t, o)
	j, err := c.Submit(testCtx(t, 10*time.Second), JobSpec{Kind: JobMapReduce, Maps: len(faults), NoReduces: true,
		TaskCPU: 300 * time.Millisecond, MemoryMB: 256, Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(testCtx(t, 150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	byAttempt := map[string]AttemptResult{}
	for _, a := range res.Attempts {
		byAttempt[a.AttemptID] = a
		t.Logf("%s %s exit %d yarn %d start %s end %s %q", a.AttemptID, a.ContainerID, a.ExitCode, a.YarnExitStatus,
			a.Start.Format("15:04:05.000"), a.End.Format("15:04:05.000"), firstLine(a.Diagnostics))
	}
	att := func(i, n int) AttemptResult {
		t.Helper()
		a, ok := byAttempt[attemptID(c.ts, j.seq, "m", i, n)]
		if !ok {
			t.Fatalf("no attempt %d of map %d", n, i)
		}
		return a
	}
	for i, f := range faults {
		first, second := att(i, 0), att(i, 1)
		if second.ExitCode != 0 || second.YarnExitStatus != 0 {
			t.Errorf("%s: the second attempt exited %d (NodeManager %d)", f, second.ExitCode, second.YarnExitStatus)
		}
		switch f {
		case FaultExit1:
			if first.ExitCode != 1 || first.YarnExitStatus != 1 {
				t.Errorf("exit1: %d, NodeManager %d", first.ExitCode, first.YarnExitStatus)
			}
		case FaultKill9, FaultOOM:
			if first.ExitCode != 137 || first.YarnExitStatus != 137 {
				t.Errorf("%s: %d, NodeManager %d", f, first.ExitCode, first.YarnExitStatus)
			}
		case FaultPmem:
			if first.YarnExitStatus != yarnKilledExceededPmem || !strings.Contains(first.Diagnostics, "beyond the 'PHYSICAL' memory limit") ||
				first.ExitCode != 143 && first.ExitCode != 137 {
				t.Errorf("pmem: %d, NodeManager %d %q", first.ExitCode, first.YarnExitStatus, first.Diagnostics)
			}
		case FaultSpeculate:
			if first.YarnExitStatus != yarnKilledByAppMaster || first.ExitCode != 143 {
				t.Errorf("speculate: the original %d, NodeManager %d", first.ExitCode, first.YarnExitStatus)
			}
			if !second.Start.Before(first.End) || !first.Start.Before(second.Start) {
				t.Errorf("speculate: the copy ran %s..%s, the original %s..%s", second.Start, second.End, first.Start, first.End)
			}
		}
		if f != FaultSpeculate && !first.End.Before(second.Start) {
			t.Errorf("%s: the retry started at %s, before the attempt ended at %s", f, second.Start, first.End)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestLateReapAMSucceeds: an ApplicationMaster that exits 0 when its job
// is over is not killed because its NodeManager reaps it late (its end is
// known when it is reaped): its NodeManager says 0, not -105.
func TestLateReapAMSucceeds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs")
	}
	c := startCluster(t, Options{Nodes: 1, MapSlots: 1, ReduceSlots: 1, ReapDelay: amExitWait + time.Second})
	j, err := c.Submit(testCtx(t, 10*time.Second), JobSpec{Kind: JobMapReduce, Maps: 1, NoReduces: true,
		TaskCPU: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(testCtx(t, 120*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ams := 0
	for _, a := range res.Attempts {
		t.Logf("%s %s %s exit %d yarn %d %q", a.Type, a.AttemptID, a.ContainerID, a.ExitCode, a.YarnExitStatus, firstLine(a.Diagnostics))
		if a.Type != "am" {
			continue
		}
		ams++
		if a.ExitCode != 0 || a.YarnExitStatus != 0 {
			t.Errorf("the ApplicationMaster exited %d, its NodeManager says %d (%q), want 0 and 0",
				a.ExitCode, a.YarnExitStatus, firstLine(a.Diagnostics))
		}
	}
	if ams != 1 {
		t.Errorf("%d ApplicationMasters in the result, want 1", ams)
	}
}
