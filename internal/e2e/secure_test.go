package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/minica"
	"github.com/taskscope/taskscope/internal/minikdc"
	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestSecureCluster: on a cluster secured as production ones are (the
// NodeManager on HTTPS only, demanding Kerberos; a KDC started by the
// test), the agent finds the NodeManager's HTTPS address, its SPNEGO
// principal and ssl-client.xml's JKS truststore in its conf dir, logs in
// with its own keytab (taskscope/_HOST) and reads how containers ended:
// the pmem kill and the ApplicationMaster's kill are known from the
// NodeManager alone (-104, -105, with its diagnostics).
func TestSecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	ctx := context.Background()
	kdc := testsrv.StartKDC(t, minikdc.Options{})
	ca, err := minica.New("e2e cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	host := nodemanager.CanonicalHostname()
	if err := kdc.AddPrincipal(ctx, "", "taskscope/"+host); err != nil {
		t.Fatal(err)
	}
	kt := filepath.Join(t.TempDir(), "taskscope.keytab")
	if err := kdc.Keytab(ctx, kt, "taskscope/"+host); err != nil {
		t.Fatal(err)
	}
	c, err := simulator.Start(ctx, simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 1, MapSlots: 2, ReduceSlots: 1,
		Security: &simulator.Security{KDC: kdc, CA: ca, Host: host, Admins: []string{"taskscope"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := newHarness(t)
	h.startAgent("e2e-secure", func(cfg *agent.Config) {
		cfg.NM = nodemanager.ClientConfig{Keytab: kt, Principal: "taskscope/_HOST", Krb5Conf: kdc.Krb5Conf}
		cfg.Lost.NMPoll = 300 * time.Millisecond
	})
	faults := []simulator.Fault{simulator.FaultPmem, simulator.FaultSpeculate}
	res := run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "secure", Maps: len(faults), NoReduces: true,
		TaskCPU: 300 * time.Millisecond, MemoryMB: 256, Faults: faults})
	attempt := func(i, n int) string {
		return strings.Replace(res.JobID, "job_", "attempt_", 1) + "_m_00000" + string(rune('0'+i)) + "_" + string(rune('0'+n))
	}
	h.waitOutcomes(t, res.JobID, map[string]outcomeWant{
		attempt(0, 0): {store.OutcomeKilledMemory, store.YarnKilledExceededPmem, "", false, store.ExitSourceNodeManager},
		attempt(1, 0): {store.OutcomeKilled, store.YarnKilledByAppMaster, "", false, store.ExitSourceNodeManager},
	})
	// The agent logged in once, and its ticket is in the KDC's log.
	if !strings.Contains(kdc.Log(), "taskscope/"+host+"@"+kdc.Realm+" for HTTP/"+host+"@"+kdc.Realm) {
		t.Errorf("the KDC issued no ticket for the NodeManager to the agent:\n%s", kdc.Log())
	}
}
