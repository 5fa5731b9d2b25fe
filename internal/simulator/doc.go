// Package simulator runs a simulated Hadoop cluster made of real processes
// shaped exactly like Hadoop's (see /work/shared/hadoop-anatomy.md): the
// argv, working directories, environments, parentage, sessions and files of
// YARN containers (MapReduce, Streaming, Spark, Tez) and of Hadoop 1 Child
// JVMs, so that taskscope's agent can be tested against them on a machine
// without Hadoop.
//
// # Processes
//
// Worker daemons are this binary re-executed (os.Executable) in a daemon
// role chosen by an environment variable, with argv[0] and arguments of the
// real daemon (java -Dproc_nodemanager ... NodeManager, java
// -Dproc_tasktracker ... TaskTracker) and every thread named "java". Any
// binary or test package that starts a cluster must call
// RunDaemonIfRequested first:
//
//	func TestMain(m *testing.M) {
//		simulator.RunDaemonIfRequested()
//		os.Exit(m.Run())
//	}
//
// The controller (the Cluster, in the calling process) talks to each daemon
// over a socketpair. A NodeManager launches containers as
// DefaultContainerExecutor does (default_container_executor.sh ->
// default_container_executor_session.sh -> launch_container.sh -> bash -c
// "<java ...>" -> the JVM), waits for them with wait4 and serves the
// NodeManager REST API; a TaskTracker runs `bash taskjvm.sh` (exec setsid
// java ... Child) and hands out tasks over a small umbilical, with JVM reuse.
//
// The task JVMs are real JVMs running stand-ins with the real main classes
// (org.apache.hadoop.mapred.YarnChild, org.apache.hadoop.mapred.Child,
// org.apache.hadoop.mapreduce.v2.app.MRAppMaster,
// org.apache.spark.executor.YarnCoarseGrainedExecutorBackend,
// org.apache.tez.runtime.task.TezChild, and the Spark and Tez
// ApplicationMasters), compiled on demand from embedded sources into a
// cache directory. They burn a set amount of CPU, hold memory, optionally
// leak, churn garbage or do file IO, as their job configuration says
// (taskscope.sim.* keys next to the real Hadoop keys in job.xml,
// __spark_conf__.properties or tez-conf.pb). Streaming tasks run a bash
// mapper and a python3 reducer that burn CPU and fork short-lived children;
// PySpark executors run a python3 pyspark.daemon that forks workers.
//
// # How attempts end
//
// JobSpec.Faults ends a map task's first attempt on demand (exit 1, kill
// -9, over its container's memory, the kernel's OOM killer in a limited
// memory cgroup, a speculative copy that wins); the NodeManager reports it
// as a real one does (the exit-code file, COMPLETE in its REST API with
// its exitCode and diagnostics), and AttemptResult keeps it (ExitCode,
// YarnExitStatus, Diagnostics).
//
// # Ground truth
//
// Every process the simulator starts for a job, and every descendant, has
// TASKSCOPE_SIM_UNIT (EnvUnit) in its environment: the attempt id, or the
// container id (Hadoop 1: the JVM id) where the process runs several
// attempts. Tests compare an agent's attribution with it. Every process,
// daemons included, also has TASKSCOPE_SIM_CLUSTER (EnvCluster); Close
// kills whatever still has it.
package simulator
