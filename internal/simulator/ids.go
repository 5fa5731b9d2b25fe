package simulator

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Ids in the forms of Hadoop's id classes (JobID, ApplicationId,
// TaskAttemptID, ContainerId, JVMId, Tez's TezTaskAttemptID). The cluster
// timestamp is the simulator's start in milliseconds (a real Hadoop 1
// JobTracker uses yyyyMMddHHmm; both match the same patterns).

var (
	tsMu   sync.Mutex
	lastTS int64
)

// clusterTimestamp returns the current time in ms, never the same twice in
// one process, so that two clusters never share ids.
func clusterTimestamp() int64 {
	tsMu.Lock()
	defer tsMu.Unlock()
	// Clusters of other processes (tests run in parallel, each with an
	// agent that sees every process on the machine) must not mint the same
	// ids: a random offset of up to a minute keeps them apart.
	ts := time.Now().UnixMilli() + rand.Int64N(60_000)
	if ts <= lastTS {
		ts = lastTS + 1
	}
	lastTS = ts
	return ts
}

func jobID(ts int64, seq int) string { return fmt.Sprintf("job_%d_%04d", ts, seq) }
func appID(ts int64, seq int) string { return fmt.Sprintf("application_%d_%04d", ts, seq) }

// attemptID is attempt_<ts>_<job>_<m|r>_<task>_<n>.
func attemptID(ts int64, seq int, typ string, task, n int) string {
	return fmt.Sprintf("attempt_%d_%04d_%s_%06d_%d", ts, seq, typ, task, n)
}

// tezAttemptID is attempt_<ts>_<app>_<dag>_<vertex>_<task>_<n>.
func tezAttemptID(ts int64, seq, dag, vertex, task, n int) string {
	return fmt.Sprintf("attempt_%d_%04d_%d_%02d_%06d_%d", ts, seq, dag, vertex, task, n)
}

// containerID is container_e<epoch>_<ts>_<app>_<appAttempt>_<seq>, without
// the epoch part when epoch < 0.
func containerID(epoch int, ts int64, app, appAttempt, seq int) string {
	if epoch < 0 {
		return fmt.Sprintf("container_%d_%04d_%02d_%06d", ts, app, appAttempt, seq)
	}
	return fmt.Sprintf("container_e%02d_%d_%04d_%02d_%06d", epoch, ts, app, appAttempt, seq)
}

// containerJVMID is what MapReduce passes as YarnChild's jvmId: the
// container's 64-bit id, (epoch << 40) | sequence number.
func containerJVMID(epoch int, seq int) int64 {
	if epoch < 0 {
		epoch = 0
	}
	return int64(epoch)<<40 | int64(seq)
}

// hadoop1JVMID is JVMId.toString(): jvm_<ts>_<job>_<m|r>_<jvmIdInt>.
func hadoop1JVMID(ts int64, seq int, typ string, id int32) string {
	return fmt.Sprintf("jvm_%d_%04d_%s_%d", ts, seq, typ, id)
}

// taskUnit is the key of per-task overrides in job configurations: m_000003.
func taskUnit(typ string, task int) string { return fmt.Sprintf("%s_%06d", typ, task) }
