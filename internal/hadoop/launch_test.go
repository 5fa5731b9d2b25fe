package hadoop

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// summary flattens a Launch for comparison.
type summary struct {
	Kind      Kind
	Main      string
	Attempt   string
	Container string
	App       string
	LogDir    string
	Executor  string
	Job       string
	Framework string
	Inner     Kind
}

func summarize(l Launch) summary {
	s := summary{Kind: l.Kind, Main: l.MainClass, App: l.AppID, LogDir: l.LogDir, Executor: l.ExecutorID, Job: l.JobID(), Framework: l.Framework()}
	if l.HasAttempt {
		s.Attempt = l.Attempt.Raw
	}
	if l.HasContainer {
		s.Container = l.Container.Raw
	}
	if l.Inner != nil {
		s.Inner = l.Inner.Kind
	}
	return s
}

func (s summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kind=%v", s.Kind)
	for _, kv := range [][2]string{{"main", s.Main}, {"attempt", s.Attempt}, {"container", s.Container}, {"app", s.App},
		{"logdir", s.LogDir}, {"executor", s.Executor}, {"job", s.Job}, {"framework", s.Framework}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "\n%s=%s", kv[0], kv[1])
		}
	}
	if s.Inner != KindNone {
		fmt.Fprintf(&b, "\ninner=%v", s.Inner)
	}
	return b.String() + "\n"
}

// Real-world command lines, built as Hadoop builds them.
const (
	jdk8 = "/usr/lib/jvm/java-8-openjdk-amd64/bin/java"

	mrApp       = "application_1700000000000_0042"
	mrJob       = "job_1700000000000_0042"
	mrContainer = "container_e07_1700000000000_0042_01_000005"
	mrAttempt   = "attempt_1700000000000_0042_m_000003_0"
	mrLogDir    = "/data/yarn/logs/" + mrApp + "/" + mrContainer
	mrWorkDir   = "/data/yarn/local/usercache/alice/appcache/" + mrApp + "/" + mrContainer
	amContainer = "container_e07_1700000000000_0042_01_000001"
	amLogDir    = "/data/yarn/logs/" + mrApp + "/" + amContainer

	h1Job     = "job_201401011200_0007"
	h1Attempt = "attempt_201401011200_0007_m_000012_0"
	h1Work    = "/data/1/mapred/local/taskTracker/bob/jobcache/" + h1Job + "/" + h1Attempt + "/work"
	h1LogDir  = "/var/log/hadoop/userlogs/" + h1Job + "/" + h1Attempt

	sparkApp       = "application_1700000000000_0101"
	sparkContainer = "container_1700000000000_0101_01_000003"
	sparkLogDir    = "/data/yarn/logs/" + sparkApp + "/" + sparkContainer

	tezApp       = "application_1700000000000_0200"
	tezContainer = "container_e07_1700000000000_0200_01_000004"
	tezLogDir    = "/data/yarn/logs/" + tezApp + "/" + tezContainer
)

func yarnChildArgv() []string {
	return []string{jdk8, "-Djava.net.preferIPv4Stack=true", "-Dhadoop.metrics.log.level=WARN", "-Xmx820m",
		"-Djava.io.tmpdir=" + mrWorkDir + "/tmp", "-Dlog4j.configuration=container-log4j.properties",
		"-Dyarn.app.container.log.dir=" + mrLogDir, "-Dyarn.app.container.log.filesize=0",
		"-Dhadoop.root.logger=INFO,CLA", "-Dhadoop.root.logfile=syslog",
		"org.apache.hadoop.mapred.YarnChild", "10.1.2.3", "39417", mrAttempt, "7696581394437"}
}

func mrAppMasterArgv() []string {
	return []string{jdk8, "-Djava.io.tmpdir=" + mrWorkDir + "/tmp", "-Dlog4j.configuration=container-log4j.properties",
		"-Dyarn.app.container.log.dir=" + amLogDir, "-Dyarn.app.container.log.filesize=0",
		"-Dhadoop.root.logger=INFO,CLA", "-Dhadoop.root.logfile=syslog", "-Xmx1024m",
		"org.apache.hadoop.mapreduce.v2.app.MRAppMaster"}
}

// hadoop1Classpath is as long as a real TaskTracker's: every jar of lib/.
func hadoop1Classpath() string {
	cp := []string{"/etc/hadoop/conf", "/usr/lib/jvm/java-6-sun/lib/tools.jar", "/usr/lib/hadoop", "/usr/lib/hadoop/hadoop-core-1.2.1.jar"}
	for _, j := range []string{"asm-3.2", "aspectjrt-1.6.11", "aspectjtools-1.6.11", "commons-beanutils-1.7.0", "commons-beanutils-core-1.8.0",
		"commons-cli-1.2", "commons-codec-1.4", "commons-collections-3.2.1", "commons-configuration-1.6", "commons-daemon-1.0.1",
		"commons-digester-1.8", "commons-el-1.0", "commons-httpclient-3.0.1", "commons-io-2.1", "commons-lang-2.4", "commons-logging-1.1.1",
		"commons-logging-api-1.0.4", "commons-math-2.1", "commons-net-3.1", "core-3.1.1", "hsqldb-1.8.0.10", "jackson-core-asl-1.8.8",
		"jackson-mapper-asl-1.8.8", "jasper-compiler-5.5.12", "jasper-runtime-5.5.12", "jdeb-0.8", "jersey-core-1.8", "jersey-json-1.8",
		"jersey-server-1.8", "jets3t-0.6.1", "jetty-6.1.26", "jetty-util-6.1.26", "jsch-0.1.42", "junit-4.5", "kfs-0.2.2", "log4j-1.2.15",
		"mockito-all-1.8.5", "oro-2.0.8", "servlet-api-2.5-20081211", "slf4j-api-1.4.3", "slf4j-log4j12-1.4.3", "xmlenc-0.52"} {
		cp = append(cp, "/usr/lib/hadoop/lib/"+j+".jar")
	}
	return strings.Join(cp, ":")
}

func childArgv(attempt, logDir string, cleanup bool) []string {
	return []string{"/usr/lib/jvm/java-6-sun/jre/bin/java",
		"-Djava.library.path=/usr/lib/hadoop/lib/native/Linux-amd64-64:" + h1Work,
		"-Xmx200m", "-Djava.net.preferIPv4Stack=true", "-verbose:gc", "-Xloggc:/tmp/" + attempt + ".gc",
		"-Djava.io.tmpdir=" + h1Work + "/tmp", "-classpath", hadoop1Classpath(),
		"-Dlog4j.configuration=task-log4j.properties", "-Dhadoop.log.dir=/var/log/hadoop", "-Dhadoop.root.logger=INFO,TLA",
		"-Dhadoop.tasklog.taskid=" + attempt, fmt.Sprintf("-Dhadoop.tasklog.iscleanup=%v", cleanup), "-Dhadoop.tasklog.totalLogFileSize=0",
		"org.apache.hadoop.mapred.Child", "127.0.0.1", "50271", attempt, logDir, "-1398519235"}
}

func sparkArgv(main string) []string {
	return []string{"/usr/lib/jvm/java-11-openjdk-amd64/bin/java", "-server", "-Xmx4096m", "-Djava.io.tmpdir=" + "/data/yarn/local/usercache/carol/appcache/" + sparkApp + "/" + sparkContainer + "/tmp",
		"-Dspark.driver.port=37261", "-Dspark.network.timeout=120s", "-Dspark.yarn.app.container.log.dir=" + sparkLogDir,
		"-XX:OnOutOfMemoryError=kill %p", main,
		"--driver-url", "spark://CoarseGrainedScheduler@10.1.2.9:37261", "--executor-id", "2", "--hostname", "worker7.example.com",
		"--cores", "4", "--app-id", sparkApp, "--resourceProfileId", "0"}
}

func tezArgv() []string {
	return []string{jdk8, "-Xmx3276m", "-server", "-Djava.net.preferIPv4Stack=true", "-XX:+UseNUMA", "-XX:+UseG1GC",
		"-Dlog4j.configuratorClass=org.apache.tez.common.TezLog4jConfigurator", "-Dlog4j.configuration=tez-container-log4j.properties",
		"-Dyarn.app.container.log.dir=" + tezLogDir, "-Dtez.root.logger=INFO,CLA", "-Djava.io.tmpdir=/data/yarn/local/tmp",
		"org.apache.tez.runtime.task.TezChild", "10.1.2.4", "41234", tezContainer, tezApp, "1"}
}

// shellQuote renders argv as launch_container.sh's bash -c string does: words
// joined with blanks, redirections appended.
func bashC(argv []string, logDir string) []string {
	cmd := strings.Join(argv, " ")
	cmd = strings.ReplaceAll(cmd, "kill %p", "'kill %p'")
	return []string{"/bin/bash", "-c", cmd + " 1>" + logDir + "/stdout 2>" + logDir + "/stderr "}
}

func TestClassify(t *testing.T) {
	yarnChild := summary{Kind: KindYarnChild, Main: "org.apache.hadoop.mapred.YarnChild", Attempt: mrAttempt, Container: mrContainer,
		App: mrApp, LogDir: mrLogDir, Job: mrJob, Framework: FrameworkMapReduce}
	am := summary{Kind: KindMRAppMaster, Main: "org.apache.hadoop.mapreduce.v2.app.MRAppMaster", Container: amContainer,
		App: mrApp, LogDir: amLogDir, Job: mrJob, Framework: FrameworkMapReduce}
	child := summary{Kind: KindChild, Main: "org.apache.hadoop.mapred.Child", Attempt: h1Attempt, LogDir: h1LogDir,
		Job: h1Job, Framework: FrameworkMapReduce}
	spark := summary{Kind: KindSparkExecutor, Main: "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
		Container: sparkContainer, App: sparkApp, LogDir: sparkLogDir, Executor: "2", Job: sparkApp, Framework: FrameworkSpark}
	spark2 := spark
	spark2.Main = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
	tez := summary{Kind: KindTezChild, Main: "org.apache.tez.runtime.task.TezChild", Container: tezContainer, App: tezApp,
		LogDir: tezLogDir, Job: tezApp, Framework: FrameworkTez}
	shellOf := func(s summary) summary {
		s.Inner, s.Kind, s.Main, s.Executor = s.Kind, KindContainerShell, "", ""
		return s
	}
	cleanupDir := "/var/log/hadoop/userlogs/" + h1Job + "/attempt_201401011200_0007_m_000013_0.cleanup"
	cleanup := child
	cleanup.Attempt, cleanup.LogDir = "attempt_201401011200_0007_m_000013_0", cleanupDir
	none := summary{Framework: FrameworkUnknown}

	sparkWithLib := bashC(sparkArgv(spark.Main), sparkLogDir)
	sparkWithLib[2] = `LD_LIBRARY_PATH="/opt/hadoop/lib/native:$LD_LIBRARY_PATH" ` + sparkWithLib[2]

	tests := []struct {
		name string
		argv []string
		want summary
	}{
		{"YarnChild", yarnChildArgv(), yarnChild},
		{"YarnChild without log dir", []string{"java", "org.apache.hadoop.mapred.YarnChild", "h", "1", mrAttempt, "5"},
			summary{Kind: KindYarnChild, Main: "org.apache.hadoop.mapred.YarnChild", Attempt: mrAttempt, Job: mrJob, Framework: FrameworkMapReduce}},
		{"YarnChild with a broken attempt id", []string{"java", "org.apache.hadoop.mapred.YarnChild", "h", "1", "attempt_17_0042_x_000003_0", "5"},
			summary{Kind: KindYarnChild, Main: "org.apache.hadoop.mapred.YarnChild", Framework: FrameworkMapReduce}},
		{"YarnChild with too few args", []string{"java", "org.apache.hadoop.mapred.YarnChild", "h"},
			summary{Kind: KindYarnChild, Main: "org.apache.hadoop.mapred.YarnChild", Framework: FrameworkMapReduce}},
		{"MRAppMaster", mrAppMasterArgv(), am},
		{"Hadoop 1 Child", childArgv(h1Attempt, h1LogDir, false), child},
		{"Hadoop 1 cleanup Child", childArgv("attempt_201401011200_0007_m_000013_0", cleanupDir, true), cleanup},
		{"Spark 3 YarnCoarseGrainedExecutorBackend", sparkArgv(spark.Main), spark},
		{"Spark 2 CoarseGrainedExecutorBackend", sparkArgv(spark2.Main), spark2},
		{"TezChild", tezArgv(), tez},
		{"bash -c YarnChild", bashC(yarnChildArgv(), mrLogDir), shellOf(yarnChild)},
		{"bash -c MRAppMaster", bashC(mrAppMasterArgv(), amLogDir), shellOf(am)},
		{"bash -c Spark executor", bashC(sparkArgv(spark.Main), sparkLogDir), shellOf(spark)},
		{"bash -c Spark executor with LD_LIBRARY_PATH prefix", sparkWithLib, shellOf(spark)},
		{"bash -c TezChild", bashC(tezArgv(), tezLogDir), shellOf(tez)},
		{"launch_container.sh", []string{"/bin/bash", mrWorkDir + "/launch_container.sh"},
			summary{Kind: KindLaunchContainer, Container: mrContainer, App: mrApp, Job: mrJob, Framework: FrameworkUnknown}},
		{"bash -c launch_container.sh", []string{"/bin/bash", "-c", mrWorkDir + "/launch_container.sh"},
			summary{Kind: KindLaunchContainer, Container: mrContainer, App: mrApp, Job: mrJob, Framework: FrameworkUnknown}},
		{"default_container_executor.sh", []string{"bash", mrWorkDir + "/default_container_executor.sh"},
			summary{Kind: KindContainerExecutor, Container: mrContainer, App: mrApp, Job: mrJob, Framework: FrameworkUnknown}},
		{"default_container_executor_session.sh", []string{"/bin/bash", mrWorkDir + "/default_container_executor_session.sh"},
			summary{Kind: KindContainerExecutor, Container: mrContainer, App: mrApp, Job: mrJob, Framework: FrameworkUnknown}},
		{"sh -e launch_container.sh", []string{"/bin/sh", "-e", "-o", "pipefail", mrWorkDir + "/launch_container.sh"},
			summary{Kind: KindLaunchContainer, Container: mrContainer, App: mrApp, Job: mrJob, Framework: FrameworkUnknown}},
		{"taskjvm.sh", []string{"bash", "/data/1/mapred/local/ttprivate/taskTracker/bob/jobcache/" + h1Job + "/" + h1Attempt + "/taskjvm.sh"},
			summary{Kind: KindTaskJVMScript, Attempt: h1Attempt, Job: h1Job, Framework: FrameworkUnknown}},
		{"Hadoop 1 task-controller", []string{"/usr/lib/hadoop/bin/task-controller", "bob", "/data/1/mapred/local,/data/2/mapred/local", "1",
			h1Job, h1Attempt, h1Work, "/data/1/mapred/local/ttprivate/taskTracker/bob/jobcache/" + h1Job + "/" + h1Attempt + "/taskjvm.sh"},
			summary{Kind: KindTaskController, Attempt: h1Attempt, Job: h1Job, Framework: FrameworkUnknown}},
		{"YARN container-executor", []string{"/opt/hadoop/bin/container-executor", "alice", "alice", "1", mrApp, mrContainer, mrWorkDir,
			"/data/yarn/local/nmPrivate/" + mrApp + "/" + mrContainer + "/launch_container.sh",
			"/data/yarn/local/nmPrivate/" + mrApp + "/" + mrContainer + "/" + mrContainer + ".tokens",
			"/data/yarn/local/nmPrivate/" + mrApp + "/" + mrContainer + "/" + mrContainer + ".pid",
			"/data/yarn/local", "/data/yarn/logs", "cgroups=/sys/fs/cgroup/cpu/hadoop-yarn/" + mrContainer + "/tasks"},
			summary{Kind: KindContainerExecutor, Container: mrContainer, App: mrApp, Job: mrJob, Framework: FrameworkUnknown}},
		{"NodeManager", []string{jdk8, "-Dproc_nodemanager", "-Xmx1000m", "-Dhadoop.log.dir=/var/log/hadoop-yarn", "-Dyarn.log.dir=/var/log/hadoop-yarn",
			"-Dhadoop.log.file=yarn-yarn-nodemanager-worker7.log", "-Dyarn.root.logger=INFO,RFA", "-Djava.library.path=/opt/hadoop/lib/native",
			"-classpath", "/etc/hadoop:/opt/hadoop/share/hadoop/common/*:/opt/hadoop/share/hadoop/yarn/*", "org.apache.hadoop.yarn.server.nodemanager.NodeManager"},
			summary{Kind: KindNodeManager, Main: "org.apache.hadoop.yarn.server.nodemanager.NodeManager", Framework: FrameworkUnknown}},
		{"TaskTracker", []string{"/usr/lib/jvm/java-6-sun/bin/java", "-Dproc_tasktracker", "-Xmx1000m", "-Dhadoop.log.dir=/var/log/hadoop",
			"-Dhadoop.log.file=hadoop-mapred-tasktracker-worker7.log", "-Dhadoop.home.dir=/usr/lib/hadoop", "-Dhadoop.id.str=mapred",
			"-Dhadoop.root.logger=INFO,DRFA", "-classpath", hadoop1Classpath(), "org.apache.hadoop.mapred.TaskTracker"},
			summary{Kind: KindTaskTracker, Main: "org.apache.hadoop.mapred.TaskTracker", Framework: FrameworkUnknown}},
		{"DataNode", []string{jdk8, "-Dproc_datanode", "-cp", "/opt/hadoop/share/hadoop/hdfs/*", "org.apache.hadoop.hdfs.server.datanode.DataNode"},
			summary{Kind: KindOtherDaemon, Main: "org.apache.hadoop.hdfs.server.datanode.DataNode", Framework: FrameworkUnknown}},
		{"bash -c NodeManager is not a container", []string{"bash", "-c", "exec " + jdk8 + " -Dproc_nodemanager org.apache.hadoop.yarn.server.nodemanager.NodeManager"}, none},
		// Processes that merely mention ids are not task processes.
		{"grep for an attempt", []string{"grep", "-r", mrAttempt, "/data/yarn/logs"}, none},
		{"tail of a task log", []string{"tail", "-F", h1LogDir + "/syslog"}, none},
		{"bash -c pipeline mentioning an attempt", []string{"/bin/bash", "-c", "grep " + mrAttempt + " " + mrLogDir + "/syslog | wc -l"}, none},
		{"sh -c cat launch_container.sh", []string{"sh", "-c", "cat " + mrWorkDir + "/launch_container.sh"}, none},
		{"vim of launch_container.sh", []string{"vim", mrWorkDir + "/launch_container.sh"}, none},
		{"user script with an application id", []string{"bash", "/home/u/cleanup.sh", mrApp}, none},
		{"streaming mapper", []string{"/usr/bin/python3", "mapper.py"}, none},
		{"java -jar tool with an attempt id", []string{"java", "-jar", "logtool.jar", mrAttempt}, none},
		{"java tool with a container id", []string{jdk8, "-cp", "x.jar", "com.example.LogTool", mrContainer}, none},
		{"java tool mentioning log dir", []string{"java", "-Dyarn.app.container.log.dir=" + mrLogDir, "-version"}, none},
		{"java alone", []string{"java"}, none},
		{"bash alone", []string{"bash"}, none},
		{"bash -c without command", []string{"bash", "-c"}, none},
		{"empty argv0", []string{""}, none},
		{"no argv", nil, none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(Classify(tc.argv))
			if got != tc.want {
				t.Errorf("Classify:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestKindPredicates(t *testing.T) {
	for k := KindNone; k <= KindOtherDaemon+1; k++ {
		n := 0
		for _, b := range []bool{k.IsJVM(), k.IsWrapper(), k.IsDaemon()} {
			if b {
				n++
			}
		}
		if want := 1; k == KindNone || k > KindOtherDaemon {
			want = 0
			if n != want {
				t.Errorf("%v: in %d classes, want %d", k, n, want)
			}
		} else if n != want {
			t.Errorf("%v: in %d classes, want exactly 1", k, n)
		}
		if k > KindOtherDaemon && k.String() != "unknown" {
			t.Errorf("Kind(%d).String() = %q", k, k.String())
		}
		if k <= KindOtherDaemon && (k.String() == "" || k.String() == "unknown") {
			t.Errorf("Kind(%d) has no name", k)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  a  b\tc\n", []string{"a", "b", "c"}},
		{`exec setsid 'java' '-Dx=a b' "q\"d" e\ f`, []string{"java", "-Dx=a b", `q"d`, "e f"}},
		{`-XX:OnOutOfMemoryError='kill %p' x`, []string{"-XX:OnOutOfMemoryError=kill %p", "x"}},
		{`LD_LIBRARY_PATH="/a:$LD_LIBRARY_PATH" A_1=2 java -Dk=v`, []string{"java", "-Dk=v"}},
		{`=x java`, []string{"=x", "java"}},
		{`1A=x java`, []string{"1A=x", "java"}},
		{`nohup nice java 1>>out 2>>err < /dev/null`, []string{"java", "1>>out", "2>>err", "<", "/dev/null"}},
		{`''`, []string{""}},
		{`'unterminated`, []string{"unterminated"}},
	}
	for _, tc := range tests {
		got := splitCommand(tc.in)
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("splitCommand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestClassifyScript classifies the launch scripts under testdata/scripts
// and compares with the .golden files beside them (go test -update rewrites them).
func TestClassifyScript(t *testing.T) {
	files, err := filepath.Glob("testdata/scripts/*.sh")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			l, ok := ClassifyScript(b)
			got := fmt.Sprintf("ok=%v\n", ok)
			if ok {
				got += summarize(l).String()
			}
			golden := strings.TrimSuffix(f, ".sh") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got != string(want) {
				t.Errorf("ClassifyScript(%s):\n%s\nwant:\n%s", f, got, want)
			}
		})
	}
}
