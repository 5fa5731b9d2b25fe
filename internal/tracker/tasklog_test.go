package tracker

import (
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// h1Syslog writes a Hadoop 1 JVM's syslog (in its first attempt's log
// directory) as the JVM and its TaskTracker see it.
func h1Syslog(f *fixture, pids []int32, logDir, content string) {
	for _, pid := range pids {
		f.file(pid, "root"+logDir+"/syslog", content, fixtureT0)
	}
}

func h1DoneLines(attempt string) string {
	return "2026-12-04 12:00:05,100 INFO org.apache.hadoop.mapred.Task: Task:" + attempt +
		" is done. And is in the process of commiting\n" +
		"2026-12-04 12:00:05,200 INFO org.apache.hadoop.mapred.Task: Task '" + attempt + "' done.\n"
}

const h1ErrorLines = "2026-12-04 12:00:06,000 WARN org.apache.hadoop.mapred.Child: Error running child\n" +
	"java.io.IOException: injected\n\tat org.apache.hadoop.mapred.MapTask.run(MapTask.java:370)\n"

// Hadoop 1: what an attempt's own log says of its end is read when it
// ends: a Child that exited 0 after its task failed (task_log 1), a
// reused JVM's attempt ended by the next one (done), the JVM's last
// attempt, done, then its idle JVM killed (done, and the JVM's 143); a
// task-cleanup run reports nothing of its end for the attempt it runs
// under.
func TestTaskLogHadoop1(t *testing.T) {
	f := newFixture(t)
	fxH1Node(f)
	dir := func(attempt string) string { return fxH1Logs + "/userlogs/" + fxJob + "/" + attempt }
	failed, first, second := fxAttempt("m", 1, 0), fxAttempt("m", 2, 0), fxAttempt("m", 3, 0)
	cleaned := fxAttempt("m", 4, 0)
	start := "2026-12-04 12:00:00,000 INFO org.apache.hadoop.mapred.Task:  Using ResourceCalculatorPlugin : null\n"
	f.add(fproc{pid: 3001, ppid: fxTTPID, sid: 3001, argv: h1Child(failed, "1"), utime: 100})
	h1Syslog(f, []int32{3001, fxTTPID}, dir(failed), start)
	f.add(fproc{pid: 3101, ppid: fxTTPID, sid: 3101, argv: h1Child(first, "2"), utime: 100})
	f.file(3101, "root"+dir(first)+"/log.index", logIndex(dir(first)), fixtureT0.Add(-time.Minute))
	h1Syslog(f, []int32{3101, fxTTPID}, dir(first), start)
	cleanupArgv := h1Child(cleaned, "3")
	cleanupArgv[len(cleanupArgv)-2] += ".cleanup"
	for i, a := range cleanupArgv {
		if a == "-Dhadoop.tasklog.iscleanup=false" {
			cleanupArgv[i] = "-Dhadoop.tasklog.iscleanup=true"
		}
	}
	f.add(fproc{pid: 3201, ppid: fxTTPID, sid: 3201, argv: cleanupArgv, utime: 100})
	h1Syslog(f, []int32{3201, fxTTPID}, dir(cleaned)+".cleanup", start+h1DoneLines(cleaned))
	r := f.tracker(true)
	r.tick()
	r.tick()
	for _, id := range []string{failed, first, cleaned} {
		if a, ok := r.sink.attempts[id]; !ok || a.Ended || a.TaskLog.Seen() {
			t.Fatalf("%s running: %+v (seen %v)", id, a, ok)
		}
	}
	// The failed task's Child logs the failure and exits 0; the reused
	// JVM's first attempt is done and it takes the next; the cleanup run
	// is done and exits 0.
	h1Syslog(f, []int32{3001, fxTTPID}, dir(failed), start+h1ErrorLines)
	r.exits.exit(3001, fxTTPID, 900, 5000, 0)
	f.remove(3001)
	h1Syslog(f, []int32{3101, fxTTPID}, dir(first), start+h1DoneLines(first)+start)
	f.file(3101, "root"+dir(second)+"/log.index", logIndex(dir(first)), fixtureT0.Add(time.Second))
	r.exits.exit(3201, fxTTPID, 900, 5000, 0)
	f.remove(3201)
	r.tick()
	if a := r.sink.attempts[failed]; !a.Ended || !a.JVMExit.Seen() || a.JVMExit.Status != 0 || !a.TaskLog.Seen() ||
		a.TaskLog.Status != hadoop.TaskLogFailed {
		t.Errorf("the failed task's attempt: %+v", a)
	}
	if a := r.sink.attempts[first]; !a.Ended || a.JVMExit.Seen() || !a.TaskLog.Seen() || a.TaskLog.Status != hadoop.TaskLogDone {
		t.Errorf("the attempt ended by the JVM's next: %+v", a)
	}
	if a := r.sink.attempts[second]; a.Ended || a.TaskLog.Seen() {
		t.Errorf("the JVM's next attempt: %+v", a)
	}
	if a := r.sink.attempts[cleaned]; !a.Ended || a.JVMExit.Seen() || a.RootExit.Seen() || a.TaskLog.Seen() {
		t.Errorf("the cleanup run reported an end for %s: %+v", cleaned, a)
	}
	// The second attempt is done; the TaskTracker kills the idle JVM at
	// the job's end.
	h1Syslog(f, []int32{3101, fxTTPID}, dir(first), start+h1DoneLines(first)+start+h1DoneLines(second))
	r.tick()
	r.exits.exit(3101, fxTTPID, 900, 5000, 15)
	f.remove(3101)
	r.tick()
	if a := r.sink.attempts[second]; !a.Ended || a.JVMExit.Status != 15 || !a.TaskLog.Seen() || a.TaskLog.Status != hadoop.TaskLogDone {
		t.Errorf("the reused JVM's last attempt: %+v", a)
	}
}

// A YARN container's task log is not read (its exit statuses tell), and
// a Hadoop 1 JVM whose log says nothing of its end reports none.
func TestTaskLogNotRead(t *testing.T) {
	f := newFixture(t)
	fxH1Node(f)
	a := fxAttempt("m", 1, 0)
	logDir := fxH1Logs + "/userlogs/" + fxJob + "/" + a
	f.add(fproc{pid: 3001, ppid: fxTTPID, sid: 3001, argv: h1Child(a, "1"), utime: 100})
	h1Syslog(f, []int32{3001, fxTTPID}, logDir, strings.Repeat("INFO still mapping\n", 10000))
	r := f.tracker(true)
	r.tick()
	r.exits.exit(3001, fxTTPID, 900, 5000, 9)
	f.remove(3001)
	r.tick()
	if got := r.sink.attempts[a]; !got.Ended || got.JVMExit.Status != 9 || got.TaskLog.Seen() {
		t.Errorf("%+v", got)
	}
}
