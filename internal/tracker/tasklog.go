package tracker

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/wire"
)

// What a Hadoop 1 attempt's own log says of its end (wire.Attempt.TaskLog).
// A Hadoop 1 Child JVM's exit status does not say it: Child catches its
// task's failure, logs "Error running child" and returns from main (the
// JVM exits 0; the TaskTracker fails the task because it never said it
// was done), and the TaskTracker kills the idle JVMs of a job with JVM
// reuse when the job ends (its last attempt, done, exits 143 or 137).
// Its syslog does: Task.done logs "Task '<attempt>' done." once the
// TaskTracker took the done. Every attempt of a reused JVM appends to its
// first attempt's syslog (the JVM's log directory, Child's argv[3]).
//
// It is read when an attempt ends: its JVM exited (outcomes.ended), or the
// JVM took its next attempt (outcomes.switched: Child asks for the next
// task only after the last one said it was done).
//
// A task-cleanup run (log directory <attempt>.cleanup) runs under the id
// of the attempt that failed or was killed: its processes are that
// attempt's, but nothing of its own end is reported (neither its exit
// statuses nor its log): its "done" says the cleanup ended, not the
// attempt.

// readTaskLog sets a's TaskLog from the tail of its JVM's syslog, once.
func (o *outcomes) readTaskLog(u *unit, a *attempt, ms int64) {
	if a == nil || u.jvmKind != hadoop.KindChild || u.containerID != "" || u.logDir == "" || a.info.TaskLog.Seen() ||
		cleanupRun(u, a) {
		return
	}
	// The JVM's view of the file; once it is gone, its TaskTracker's.
	var err error
	for _, pid := range []int32{u.jvmPID, u.launcherPID} {
		if pid <= 1 {
			continue
		}
		var b []byte
		b, err = readTail(o.fs.PidPath(pid, "root")+u.logDir+"/syslog", hadoop.TaskLogTail)
		if err != nil {
			continue
		}
		if st, ok := hadoop.ParseTaskEnd(b, a.info.AttemptID); ok {
			a.info.TaskLog = wire.ExitStatus{Status: st, Ms: ms}
		}
		return
	}
	if err != nil {
		o.errs.count("syslog", err)
	}
}

// cleanupRun reports whether a is a Hadoop 1 task-cleanup run.
func cleanupRun(u *unit, a *attempt) bool {
	return a.cleanup || a == u.cur && u.cleanup
}

// isCleanupDir reports whether a Hadoop 1 task log directory is a
// task-cleanup run's (userlogs/<job>/<attempt>.cleanup).
func isCleanupDir(dir string) bool {
	return strings.HasSuffix(path.Base(dir), ".cleanup")
}

// readTail reads at most n bytes of the end of a file.
func readTail(name string, n int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read the task log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read the task log: %w", err)
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	k, err := f.ReadAt(b, off)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("cannot read the task log %s: %w", name, err)
	}
	return b[:k], nil
}
