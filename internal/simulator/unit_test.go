package simulator

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

func TestIDs(t *testing.T) {
	const ts = 1500000000000
	for _, tc := range []struct{ got, want string }{
		{jobID(ts, 7), "job_1500000000000_0007"},
		{appID(ts, 7), "application_1500000000000_0007"},
		{attemptID(ts, 7, "m", 3, 1), "attempt_1500000000000_0007_m_000003_1"},
		{tezAttemptID(ts, 7, 1, 0, 3, 0), "attempt_1500000000000_0007_1_00_000003_0"},
		{containerID(1, ts, 7, 1, 2), "container_e01_1500000000000_0007_01_000002"},
		{containerID(-1, ts, 7, 1, 2), "container_1500000000000_0007_01_000002"},
		{hadoop1JVMID(ts, 7, "r", -42), "jvm_1500000000000_0007_r_-42"},
		{taskUnit("m", 3), "m_000003"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if a, ok := hadoop.ParseAttempt(attemptID(ts, 7, "r", 3, 1)); !ok || a.JobID() != jobID(ts, 7) || a.Type != "reduce" {
		t.Errorf("attempt does not parse: %+v", a)
	}
	if a, ok := hadoop.ParseAttempt(tezAttemptID(ts, 7, 1, 1, 3, 0)); !ok || !a.Tez || a.JobID() != appID(ts, 7) {
		t.Errorf("Tez attempt does not parse: %+v", a)
	}
	c, ok := hadoop.FindContainer(containerID(12, ts, 7, 1, 2))
	if !ok || c.Epoch != 12 || c.AppID() != appID(ts, 7) || c.IsFirst() {
		t.Errorf("container does not parse: %+v", c)
	}
	if got := containerJVMID(1, 2); got != 1<<40|2 {
		t.Errorf("jvm id %d", got)
	}
	if a, b := clusterTimestamp(), clusterTimestamp(); b <= a {
		t.Errorf("cluster timestamps %d then %d", a, b)
	}
}

func TestConfFormats(t *testing.T) {
	c := confList{{"a.b", "x<y & \"z\""}, {"mapreduce.job.name", "n"}}
	c.set("mapreduce.job.name", "name")
	c.set("new", "v")
	got, err := hadoop.ParseConf(bytes.NewReader(xmlConf(c, "job.xml")))
	if err != nil {
		t.Fatal(err)
	}
	if got["a.b"] != "x<y & \"z\"" || got["mapreduce.job.name"] != "name" || got["new"] != "v" || len(got) != 3 {
		t.Errorf("round trip: %v", got)
	}
	props := string(propertiesConf(confList{{"spark.app.name", "a=b:c"}, {"k", "line\nnext"}}))
	if !strings.Contains(props, `spark.app.name=a\=b\:c`+"\n") || !strings.Contains(props, `k=line\nnext`+"\n") {
		t.Errorf("properties:\n%s", props)
	}
	tez := decodeTezConf(t, string(tezConfPB(confList{{"tez.queue.name", "q"}, {"empty", ""}})))
	if tez["tez.queue.name"] != "q" || len(tez) != 2 {
		t.Errorf("tez-conf.pb: %v", tez)
	}
}

func TestNormalize(t *testing.T) {
	s := normalize(JobSpec{Kind: JobStreaming}, 3)
	if s.Name != "streaming-3" || s.User != "hadoop" || s.Queue != "default" || s.Maps != 2 || s.Reduces != 1 ||
		s.TaskCPU != time.Second || s.StreamCPU != 500*time.Millisecond || s.ShortLivedChildren != 6 || s.JVMReuse != 1 {
		t.Errorf("normalize: %+v", s)
	}
	if s := normalize(JobSpec{Kind: JobTez, NoReduces: true, Reduces: 4}, 1); s.JVMReuse != 2 || s.Reduces != 0 {
		t.Errorf("normalize Tez: %+v", s)
	}
}

// TestScripts checks that the generated scripts are valid bash, and what
// hadoop.Classify makes of the command lines they produce.
func TestScripts(t *testing.T) {
	dir := t.TempDir()
	cfg := &daemonConfig{Name: "node1", JavaHome: "/usr/lib/jvm/j", Java: "/usr/lib/jvm/j/bin/java", HadoopHome: "/opt/hadoop",
		ConfDir: "/etc/hadoop", LocalDir: dir, LogDir: dir + "/logs", Classes: "/c"}
	req := &launchReq{ContainerID: "container_e01_1500000000000_0001_01_000002", AppID: "application_1500000000000_0001",
		Command: "$JAVA_HOME/bin/java -Xmx96m -Djava.io.tmpdir=$PWD/tmp -Dyarn.app.container.log.dir=<LOG_DIR> org.apache.hadoop.mapred.YarnChild 127.0.0.1 1 attempt_1500000000000_0001_m_000000_0 2 " + redirects}
	script := launchScript(cfg, req, []kv{{"CONTAINER_ID", req.ContainerID}, {"JVM_PID", "$$"}, {"X", `a"b\c`}},
		[]kv{{"/fc/10/job.xml", "job.xml"}, {"/fc/11/x", "jobSubmitDir/x"}}, "/logs/app/c", "/work")
	s := string(script)
	for _, want := range []string{"export CONTAINER_ID=\"" + req.ContainerID + "\"\n", "export JVM_PID=\"$$\"\n", `export X="a\"b\\c"` + "\n",
		"ln -sf -- \"/fc/10/job.xml\" \"job.xml\"\n", "mkdir -p jobSubmitDir\n",
		"exec /bin/bash -c \"$JAVA_HOME/bin/java -Xmx96m -Djava.io.tmpdir=$PWD/tmp -Dyarn.app.container.log.dir=/logs/app/c org.apache.hadoop.mapred.YarnChild 127.0.0.1 1 attempt_1500000000000_0001_m_000000_0 2 1>/logs/app/c/stdout 2>/logs/app/c/stderr \"\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("launch_container.sh lacks %q:\n%s", want, s)
		}
	}
	if !strings.HasSuffix(s, "\n") || strings.Index(s, "export CONTAINER_ID") > strings.Index(s, "ln -sf") {
		t.Errorf("launch_container.sh order:\n%s", s)
	}
	bashSyntax(t, "launch_container.sh", script)
	// What the root process's argv becomes once bash has expanded $JAVA_HOME and $PWD.
	cmd := strings.NewReplacer("$JAVA_HOME", "/usr/lib/jvm/j", "$PWD", "/work", "<LOG_DIR>", "/logs/app/c").Replace(req.Command)
	l := hadoop.Classify([]string{"/bin/bash", "-c", cmd})
	if l.Kind != hadoop.KindContainerShell || l.Inner.Kind != hadoop.KindYarnChild || l.Attempt.Raw != "attempt_1500000000000_0001_m_000000_0" {
		t.Errorf("Classify(bash -c) = %+v", l)
	}

	tt := &taskTracker{cfg: cfg, port: 4242}
	j := &ttJVM{id: -7, work: "/w", logLocation: "/l/userlogs/job_1_0001/attempt_1_0001_m_000000_0"}
	a := &ttAttempt{req: &assignReq{Attempt: "attempt_1_0001_m_000000_0", Job: "job_1_0001", User: "u", JavaOpts: "-Xmx1m -Dx=@taskid@", ChildEnv: "A=1,B=2"}}
	body := tt.taskJVMScript(j, a)
	bashSyntax(t, "taskjvm.sh", body)
	for _, want := range []string{"export A=\"1\"\n", "'-Dx=attempt_1_0001_m_000000_0' ", "'org.apache.hadoop.mapred.Child' '127.0.0.1' '4242' 'attempt_1_0001_m_000000_0' '/l/userlogs/job_1_0001/attempt_1_0001_m_000000_0' '-7'  < /dev/null  1>> "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("taskjvm.sh lacks %q:\n%s", want, body)
		}
	}
	bashSyntax(t, "mapper.sh", []byte(mapperScript))
	if c := findPython(); c != "" {
		out, err := exec.Command(c, "-c", "import ast,sys; [ast.parse(open(f).read()) for f in sys.argv[1:]]", writeTemp(t, "reducer.py", reducerScript), writeTemp(t, "daemon.py", pysparkDaemon)).CombinedOutput()
		if err != nil {
			t.Errorf("python scripts do not parse: %v %s", err, out)
		}
	}
}

func writeTemp(t *testing.T, name, body string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func bashSyntax(t *testing.T, name string, body []byte) {
	t.Helper()
	out, err := exec.Command("bash", "-n", writeTemp(t, name, string(body))).CombinedOutput()
	if err != nil {
		t.Errorf("%s is not valid bash: %v %s", name, err, out)
	}
}

// TestCompileJava compiles the stand-ins twice at once into a fresh
// directory: both calls succeed with the same result.
func TestCompileJava(t *testing.T) {
	j, err := findJava("")
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := sourcesHash(j.Javac)
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "sim-classes-test")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = compileInto(context.Background(), j, files, parent, dir)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, class := range []string{"org/apache/hadoop/mapred/YarnChild.class", "org/apache/hadoop/mapred/Child.class",
		"org/apache/hadoop/mapreduce/v2/app/MRAppMaster.class", "org/apache/spark/executor/YarnCoarseGrainedExecutorBackend.class",
		"org/apache/tez/runtime/task/TezChild.class", "taskscope/sim/Work.class"} {
		if _, err := os.Stat(filepath.Join(dir, class)); err != nil {
			t.Error(err)
		}
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("left in %s: %v", parent, entries)
	}
}

// TestGCBoundMaps: the first GCBoundMaps maps alone are GC-bound (a
// unit override the task JVMs resolve), in the job's small heap.
func TestGCBoundMaps(t *testing.T) {
	c := &Cluster{scale: 1}
	j := &Job{Spec: JobSpec{Kind: JobMapReduce, Maps: 5, TaskMemMB: 32, GCBoundMaps: 1}}
	var conf confList
	c.workConf(&conf, j)
	if conf.get("taskscope.sim.gc."+taskUnit("m", 0)) != "true" || conf.get("taskscope.sim.gc."+taskUnit("m", 1)) != "" ||
		conf.get("taskscope.sim.gc") != "" {
		t.Errorf("GC-bound keys: m_000000 %q, m_000001 %q, job %q", conf.get("taskscope.sim.gc."+taskUnit("m", 0)),
			conf.get("taskscope.sim.gc."+taskUnit("m", 1)), conf.get("taskscope.sim.gc"))
	}
	if got := c.taskXmxMB(j.Spec); got != 80 {
		t.Errorf("-Xmx %d MB, want GCBound's 80", got)
	}
}

// TestStartOnCPUs: a process started on CPUs runs on those alone, and the
// starting thread gets its own affinity back.
func TestStartOnCPUs(t *testing.T) {
	cmd := exec.Command("cat", "/proc/self/status")
	var out bytes.Buffer
	cmd.Stdout = &out
	first := strconv.Itoa(firstCPU())
	if err := startIn(cmd, nil, []int{firstCPU()}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Cpus_allowed_list:\t"+first+"\n") {
		t.Errorf("the process may run on other CPUs:\n%s", out.String())
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Cpus_allowed_list:\t"+first+"\n") && runtime.NumCPU() > 1 {
		t.Errorf("this process was left on CPU %s", first)
	}
}
