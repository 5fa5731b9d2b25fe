package simulator

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// TestYARN starts a two-node YARN cluster (with cgroups where this machine
// allows them) and runs one job of each YARN kind at the same time,
// checking each process tree against hadoop-anatomy.md through /proc.
func TestYARN(t *testing.T) {
	_, cgErr := detectCgroups()
	cg := cgErr == nil
	if !cg {
		t.Logf("running without cgroups: %v", cgErr)
	}
	c := startCluster(t, Options{Nodes: 2, Cgroups: cg})
	t.Run("daemons", func(t *testing.T) { checkNodeManagers(t, c) })
	t.Run("jobs", func(t *testing.T) {
		t.Run("mapreduce", func(t *testing.T) { t.Parallel(); testMapReduce(t, c, cg) })
		t.Run("streaming", func(t *testing.T) { t.Parallel(); testStreaming(t, c) })
		t.Run("pyspark", func(t *testing.T) { t.Parallel(); testSpark(t, c) })
		t.Run("tez", func(t *testing.T) { t.Parallel(); testTez(t, c) })
	})
}

func checkNodeManagers(t *testing.T, c *Cluster) {
	for _, n := range c.Nodes() {
		v := readProc(t, n.PID)
		if v.Argv[0] != c.java.Java || !slices.Contains(v.Argv, "-Dproc_nodemanager") {
			t.Errorf("NodeManager argv %q", v.Argv)
		}
		wantClassify(t, v.Argv, hadoop.KindNodeManager)
		if cp := v.Argv[slices.Index(v.Argv, "-classpath")+1]; !strings.HasPrefix(cp, n.ConfDir+":") {
			t.Errorf("NodeManager classpath %q does not start with the conf dir %s", cp, n.ConfDir)
		}
		wantEnv(t, v, map[string]string{"HADOOP_CONF_DIR": n.ConfDir, EnvCluster: c.ID()})
		if _, ok := v.Env[EnvUnit]; ok {
			t.Errorf("a daemon has %s", EnvUnit)
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", n.PID))
		for _, task := range tasks {
			if comm := strings.TrimSpace(mustRead(t, fmt.Sprintf("/proc/%d/task/%s/comm", n.PID, task.Name()))); comm != "java" {
				t.Errorf("NodeManager thread %s is named %q, want java", task.Name(), comm)
			}
		}
		site := readConf(t, filepath.Join(n.ConfDir, "yarn-site.xml"))
		if got := site["yarn.nodemanager.webapp.address"]; got != n.WebAddress || got == "" {
			t.Errorf("yarn-site.xml webapp address %q, node says %q", got, n.WebAddress)
		}
		if site["yarn.nodemanager.local-dirs"] != n.LocalDir || site["yarn.nodemanager.log-dirs"] != n.LogDir {
			t.Errorf("yarn-site.xml dirs %q %q, want %q %q", site["yarn.nodemanager.local-dirs"], site["yarn.nodemanager.log-dirs"], n.LocalDir, n.LogDir)
		}
		var info struct {
			NodeInfo struct {
				NodeHostName string `json:"nodeHostName"`
			} `json:"nodeInfo"`
		}
		getJSON(t, "http://"+n.WebAddress+"/ws/v1/node/info", &info)
		if info.NodeInfo.NodeHostName != n.Name {
			t.Errorf("node info host %q, want %q", info.NodeInfo.NodeHostName, n.Name)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

type nmContainers struct {
	Containers struct {
		Container []nmContainerInfo `json:"container"`
	} `json:"containers"`
}

func nodeOf(t *testing.T, c *Cluster, name string) NodeInfo {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return NodeInfo{}
}

// shellWords splits a bash -c command string as the shell would (quotes, no expansions).
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in, q := false, byte(0)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case q != 0:
			if ch == q {
				q = 0
			} else {
				cur.WriteByte(ch)
			}
		case ch == '\'' || ch == '"':
			q, in = ch, true
		case ch == ' ':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// containerView is a YARN container's process tree as /proc shows it.
type containerView struct {
	launcher, root, jvm procView
	work, logDir, priv  string
	node                NodeInfo
}

// checkContainer checks a running container against DefaultContainerExecutor's layout and chain.
func checkContainer(t *testing.T, c *Cluster, user string, r AttemptResult, jvmKind hadoop.Kind) containerView {
	t.Helper()
	n := nodeOf(t, c, r.Node)
	cid, ok := hadoop.FindContainer(r.ContainerID)
	if !ok {
		t.Fatalf("bad container id %q", r.ContainerID)
	}
	app := cid.AppID()
	cv := containerView{node: n,
		work:   filepath.Join(n.LocalDir, "usercache", user, "appcache", app, r.ContainerID),
		logDir: filepath.Join(n.LogDir, app, r.ContainerID),
		priv:   filepath.Join(n.LocalDir, "nmPrivate", app, r.ContainerID),
	}
	if r.WorkDir != cv.work || r.LogDir != cv.logDir {
		t.Errorf("result dirs %s %s, want %s %s", r.WorkDir, r.LogDir, cv.work, cv.logDir)
	}
	// bash default_container_executor.sh: the NodeManager's child, in its process group.
	a := readProc(t, r.LauncherPID)
	cv.launcher = a
	if want := []string{"bash", filepath.Join(cv.work, "default_container_executor.sh")}; !slices.Equal(a.Argv, want) {
		t.Errorf("launcher argv %q, want %q", a.Argv, want)
	}
	if a.Stat.PPID != n.PID || a.Stat.PGRP != n.PID || a.Cwd != cv.work {
		t.Errorf("launcher ppid %d pgrp %d cwd %s, want %d %d %s", a.Stat.PPID, a.Stat.PGRP, a.Cwd, n.PID, n.PID, cv.work)
	}
	wantClassify(t, a.Argv, hadoop.KindContainerExecutor)
	wantEnv(t, a, map[string]string{"CONTAINER_ID": r.ContainerID, EnvUnit: r.Unit, EnvCluster: c.ID()})
	// /bin/bash -c "<java ...>": the pid in the pid file, session and group leader, the JVM's parent.
	b := readProc(t, r.RootPID)
	cv.root = b
	if len(b.Argv) != 3 || b.Argv[0] != "/bin/bash" || b.Argv[1] != "-c" {
		t.Fatalf("root argv %q, want /bin/bash -c <command>", b.Argv)
	}
	if b.Stat.PPID != a.PID || b.Stat.Session != b.PID || b.Stat.PGRP != b.PID || b.Cwd != cv.work {
		t.Errorf("root ppid %d sid %d pgrp %d cwd %s; want ppid %d, its own session and group, cwd %s",
			b.Stat.PPID, b.Stat.Session, b.Stat.PGRP, b.Cwd, a.PID, cv.work)
	}
	if !strings.HasSuffix(b.Argv[2], " 1>"+cv.logDir+"/stdout 2>"+cv.logDir+"/stderr ") {
		t.Errorf("root command does not end with the log redirections: %q", b.Argv[2])
	}
	rl := hadoop.Classify(b.Argv)
	if jvmKind != hadoop.KindNone {
		if rl.Kind != hadoop.KindContainerShell || rl.Inner == nil || rl.Inner.Kind != jvmKind {
			t.Errorf("Classify(root) = %+v, want a container shell around %v", rl, jvmKind)
		}
	} else if rl.Kind != hadoop.KindNone {
		t.Errorf("Classify(root) = %v, want none", rl.Kind)
	}
	if got := strings.TrimSpace(mustRead(t, filepath.Join(cv.priv, r.ContainerID+".pid"))); got != strconv.Itoa(b.PID) {
		t.Errorf("pid file says %q, root is %d", got, b.PID)
	}
	// The JVM.
	jv := readProc(t, r.JVMPID)
	cv.jvm = jv
	if jv.Stat.PPID != b.PID || jv.Stat.Session != b.PID || jv.Stat.PGRP != b.PID || jv.Cwd != cv.work {
		t.Errorf("JVM ppid %d sid %d pgrp %d cwd %s; want %d %d %d %s", jv.Stat.PPID, jv.Stat.Session, jv.Stat.PGRP, jv.Cwd, b.PID, b.PID, b.PID, cv.work)
	}
	words := shellWords(b.Argv[2])
	if len(words) < 3 || !strings.HasPrefix(words[len(words)-2], "1>") || !strings.HasPrefix(words[len(words)-1], "2>") {
		t.Errorf("root command words %q", words)
	} else if want := words[:len(words)-2]; !slices.Equal(jv.Argv, want) {
		t.Errorf("JVM argv\n %q\nwant (the root's command)\n %q", jv.Argv, want)
	}
	if jv.Argv[0] != c.java.Java {
		t.Errorf("JVM argv[0] %q, want %q", jv.Argv[0], c.java.Java)
	}
	// Every container command but Tez's AM sets java.io.tmpdir to $PWD/tmp.
	if !strings.HasSuffix(r.MainClass, "DAGAppMaster") && !slices.Contains(jv.Argv, "-Djava.io.tmpdir="+cv.work+"/tmp") {
		t.Errorf("JVM argv has no -Djava.io.tmpdir=$PWD/tmp: %q", jv.Argv)
	}
	_, webPort, _ := net.SplitHostPort(n.WebAddress)
	wantEnv(t, jv, map[string]string{
		"CONTAINER_ID": r.ContainerID, "NM_HOST": n.Name, "NM_HTTP_PORT": webPort,
		"LOCAL_DIRS": filepath.Join(n.LocalDir, "usercache", user, "appcache", app), "LOG_DIRS": cv.logDir,
		"USER": user, "LOGNAME": user, "HOME": "/home/", "PWD": cv.work, "JVM_PID": strconv.Itoa(b.PID),
		"HADOOP_CONF_DIR": n.ConfDir, "HADOOP_TOKEN_FILE_LOCATION": filepath.Join(cv.work, "container_tokens"),
		EnvUnit: r.Unit, EnvCluster: c.ID(),
	})
	wantVars := []string{"NM_PORT", "CLASSPATH"}
	if !strings.Contains(r.MainClass, "spark") { // Spark does not set HADOOP_ROOT_LOGGER
		wantVars = append(wantVars, "HADOOP_ROOT_LOGGER")
	}
	for _, k := range wantVars {
		if jv.Env[k] == "" {
			t.Errorf("JVM env has no %s", k)
		}
	}
	if _, ok := jv.Env[envRole]; ok {
		t.Errorf("JVM env has %s", envRole)
	}
	if jvmKind != hadoop.KindNone {
		l := wantClassify(t, jv.Argv, jvmKind)
		if jvmKind != hadoop.KindSparkExecutor && (l.LogDir != cv.logDir || l.Container.Raw != r.ContainerID) {
			t.Errorf("Classify(JVM) log dir %q container %q, want %q %q", l.LogDir, l.Container.Raw, cv.logDir, r.ContainerID)
		}
	} else {
		wantClassify(t, jv.Argv, hadoop.KindNone)
	}
	// The transient stages of the chain, as their argv were.
	wantClassify(t, []string{"/bin/bash", filepath.Join(cv.work, "default_container_executor_session.sh")}, hadoop.KindContainerExecutor)
	wantClassify(t, []string{"/bin/bash", filepath.Join(cv.work, "launch_container.sh")}, hadoop.KindLaunchContainer)
	// Files.
	wantFiles(t, cv.priv, "launch_container.sh", r.ContainerID+".tokens", r.ContainerID+".pid")
	wantFiles(t, cv.work, "launch_container.sh", "default_container_executor.sh", "default_container_executor_session.sh", "container_tokens", "tmp")
	wantFiles(t, cv.logDir, "stdout", "stderr", "prelaunch.out", "prelaunch.err", "launch_container.sh", "directory.info")
	session := mustRead(t, filepath.Join(cv.work, "default_container_executor_session.sh"))
	if !strings.Contains(session, "exec setsid /bin/bash \""+filepath.Join(cv.work, "launch_container.sh")+"\"") {
		t.Errorf("session script:\n%s", session)
	}
	launch := mustRead(t, filepath.Join(cv.work, "launch_container.sh"))
	if !strings.Contains(launch, "\nexec /bin/bash -c \"$JAVA_HOME/bin/java ") || !strings.Contains(launch, "export JVM_PID=\"$$\"\n") {
		t.Errorf("launch_container.sh:\n%s", launch)
	}
	// Perf data stays on: the agent reads /tmp/hsperfdata_<user>/<pid>.
	testsrv.WaitUntil(t, "hsperfdata of the JVM", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join("/tmp", "hsperfdata_"+c.realUser, strconv.Itoa(jv.PID)))
		return err == nil
	})
	return cv
}

func testMapReduce(t *testing.T, c *Cluster, cg bool) {
	ctx := testCtx(t, 120*time.Second)
	spec := JobSpec{Kind: JobMapReduce, Name: "wordcount-sim", User: "alice", Queue: "etl", Maps: 2, Reduces: 1,
		TaskCPU: time.Second, MemoryMB: 1536, Hold: 6 * time.Second}
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(j.ID, "job_") || j.AppID != "application_"+strings.TrimPrefix(j.ID, "job_") {
		t.Errorf("job %s app %s", j.ID, j.AppID)
	}
	ps, err := j.WaitProcesses(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	am, ok := findProc(ps, func(r AttemptResult) bool { return r.Type == "am" })
	if !ok || !strings.HasSuffix(am.ContainerID, "_01_000001") || am.Unit != am.ContainerID {
		t.Fatalf("no ApplicationMaster in container 1: %+v", ps)
	}
	amv := checkContainer(t, c, "alice", am, hadoop.KindMRAppMaster)
	if amv.jvm.Argv[len(amv.jvm.Argv)-1] != "org.apache.hadoop.mapreduce.v2.app.MRAppMaster" {
		t.Errorf("MRAppMaster argv %q", amv.jvm.Argv)
	}
	m, ok := findProc(ps, func(r AttemptResult) bool { return r.Type == "map" })
	if !ok {
		t.Fatalf("no map: %+v", ps)
	}
	cv := checkContainer(t, c, "alice", m, hadoop.KindYarnChild)
	at, ok := hadoop.ParseAttempt(m.AttemptID)
	if !ok || at.JobID() != j.ID || at.Type != "map" || m.Unit != m.AttemptID {
		t.Errorf("map attempt %q unit %q", m.AttemptID, m.Unit)
	}
	cid, _ := hadoop.FindContainer(m.ContainerID)
	seq, _ := strconv.Atoi(cid.Seq)
	job := readConf(t, filepath.Join(cv.work, "job.xml"))
	want := []string{c.java.Java, "-Djava.net.preferIPv4Stack=true", "-Dhadoop.metrics.log.level=WARN", "-Xmx96m",
		"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.io.tmpdir=" + cv.work + "/tmp",
		"-Dlog4j.configuration=container-log4j.properties", "-Dyarn.app.container.log.dir=" + cv.logDir,
		"-Dyarn.app.container.log.filesize=0", "-Dhadoop.root.logger=INFO,CLA", "-Dhadoop.root.logfile=syslog",
		"org.apache.hadoop.mapred.YarnChild", "127.0.0.1", job["taskscope.sim.am.port"], m.AttemptID,
		strconv.FormatInt(1<<40|int64(seq), 10)}
	if !slices.Equal(cv.jvm.Argv, want) {
		t.Errorf("YarnChild argv\n %q\nwant\n %q", cv.jvm.Argv, want)
	}
	wantEnv(t, cv.jvm, map[string]string{"HADOOP_ROOT_LOGGER": "INFO,console"})
	if !strings.Contains(cv.jvm.Env["HADOOP_CLIENT_OPTS"], "-Dyarn.app.container.log.dir="+cv.logDir) {
		t.Errorf("HADOOP_CLIENT_OPTS %q", cv.jvm.Env["HADOOP_CLIENT_OPTS"])
	}
	// job.xml: the job's settings; YarnChild has written its own copy with the attempt in it.
	testsrv.WaitUntil(t, "YarnChild's job.xml", 10*time.Second, func() bool {
		return readConf(t, filepath.Join(cv.work, "job.xml"))["mapreduce.task.attempt.id"] == m.AttemptID
	})
	job = readConf(t, filepath.Join(cv.work, "job.xml"))
	jc := job.JobConfFor("map")
	if jc.JobName != spec.Name || jc.User != "alice" || jc.Queue != "etl" || jc.MemoryMB != 1536 || jc.XmxBytes != 96<<20 {
		t.Errorf("job.xml says %+v", jc)
	}
	if job["mapred.task.id"] != m.AttemptID || job["mapreduce.job.id"] != j.ID {
		t.Errorf("job.xml task keys %q %q", job["mapred.task.id"], job["mapreduce.job.id"])
	}
	// The NodeManager lists the container.
	var list nmContainers
	getJSON(t, "http://"+cv.node.WebAddress+"/ws/v1/node/containers", &list)
	if !slices.ContainsFunc(list.Containers.Container, func(x nmContainerInfo) bool {
		return x.ID == m.ContainerID && x.State == "RUNNING" && x.User == "alice" && x.ExitCode == yarnInvalid
	}) {
		t.Errorf("the NodeManager does not list %s as RUNNING: %+v", m.ContainerID, list)
	}
	var cgPaths []string
	if cg {
		cgroup := mustRead(t, fmt.Sprintf("/proc/%d/cgroup", cv.jvm.PID))
		for _, ctrl := range []string{"cpu", "memory"} {
			line := ":" + ctrl + ":/hadoop-yarn/" + m.ContainerID + "\n"
			if !strings.Contains(cgroup, line) {
				t.Errorf("JVM cgroups lack %q:\n%s", line, cgroup)
			}
		}
		for _, mnt := range c.cgroups {
			cgPaths = append(cgPaths, filepath.Join(mnt, cgroupHierarchy, m.ContainerID))
		}
		// The NodeManager itself stays where it was.
		if strings.Contains(mustRead(t, fmt.Sprintf("/proc/%d/cgroup", cv.node.PID)), "hadoop-yarn") {
			t.Errorf("the NodeManager is in a container cgroup")
		}
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var maps, reduces int
	for _, r := range res.Attempts {
		if r.ExitCode != 0 || r.End.IsZero() || r.Orphaned || r.Lost {
			t.Errorf("%s: exit %d end %v", r.Unit, r.ExitCode, r.End)
		}
		switch r.Type {
		case "map", "reduce":
			if r.Type == "map" {
				maps++
			} else {
				reduces++
			}
			wantCPU(t, r.Unit, r, c.scaled(spec.TaskCPU))
			if r.MaxRSSBytes < 32<<20 {
				t.Errorf("%s: maxrss %d, want at least the 32 MB the task holds", r.Unit, r.MaxRSSBytes)
			}
		}
	}
	if maps != 2 || reduces != 1 {
		t.Errorf("%d maps %d reduces", maps, reduces)
	}
	// The container's cleanup deletes its pid and exit-code files, as a
	// NodeManager's does (the exit code is its REST API's, below).
	testsrv.WaitUntil(t, "the cleanup of the pid and exit-code files", 10*time.Second, func() bool {
		_, err1 := os.Stat(filepath.Join(cv.priv, m.ContainerID+".pid.exitcode"))
		_, err2 := os.Stat(filepath.Join(cv.priv, m.ContainerID+".pid"))
		return os.IsNotExist(err1) && os.IsNotExist(err2)
	})
	for _, p := range cgPaths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("cgroup %s is still there: %v", p, err)
		}
	}
	// Completed containers stay listed a moment (until the ResourceManager
	// would acknowledge them), COMPLETE with their exit code; then they go.
	listed := func() []nmContainerInfo {
		var after nmContainers
		getJSON(t, "http://"+cv.node.WebAddress+"/ws/v1/node/containers", &after)
		var out []nmContainerInfo
		for _, x := range after.Containers.Container {
			if xc, _ := hadoop.FindContainer(x.ID); xc.AppID() == cid.AppID() {
				out = append(out, x)
			}
		}
		return out
	}
	for _, x := range listed() {
		if x.State != "COMPLETE" || x.ExitCode != 0 {
			t.Errorf("container %s listed after the job as %s, exit code %d", x.ID, x.State, x.ExitCode)
		}
	}
	testsrv.WaitUntil(t, "the completed containers to go from the list", 10*time.Second, func() bool { return len(listed()) == 0 })
}

func testStreaming(t *testing.T, c *Cluster) {
	ctx := testCtx(t, 120*time.Second)
	spec := JobSpec{Kind: JobStreaming, Name: "streamjob-sim", User: "bob", Maps: 1, Reduces: 1, TaskCPU: 600 * time.Millisecond,
		StreamCPU: 2 * time.Second, ShortLivedChildren: 30, Hold: 2 * time.Second}
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := j.WaitProcesses(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := findProc(ps, func(r AttemptResult) bool { return r.Type == "map" })
	if !ok {
		t.Fatalf("no map: %+v", ps)
	}
	cv := checkContainer(t, c, "bob", m, hadoop.KindYarnChild)
	wantConf := map[string]string{
		"mapreduce_task_attempt_id": m.AttemptID, "mapred_task_id": m.AttemptID,
		"mapreduce_job_id": j.ID, "mapred_job_id": j.ID, "mapreduce_job_name": spec.Name,
		"mapreduce_job_user_name": "bob", "CONTAINER_ID": m.ContainerID, EnvUnit: m.Unit,
		"TMPDIR": cv.work + "/tmp", "stream_map_streamprocessor": "mapper.sh",
	}
	mapper, kids := watchStreaming(t, cv.jvm.PID, "mapper.sh", 30*time.Second)
	if want := []string{"/bin/bash", filepath.Join(cv.work, "mapper.sh")}; !slices.Equal(mapper.Argv, want) {
		t.Errorf("mapper argv %q, want %q", mapper.Argv, want)
	}
	if mapper.Cwd != cv.work || mapper.Stat.PPID != cv.jvm.PID {
		t.Errorf("mapper cwd %s ppid %d", mapper.Cwd, mapper.Stat.PPID)
	}
	wantEnv(t, mapper, wantConf)
	wantClassify(t, mapper.Argv, hadoop.KindNone)
	if te := hadoop.ParseTaskEnv(mapper.Environ); te.AttemptID != m.AttemptID || te.ContainerID != m.ContainerID || !te.Streaming {
		t.Errorf("ParseTaskEnv(mapper) = %+v", te)
	}
	if len(kids) == 0 {
		t.Errorf("saw none of the mapper's short-lived children")
	}
	for _, k := range kids {
		wantEnv(t, k, map[string]string{"mapred_task_id": m.AttemptID, EnvUnit: m.Unit})
		wantClassify(t, k.Argv, hadoop.KindNone)
	}
	t.Logf("saw %d short-lived children of the mapper: %v", len(kids), argv0s(kids))
	ps, err = j.WaitProcesses(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := findProc(ps, func(r AttemptResult) bool { return r.Type == "reduce" })
	rv := checkContainer(t, c, "bob", r, hadoop.KindYarnChild)
	reducer, _ := watchStreaming(t, rv.jvm.PID, "reducer.py", 30*time.Second)
	if len(reducer.Argv) != 2 || !filepath.IsAbs(reducer.Argv[0]) || filepath.Base(reducer.Argv[0]) != "python3" || reducer.Argv[1] != "reducer.py" {
		t.Errorf("reducer argv %q, want [/…/python3 reducer.py]", reducer.Argv)
	}
	wantEnv(t, reducer, map[string]string{"mapreduce_task_attempt_id": r.AttemptID, "mapred_task_id": r.AttemptID, EnvUnit: r.Unit})
	wantClassify(t, reducer.Argv, hadoop.KindNone)
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Attempts {
		if a.Type == "map" || a.Type == "reduce" {
			// The JVM's own CPU and the script's, which the JVM waited for: short-lived children count too.
			wantCPU(t, a.Unit, a, c.scaled(spec.TaskCPU+spec.StreamCPU))
		}
	}
}

func argv0s(vs []procView) []string {
	var out []string
	for _, v := range vs {
		out = append(out, filepath.Base(v.Argv[0]))
	}
	return out
}

// watchStreaming polls the JVM's children for the streaming script (the
// child that runs script: interpreter and script, as PipeMapRed starts it) and records the script's own
// children while it runs. It returns once the script has exited.
func watchStreaming(t *testing.T, jvm int, script string, d time.Duration) (procView, []procView) {
	t.Helper()
	deadline := time.Now().Add(d)
	var sv procView
	found := false
	seen := map[int]procView{}
	for time.Now().Before(deadline) {
		if !found {
			for _, ch := range children(jvm) {
				if v, err := tryReadProc(ch.PID); err == nil && len(v.Argv) == 2 && filepath.Base(v.Argv[1]) == script {
					sv, found = v, true
				}
			}
		} else {
			st, err := statOf(sv.PID)
			if err != nil || st.State == 'Z' || st.PPID != jvm {
				break
			}
			for _, ch := range children(sv.PID) {
				if _, ok := seen[ch.PID]; ok {
					continue
				}
				if v, err := tryReadProc(ch.PID); err == nil && v.Stat.PPID == sv.PID {
					seen[ch.PID] = v
				}
			}
		}
		time.Sleep(time.Millisecond) // a look every ms: the script's children live a few ms
	}
	if !found {
		t.Fatalf("no %s under JVM %d", script, jvm)
	}
	var kids []procView
	for _, v := range seen {
		kids = append(kids, v)
	}
	return sv, kids
}

func testSpark(t *testing.T, c *Cluster) {
	ctx := testCtx(t, 120*time.Second)
	if c.python == "" {
		t.Fatal("no python3 on this machine: PySpark needs it")
	}
	spec := JobSpec{Kind: JobSpark, Name: "pyspark-sim", User: "carol", Queue: "adhoc", Maps: 4, Executors: 2,
		PySpark: true, TaskCPU: 600 * time.Millisecond, Hold: 3 * time.Second}
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != j.AppID || !strings.HasPrefix(j.ID, "application_") {
		t.Errorf("spark job %s app %s", j.ID, j.AppID)
	}
	ps, err := j.WaitProcesses(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	am, _ := findProc(ps, func(r AttemptResult) bool { return r.Type == "am" })
	amv := checkContainer(t, c, "carol", am, hadoop.KindSparkAM)
	if !slices.Contains(amv.jvm.Argv, "org.apache.spark.deploy.yarn.ExecutorLauncher") {
		t.Errorf("Spark AM argv %q", amv.jvm.Argv)
	}
	e, ok := findProc(ps, func(r AttemptResult) bool { return r.Type == "executor" })
	if !ok {
		t.Fatalf("no executor: %+v", ps)
	}
	if e.Unit != e.ContainerID {
		t.Errorf("executor unit %q, want its container", e.Unit)
	}
	cv := checkContainer(t, c, "carol", e, hadoop.KindSparkExecutor)
	l := hadoop.Classify(cv.jvm.Argv)
	if l.AppID != j.AppID || l.ExecutorID == "" {
		t.Errorf("Classify(executor) app %q executor %q", l.AppID, l.ExecutorID)
	}
	args := cv.jvm.Argv[slices.Index(cv.jvm.Argv, "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend")+1:]
	if len(args) != 12 || args[0] != "--driver-url" || !strings.HasPrefix(args[1], "spark://CoarseGrainedScheduler@127.0.0.1:") ||
		args[2] != "--executor-id" || args[4] != "--hostname" || args[5] != e.Node || args[6] != "--cores" || args[7] != "1" ||
		args[8] != "--app-id" || args[9] != j.AppID || args[10] != "--resourceProfileId" || args[11] != "0" {
		t.Errorf("executor arguments %q", args)
	}
	for _, w := range []string{"-server", "-Dspark.yarn.app.container.log.dir=" + cv.logDir, "-XX:OnOutOfMemoryError=kill %p"} {
		if !slices.Contains(cv.jvm.Argv, w) {
			t.Errorf("executor argv lacks %q: %q", w, cv.jvm.Argv)
		}
	}
	props := mustRead(t, filepath.Join(cv.work, "__spark_conf__", "__spark_conf__.properties"))
	for _, w := range []string{"spark.app.name=pyspark-sim", "spark.yarn.queue=adhoc", "spark.app.id=" + j.AppID} {
		if !strings.Contains(props, w+"\n") {
			t.Errorf("__spark_conf__.properties lacks %q", w)
		}
	}
	// The python daemon and its forked workers.
	var daemon procView
	testsrv.WaitUntil(t, "pyspark.daemon", 20*time.Second, func() bool {
		for _, ch := range children(cv.jvm.PID) {
			if v, err := tryReadProc(ch.PID); err == nil && slices.Equal(v.Argv[1:], []string{"-m", "pyspark.daemon"}) {
				daemon = v
				return true
			}
		}
		return false
	})
	wantClassify(t, daemon.Argv, hadoop.KindNone) // tied to its container by CONTAINER_ID and its parent
	if daemon.Argv[0] != c.python || daemon.Cwd != cv.work {
		t.Errorf("daemon argv %q cwd %s", daemon.Argv, daemon.Cwd)
	}
	wantEnv(t, daemon, map[string]string{"CONTAINER_ID": e.ContainerID, EnvUnit: e.Unit, "PYTHONPATH": cv.work + "/pyspark.zip:" + cv.work + "/py4j-0.10.9.7-src.zip"})
	testsrv.WaitUntil(t, "a pyspark worker", 20*time.Second, func() bool {
		for _, ch := range children(daemon.PID) {
			if v, err := tryReadProc(ch.PID); err == nil && slices.Equal(v.Argv, daemon.Argv) && v.Env[EnvUnit] == e.Unit {
				return true
			}
		}
		return false
	})
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Attempts {
		if a.Type != "executor" {
			continue
		}
		// Two tasks each, burnt in python workers the daemon waited for,
		// beside the JVM's start. Beside them: python's start (70 ms
		// here) and the executor JVM over its hold (about 320 ms here
		// after its start), which grow as the host slows (CI's
		// executor took 720 ms above its tasks and start).
		wantCPUBeside(t, a.Unit, a, 2*c.scaled(spec.TaskCPU), 400*time.Millisecond)
	}
}

func testTez(t *testing.T, c *Cluster) {
	ctx := testCtx(t, 120*time.Second)
	spec := JobSpec{Kind: JobTez, Name: "hive-query-sim", User: "hive", Queue: "reporting", Maps: 2, Reduces: 1,
		TaskCPU: 600 * time.Millisecond, Hold: 2 * time.Second}
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := j.WaitProcesses(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	am, _ := findProc(ps, func(r AttemptResult) bool { return r.Type == "am" })
	amv := checkContainer(t, c, "hive", am, hadoop.KindTezAM)
	if amv.jvm.Argv[len(amv.jvm.Argv)-1] != "--session" {
		t.Errorf("DAGAppMaster argv %q", amv.jvm.Argv)
	}
	tc, ok := findProc(ps, func(r AttemptResult) bool { return r.Type == "tez" })
	if !ok {
		t.Fatalf("no TezChild: %+v", ps)
	}
	if tc.Unit != tc.ContainerID {
		t.Errorf("TezChild unit %q, want its container (it runs two attempts)", tc.Unit)
	}
	cv := checkContainer(t, c, "hive", tc, hadoop.KindTezChild)
	l := hadoop.Classify(cv.jvm.Argv)
	if l.AppID != j.AppID || l.JobID() != j.AppID {
		t.Errorf("Classify(TezChild) app %q job %q", l.AppID, l.JobID())
	}
	n := len(cv.jvm.Argv)
	if got, want := cv.jvm.Argv[n-6:], []string{"org.apache.tez.runtime.task.TezChild", "127.0.0.1", cv.jvm.Argv[n-4], tc.ContainerID, j.AppID, "1"}; !slices.Equal(got, want) {
		t.Errorf("TezChild arguments %q", got)
	}
	conf := decodeTezConf(t, mustRead(t, filepath.Join(cv.work, "tez-conf.pb")))
	if conf["tez.queue.name"] != "reporting" || conf["user.name"] != "hive" {
		t.Errorf("tez-conf.pb: queue %q user %q", conf["tez.queue.name"], conf["user.name"])
	}
	attempts := strings.Split(conf["taskscope.sim.tez.attempts."+tc.ContainerID], ",")
	if len(attempts) != 2 {
		t.Fatalf("container %s runs %q", tc.ContainerID, attempts)
	}
	for _, a := range attempts {
		if at, ok := hadoop.ParseAttempt(a); !ok || !at.Tez || at.JobID() != j.AppID {
			t.Errorf("bad Tez attempt %q", a)
		}
	}
	testsrv.WaitUntil(t, "the second attempt's syslog", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(cv.logDir, "syslog_"+attempts[1]))
		return err == nil
	})
	if _, err := statOf(cv.jvm.PID); err != nil {
		t.Errorf("the TezChild JVM %d is gone by its second attempt", cv.jvm.PID)
	}
	wantFiles(t, cv.logDir, "syslog", "syslog_"+attempts[0], "syslog_"+attempts[1])
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := findProc(res.Attempts, func(r AttemptResult) bool { return r.Unit == tc.Unit })
	if len(r.Switches) != 2 || r.Switches[0].AttemptID != attempts[0] || r.Switches[1].AttemptID != attempts[1] ||
		!r.Switches[1].At.After(r.Switches[0].At) {
		t.Errorf("switches %+v, want %q in order", r.Switches, attempts)
	}
	wantCPU(t, r.Unit, r, 2*c.scaled(spec.TaskCPU))
	last, _ := findProc(res.Attempts, func(r AttemptResult) bool { return r.Type == "tez" && r.Unit != tc.Unit })
	if !strings.Contains(last.Unit, "_1_01_000000_") || last.Unit != last.AttemptID {
		t.Errorf("vertex 2's container: unit %q attempt %q", last.Unit, last.AttemptID)
	}
}

func decodeTezConf(t *testing.T, s string) map[string]string {
	t.Helper()
	c, err := hadoop.ParseTezConf(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
