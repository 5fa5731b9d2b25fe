package simulator

import (
	"net"
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

// TestHadoop1Reuse runs a Streaming job on one TaskTracker with one map
// slot and JVM reuse: one Child runs both maps, one after the other.
func TestHadoop1Reuse(t *testing.T) {
	c := startCluster(t, Options{Nodes: 1, Kind: NodeHadoop1, MapSlots: 1, ReduceSlots: 1})
	ctx := testCtx(t, 120*time.Second)
	n := c.Nodes()[0]
	tt := readProc(t, n.PID)
	wantClassify(t, tt.Argv, hadoop.KindTaskTracker)
	if !slices.Contains(tt.Argv, "-Dproc_tasktracker") || tt.Argv[0] != c.java.Java {
		t.Errorf("TaskTracker argv %q", tt.Argv)
	}
	wantEnv(t, tt, map[string]string{"HADOOP_CONF_DIR": n.ConfDir})
	site := readConf(t, filepath.Join(n.ConfDir, "mapred-site.xml"))
	if site["mapred.tasktracker.map.tasks.maximum"] != "1" || site["mapred.tasktracker.reduce.tasks.maximum"] != "1" ||
		site["mapred.task.tracker.report.address"] != n.UmbilicalAddress || site["mapred.local.dir"] != n.LocalDir {
		t.Errorf("mapred-site.xml: %v", site)
	}

	spec := JobSpec{Kind: JobHadoop1Streaming, Name: "legacy-streaming-sim", User: "bob", Queue: "adhoc", Maps: 2, Reduces: 1,
		JVMReuse: 2, TaskCPU: 600 * time.Millisecond, StreamCPU: time.Second, ShortLivedChildren: 4, Hold: 3 * time.Second, MemoryMB: 2048}
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if j.AppID != "" || !strings.HasPrefix(j.ID, "job_") {
		t.Errorf("Hadoop 1 job %q app %q", j.ID, j.AppID)
	}
	ps, err := j.WaitProcesses(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ch := ps[0]
	first := ch.AttemptID
	if ch.Type != "map" || !strings.HasPrefix(ch.Unit, "jvm_"+strings.TrimPrefix(j.ID, "job_")+"_m_") || ch.Unit != ch.JVMID {
		t.Errorf("first JVM: type %s unit %q jvm %q", ch.Type, ch.Unit, ch.JVMID)
	}
	jobDir := filepath.Join(n.LocalDir, "taskTracker", "bob", "jobcache", j.ID)
	work := filepath.Join(jobDir, first, "work")
	logDir := filepath.Join(n.LogDir, "userlogs", j.ID, first)
	v := checkChild(t, c, n, ch, "bob", work, logDir)
	jvmID := v.Argv[len(v.Argv)-1]
	if ch.JVMID != "jvm_"+strings.TrimPrefix(j.ID, "job_")+"_m_"+jvmID {
		t.Errorf("JVM id %q, argv says %s", ch.JVMID, jvmID)
	}
	// The attempt's localized job.xml.
	jx := readConf(t, filepath.Join(jobDir, first, "job.xml"))
	jc := jx.JobConfFor("map")
	if jc.JobName != spec.Name || jc.User != "bob" || jc.Queue != "adhoc" || jc.MemoryMB != 2048 || !jc.Streaming || jc.Maps != 2 {
		t.Errorf("job.xml of %s says %+v", first, jc)
	}
	if jx["mapred.task.id"] != first || jx["mapred.job.reuse.jvm.num.tasks"] != "2" || jx["mapred.local.dir"] != filepath.Join(jobDir, first) {
		t.Errorf("job.xml of %s: task id %q reuse %q local %q", first, jx["mapred.task.id"], jx["mapred.job.reuse.jvm.num.tasks"], jx["mapred.local.dir"])
	}
	wantFiles(t, jobDir, "job.xml", "jobToken", "jars/mapper.sh", "jars/reducer.py")
	wantFiles(t, work, "tmp", "mapper.sh")
	testsrv.WaitUntil(t, "log.index of the first attempt", 10*time.Second, func() bool { return logIndexDir(filepath.Join(logDir, "log.index")) == logDir })
	mapper, kids := watchStreaming(t, v.PID, "mapper.sh", 30*time.Second)
	wantEnv(t, mapper, map[string]string{"mapred_task_id": first, "mapred_job_id": j.ID, "mapred_job_name": spec.Name, EnvUnit: ch.Unit})
	if mapper.Cwd != work {
		t.Errorf("mapper cwd %s, want %s", mapper.Cwd, work)
	}
	t.Logf("first mapper had %d short-lived children", len(kids))

	// The same JVM takes the second map.
	ps, err = j.WaitFor(ctx, func(rs []AttemptResult) bool {
		r, ok := findProc(rs, func(r AttemptResult) bool { return r.Unit == ch.Unit })
		return ok && len(r.Switches) >= 2 || ok && r.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := findProc(ps, func(r AttemptResult) bool { return r.Unit == ch.Unit })
	if len(r.Switches) != 2 {
		t.Fatalf("the JVM ran %+v", r.Switches)
	}
	second := r.Switches[1].AttemptID
	if second == first || !strings.Contains(second, "_m_000001_") && !strings.Contains(second, "_m_000000_") {
		t.Errorf("second attempt %q", second)
	}
	v2 := readProc(t, v.PID)
	if !slices.Equal(v2.Argv, v.Argv) || v2.Cwd != v.Cwd || v2.Env["HADOOP_CLIENT_OPTS"] != v.Env["HADOOP_CLIENT_OPTS"] {
		t.Errorf("the reused JVM's argv, cwd or HADOOP_CLIENT_OPTS changed")
	}
	secondLog := filepath.Join(n.LogDir, "userlogs", j.ID, second)
	testsrv.WaitUntil(t, "log.index of the second attempt", 10*time.Second, func() bool {
		return logIndexDir(filepath.Join(secondLog, "log.index")) == v.Argv[len(v.Argv)-2]
	})
	if got := readConf(t, filepath.Join(jobDir, second, "job.xml"))["mapred.task.id"]; got != second {
		t.Errorf("job.xml of the second attempt says mapred.task.id %q", got)
	}
	mapper2, _ := watchStreaming(t, v.PID, "mapper.sh", 30*time.Second)
	// Streaming's environment names the current attempt, argv the first.
	wantEnv(t, mapper2, map[string]string{"mapred_task_id": second, EnvUnit: ch.Unit})

	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var jvms int
	for _, a := range res.Attempts {
		if a.ExitCode != 0 || a.Lost || a.Orphaned {
			t.Errorf("%s: exit %d lost %v orphaned %v", a.Unit, a.ExitCode, a.Lost, a.Orphaned)
		}
		jvms++
		if a.Unit == ch.Unit {
			// Two attempts, each the JVM's share and the mapper's.
			wantCPU(t, a.Unit, a, 2*c.scaled(spec.TaskCPU+spec.StreamCPU))
		}
	}
	if jvms != 2 {
		t.Errorf("%d JVMs for 2 maps with reuse and 1 reduce, want 2", jvms)
	}
	syslog := mustRead(t, filepath.Join(logDir, "syslog"))
	for _, a := range []string{first, second} {
		// Task.done's line, as a real Child's syslog has it.
		if !strings.Contains(syslog, "Task '"+a+"' done.") {
			t.Errorf("no done of %s in the JVM's syslog", a)
		}
	}
	if !strings.Contains(syslog, "Task "+second) {
		t.Errorf("the second attempt did not log into the first attempt's syslog")
	}
}

// logIndexDir returns the LOG_DIR of a log.index.
func logIndexDir(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	d, _ := hadoop.ParseLogIndex(b)
	return d
}

// checkChild checks a running Child against Hadoop 1's launch.
func checkChild(t *testing.T, c *Cluster, n NodeInfo, r AttemptResult, user, work, logDir string) procView {
	t.Helper()
	v := readProc(t, r.JVMPID)
	if r.RootPID != v.PID || r.LauncherPID != v.PID {
		t.Errorf("root %d launcher %d jvm %d: want one process", r.RootPID, r.LauncherPID, r.JVMPID)
	}
	if v.Stat.PPID != n.PID || v.Stat.Session != v.PID || v.Stat.PGRP != v.PID || v.Cwd != work {
		t.Errorf("Child ppid %d sid %d pgrp %d cwd %s; want ppid %d, its own session and group, cwd %s",
			v.Stat.PPID, v.Stat.Session, v.Stat.PGRP, v.Cwd, n.PID, work)
	}
	native := filepath.Join(c.hadoop1, "lib/native/Linux-amd64-64")
	_, port, _ := net.SplitHostPort(n.UmbilicalAddress)
	cp := v.Argv[slices.Index(v.Argv, "-classpath")+1]
	want := []string{c.java.Java, "-Djava.library.path=" + native + ":" + work, "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.io.tmpdir=" + work + "/tmp", "-classpath", cp, "-Dlog4j.configuration=task-log4j.properties",
		"-Dhadoop.log.dir=" + n.LogDir, "-Dhadoop.root.logger=INFO,TLA", "-Dhadoop.tasklog.taskid=" + r.AttemptID,
		"-Dhadoop.tasklog.iscleanup=false", "-Dhadoop.tasklog.totalLogFileSize=0",
		"org.apache.hadoop.mapred.Child", "127.0.0.1", port, r.AttemptID, logDir, v.Argv[len(v.Argv)-1]}
	if !slices.Equal(v.Argv, want) {
		t.Errorf("Child argv\n %q\nwant\n %q", v.Argv, want)
	}
	if _, err := strconv.ParseInt(v.Argv[len(v.Argv)-1], 10, 32); err != nil {
		t.Errorf("jvmIdInt %q", v.Argv[len(v.Argv)-1])
	}
	if !strings.HasPrefix(cp, n.ConfDir+":") || !strings.Contains(cp, ":"+c.java.Classes+":") || !strings.HasSuffix(cp, ":"+work) {
		t.Errorf("Child classpath %q", cp)
	}
	jobDir := filepath.Dir(filepath.Dir(work))
	wantEnv(t, v, map[string]string{
		"JVM_PID": strconv.Itoa(v.PID), "HADOOP_WORK_DIR": work, "LD_LIBRARY_PATH": work + ":" + native,
		"HADOOP_TOKEN_FILE_LOCATION": filepath.Join(jobDir, "jobToken"), "HADOOP_ROOT_LOGGER": "INFO,TLA",
		"HADOOP_CLIENT_OPTS": "-Dhadoop.tasklog.taskid=" + r.AttemptID + " -Dhadoop.tasklog.iscleanup=false -Dhadoop.tasklog.totalLogFileSize=0",
		"USER":               user, "LOGNAME": user, "SHELL": "/bin/bash", "HOME": "/homes/", EnvUnit: r.Unit, EnvCluster: c.ID(),
	})
	l := wantClassify(t, v.Argv, hadoop.KindChild)
	if l.Attempt.Raw != r.AttemptID || l.LogDir != logDir {
		t.Errorf("Classify(Child): attempt %q log dir %q", l.Attempt.Raw, l.LogDir)
	}
	script := filepath.Join(n.LocalDir, "ttprivate", "taskTracker", user, "jobcache", filepath.Base(jobDir), r.AttemptID, "taskjvm.sh")
	body := mustRead(t, script)
	lines := strings.Split(body, "\n")
	if lines[0] != "export JVM_PID=`echo $$`" {
		t.Errorf("taskjvm.sh starts %q", lines[0])
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "exec setsid '"+c.java.Java+"' '-Djava.library.path=") ||
		!strings.HasSuffix(last, "'"+v.Argv[len(v.Argv)-1]+"'  < /dev/null  1>> "+logDir+"/stdout 2>> "+logDir+"/stderr") {
		t.Errorf("taskjvm.sh ends %q", last)
	}
	sl := wantClassify(t, []string{"bash", script}, hadoop.KindTaskJVMScript)
	if sl.Attempt.Raw != r.AttemptID {
		t.Errorf("Classify(bash taskjvm.sh) attempt %q", sl.Attempt.Raw)
	}
	wantFiles(t, logDir, "stdout", "stderr")
	testsrv.WaitUntil(t, "the Child's syslog", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(logDir, "syslog"))
		return err == nil
	})
	return v
}

// TestHadoop1LostChildAndKillDaemon: a Child that hangs before getTask is
// "just removed" by its TaskTracker, which starts another JVM for the slot
// (live Child JVMs exceed the slots); then the TaskTracker is killed: its
// running Child is orphaned and exits 65 after three failed pings, the task
// is retried on the other node, and the hung Child stays until Close.
func TestHadoop1LostChildAndKillDaemon(t *testing.T) {
	c := startCluster(t, Options{Nodes: 2, Kind: NodeHadoop1, MapSlots: 1, ReduceSlots: 1})
	ctx := testCtx(t, 120*time.Second)
	spec := JobSpec{Kind: JobHadoop1, Maps: 1, NoReduces: true, LostChild: true, TaskCPU: 400 * time.Millisecond, Hold: 16 * time.Second}
	j, err := c.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	a0, a1 := attemptID(c.ts, j.seq, "m", 0, 0), attemptID(c.ts, j.seq, "m", 0, 1)
	ps, err := j.WaitFor(ctx, func(rs []AttemptResult) bool {
		_, lost := findProc(rs, func(r AttemptResult) bool { return r.AttemptID == a0 && r.Lost })
		_, next := findProc(rs, func(r AttemptResult) bool { return r.AttemptID == a1 && len(r.Switches) > 0 })
		return lost && next
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, ps)
	}
	lost, _ := findProc(ps, func(r AttemptResult) bool { return r.AttemptID == a0 })
	running, _ := findProc(ps, func(r AttemptResult) bool { return r.AttemptID == a1 })
	if lost.Node != running.Node {
		t.Fatalf("the retry ran on %s, the lost JVM is on %s", running.Node, lost.Node)
	}
	n := nodeOf(t, c, running.Node)
	lv := readProc(t, lost.JVMPID)
	wantClassify(t, lv.Argv, hadoop.KindChild)
	wantEnv(t, lv, map[string]string{EnvUnit: a0})
	if !strings.Contains(mustRead(t, filepath.Join(n.Dir, "logs", "hadoop-"+c.realUser+"-tasktracker-"+n.Name+".log")), "JVM Not killed "+lost.JVMID+" but just removed") {
		t.Errorf("the TaskTracker did not log the removal of %s", lost.JVMID)
	}
	var live int
	for _, p := range children(n.PID) {
		if v, err := tryReadProc(p.PID); err == nil && hadoop.Classify(v.Argv).Kind == hadoop.KindChild {
			live++
		}
	}
	if live != 2 {
		t.Errorf("%d live Child JVMs under the TaskTracker, want 2 (one more than its 1 map slot)", live)
	}
	checkChild(t, c, n, running, "hadoop", filepath.Join(n.LocalDir, "taskTracker", "hadoop", "jobcache", j.ID, a1, "work"),
		filepath.Join(n.LogDir, "userlogs", j.ID, a1))

	if err := c.KillDaemon(n.Name); err != nil {
		t.Fatal(err)
	}
	if alive := nodeOf(t, c, n.Name).Alive; alive {
		t.Errorf("node %s still alive", n.Name)
	}
	// Orphaned: reparented to init, still running, still pinging.
	testsrv.WaitUntil(t, "the orphaned Child's reparenting", 2*time.Second, func() bool {
		st, err := statOf(running.JVMPID)
		return err == nil && st.PPID != n.PID
	})
	if st, _ := statOf(running.JVMPID); st.State == 'Z' {
		t.Errorf("the orphaned Child exited at once")
	}
	// Three failed pings later it exits 65.
	var gone bool
	testsrv.WaitUntil(t, "the orphaned Child to exit", 15*time.Second, func() bool {
		st, err := statOf(running.JVMPID)
		if err != nil {
			gone = true
			return true
		}
		return st.State == 'Z'
	})
	if code, ok := zombieExitCode(running.JVMPID); ok {
		if code != 65 {
			t.Errorf("the orphaned Child exited %d, want 65", code)
		}
	} else if !gone {
		t.Errorf("cannot tell how the orphaned Child exited")
	}
	if log := mustRead(t, filepath.Join(n.LogDir, "userlogs", j.ID, a1, "syslog")); !strings.Contains(log, "Last retry, killing "+a1) {
		t.Errorf("the Child did not log its last ping retry:\n%s", log)
	}
	// The hung one lives on, orphaned too.
	st, err := statOf(lost.JVMPID)
	if err != nil || st.State == 'Z' {
		t.Fatalf("the lost Child is gone: %v", err)
	}
	if st.Session != lost.JVMPID {
		t.Errorf("the lost Child is not its own session leader")
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var retried bool
	for _, a := range res.Attempts {
		switch a.AttemptID {
		case a0:
			if !a.Lost || a.ExitCode != -1 {
				t.Errorf("%s: lost %v exit %d", a0, a.Lost, a.ExitCode)
			}
		case a1:
			if !a.Orphaned {
				t.Errorf("%s is not marked orphaned", a1)
			}
		default:
			retried = a.Node != n.Name && a.ExitCode == 0
		}
	}
	if !retried {
		t.Errorf("the task was not retried on the other node: %+v", res.Attempts)
	}
	if _, err := statOf(lost.JVMPID); err != nil {
		t.Errorf("the lost Child is gone before Close")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := statOf(lost.JVMPID); err == nil && st.State != 'Z' {
		t.Errorf("the lost Child %d survived Close", lost.JVMPID)
	}
}

// TestHadoop1FailedTask: a Child whose task fails logs "Error running
// child" and exits 0, as Hadoop 1's does (it catches the task's exception
// and returns from main); its TaskTracker fails the attempt (the JVM exited
// without its done), which is retried; the retry says it was done.
func TestHadoop1FailedTask(t *testing.T) {
	c := startCluster(t, Options{Nodes: 1, Kind: NodeHadoop1, MapSlots: 1, ReduceSlots: 1})
	ctx := testCtx(t, 120*time.Second)
	j, err := c.Submit(ctx, JobSpec{Kind: JobHadoop1, Maps: 1, NoReduces: true, FailMaps: 1, TaskCPU: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failed := strings.Replace(j.ID, "job_", "attempt_", 1) + "_m_000000_0"
	retry := failed[:len(failed)-1] + "1"
	seen := map[string]bool{}
	for _, a := range res.Attempts {
		seen[a.AttemptID] = true
		syslog := mustRead(t, filepath.Join(a.LogDir, "syslog"))
		switch a.AttemptID {
		case failed:
			if a.ExitCode != 0 || !strings.Contains(syslog, "Error running child") || strings.Contains(syslog, "' done.") {
				t.Errorf("the failed task's Child: exit %d, syslog:\n%s", a.ExitCode, syslog)
			}
		case retry:
			if a.ExitCode != 0 || !strings.Contains(syslog, "Task '"+retry+"' done.") || strings.Contains(syslog, "Error running child") {
				t.Errorf("the retry's Child: exit %d, syslog:\n%s", a.ExitCode, syslog)
			}
		}
	}
	if !seen[failed] || !seen[retry] {
		t.Errorf("attempts %v, want %s and its retry", seen, failed)
	}
}
