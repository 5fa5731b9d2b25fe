package tracker

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// attributionCase is a fixture tree and what happens to it: steps[i] runs
// before tick i+1 (the first builds the tree). The tracker's view after
// every tick is compared with testdata/golden/<name>.golden.
type attributionCase struct {
	name    string
	steps   []func(f *fixture)
	metrics []int32 // pids whose metrics go into the golden output too
	check   func(t *testing.T, r *fixtureRun)
}

func attributionCases() []attributionCase {
	c2, c3 := fxContainer(2), fxContainer(3)
	m0, m1, r0 := fxAttempt("m", 0, 0), fxAttempt("m", 1, 0), fxAttempt("r", 0, 0)
	return []attributionCase{
		{name: "yarn-container", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
		}}, metrics: []int32{2003}},

		// The chain as it execs, one step per tick: the launch script is in
		// the working directory, so the attempt is known before the JVM starts.
		{name: "yarn-container-exec-chain", steps: []func(f *fixture){
			func(f *fixture) {
				fxYARNNode(f)
				work, _ := yarnPaths(c2)
				cwd := f.dir(work)
				f.write("../fs"+work+"/launch_container.sh", "#!/bin/bash\nexport CONTAINER_ID=\""+c2+"\"\nexec /bin/bash -c \""+
					strings.Join(yarnChild(c2, m0), " ")+" 1>/dev/null 2>/dev/null\"\n")
				env := []string{"CONTAINER_ID=" + c2}
				f.add(fproc{pid: 2001, ppid: fxNMPID, sid: fxNMPID, argv: []string{"bash", work + "/default_container_executor.sh"}, env: env, cwd: cwd})
				f.add(fproc{pid: 2002, ppid: 2001, sid: fxNMPID, argv: []string{"/bin/bash", work + "/default_container_executor_session.sh"}, env: env, cwd: cwd})
			},
			func(f *fixture) {
				work, _ := yarnPaths(c2)
				f.set(2002, func(p *fproc) { p.sid, p.pgrp = 2002, 2002 })
				f.exec(2002, "/bin/bash", work+"/launch_container.sh")
			},
			func(f *fixture) {
				f.exec(2002, "/bin/bash", "-c", strings.Join(yarnChild(c2, m0), " "))
			},
			func(f *fixture) {
				f.add(fproc{pid: 2003, ppid: 2002, sid: 2002, argv: yarnChild(c2, m0), env: []string{"CONTAINER_ID=" + c2}})
			},
		}},

		// The wrapper's bash execs the JVM between the tracker's read of its
		// command line and its first read of its stat: the stat (name and
		// stack) is already the JVM's, the command line it was classified
		// by the wrapper's. No exec shows later; the name gives it away.
		{name: "exec-between-first-reads", steps: []func(f *fixture){
			func(f *fixture) {
				fxYARNNode(f)
				work, logs := yarnPaths(c2)
				env := []string{"CONTAINER_ID=" + c2, "USER=alice", "LOG_DIRS=" + logs}
				f.add(fproc{pid: 2001, ppid: fxNMPID, sid: fxNMPID, argv: []string{"bash", work + "/default_container_executor.sh"}, env: env})
				f.add(fproc{pid: 2002, ppid: 2001, sid: 2002, argv: []string{"/bin/bash", "-c", shellJoin(yarnChild(c2, m0)) + " 1>" + logs + "/stdout"},
					comm: "java", env: env})
			},
			func(f *fixture) {
				f.set(2002, func(p *fproc) { p.argv, p.cmdline = yarnChild(c2, m0), nil })
			},
		}, check: func(t *testing.T, r *fixtureRun) {
			if _, p, ok := viewOf(r.tr, 2002); !ok || p.Role != wire.RoleTaskJVM {
				t.Errorf("the JVM that exec'd before its first stat: %+v (tracked %v), want role %s", p, ok, wire.RoleTaskJVM)
			}
		}},

		// Without a readable launch script the container runs no attempt
		// until its JVM tells which: then it switches.
		{name: "yarn-container-no-script", steps: []func(f *fixture){
			func(f *fixture) {
				fxYARNNode(f)
				work, _ := yarnPaths(c2)
				f.add(fproc{pid: 2001, ppid: fxNMPID, sid: fxNMPID, argv: []string{"bash", work + "/default_container_executor.sh"}})
				f.add(fproc{pid: 2002, ppid: 2001, argv: []string{"/bin/bash", "-c", "launch_container.sh"}, cwd: f.dir(work)})
			},
			func(f *fixture) {
				f.add(fproc{pid: 2003, ppid: 2002, argv: yarnChild(c2, m0)})
			},
		}},

		{name: "mrappmaster", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, fxContainer(1), yarnJVMArgv(fxContainer(1), "org.apache.hadoop.mapreduce.v2.app.MRAppMaster"))
		}}},

		{name: "hadoop1-child", steps: []func(f *fixture){func(f *fixture) {
			fxH1Node(f)
			// bash taskjvm.sh ends with exec setsid java: the Child is the
			// TaskTracker's child and its own session.
			f.add(fproc{pid: 3001, ppid: fxTTPID, argv: h1Child(m0, "-1234567"), threads: 30, utime: 500})
			f.add(fproc{pid: 3010, ppid: fxTTPID, argv: h1Child(r0, "987654"), threads: 30, utime: 100})
		}}},

		// LinuxTaskController: task-controller execs taskjvm.sh, which execs
		// setsid java: one pid, three command lines.
		{name: "hadoop1-task-controller", steps: []func(f *fixture){
			func(f *fixture) {
				fxH1Node(f)
				f.add(fproc{pid: 3001, ppid: fxTTPID, sid: 1, argv: []string{"/usr/lib/hadoop/bin/task-controller", "alice", fxH1Local,
					"LAUNCH_TASK_JVM", "job_" + fxTS + "_0001", m0, fxH1Local + "/taskTracker/alice/jobcache/job_" + fxTS + "_0001/" + m0 + "/work",
					fxH1Local + "/ttprivate/taskTracker/alice/jobcache/job_" + fxTS + "_0001/" + m0 + "/taskjvm.sh"}})
			},
			func(f *fixture) {
				f.exec(3001, "/bin/bash", fxH1Local+"/ttprivate/taskTracker/alice/jobcache/job_"+fxTS+"_0001/"+m0+"/taskjvm.sh")
			},
			func(f *fixture) {
				f.set(3001, func(p *fproc) { p.sid = 3001 })
				f.exec(3001, h1Child(m0, "42")...)
			},
		}},

		// JVM reuse: the command line names the first attempt only; the
		// newest log.index whose LOG_DIR is the JVM's log directory names the
		// attempt it runs now.
		{name: "hadoop1-jvm-reuse", steps: []func(f *fixture){
			func(f *fixture) {
				fxH1Node(f)
				f.add(fproc{pid: 3001, ppid: fxTTPID, argv: h1Child(m0, "-77"), utime: 500})
				logDir := fxH1Logs + "/userlogs/" + fxJob + "/" + m0
				f.file(3001, "root"+logDir+"/log.index", logIndex(logDir), fixtureT0.Add(-time.Minute))
				// Another JVM's attempt of the same job: not this one's.
				f.file(3001, "root"+fxH1Logs+"/userlogs/"+fxJob+"/"+fxAttempt("m", 9, 0)+"/log.index",
					logIndex(fxH1Logs+"/userlogs/"+fxJob+"/"+fxAttempt("m", 9, 0)), fixtureT0)
			},
			func(f *fixture) {
				logDir := fxH1Logs + "/userlogs/" + fxJob + "/" + m0
				f.file(3001, "root"+fxH1Logs+"/userlogs/"+fxJob+"/"+m1+"/log.index", logIndex(logDir), fixtureT0.Add(time.Second))
				f.set(3001, func(p *fproc) { p.utime = 800 })
			},
			func(f *fixture) {
				f.set(3001, func(p *fproc) { p.utime = 900 })
			},
		}},

		// Streaming: the task JVM's children, by ancestry (their role from
		// the job configuration in their environment).
		{name: "streaming", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"/usr/bin/python3", "mapper.py"}, env: streamingEnv(c2, m0), utime: 50})
			f.add(fproc{pid: 2011, ppid: 2010, sid: 2002, argv: []string{"sort", "-k1,1"}, env: streamingEnv(c2, m0)})
			f.add(fproc{pid: 2012, ppid: 2003, sid: 2002, argv: []string{"/bin/sh", "-c", "df -k /data/1"}})
		}}},

		// Processes that left the tree: reparented to init in the
		// container's session (YARN-4834), and setsid escapees tied by
		// their cgroup or their environment.
		{name: "escapees", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			yarnContainer(f, 2101, c3, yarnChild(c3, m1))
			f.add(fproc{pid: 2020, ppid: 1, sid: 2002, argv: []string{"/usr/bin/python3", "daemonized.py"}})
			f.add(fproc{pid: 2021, ppid: 1, argv: []string{"/usr/bin/setsid-helper", "--cgroup"},
				cgroup: "12:cpu,cpuacct:/hadoop-yarn/" + c2 + "\n0::/hadoop-yarn/" + c2 + "\n"})
			f.add(fproc{pid: 2022, ppid: 1, argv: []string{"/usr/bin/setsid-helper", "--container-env"}, env: []string{"CONTAINER_ID=" + c3}})
			f.add(fproc{pid: 2023, ppid: 1, argv: []string{"/usr/bin/python3", "escaped-streaming.py"}, env: streamingEnv(c3, m1)})
			// Not a task's: in its own session with no tie.
			f.add(fproc{pid: 2024, ppid: 1, argv: []string{"/usr/bin/python3", "unrelated.py"}, env: []string{"USER=alice"}})
			// A cgroup of another hierarchy name is not YARN's.
			f.add(fproc{pid: 2025, ppid: 1, argv: []string{"/usr/bin/other"}, cgroup: "0::/system.slice/" + c2 + "\n"})
		}}},

		// Hadoop 1: an escapee whose environment names the attempt a
		// running Child JVM has now.
		{name: "hadoop1-escapee-env", steps: []func(f *fixture){func(f *fixture) {
			fxH1Node(f)
			f.add(fproc{pid: 3001, ppid: fxTTPID, argv: h1Child(m0, "5")})
			f.add(fproc{pid: 3005, ppid: 1, argv: []string{"/usr/bin/perl", "reducer.pl"},
				env: []string{"mapred_task_id=" + m0, "mapred_job_id=" + fxJob, "HADOOP_WORK_DIR=/x"}})
		}}},

		{name: "spark", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			_, logs := yarnPaths(c2)
			jvm := []string{fxJava, "-server", "-Xmx1024m", "-Djava.io.tmpdir=/tmp", "-Dspark.yarn.app.container.log.dir=" + logs,
				"-XX:OnOutOfMemoryError=kill %p", "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
				"--driver-url", "spark://CoarseGrainedScheduler@" + fxDriverIP + ":35000", "--executor-id", "1", "--hostname", "node1",
				"--cores", "2", "--app-id", fxApp, "--resourceProfileId", "0"}
			yarnContainer(f, 2001, c2, jvm)
			f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"python3", "-m", "pyspark.daemon"}})
			f.add(fproc{pid: 2011, ppid: 2010, sid: 2002, argv: []string{"python3", "-m", "pyspark.daemon"}, utime: 200})
		}}},

		// Tez reuses containers: the newest syslog_attempt_* in the log
		// directory names the attempt running now.
		{name: "tez", steps: []func(f *fixture){
			func(f *fixture) {
				fxYARNNode(f)
				_, logs := yarnPaths(c2)
				jvm := yarnJVMArgv(c2, "org.apache.tez.runtime.task.TezChild", fxAMHost, "41000", c2, fxApp, "1")
				yarnContainer(f, 2001, c2, jvm)
				f.file(2003, "root"+logs+"/syslog", "", fixtureT0.Add(-time.Minute))
				f.file(2003, "root"+logs+"/stderr", "", fixtureT0.Add(-time.Minute))
			},
			func(f *fixture) {
				_, logs := yarnPaths(c2)
				f.file(2003, "root"+logs+"/syslog_"+fxTezAttempt(0, 0, 0), "2023-11-14 22:13:21,000 INFO\n", fixtureT0)
			},
			func(f *fixture) {
				_, logs := yarnPaths(c2)
				f.file(2003, "root"+logs+"/syslog_"+fxTezAttempt(1, 3, 0), "2023-11-14 22:13:22,000 INFO\n", fixtureT0.Add(time.Second))
			},
		}},

		// Daemons, their children before exec, init and kernel threads
		// are never tracked.
		{name: "not-tasks", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			f.add(fproc{pid: 102, ppid: 1, argv: []string{fxJava, "-Dproc_resourcemanager", "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"}})
			f.add(fproc{pid: 103, ppid: 1, argv: []string{fxJava, "-Dproc_jobtracker", "org.apache.hadoop.mapred.JobTracker"}})
			f.add(fproc{pid: 104, ppid: 1, argv: []string{fxJava, "-Dproc_namenode", "org.apache.hadoop.hdfs.server.namenode.NameNode"}})
			// The NodeManager's fork, not yet exec'd.
			f.add(fproc{pid: 110, ppid: fxNMPID, argv: f.procs[fxNMPID].argv})
			// A bash -c that runs a daemon is not a container.
			f.add(fproc{pid: 111, ppid: 1, argv: []string{"bash", "-c", fxJava + " org.apache.hadoop.yarn.server.nodemanager.NodeManager"}})
			f.add(fproc{pid: 4, ppid: 2, comm: "ksoftirqd/0", cmdline: []byte{}})
			f.add(fproc{pid: 112, ppid: 1, argv: []string{"java", "-jar", "app.jar"}})
		}}},

		// A process that has only stat and cmdline: every other file is
		// gone; the sample has what stat gives.
		{name: "stat-and-cmdline-only", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			f.remove(2003)
			f.add(fproc{pid: 2003, ppid: 2002, sid: 2002, argv: yarnChild(c2, m0), utime: 300, threads: 20, only: []string{"stat", "cmdline"}})
		}}, metrics: []int32{2003}, check: func(t *testing.T, r *fixtureRun) {
			if _, _, ok := viewOf(r.tr, 2003); !ok {
				t.Error("the JVM with only stat and cmdline is not tracked")
			}
		}},

		// Files that cannot be read: a directory (EISDIR), garbage, a
		// dangling link. They degrade the sample and are counted by source.
		{name: "unreadable-files", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			f.set(2003, func(p *fproc) {
				p.broken = map[string]string{"status": "dir", "io": "garbage", "schedstat": "dangling", "smaps_rollup": "garbage"}
			})
			f.add(fproc{pid: 2010, ppid: 1, argv: []string{"/usr/bin/escaped"}, broken: map[string]string{"cgroup": "dir", "environ": "garbage"}})
		}}, metrics: []int32{2002, 2003}, check: func(t *testing.T, r *fixtureRun) {
			errs := r.tr.SourceErrors()
			for _, src := range []string{"status", "io", "schedstat", "smaps_rollup"} {
				if errs[src] == 0 {
					t.Errorf("no read error counted for %s: %v", src, errs)
				}
			}
		}},

		// Hostile command lines: HTML, invalid UTF-8, NULs, a 100 KB argument.
		{name: "hostile-cmdlines", steps: []func(f *fixture){func(f *fixture) {
			fxYARNNode(f)
			yarnContainer(f, 2001, c2, yarnChild(c2, m0))
			f.add(fproc{pid: 2010, ppid: 2003, sid: 2002, argv: []string{"/bin/echo", "<script>alert('x')</script>", "&amp;", `"quoted"`}})
			f.add(fproc{pid: 2011, ppid: 2003, sid: 2002, comm: "bad\xffcomm", cmdline: []byte("/bin/bad\xff\xfe\x00arg\xc3\x28\x00\\x41\x00")})
			f.add(fproc{pid: 2012, ppid: 2003, sid: 2002, comm: "nuls", cmdline: []byte("\x00\x00/bin/nul\x00\x00\x00x\x00\x00\x00")})
			f.add(fproc{pid: 2013, ppid: 2003, sid: 2002, argv: []string{"/bin/long", strings.Repeat("A", 100<<10)}})
			f.add(fproc{pid: 2014, ppid: 2003, sid: 2002, comm: "a) R 1 2 (b", argv: []string{"/bin/odd) R 1 2 (b"}})
			// A task JVM whose command line holds a 100 KB class path.
			f.add(fproc{pid: 2101, ppid: fxNMPID, argv: append([]string{fxJava, "-cp", strings.Repeat("/x.jar:", 15000)},
				yarnChild(c3, m1)[1:]...)})
		}}, check: func(t *testing.T, r *fixtureRun) {
			for _, pid := range []int32{2010, 2011, 2012, 2013, 2014, 2101} {
				_, p, ok := viewOf(r.tr, pid)
				if !ok {
					t.Errorf("pid %d not tracked", pid)
					continue
				}
				if len(p.Cmdline) > maxCmdline+maxCmdline/2 {
					t.Errorf("pid %d: command line of %d bytes kept", pid, len(p.Cmdline))
				}
				b := wire.Batch{Version: wire.Version, AgentID: "a", Seq: 1, Host: "h",
					Processes: []wire.Process{{Key: p.Key, PID: pid, Cmdline: p.Cmdline, Comm: p.Comm, Role: p.Role}}}
				if err := wire.Validate(&b); err != nil {
					t.Errorf("pid %d: %v", pid, err)
				}
			}
		}},
	}
}

func TestAttribution(t *testing.T) {
	for _, tc := range attributionCases() {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			r := f.tracker(false)
			for _, step := range tc.steps {
				step(f)
				r.tick()
				for _, pid := range tc.metrics {
					fmt.Fprintf(&r.log, "  metrics of %d: %s\n", pid, metricsOf(r.tr, pid))
				}
			}
			if errs := r.tr.SourceErrors(); len(errs) > 0 {
				var names []string
				for k, v := range errs {
					names = append(names, fmt.Sprintf("%s=%d", k, v))
				}
				sort.Strings(names)
				fmt.Fprintf(&r.log, "read errors: %s\n", strings.Join(names, " "))
			}
			golden(t, tc.name, r.log.String())
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}
