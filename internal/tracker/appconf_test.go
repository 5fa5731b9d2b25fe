package tracker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// tezConf renders a tez-conf.pb of the keys and values.
func tezConf(kv ...string) string {
	var out []byte
	for i := 0; i+1 < len(kv); i += 2 {
		out = hadoop.AppendTezConf(out, kv[i], kv[i+1])
	}
	return string(out)
}

// Every job counts in its queue and its allocation: a Tez container's
// queue and size come from its tez-conf.pb, a Spark executor's from its
// __spark_conf__ (YARN's default queue when it names none; its heap and
// overhead), and each YARN container's size from what its NodeManager
// allocated once it lists it (a Tez vertex may ask for its own size),
// for its attempt then and those it runs next.
func TestQueueAndAllocation(t *testing.T) {
	f := newFixture(t)
	fxYARNNode(f)
	cwdOf := func(pid int32, work string, files map[string]string) {
		cwd := f.dir(work)
		for name, content := range files {
			p := filepath.Join(cwd, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f.set(pid, func(p *fproc) { p.cwd = cwd })
	}
	tez := tezConf("tez.queue.name", "etl", "tez.task.resource.memory.mb", "2048", "tez.am.resource.memory.mb", "1536",
		"tez.task.launch.cmd-opts", "-Xmx1638m", "tez.task.resource.cpu.vcores", "2")
	// A Tez AM (container 1), a Tez task container (2), a Spark executor (3).
	c1, c2, c3 := fxContainer(1), fxContainer(2), fxContainer(3)
	work1, logs1 := yarnContainer(f, 1001, c1, yarnJVMArgv(c1, "org.apache.tez.dag.app.DAGAppMaster", "--session"))
	cwdOf(1003, work1, map[string]string{"tez-conf.pb": tez})
	f.file(1003, "root"+logs1+"/syslog_dag_"+fxTS+"_0001_1", "2026-12-04 10:00:00,123 [INFO] |app.DAGAppMaster|: Running DAG: nightly-etl\n", fixtureT0)
	work2, logs2 := yarnContainer(f, 2001, c2, yarnJVMArgv(c2, "org.apache.tez.runtime.task.TezChild", fxAMHost, "41000", c2, fxApp, "1"))
	cwdOf(2003, work2, map[string]string{"tez-conf.pb": tez})
	work3, _ := yarnContainer(f, 3001, c3, yarnJVMArgv(c3, "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend", "--driver-url",
		"spark://CoarseGrainedScheduler@"+fxDriverIP+":35000", "--executor-id", "1", "--hostname", "node1", "--cores", "1", "--app-id", fxApp))
	cwdOf(3003, work3, map[string]string{"__spark_conf__/__spark_conf__.properties": "#Spark configuration.\nspark.app.name=daily\\: load\nspark.executor.memory=2g\nspark.executor.cores=3\n"})

	r := f.tracker(false)
	r.tr.cfg.Lost = LostConfig{Enabled: true, NoNM: true, CheckEvery: time.Millisecond}
	r.tick()
	for _, c := range []struct {
		id, queue, name string
		mb, vcores      int64
	}{{c1, "etl", "nightly-etl", 1536, 1 /* tez.am.resource.cpu.vcores unset: Tez's default */}, {c2, "etl", "", 2048, 2}, {c3, "default", "daily: load", 2048 + 384, 3}} {
		a, ok := r.sink.attempts[c.id]
		if !ok {
			t.Fatalf("no attempt for container %s: %d attempts", c.id, len(r.sink.attempts))
		}
		if a.Queue != c.queue || a.MemoryMB != c.mb || a.VCores != c.vcores || c.name != "" && a.JobName != c.name {
			t.Errorf("%s: queue %q, %d MB, %d vcores, name %q; want %q, %d MB, %d vcores, %q", c.id, a.Queue, a.MemoryMB, a.VCores,
				a.JobName, c.queue, c.mb, c.vcores, c.name)
		}
	}
	if a := r.sink.attempts[c2]; a.XmxBytes != 820<<20 || a.JavaOpts != "-Xmx1638m" {
		t.Errorf("the Tez container's heap %d, java opts %q (want the JVM's own -Xmx820m)", a.XmxBytes, a.JavaOpts)
	}

	// The NodeManager lists container 2 at 4096 MB (the vertex asked for
	// more than tez.task.resource.memory.mb), container 3 without a size.
	nm := &fakeLister{}
	r.tr.lost.nm.static = nm
	nm.list(r.now(), []string{fxApp}, c1, c2, c3)
	nm.last.Memory = map[string]int64{c2: 4096}
	nm.last.VCores = map[string]int64{c2: 4}
	r.tick()
	if a := r.sink.attempts[c2]; a.MemoryMB != 4096 || a.VCores != 4 || a.Queue != "etl" {
		t.Errorf("container 2 after the NodeManager listed it: %d MB, %d vcores, queue %q; want 4096 MB, 4 vcores in etl",
			a.MemoryMB, a.VCores, a.Queue)
	}
	if a := r.sink.attempts[c3]; a.MemoryMB != 2048+384 {
		t.Errorf("container 3, listed without a size: %d MB", a.MemoryMB)
	}
	// Its next attempt (Tez reuses the container) starts at that size.
	next := fxTezAttempt(0, 1, 0)
	f.file(2003, "root"+logs2+"/syslog_"+next, "", fixtureT0.Add(2*time.Second))
	r.tick()
	r.tick()
	if a, ok := r.sink.attempts[next]; !ok || a.MemoryMB != 4096 || a.VCores != 4 || a.Queue != "etl" {
		t.Errorf("the container's next attempt: %+v (reported %v)", a, ok)
	}
}
