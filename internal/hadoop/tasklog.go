package hadoop

import "bytes"

// TaskLogTail is how much of the end of a Hadoop 1 task JVM's syslog
// ParseTaskEnd is given: an attempt's last lines (its "done", or the
// failure and its stack trace) and what the next attempt of a reused JVM
// logged before the agent looked.
const TaskLogTail = 32 << 10

// What a task's log says of its end (ParseTaskEnd; wire.Attempt.TaskLog).
const (
	TaskLogDone   = 0 // the task said it was done: "Task '<attempt>' done."
	TaskLogFailed = 1 // the task JVM logged that its task failed: "Error running child"
)

// taskLogFailures are the lines Hadoop 1's Child logs when its task
// failed, before it returns from main (its JVM then exits 0, or 65/66 for
// a lost TaskTracker): catch (FSError), catch (Exception), catch
// (Throwable: "Error running child : <stack>").
var taskLogFailures = [][]byte{[]byte("Error running child"), []byte("FSError from child")}

// ParseTaskEnd reads what the tail of a Hadoop 1 task JVM's syslog (the
// JVM's first attempt's userlogs/<job>/<attempt>/syslog, which every
// attempt of a reused JVM appends to) says of attempt's end: TaskLogDone
// when attempt logged "Task '<attempt>' done." (Task.done, after the
// TaskTracker took its done: a reused JVM asks for its next task only
// then), else TaskLogFailed when a failure line comes after every task's
// done (the failure is of the JVM's last task: Child exits after it),
// else nothing (ok false). A "Task:<attempt> is done. And is in the
// process of commiting" alone is no done: the commit may still fail.
func ParseTaskEnd(tail []byte, attempt string) (status int32, ok bool) {
	if attempt == "" || bytes.ContainsAny([]byte(attempt), "'\n") {
		return 0, false
	}
	done := []byte("Task '" + attempt + "' done.")
	if bytes.Contains(tail, done) {
		return TaskLogDone, true
	}
	// A failure line after the last done of any task.
	from := 0
	if i := lastDone(tail); i >= 0 {
		from = i
	}
	for _, f := range taskLogFailures {
		if bytes.Contains(tail[from:], f) {
			return TaskLogFailed, true
		}
	}
	return 0, false
}

// lastDone is the offset of the end of the last line of b that says
// "Task '<id>' done.", -1 if none (one pass over the lines).
func lastDone(b []byte) int {
	last := -1
	for off := 0; off < len(b); {
		line := b[off:]
		n := bytes.IndexByte(line, '\n')
		if n >= 0 {
			line = line[:n]
		}
		if k := bytes.Index(line, []byte("Task '")); k >= 0 {
			rest := line[k+len("Task '"):]
			if q := bytes.IndexByte(rest, '\''); q >= 0 && bytes.HasPrefix(rest[q:], []byte("' done.")) {
				last = off + len(line)
			}
		}
		if n < 0 {
			break
		}
		off += n + 1
	}
	return last
}
