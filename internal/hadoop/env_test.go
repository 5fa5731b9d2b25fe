package hadoop

import (
	"strings"
	"testing"
)

func environ(kv ...string) []byte { return []byte(strings.Join(kv, "\x00") + "\x00") }

func TestParseTaskEnv(t *testing.T) {
	const (
		container = "container_e07_1700000000000_0042_01_000005"
		attempt   = "attempt_1700000000000_0042_m_000003_0"
		h1Attempt = "attempt_201401011200_0007_m_000013_0"
	)
	yarn := environ("PATH=/usr/bin:/bin", "CONTAINER_ID="+container, "NM_PORT=45454", "NM_HOST=worker7.example.com",
		"NM_HTTP_PORT=8042", "LOCAL_DIRS=/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042",
		"LOG_DIRS=/data/yarn/logs/application_1700000000000_0042/"+container, "USER=alice", "HOME=/home/",
		"PWD=/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042/"+container, "JVM_PID=4242",
		"HADOOP_ROOT_LOGGER=INFO,console", "MALLOC_ARENA_MAX=4")
	// A Streaming mapper on YARN: the JVM's environment plus every job conf key.
	streaming := append(append([]byte{}, yarn...), environ("mapreduce_task_attempt_id="+attempt, "mapreduce_job_id=job_1700000000000_0042",
		"mapreduce_task_id=task_1700000000000_0042_m_000003", "mapreduce_task_ismap=true", "map_input_file=hdfs://nn/in/part-0",
		"mapred_task_id="+attempt, "mapred_job_id=job_1700000000000_0042", "stream_map_streamprocessor=python3%20mapper.py")...)
	// A Hadoop 1 Streaming mapper under JVM reuse: only the old names, and mapred_task_id is the current attempt.
	h1 := environ("HADOOP_WORK_DIR=/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/work",
		"HADOOP_ROOT_LOGGER=INFO,TLA", "USER=bob", "JVM_PID=777", "mapred_task_id="+h1Attempt, "mapred_job_id=job_201401011200_0007",
		"mapred_tip_id=task_201401011200_0007_m_000013")
	tests := []struct {
		name string
		in   []byte
		want TaskEnv
		any  bool
	}{
		{"YARN container", yarn, TaskEnv{ContainerID: container, User: "alice", JVMPid: "4242",
			LogDirs: "/data/yarn/logs/application_1700000000000_0042/" + container}, true},
		{"YARN Streaming child", streaming, TaskEnv{ContainerID: container, AttemptID: attempt, JobID: "job_1700000000000_0042",
			User: "alice", JVMPid: "4242", LogDirs: "/data/yarn/logs/application_1700000000000_0042/" + container, Streaming: true}, true},
		{"Hadoop 1 Streaming child", h1, TaskEnv{AttemptID: h1Attempt, JobID: "job_201401011200_0007", User: "bob", JVMPid: "777", Streaming: true}, true},
		{"new name wins over old", environ("mapred_task_id="+h1Attempt, "mapreduce_task_attempt_id="+attempt),
			TaskEnv{AttemptID: attempt, Streaming: true}, true},
		{"no trailing NUL", []byte("CONTAINER_ID=" + container), TaskEnv{ContainerID: container}, true},
		{"garbage ids are dropped", environ("CONTAINER_ID=not-a-container", "mapreduce_task_attempt_id=attempt_x"),
			TaskEnv{Streaming: true}, false},
		{"ids must be exact", environ("CONTAINER_ID=x"+container, "mapred_task_id="+attempt+"_"),
			TaskEnv{Streaming: true}, false},
		{"keys are case-sensitive and whole", environ("container_id="+container, "XCONTAINER_ID="+container, "CONTAINER_IDX="+container, "USERNAME=x"),
			TaskEnv{}, false},
		{"empty entries", []byte("\x00\x00USER=u\x00\x00"), TaskEnv{User: "u"}, false},
		{"last definition wins", environ("USER=a", "USER=b"), TaskEnv{User: "b"}, false},
		{"empty", nil, TaskEnv{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseTaskEnv(tc.in)
			if got != tc.want {
				t.Errorf("ParseTaskEnv:\n got %+v\nwant %+v", got, tc.want)
			}
			if got.Any() != tc.any {
				t.Errorf("Any() = %v, want %v", got.Any(), tc.any)
			}
		})
	}
}
