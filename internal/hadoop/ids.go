// Package hadoop knows the names Hadoop gives to jobs, applications, task
// attempts and containers, and how Hadoop 1, YARN MapReduce, Streaming, Spark
// and Tez launch their task processes. It parses; it reads no files itself.
package hadoop

import (
	"regexp"
	"strconv"
	"strings"
)

// The regular expressions of Hadoop's own id classes (JobID, ApplicationId,
// TaskAttemptID, ContainerId, Tez's TezTaskAttemptID).
var (
	reJob = regexp.MustCompile(`job_(\w+?)_(\d{4,})`)
	reApp = regexp.MustCompile(`application_(\d+)_(\d{4,})`)
	// One expression for both attempt forms, so that the leftmost attempt
	// id of either kind is found: MapReduce's
	// attempt_(\d+)_(\d{4,})_([mrsct])_(\d{6,})_(\d+) and Tez's
	// attempt_(\d+)_(\d{4,})_(\d+)_(\d{2,})_(\d{6,})_(\d+).
	reAttempt = regexp.MustCompile(`attempt_(\d+)_(\d{4,})_(?:([mrsct])_(\d{6,})_(\d+)|(\d+)_(\d{2,})_(\d{6,})_(\d+))`)
)

// AttemptID is a parsed task attempt id: a MapReduce one
// (attempt_<ts>_<job>_<type>_<task>_<n>) or a Tez one
// (attempt_<ts>_<app>_<dag>_<vertex>_<task>_<n>).
type AttemptID struct {
	Raw       string
	ClusterTS string // the cluster timestamp part
	Seq       string // the job or application number, as written (4+ digits)
	Type      string // map, reduce, setup, cleanup, task-cleanup; "tez" for Tez attempts
	Task      string
	Attempt   int
	Tez       bool
	DAG       string // Tez only
	Vertex    string // Tez only
}

// JobID returns the MapReduce job id of the attempt (job_<ts>_<n>), or for Tez
// attempts the application id, which is what names a Tez job.
func (a AttemptID) JobID() string {
	if a.Tez {
		return "application_" + a.ClusterTS + "_" + a.Seq
	}
	return "job_" + a.ClusterTS + "_" + a.Seq
}

// TaskID is the attempt id without the attempt number: the task it belongs to.
func (a AttemptID) TaskID() string {
	i := strings.LastIndexByte(a.Raw, '_')
	if i < 0 {
		return a.Raw
	}
	return "task" + strings.TrimPrefix(a.Raw[:i], "attempt")
}

var mrTaskTypes = map[string]string{"m": "map", "r": "reduce", "s": "setup", "c": "cleanup", "t": "task-cleanup"}

// FindAttempt returns the first (leftmost) task attempt id in s, MapReduce or Tez.
func FindAttempt(s string) (AttemptID, bool) {
	if !strings.Contains(s, "attempt_") {
		return AttemptID{}, false
	}
	m := reAttempt.FindStringSubmatch(s)
	if m == nil {
		return AttemptID{}, false
	}
	if m[3] != "" {
		n, _ := strconv.Atoi(m[5])
		return AttemptID{Raw: m[0], ClusterTS: m[1], Seq: m[2], Type: mrTaskTypes[m[3]], Task: m[4], Attempt: n}, true
	}
	n, _ := strconv.Atoi(m[9])
	return AttemptID{Raw: m[0], ClusterTS: m[1], Seq: m[2], Type: "tez", DAG: m[6], Vertex: m[7], Task: m[8], Attempt: n, Tez: true}, true
}

// ParseAttempt parses s, which must be exactly one attempt id.
func ParseAttempt(s string) (AttemptID, bool) {
	a, ok := FindAttempt(s)
	if !ok || a.Raw != s {
		return AttemptID{}, false
	}
	return a, true
}

// ContainerID is a parsed YARN container id.
type ContainerID struct {
	Raw        string
	Epoch      int
	ClusterTS  string
	AppSeq     string
	AppAttempt string
	Seq        string
}

// AppID is the application the container belongs to.
func (c ContainerID) AppID() string { return "application_" + c.ClusterTS + "_" + c.AppSeq }

// JobID is the MapReduce job id of the container's application.
func (c ContainerID) JobID() string { return "job_" + c.ClusterTS + "_" + c.AppSeq }

// IsFirst reports whether this is container 1 of its application attempt: the
// ApplicationMaster's container.
func (c ContainerID) IsFirst() bool { n, _ := strconv.Atoi(c.Seq); return n == 1 }

// FindContainer returns the first container id in s: ContainerId's form,
// container_[e<epoch>_]<cluster ts>_<app, 4+ digits>_<attempt, 2+>_<seq, 6+>
// (the expression container_(?:e(\d+)_)?(\d+)_(\d{4,})_(\d{2,})_(\d{6,}),
// matched by hand: the tracker looks for one in the environment of every
// child of a task JVM, and the expression cost it a tenth of a tick under a
// churn of 500 processes a second).
func FindContainer(s string) (ContainerID, bool) {
	const prefix = "container_"
	for i := strings.Index(s, prefix); i >= 0; {
		if c, ok := containerAt(s[i:]); ok {
			return c, true
		}
		j := strings.Index(s[i+1:], prefix)
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return ContainerID{}, false
}

// containerAt parses the container id that s begins with, if any.
func containerAt(s string) (ContainerID, bool) {
	var c ContainerID
	rest := s[len("container_"):]
	if len(rest) > 0 && rest[0] == 'e' {
		d, r := leadingDigits(rest[1:])
		if d == "" || !strings.HasPrefix(r, "_") {
			return ContainerID{}, false
		}
		c.Epoch, _ = strconv.Atoi(d)
		rest = r[1:]
	}
	var parts [4]string
	for k, least := range [4]int{1, 4, 2, 6} {
		d, r := leadingDigits(rest)
		if len(d) < least {
			return ContainerID{}, false
		}
		parts[k], rest = d, r
		if k < 3 {
			if !strings.HasPrefix(rest, "_") {
				return ContainerID{}, false
			}
			rest = rest[1:]
		}
	}
	c.Raw = s[:len(s)-len(rest)]
	c.ClusterTS, c.AppSeq, c.AppAttempt, c.Seq = parts[0], parts[1], parts[2], parts[3]
	return c, true
}

// leadingDigits splits s after its leading ASCII digits.
func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

// FindApp returns the first application id in s.
func FindApp(s string) (string, bool) {
	if !strings.Contains(s, "application_") {
		return "", false
	}
	m := reApp.FindString(s)
	return m, m != ""
}

// FindJob returns the first job id in s.
func FindJob(s string) (string, bool) {
	if !strings.Contains(s, "job_") {
		return "", false
	}
	m := reJob.FindString(s)
	return m, m != ""
}

// JobForApp maps application_<ts>_<n> to job_<ts>_<n> (MapReduce on YARN names
// the same job both ways).
func JobForApp(app string) string {
	if rest, ok := strings.CutPrefix(app, "application_"); ok {
		return "job_" + rest
	}
	return app
}

// AppForJob maps job_<ts>_<n> to application_<ts>_<n>.
func AppForJob(job string) string {
	if rest, ok := strings.CutPrefix(job, "job_"); ok {
		return "application_" + rest
	}
	return job
}
