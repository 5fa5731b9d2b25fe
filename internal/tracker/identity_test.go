package tracker

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// Every YARN application is exactly one job, whatever order the tracker
// finds its containers' wrappers, ApplicationMasters and executors in, and
// whichever tick classifies them first (issue 14): MapReduce's is
// job_X_N, Spark's and Tez's application_X_N; Spark jobs are named by
// spark.app.name, Tez jobs by their DAG.

// idContainer is one container of the identity test's applications.
type idContainer struct {
	app, seq int
	jvm      func(c idContainer) []string
	files    map[string]string // in the working directory
	logs     map[string]string // in the log directory
}

func (c idContainer) id() string {
	return fmt.Sprintf("container_e01_%s_%04d_01_%06d", fxTS, c.app, c.seq)
}

func (c idContainer) appID() string { return fmt.Sprintf("application_%s_%04d", fxTS, c.app) }

func (c idContainer) paths() (work, logs string) {
	return fxNMLocal + "/usercache/alice/appcache/" + c.appID() + "/" + c.id(), fxNMLogs + "/" + c.appID() + "/" + c.id()
}

func (c idContainer) jvmArgv(mainClass string, args ...string) []string {
	work, logs := c.paths()
	argv := []string{fxJava, "-Xmx820m", "-Djava.io.tmpdir=" + work + "/tmp", "-Dyarn.app.container.log.dir=" + logs, mainClass}
	return append(argv, args...)
}

// idApps are a MapReduce, a Spark and a Tez application, with the job
// each must be and the name it must have.
func idApps() (cs []idContainer, jobs map[int]string, names map[int]string) {
	jobXML := func(name string) string {
		return "<configuration><property><name>mapreduce.job.name</name><value>" + name + "</value></property>" +
			"<property><name>mapreduce.map.memory.mb</name><value>1024</value></property>" +
			"<property><name>yarn.app.mapreduce.am.resource.mb</name><value>1536</value></property></configuration>"
	}
	sparkConf := "spark.app.name=sparky\nspark.executor.memory=1g\nspark.yarn.am.memory=512m\n"
	mr := func(c idContainer) []string {
		if c.seq == 1 {
			return c.jvmArgv("org.apache.hadoop.mapreduce.v2.app.MRAppMaster")
		}
		return c.jvmArgv("org.apache.hadoop.mapred.YarnChild", fxAMHost, "40123",
			fmt.Sprintf("attempt_%s_%04d_m_%06d_0", fxTS, c.app, c.seq-2), "1099511627778")
	}
	spark := func(c idContainer) []string {
		if c.seq == 1 {
			return c.jvmArgv("org.apache.spark.deploy.yarn.ExecutorLauncher", "--arg", fxDriverIP+":35000")
		}
		return c.jvmArgv("org.apache.spark.executor.YarnCoarseGrainedExecutorBackend", "--driver-url",
			"spark://CoarseGrainedScheduler@"+fxDriverIP+":35000", "--executor-id", fmt.Sprint(c.seq-1),
			"--hostname", "node1", "--cores", "1", "--app-id", c.appID())
	}
	tez := func(c idContainer) []string {
		if c.seq == 1 {
			return c.jvmArgv("org.apache.tez.dag.app.DAGAppMaster", "--session")
		}
		return c.jvmArgv("org.apache.tez.runtime.task.TezChild", fxAMHost, "41000", c.id(), c.appID(), "1")
	}
	dagLog := map[string]string{fmt.Sprintf("syslog_dag_%s_0003_1", fxTS): "2026-12-04 10:00:00,123 [INFO] [IPC Server handler 0] |app.DAGAppMaster|: Running DAG: tezzy, callerContext={ context=CLI }\n"}
	cs = []idContainer{
		{app: 1, seq: 1, jvm: mr, files: map[string]string{"job.xml": jobXML("mr-job")}},
		{app: 1, seq: 2, jvm: mr, files: map[string]string{"job.xml": jobXML("mr-job")}},
		{app: 2, seq: 1, jvm: spark, files: map[string]string{"__spark_conf__/__spark_conf__.properties": sparkConf}},
		{app: 2, seq: 2, jvm: spark, files: map[string]string{"__spark_conf__/__spark_conf__.properties": sparkConf}},
		{app: 2, seq: 3, jvm: spark, files: map[string]string{"__spark_conf__/__spark_conf__.properties": sparkConf}},
		{app: 3, seq: 1, jvm: tez, logs: dagLog},
		{app: 3, seq: 2, jvm: tez},
	}
	jobs = map[int]string{1: "job_" + fxTS + "_0001", 2: "application_" + fxTS + "_0002", 3: "application_" + fxTS + "_0003"}
	names = map[int]string{1: "mr-job", 2: "sparky", 3: "tezzy"}
	return cs, jobs, names
}

// How a container shows itself: its wrappers (whose command lines and
// launch script tell nothing: an agent that cannot read the script) for
// gap ticks, then its JVM; with preExec the JVM is first seen between fork
// and exec (its parent's command line) for a tick.
type idShow struct {
	at, gap int
	preExec bool
}

func TestJobIdentityPermuted(t *testing.T) {
	cs, jobs, names := idApps()
	rng := rand.New(rand.NewSource(14))
	const runs = 24
	for run := 0; run < runs; run++ {
		order := rng.Perm(len(cs))
		shows := make([]idShow, len(cs))
		for i, k := range order {
			// Containers appear one or two to a tick in the permuted
			// order; a third wait for their JVM beyond the whole run
			// of the others, some are seen before their exec.
			shows[k] = idShow{at: i / 2, gap: rng.Intn(4), preExec: rng.Intn(2) == 0}
			if rng.Intn(3) == 0 {
				shows[k].gap = 6 + rng.Intn(4)
			}
		}
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			f := newFixture(t)
			fxYARNNode(f)
			r := f.tracker(false)
			last := 0
			for _, s := range shows {
				last = max(last, s.at+s.gap+2)
			}
			for tick := 0; tick <= last+1; tick++ {
				for k, c := range cs {
					s := shows[k]
					pid := int32(3000 + 10*k)
					work, logs := c.paths()
					switch tick {
					case s.at:
						wd := f.dir(work)
						for name, content := range c.files {
							f.write("../fs"+work+"/"+name, content)
						}
						for name, content := range c.logs {
							f.write("../fs"+logs+"/"+name, content)
						}
						f.add(fproc{pid: pid, ppid: fxNMPID, sid: fxNMPID, argv: []string{"bash", "default_container_executor.sh"}, cwd: wd})
						f.add(fproc{pid: pid + 1, ppid: pid, argv: []string{"/bin/bash", "-c", "launch_container.sh"}, cwd: wd})
					case s.at + s.gap + 1:
						wd := f.dir(work)
						if s.preExec {
							f.add(fproc{pid: pid + 2, ppid: pid + 1, sid: pid + 1, argv: []string{"/bin/bash", "-c", "launch_container.sh"}, cwd: wd})
						} else {
							f.add(fproc{pid: pid + 2, ppid: pid + 1, sid: pid + 1, argv: c.jvm(c), cwd: wd})
						}
						// The JVM's log directory, as it sees it (its root is the fixture's).
						for name, content := range c.logs {
							f.file(pid+2, "root"+logs+"/"+name, content, fixtureT0)
						}
					case s.at + s.gap + 2:
						if s.preExec {
							f.exec(pid+2, c.jvm(c)...)
						}
					}
				}
				r.tick()
			}
			byApp := map[int]map[string]bool{}
			named := map[int]bool{}
			for _, a := range r.sink.attempts {
				app := 0
				for _, c := range cs {
					if a.ContainerID == c.id() {
						app = c.app
					}
				}
				if app == 0 {
					t.Errorf("attempt %s has no container of the test", a.AttemptID)
					continue
				}
				if byApp[app] == nil {
					byApp[app] = map[string]bool{}
				}
				byApp[app][a.JobID] = true
				if a.JobName != "" {
					if a.JobName != names[app] {
						t.Errorf("attempt %s of application %d is named %q, want %q", a.AttemptID, app, a.JobName, names[app])
					}
					named[app] = true
				}
			}
			for app, want := range jobs {
				if got := byApp[app]; len(got) != 1 || !got[want] {
					t.Errorf("application %d: jobs %v, want only %s (shows %+v, order %v)", app, keys(got), want, shows, order)
				}
				if !named[app] {
					t.Errorf("application %d: no attempt names job %s (shows %+v)", app, want, shows)
				}
			}
			// Every container runs its attempt (or is its own), never
			// a placeholder of the wrong job.
			for _, c := range cs {
				found := false
				for _, a := range r.sink.attempts {
					if a.ContainerID == c.id() && !strings.HasPrefix(a.AttemptID, "container_") || a.AttemptID == c.id() {
						found = true
					}
				}
				if !found {
					t.Errorf("container %s runs no attempt", c.id())
				}
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A container whose framework never shows (no task JVM: YARN's
// distributed shell) is reported after undecidedTicks under its
// application, and its processes' samples go out meanwhile.
func TestJobIdentityUndecided(t *testing.T) {
	c := idContainer{app: 9, seq: 2}
	work, _ := c.paths()
	f := newFixture(t)
	fxYARNNode(f)
	wd := f.dir(work)
	f.add(fproc{pid: 3000, ppid: fxNMPID, sid: fxNMPID, argv: []string{"bash", "default_container_executor.sh"}, cwd: wd})
	f.add(fproc{pid: 3001, ppid: 3000, argv: []string{"/bin/bash", "-c", "launch_container.sh"}, cwd: wd})
	f.add(fproc{pid: 3002, ppid: 3001, argv: []string{"/usr/bin/python3", "shell.py"}, cwd: wd})
	r := f.tracker(false)
	for i := 0; i < undecidedTicks; i++ {
		r.tick()
		if len(r.sink.attempts) != 0 {
			t.Fatalf("tick %d: an attempt before its job is known: %v", i+1, r.sink.attempts)
		}
		if st := r.tr.Stats(); st.Tracked != 3 {
			t.Fatalf("tick %d: %d processes sampled, want 3", i+1, st.Tracked)
		}
	}
	r.tick()
	a, ok := r.sink.attempts[c.id()]
	if !ok || a.JobID != c.appID() {
		t.Fatalf("after %d ticks: attempts %v, want %s in %s", undecidedTicks, r.sink.attempts, c.id(), c.appID())
	}
	var from []int64
	for _, m := range r.sink.members {
		from = append(from, m.FromMs)
	}
	startMs := r.tr.startMs(f.procs[3000].start)
	if len(from) != 3 || from[0] != startMs {
		t.Errorf("memberships from %v, want 3 from the processes' start %d", from, startMs)
	}
}

// A NodeManager's fork that keeps its daemon's command line for ticks (a
// busy node) is no daemon: looked at again, it is tracked once it has
// exec'd its container's launcher, and its children are its container's.
func TestDaemonForkSlowExec(t *testing.T) {
	c := idContainer{app: 1, seq: 2}
	work, _ := c.paths()
	f := newFixture(t)
	fxYARNNode(f)
	f.add(fproc{pid: 3000, ppid: fxNMPID, sid: fxNMPID, argv: f.procs[fxNMPID].argv})
	r := f.tracker(false)
	for i := 0; i < 3; i++ {
		r.tick()
	}
	if p := r.tr.procs[3000]; p == nil || p.state == stDaemon || !p.fork {
		t.Fatalf("the NodeManager's fork: %+v", p)
	}
	f.exec(3000, "bash", work+"/default_container_executor.sh")
	f.set(3000, func(p *fproc) { p.env = []string{"CONTAINER_ID=" + c.id()} })
	f.add(fproc{pid: 3001, ppid: 3000, argv: []string{"/bin/bash", "-c", strings.Join(c.jvmArgv("org.apache.hadoop.mapred.YarnChild", fxAMHost, "1",
		fmt.Sprintf("attempt_%s_0001_m_000000_0", fxTS), "1"), " ")}})
	r.tick()
	r.tick()
	for _, pid := range []int32{3000, 3001} {
		if a, _, ok := viewOf(r.tr, pid); !ok || a.JobID != "job_"+fxTS+"_0001" {
			t.Errorf("pid %d: in job %q, tracked %v", pid, a.JobID, ok)
		}
	}
}
