package hadoop

import (
	"bytes"
	"strings"
	"testing"
)

const (
	tlA = "attempt_201412061200_0001_m_000000_0"
	tlB = "attempt_201412061200_0001_m_000001_0"
)

// taskLogDone is what Hadoop 1's Task.done logs for attempt.
func taskLogDone(attempt string) string {
	return "2014-12-06 12:00:05,100 INFO org.apache.hadoop.mapred.Task: Task:" + attempt +
		" is done. And is in the process of commiting\n" +
		"2014-12-06 12:00:05,200 INFO org.apache.hadoop.mapred.Task: Task '" + attempt + "' done.\n"
}

const taskLogError = "2014-12-06 12:00:06,000 WARN org.apache.hadoop.mapred.Child: Error running child\n" +
	"java.lang.RuntimeException: PipeMapRed.waitOutputThreads(): subprocess failed with code 1\n" +
	"\tat org.apache.hadoop.streaming.PipeMapRed.waitOutputThreads(PipeMapRed.java:362)\n" +
	"2014-12-06 12:00:06,010 INFO org.apache.hadoop.mapred.Task: Runnning cleanup for the task\n"

func TestParseTaskEnd(t *testing.T) {
	start := "2014-12-06 12:00:00,000 INFO org.apache.hadoop.mapred.Task:  Using ResourceCalculatorPlugin : null\n"
	for _, c := range []struct {
		name, log, attempt string
		status             int32
		ok                 bool
	}{
		{"done", start + taskLogDone(tlA), tlA, TaskLogDone, true},
		{"done, then the next attempt of the reused JVM runs", start + taskLogDone(tlA) + start, tlA, TaskLogDone, true},
		{"failed", start + taskLogError, tlA, TaskLogFailed, true},
		{"fatal (Throwable)", start + "2014-12-06 12:00:06,000 FATAL org.apache.hadoop.mapred.Child: Error running child : java.lang.OutOfMemoryError: Java heap space\n", tlA, TaskLogFailed, true},
		{"FSError", start + "2014-12-06 12:00:06,000 FATAL org.apache.hadoop.mapred.Child: FSError from child\n", tlA, TaskLogFailed, true},
		{"the reused JVM's second attempt failed", start + taskLogDone(tlA) + start + taskLogError, tlB, TaskLogFailed, true},
		{"the first attempt of a JVM whose second failed is done", start + taskLogDone(tlA) + start + taskLogError, tlA, TaskLogDone, true},
		{"a failure before the done of the last task is not its", taskLogError + start + taskLogDone(tlA), tlB, 0, false},
		{"done while getTask failed after it: done", start + taskLogDone(tlA) + taskLogError, tlA, TaskLogDone, true},
		{"committing is not done", start + "INFO org.apache.hadoop.mapred.Task: Task:" + tlA + " is done. And is in the process of commiting\n", tlA, 0, false},
		{"another attempt's done", start + taskLogDone(tlB), tlA, 0, false},
		{"a longer id's done is not its", start + taskLogDone(tlA+"0"), tlA, 0, false},
		{"still running", start, tlA, 0, false},
		{"empty", "", tlA, 0, false},
		{"no attempt", taskLogDone(""), "", 0, false},
	} {
		st, ok := ParseTaskEnd([]byte(c.log), c.attempt)
		if st != c.status || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.name, st, ok, c.status, c.ok)
		}
	}
}

func FuzzParseTaskEnd(f *testing.F) {
	f.Add([]byte(taskLogDone(tlA)), tlA)
	f.Add([]byte(taskLogDone(tlA)+taskLogError), tlB)
	f.Add([]byte(taskLogError+taskLogDone(tlA)), tlB)
	f.Add([]byte("Task '' done.\nTask 'x' done.' done."), "x")
	f.Add([]byte(""), "")
	f.Fuzz(func(t *testing.T, b []byte, attempt string) {
		st, ok := ParseTaskEnd(b, attempt)
		if !ok {
			if st != 0 {
				t.Fatalf("not ok but %d", st)
			}
			return
		}
		done := bytes.Contains(b, []byte("Task '"+attempt+"' done."))
		switch st {
		case TaskLogDone:
			if !done {
				t.Fatalf("done without its line in %q", b)
			}
		case TaskLogFailed:
			if done || !bytes.Contains(b, taskLogFailures[0]) && !bytes.Contains(b, taskLogFailures[1]) {
				t.Fatalf("failed from %q", b)
			}
		default:
			t.Fatalf("status %d", st)
		}
		if attempt == "" || strings.ContainsAny(attempt, "'\n") {
			t.Fatalf("ok for attempt %q", attempt)
		}
		// What follows a done of attempt changes nothing.
		if st == TaskLogDone {
			if st2, ok2 := ParseTaskEnd(append(append([]byte{}, b...), taskLogError...), attempt); st2 != TaskLogDone || !ok2 {
				t.Fatalf("a failure after the done changed it: %d %v", st2, ok2)
			}
		}
	})
}
