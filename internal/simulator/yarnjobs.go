package simulator

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What an ApplicationMaster puts into its containers' launch contexts, and
// the commands, as MapReduce (YARNRunner, MapReduceChildJVM), Spark
// (yarn.Client, ExecutorRunnable) and Tez (TezClientUtils,
// ContainerLauncher) build them.

const (
	mrLog4jProps = "-Dlog4j.configuration=container-log4j.properties -Dyarn.app.container.log.dir=<LOG_DIR> " +
		"-Dyarn.app.container.log.filesize=0 -Dhadoop.root.logger=INFO,CLA -Dhadoop.root.logfile=syslog"
	redirects    = "1><LOG_DIR>/stdout 2><LOG_DIR>/stderr "
	mrAdminOpts  = "-Djava.net.preferIPv4Stack=true -Dhadoop.metrics.log.level=WARN"
	tezLog4j     = "-Dlog4j.configuratorClass=org.apache.tez.common.TezLog4jConfigurator -Dlog4j.configuration=tez-container-log4j.properties -Dyarn.app.container.log.dir=<LOG_DIR> -Dtez.root.logger=INFO,CLA"
	amJavaOpts   = "-Xmx256m " + lightJVM
	hadoopCPBase = "$PWD:$HADOOP_CONF_DIR:$HADOOP_COMMON_HOME/share/hadoop/common/*:$HADOOP_COMMON_HOME/share/hadoop/common/lib/*:" +
		"$HADOOP_HDFS_HOME/share/hadoop/hdfs/*:$HADOOP_HDFS_HOME/share/hadoop/hdfs/lib/*:" +
		"$HADOOP_YARN_HOME/share/hadoop/yarn/*:$HADOOP_YARN_HOME/share/hadoop/yarn/lib/*"
)

func (c *Cluster) mrEnv(am bool) []kv {
	env := []kv{
		{"STDOUT_LOGFILE_ENV", "<LOG_DIR>/stdout"},
		{"SHELL", "/bin/bash"},
		{"HADOOP_ROOT_LOGGER", "INFO,console"},
		{"CLASSPATH", hadoopCPBase + ":$HADOOP_MAPRED_HOME/share/hadoop/mapreduce/*:$HADOOP_MAPRED_HOME/share/hadoop/mapreduce/lib/*:" +
			c.java.Classes + ":job.jar/*:job.jar/classes/:job.jar/lib/*:$PWD/*"},
	}
	if am {
		env = append(env, kv{"APP_SUBMIT_TIME_ENV", strconv.FormatInt(time.Now().UnixMilli(), 10)})
	}
	env = append(env,
		kv{"LD_LIBRARY_PATH", "$PWD:$HADOOP_COMMON_HOME/lib/native"},
		kv{"STDERR_LOGFILE_ENV", "<LOG_DIR>/stderr"},
		kv{"HADOOP_CLIENT_OPTS", " " + mrLog4jProps},
		kv{"HADOOP_MAPRED_HOME", c.hadoop3},
	)
	return env
}

// mrJobConf is the job's job.xml.
func (c *Cluster) mrJobConf(j *Job, amPort int) confList {
	s := j.Spec
	mb := strconv.Itoa(c.containerMB(s))
	opts := c.taskJavaOpts(s)
	staging := "hdfs://127.0.0.1:8020/tmp/hadoop-yarn/staging/" + s.User + "/.staging/" + j.ID
	conf := confList{
		{"mapreduce.job.name", s.Name},
		{"mapreduce.job.user.name", s.User},
		{"user.name", s.User},
		{"mapreduce.job.queuename", s.Queue},
		{"mapreduce.framework.name", "yarn"},
		{"mapreduce.job.maps", strconv.Itoa(s.Maps)},
		{"mapreduce.job.reduces", strconv.Itoa(s.Reduces)},
		{"mapreduce.map.memory.mb", mb},
		{"mapreduce.reduce.memory.mb", mb},
		{"mapreduce.map.cpu.vcores", "1"},
		{"mapreduce.reduce.cpu.vcores", "1"},
		{"mapreduce.map.java.opts", opts},
		{"mapreduce.reduce.java.opts", opts},
		{"mapreduce.admin.map.child.java.opts", mrAdminOpts},
		{"mapreduce.admin.reduce.child.java.opts", mrAdminOpts},
		{"yarn.app.mapreduce.am.resource.mb", "1536"},
		{"yarn.app.mapreduce.am.command-opts", amJavaOpts},
		{"mapreduce.job.dir", staging},
		{"yarn.app.mapreduce.am.staging-dir", "/tmp/hadoop-yarn/staging"},
		{"mapreduce.job.submithostname", "localhost"},
		{"mapreduce.job.submithostaddress", "127.0.0.1"},
		{"mapreduce.input.fileinputformat.inputdir", "hdfs://127.0.0.1:8020/user/" + s.User + "/input"},
		{"mapreduce.output.fileoutputformat.outputdir", "hdfs://127.0.0.1:8020/user/" + s.User + "/output/" + j.ID},
		{"mapreduce.job.reduce.slowstart.completedmaps", "1.0"},
		{"mapreduce.task.io.sort.mb", "16"},
	}
	if s.Kind == JobStreaming {
		conf.set("stream.map.streamprocessor", url.QueryEscape("mapper.sh"))
		conf.set("stream.reduce.streamprocessor", url.QueryEscape("python3 reducer.py"))
		conf.set("mapreduce.job.inputformat.class", "org.apache.hadoop.mapred.TextInputFormat")
		conf.set("stream.map.input.writer.class", "org.apache.hadoop.streaming.io.TextInputWriter")
		conf.set("mapreduce.job.cache.files", staging+"/files/mapper.sh#mapper.sh,"+staging+"/files/reducer.py#reducer.py")
	}
	c.workConf(&conf, j)
	c.faultConf(&conf, j)
	conf.set("taskscope.sim.am.port", strconv.Itoa(amPort))
	return conf
}

func (c *Cluster) runMapReduce(j *Job) error {
	s := j.Spec
	amPort := freePort()
	conf := c.mrJobConf(j, amPort)
	res := []resource{{ID: 10, Name: "job.xml", Link: "job.xml", Data: xmlConf(conf, "job.xml")}}
	if s.Kind == JobStreaming {
		res = append(res,
			resource{ID: 11, Name: "mapper.sh", Link: "mapper.sh", Data: []byte(mapperScript), Exec: true},
			resource{ID: 12, Name: "reducer.py", Link: "reducer.py", Data: []byte(reducerScript), Exec: true})
	}
	amCmd := "$JAVA_HOME/bin/java -Djava.io.tmpdir=$PWD/tmp " + mrLog4jProps + "  " + amJavaOpts +
		" org.apache.hadoop.mapreduce.v2.app.MRAppMaster " + redirects
	am, err := c.startAM(j, amCmd, "org.apache.hadoop.mapreduce.v2.app.MRAppMaster", c.mrEnv(true), res, 1536)
	if err != nil {
		return err
	}
	opts := c.taskJavaOpts(s)
	task := func(typ string, i, n int) (*launchReq, error) {
		attempt := attemptID(c.ts, j.seq, typ, i, n)
		cid, seq := j.nextContainer()
		kind := "map"
		if typ == "r" {
			kind = "reduce"
		}
		cmd := "$JAVA_HOME/bin/java " + mrAdminOpts + " " + strings.ReplaceAll(opts, "@taskid@", attempt) +
			" -Djava.io.tmpdir=$PWD/tmp " + mrLog4jProps + " org.apache.hadoop.mapred.YarnChild 127.0.0.1 " +
			strconv.Itoa(amPort) + " " + attempt + " " + strconv.FormatInt(containerJVMID(c.epoch, seq), 10) + " " + redirects
		req := &launchReq{ContainerID: cid, AppID: j.AppID, User: s.User, Unit: attempt, Type: kind,
			MainClass: "org.apache.hadoop.mapred.YarnChild", AttemptID: attempt, MemoryMB: c.containerMB(s), VCores: 1,
			Command: cmd, Env: c.mrEnv(false), Resources: res}
		if typ == "m" {
			c.faultReq(s, i, n, req)
		}
		if s.OnCPU0 || typ == "m" && i < s.OnCPU0Maps {
			req.CPUs = []int{firstCPU()}
		}
		return req, nil
	}
	err = c.phase(s.Maps, func(i int) error {
		build := func(n int) (*launchReq, error) { return task("m", i, n) }
		if s.fault(i) != FaultNone {
			return c.runFaultedTask(j, i, build)
		}
		return c.runContainerTask(j, build)
	})
	if err == nil && s.Reduces > 0 {
		err = c.phase(s.Reduces, func(i int) error {
			return c.runContainerTask(j, func(n int) (*launchReq, error) { return task("r", i, n) })
		})
	}
	if ferr := c.finishAM(am, amPort); err == nil {
		err = ferr
	}
	return err
}

// phase runs n tasks concurrently and returns the first error.
func (c *Cluster) phase(n int, run func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = run(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runContainerTask runs a task in a container, retrying a failed or
// orphaned attempt up to 4 attempts (mapreduce.map.maxattempts).
func (c *Cluster) runContainerTask(j *Job, build func(attempt int) (*launchReq, error)) error {
	var last string
	for attempt := 0; attempt < 4; attempt++ {
		n, err := c.acquire(NodeYARN, 0)
		if err != nil {
			return err
		}
		req, err := build(attempt)
		if err != nil {
			c.release(n, 0)
			return err
		}
		p, err := c.launchContainer(j, n, req)
		if err == nil {
			err = c.waitProc(p)
		}
		c.release(n, 0)
		if errors.Is(err, ErrClosed) {
			return err
		}
		if p == nil {
			last = err.Error()
			continue
		}
		r := c.snapshot(p)
		if r.ExitCode == 0 && !r.Orphaned {
			return nil
		}
		last = fmt.Sprintf("%s exited %d (orphaned %v)", r.Unit, r.ExitCode, r.Orphaned)
	}
	return fmt.Errorf("task failed 4 times: last %s", last)
}

// startAM launches the application's container 1.
func (c *Cluster) startAM(j *Job, cmd, mainClass string, env []kv, res []resource, mb int) (*proc, error) {
	n, err := c.amNode()
	if err != nil {
		return nil, err
	}
	cid, _ := j.nextContainer()
	req := &launchReq{ContainerID: cid, AppID: j.AppID, User: j.Spec.User, Unit: cid, Type: "am", MainClass: mainClass,
		MemoryMB: mb, VCores: 1, Command: cmd, Env: env, Resources: res}
	return c.launchContainer(j, n, req)
}

// amExitWait is how long an ApplicationMaster told the job is over may
// take to exit before its container is killed.
const amExitWait = 10 * time.Second

// finishAM tells the ApplicationMaster that the job is over (it exits 0),
// and kills its container if it does not. Its end is known when its
// NodeManager reaps it: with Options.ReapDelay, that much later (an AM
// that exited 0 is not killed for its NodeManager's delay).
func (c *Cluster) finishAM(p *proc, port int) error {
	if p == nil {
		return nil
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second); err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write([]byte("finish\n"))
		bufio.NewReader(conn).ReadString('\n')
		conn.Close()
	}
	select {
	case <-p.done:
		return nil
	case <-c.ctx.Done():
		return ErrClosed
	case <-time.After(amExitWait + c.o.ReapDelay):
	}
	c.mu.Lock()
	n, unit := p.node, p.res.Unit
	c.mu.Unlock()
	n.conn.send(&message{Op: opKill, Key: unit})
	return c.waitProc(p)
}

// runSpark runs a client-mode Spark application: an ExecutorLauncher and
// executors sharing the tasks.
func (c *Cluster) runSpark(j *Job) error {
	s := j.Spec
	amPort, driverPort := freePort(), freePort()
	xmx := c.taskXmxMB(s)
	props := confList{
		{"spark.app.name", s.Name},
		{"spark.app.id", j.AppID},
		{"spark.master", "yarn"},
		{"spark.submit.deployMode", "client"},
		{"spark.yarn.queue", s.Queue},
		{"spark.driver.host", "127.0.0.1"},
		{"spark.driver.port", strconv.Itoa(driverPort)},
		{"spark.executor.instances", strconv.Itoa(s.Executors)},
		{"spark.executor.cores", strconv.Itoa(s.Cores)},
		{"spark.executor.memory", strconv.Itoa(xmx) + "m"},
		{"spark.executor.memoryOverhead", strconv.Itoa(max(c.containerMB(s)-xmx, 384)) + "m"},
		{"spark.yarn.am.memory", "256m"},
		{"spark.user", s.User},
	}
	if s.PySpark {
		props.set("spark.pyspark.python", c.python)
		props.set("spark.submit.pyFiles", "")
	}
	c.workConf(&props, j)
	props.set("taskscope.sim.am.port", strconv.Itoa(amPort))
	props.set("taskscope.sim.spark.pyspark", strconv.FormatBool(s.PySpark))
	for e := 1; e <= s.Executors; e++ {
		tasks := s.Maps / s.Executors
		if e <= s.Maps%s.Executors {
			tasks++
		}
		props.set("taskscope.sim.spark.tasks.exec_"+strconv.Itoa(e), strconv.Itoa(tasks))
	}
	if s.Skew > 0 {
		props.set("taskscope.sim.cpu.ms.exec_1", c.ms(time.Duration(float64(s.TaskCPU)*(1+s.Skew))))
	}
	if s.Straggler {
		props.set("taskscope.sim.hold.ms.exec_1", c.ms(5*s.Hold))
	}
	res := []resource{{ID: 10, Name: "__spark_conf__.zip", Link: "__spark_conf__", Files: map[string][]byte{
		"__spark_conf__.properties":       propertiesConf(props),
		"__spark_dist_cache__.properties": propertiesConf(confList{{"spark.yarn.cache.visibilities", "PRIVATE"}}),
		"__spark_hadoop_conf__.xml":       xmlConf(confList{{"fs.defaultFS", "hdfs://127.0.0.1:8020"}}, "core-site.xml"),
	}}}
	env := []kv{
		{"SPARK_YARN_STAGING_DIR", "hdfs://127.0.0.1:8020/user/" + s.User + "/.sparkStaging/" + j.AppID},
		{"SPARK_USER", s.User},
		{"CLASSPATH", "$PWD:$PWD/__spark_conf__:$PWD/__spark_libs__/*:" + c.java.Classes + ":" + hadoopCPBase + ":$PWD/__spark_conf__/__hadoop_conf__"},
	}
	if s.PySpark {
		res = append(res, resource{ID: 11, Name: "pyspark.zip", Link: "pyspark.zip", Data: pysparkZip()})
		env = append(env, kv{"PYTHONPATH", "$PWD/pyspark.zip:$PWD/py4j-0.10.9.7-src.zip"}, kv{"PYSPARK_PYTHON", c.python})
	}
	amCmd := "$JAVA_HOME/bin/java -server -Xmx256m -Djava.io.tmpdir=$PWD/tmp -Dspark.yarn.app.container.log.dir=<LOG_DIR> " + lightJVM +
		" org.apache.spark.deploy.yarn.ExecutorLauncher --arg '127.0.0.1:" + strconv.Itoa(driverPort) +
		"' --properties-file $PWD/__spark_conf__/__spark_conf__.properties --dist-cache-conf $PWD/__spark_conf__/__spark_dist_cache__.properties " + redirects
	am, err := c.startAM(j, amCmd, "org.apache.spark.deploy.yarn.ExecutorLauncher", env, res, 640)
	if err != nil {
		return err
	}
	err = c.phase(s.Executors, func(i int) error {
		return c.runContainerTask(j, func(int) (*launchReq, error) {
			cid, _ := j.nextContainer()
			cmd := "$JAVA_HOME/bin/java -server -Xmx" + strconv.Itoa(xmx) + "m " + lightJVM + " -Djava.io.tmpdir=$PWD/tmp '-Dspark.driver.port=" +
				strconv.Itoa(driverPort) + "' '-Dspark.ui.port=0' -Dspark.yarn.app.container.log.dir=<LOG_DIR> -XX:OnOutOfMemoryError='kill %p' " +
				"org.apache.spark.executor.YarnCoarseGrainedExecutorBackend --driver-url spark://CoarseGrainedScheduler@127.0.0.1:" +
				strconv.Itoa(driverPort) + " --executor-id " + strconv.Itoa(i+1) + " --hostname $NM_HOST --cores " +
				strconv.Itoa(s.Cores) + " --app-id " + j.AppID + " --resourceProfileId 0 " + redirects
			req := &launchReq{ContainerID: cid, AppID: j.AppID, User: s.User, Unit: cid, Type: "executor",
				MainClass: "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend", MemoryMB: c.containerMB(s),
				VCores: s.Cores, Command: cmd, Env: env, Resources: res}
			if s.OnCPU0 {
				req.CPUs = []int{firstCPU()}
			}
			return req, nil
		})
	})
	if ferr := c.finishAM(am, amPort); err == nil {
		err = ferr
	}
	return err
}

// runTez runs a two-vertex Tez DAG: vertex 00 with Maps tasks, vertex 01
// with Reduces tasks; each TezChild container runs JVMReuse attempts one
// after the other.
func (c *Cluster) runTez(j *Job) error {
	s := j.Spec
	amPort := freePort()
	var mu sync.Mutex
	conf := confList{
		{"user.name", s.User},
		{"tez.queue.name", s.Queue},
		{"tez.am.resource.memory.mb", "1024"},
		{"tez.task.resource.memory.mb", strconv.Itoa(c.containerMB(s))},
		{"tez.am.launch.cmd-opts", amJavaOpts},
		{"tez.task.launch.cmd-opts", c.taskJavaOpts(s)},
		{"tez.am.container.reuse.enabled", "true"},
		{"tez.staging-dir", "/tmp/" + s.User + "/staging"},
		{"taskscope.sim.job.name", s.Name},
	}
	c.workConf(&conf, j)
	conf.set("taskscope.sim.am.port", strconv.Itoa(amPort))
	// resources renders tez-conf.pb as it is now: later containers add their
	// attempt lists. Each version is its own localized resource (filecache/<id>).
	version := 0
	resources := func() []resource {
		mu.Lock()
		defer mu.Unlock()
		version++
		return []resource{{ID: 10 + version, Name: "tez-conf.pb", Link: "tez-conf.pb", Data: tezConfPB(conf)}}
	}
	env := []kv{
		{"SHELL", "/bin/bash"},
		{"HADOOP_ROOT_LOGGER", "INFO,CLA"},
		{"CLASSPATH", "$PWD:$PWD/*:$PWD/tezlib/*:$PWD/tezlib/lib/*:" + c.java.Classes + ":" + hadoopCPBase},
		{"LD_LIBRARY_PATH", "$PWD:$HADOOP_COMMON_HOME/lib/native"},
	}
	amCmd := "$JAVA_HOME/bin/java " + amJavaOpts + " -server -Djava.net.preferIPv4Stack=true -Dhadoop.metrics.log.level=WARN " + tezLog4j +
		" -Dsun.nio.ch.bugLevel='' org.apache.tez.dag.app.DAGAppMaster --session " + redirects
	am, err := c.startAM(j, amCmd, "org.apache.tez.dag.app.DAGAppMaster", env, resources(), 1024)
	if err != nil {
		return err
	}
	reuse := max(s.JVMReuse, 1)
	vertex := func(v, tasks int) error {
		if tasks == 0 {
			return nil
		}
		containers := (tasks + reuse - 1) / reuse
		return c.phase(containers, func(k int) error {
			return c.runContainerTask(j, func(n int) (*launchReq, error) {
				cid, _ := j.nextContainer()
				var attempts []string
				for t := k * reuse; t < min((k+1)*reuse, tasks); t++ {
					attempts = append(attempts, tezAttemptID(c.ts, j.seq, 1, v, t, n))
				}
				mu.Lock()
				conf.set("taskscope.sim.tez.attempts."+cid, strings.Join(attempts, ","))
				if v == 0 && k == 0 && s.Straggler {
					conf.set("taskscope.sim.cpu.ms."+attempts[0], c.ms(5*s.TaskCPU))
					conf.set("taskscope.sim.hold.ms."+attempts[0], c.ms(5*s.Hold))
				}
				if v == 1 && k == 0 && s.Skew > 0 {
					conf.set("taskscope.sim.cpu.ms."+attempts[0], c.ms(time.Duration(float64(s.TaskCPU)*(1+s.Skew))))
				}
				mu.Unlock()
				unit := cid
				if len(attempts) == 1 {
					unit = attempts[0]
				}
				cmd := "$JAVA_HOME/bin/java " + c.taskJavaOpts(s) + " -server -Djava.net.preferIPv4Stack=true -Dhadoop.metrics.log.level=WARN " +
					tezLog4j + " -Djava.io.tmpdir=$PWD/tmp org.apache.tez.runtime.task.TezChild 127.0.0.1 " + strconv.Itoa(amPort) +
					" " + cid + " " + j.AppID + " 1 " + redirects
				return &launchReq{ContainerID: cid, AppID: j.AppID, User: s.User, Unit: unit, Type: "tez",
					MainClass: "org.apache.tez.runtime.task.TezChild", AttemptID: attempts[0], MemoryMB: c.containerMB(s),
					VCores: 1, Command: cmd, Env: env, Resources: resources()}, nil
			})
		})
	}
	err = vertex(0, s.Maps)
	if err == nil {
		err = vertex(1, s.Reduces)
	}
	if ferr := c.finishAM(am, amPort); err == nil {
		err = ferr
	}
	return err
}

// tezSwitches reads when a TezChild began each attempt: the first line of
// each syslog_<attempt> in its log directory starts with the local time.
func tezSwitches(logDir string) []Switch {
	entries, err := os.ReadDir(logDir)
	if err != nil {
		return nil
	}
	var out []Switch
	for _, e := range entries {
		a, ok := strings.CutPrefix(e.Name(), "syslog_")
		if !ok {
			continue
		}
		f, err := os.Open(filepath.Join(logDir, e.Name()))
		if err != nil {
			continue
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if len(line) < 23 {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05,000", line[:23], time.Local)
		if err != nil {
			continue
		}
		out = append(out, Switch{AttemptID: a, At: t})
	}
	sortSwitches(out)
	return out
}

func sortSwitches(s []Switch) {
	for i := 1; i < len(s); i++ {
		for k := i; k > 0 && s[k].At.Before(s[k-1].At); k-- {
			s[k], s[k-1] = s[k-1], s[k]
		}
	}
}
