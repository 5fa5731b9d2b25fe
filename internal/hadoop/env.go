package hadoop

import "bytes"

// TaskEnv is what a process's environment says about the task it belongs to.
// YARN sets CONTAINER_ID in every container; Streaming copies every job
// configuration key into its children's environment with non-alphanumerics
// turned into '_' (mapreduce_task_attempt_id, mapred_task_id, ...).
type TaskEnv struct {
	ContainerID string
	AttemptID   string // mapreduce_task_attempt_id, else mapred_task_id
	JobID       string // mapreduce_job_id, else mapred_job_id
	User        string
	JVMPid      string
	LogDirs     string
	Streaming   bool // the environment carries job conf keys: a Streaming child (or its descendant)
}

// Any reports whether the environment ties the process to a task at all.
func (e TaskEnv) Any() bool { return e.ContainerID != "" || e.AttemptID != "" }

var envKeys = [...]string{
	"CONTAINER_ID=", "mapreduce_task_attempt_id=", "mapred_task_id=", "mapreduce_job_id=",
	"mapred_job_id=", "USER=", "JVM_PID=", "LOG_DIRS=",
}

// ParseTaskEnv reads a NUL-separated environment (/proc/PID/environ).
func ParseTaskEnv(environ []byte) TaskEnv {
	var e TaskEnv
	var mrAttempt, mredTask, mrJob, mredJob string
	for len(environ) > 0 {
		var kv []byte
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			kv, environ = environ[:i], environ[i+1:]
		} else {
			kv, environ = environ, nil
		}
		if len(kv) == 0 {
			continue
		}
		switch kv[0] {
		case 'C', 'm', 'U', 'J', 'L':
		default:
			continue
		}
		for k, key := range envKeys {
			v, ok := bytes.CutPrefix(kv, []byte(key))
			if !ok {
				continue
			}
			s := string(v)
			switch k {
			case 0:
				e.ContainerID = s
			case 1:
				mrAttempt = s
			case 2:
				mredTask = s
			case 3:
				mrJob = s
			case 4:
				mredJob = s
			case 5:
				e.User = s
			case 6:
				e.JVMPid = s
			case 7:
				e.LogDirs = s
			}
			break
		}
	}
	e.AttemptID = mrAttempt
	if e.AttemptID == "" {
		e.AttemptID = mredTask
	}
	e.JobID = mrJob
	if e.JobID == "" {
		e.JobID = mredJob
	}
	e.Streaming = mrAttempt != "" || mredTask != ""
	if _, ok := ParseAttempt(e.AttemptID); !ok {
		e.AttemptID = ""
	}
	if c, ok := FindContainer(e.ContainerID); !ok || c.Raw != e.ContainerID {
		e.ContainerID = ""
	}
	return e
}
