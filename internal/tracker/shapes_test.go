package tracker

import (
	"fmt"
	"strings"
)

// The process shapes of hadoop-anatomy.md, laid out in fixture trees.

const (
	fxTS       = "1700000000123"
	fxApp      = "application_" + fxTS + "_0001"
	fxJob      = "job_" + fxTS + "_0001"
	fxJava     = "/usr/lib/jvm/java-8-openjdk/bin/java"
	fxNMLocal  = "/data/1/yarn/local"
	fxNMLogs   = "/data/1/yarn/logs"
	fxH1Logs   = "/var/log/hadoop"
	fxH1Local  = "/data/1/mapred/local"
	fxNMPID    = 100
	fxTTPID    = 200
	fxInitPID  = 1
	fxAMHost   = "10.0.0.7"
	fxDriverIP = "10.0.0.8"
)

func fxContainer(seq int) string { return fmt.Sprintf("container_e01_%s_0001_01_%06d", fxTS, seq) }

func fxAttempt(typ string, task, n int) string {
	return fmt.Sprintf("attempt_%s_0001_%s_%06d_%d", fxTS, typ, task, n)
}

func fxTezAttempt(vertex, task, n int) string {
	return fmt.Sprintf("attempt_%s_0001_1_%02d_%06d_%d", fxTS, vertex, task, n)
}

// node lays out what every node has: init, kthreadd and a kernel worker.
func fxNode(f *fixture) {
	f.add(fproc{pid: 1, ppid: 0, argv: []string{"/sbin/init", "splash"}, start: 1})
	f.add(fproc{pid: 2, ppid: 0, comm: "kthreadd", cmdline: []byte{}, start: 1})
	f.add(fproc{pid: 3, ppid: 2, comm: "kworker/0:0-events", cmdline: []byte{}, start: 2})
	f.add(fproc{pid: 50, ppid: 1, argv: []string{"/usr/sbin/sshd", "-D"}, start: 100})
}

// fxYARNNode adds a NodeManager and a DataNode.
func fxYARNNode(f *fixture) {
	fxNode(f)
	f.add(fproc{pid: fxNMPID, ppid: 1, start: 500, threads: 80, argv: []string{fxJava, "-Dproc_nodemanager", "-Xmx1000m",
		"-Dhadoop.log.dir=/var/log/hadoop-yarn", "-classpath", "/etc/hadoop:/usr/lib/hadoop/lib/*",
		"org.apache.hadoop.yarn.server.nodemanager.NodeManager"}})
	f.add(fproc{pid: 101, ppid: 1, start: 400, threads: 60, argv: []string{fxJava, "-Dproc_datanode", "-Xmx1000m",
		"org.apache.hadoop.hdfs.server.datanode.DataNode"}})
}

// fxH1Node adds a TaskTracker and a DataNode.
func fxH1Node(f *fixture) {
	fxNode(f)
	f.add(fproc{pid: fxTTPID, ppid: 1, start: 500, threads: 60, argv: []string{fxJava, "-Dproc_tasktracker", "-Xmx1000m",
		"-Dhadoop.log.dir=" + fxH1Logs, "-classpath", "/etc/hadoop:/usr/lib/hadoop/*", "org.apache.hadoop.mapred.TaskTracker"}})
	f.add(fproc{pid: 101, ppid: 1, start: 400, argv: []string{fxJava, "-Dproc_datanode", "org.apache.hadoop.hdfs.server.datanode.DataNode"}})
}

// yarnPaths are a container's working and log directories.
func yarnPaths(container string) (work, logs string) {
	return fxNMLocal + "/usercache/alice/appcache/" + fxApp + "/" + container, fxNMLogs + "/" + fxApp + "/" + container
}

// yarnJVMArgv is the JVM's command line of a YARN container.
func yarnJVMArgv(container, mainClass string, args ...string) []string {
	work, logs := yarnPaths(container)
	argv := []string{fxJava, "-Djava.net.preferIPv4Stack=true", "-Xmx820m", "-Djava.io.tmpdir=" + work + "/tmp",
		"-Dlog4j.configuration=container-log4j.properties", "-Dyarn.app.container.log.dir=" + logs,
		"-Dyarn.app.container.log.filesize=0", "-Dhadoop.root.logger=INFO,CLA", "-Dhadoop.root.logfile=syslog", mainClass}
	return append(argv, args...)
}

// yarnContainer lays out a container as DefaultContainerExecutor leaves it
// running: default_container_executor.sh (pid), the bash -c of the launch
// script's last exec (pid+1, its own session), the JVM (pid+2).
func yarnContainer(f *fixture, pid int32, container string, jvm []string) (work, logs string) {
	work, logs = yarnPaths(container)
	env := []string{"CONTAINER_ID=" + container, "USER=alice", "JVM_PID=" + fmt.Sprint(pid+1), "LOG_DIRS=" + logs}
	f.add(fproc{pid: pid, ppid: fxNMPID, sid: fxNMPID, argv: []string{"bash", work + "/default_container_executor.sh"}, env: env,
		cgroup: "12:cpu,cpuacct:/hadoop-yarn/" + container + "\n0::/hadoop-yarn/" + container + "\n"})
	cmd := shellJoin(jvm) + " 1>" + logs + "/stdout 2>" + logs + "/stderr "
	f.add(fproc{pid: pid + 1, ppid: pid, sid: pid + 1, argv: []string{"/bin/bash", "-c", cmd}, env: env})
	f.add(fproc{pid: pid + 2, ppid: pid + 1, sid: pid + 1, argv: jvm, env: env, threads: 40, utime: 300, stime: 20,
		rssPages: 50_000, readBytes: 1 << 20, writeBytes: 2 << 20, ctx: 500})
	return work, logs
}

// yarnChild is a MapReduce task JVM of attempt in container.
func yarnChild(container, attempt string) []string {
	return yarnJVMArgv(container, "org.apache.hadoop.mapred.YarnChild", fxAMHost, "40123", attempt, "1099511627778")
}

// h1Child is the command line of a Hadoop 1 Child JVM that began with attempt.
func h1Child(attempt string, jvmID string) []string {
	job := "job_" + fxTS + "_0001"
	work := fxH1Local + "/taskTracker/alice/jobcache/" + job + "/" + attempt + "/work"
	return []string{fxJava, "-Djava.library.path=/usr/lib/hadoop/lib/native:" + work, "-Xmx200m",
		"-Djava.io.tmpdir=" + work + "/tmp", "-classpath", "/etc/hadoop:/usr/lib/hadoop/hadoop-core.jar",
		"-Dlog4j.configuration=task-log4j.properties", "-Dhadoop.log.dir=" + fxH1Logs, "-Dhadoop.root.logger=INFO,TLA",
		"-Dhadoop.tasklog.taskid=" + attempt, "-Dhadoop.tasklog.iscleanup=false", "-Dhadoop.tasklog.totalLogFileSize=0",
		"org.apache.hadoop.mapred.Child", "127.0.0.1", "50050", attempt, fxH1Logs + "/userlogs/" + job + "/" + attempt, jvmID}
}

// logIndex is Hadoop 1's userlogs/<job>/<attempt>/log.index of a JVM whose
// first attempt's log directory is logDir.
func logIndex(logDir string) string {
	return "LOG_DIR:" + logDir + "\nstdout:0 -1\nstderr:0 -1\nsyslog:0 -1\n"
}

// streamingEnv is what PipeMapRed gives a Streaming process: the JVM's
// environment and the job's configuration with non-alphanumerics as '_'.
func streamingEnv(container, attempt string) []string {
	return []string{"CONTAINER_ID=" + container, "USER=alice", "mapreduce_task_attempt_id=" + attempt,
		"mapreduce_job_id=" + fxJob, "mapred_task_id=" + attempt, "stream_map_streamprocessor=mapper.py"}
}

// shellJoin joins words as launch_container.sh has them: quoted where they
// hold blanks (Spark's '-XX:OnOutOfMemoryError=kill %p').
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = w
		if strings.ContainsAny(w, " \t") {
			q[i] = "'" + w + "'"
		}
	}
	return strings.Join(q, " ")
}
