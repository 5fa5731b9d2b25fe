package simulator

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The Hadoop 1 TaskTracker stand-in. For a task it is given it lays out
// what Hadoop 1.2's TaskTracker, TaskRunner and DefaultTaskController do:
//
//	<local>/taskTracker/<user>/jobcache/<job>/job.xml, jobToken, jars/
//	<local>/taskTracker/<user>/jobcache/<job>/<attempt>/job.xml   the attempt's localized conf
//	<local>/taskTracker/<user>/jobcache/<job>/<attempt>/work/     the Child's working directory (tmp/ in it)
//	<local>/ttprivate/taskTracker/<user>/jobcache/<job>/<attempt>/taskjvm.sh
//	<hadoop.log.dir>/userlogs/<job>/<attempt>/                    stdout, stderr, syslog, log.index
//
// and runs `bash taskjvm.sh`, which ends `exec setsid '<java>' ... Child ...`,
// so the Child is its own session and group leader, with JVM_PID its pid.
// Its JvmManager hands tasks to Child JVMs over the umbilical (getTask), reuses
// idle JVMs of the same job up to mapred.job.reuse.jvm.num.tasks, rewrites the
// current attempt's log.index every 5 s, and "just removes" a JVM that is
// killed before it has reported its pid.

type taskTracker struct {
	cfg  *daemonConfig
	c    *conn
	log  *slog.Logger
	port int

	mu       sync.Mutex
	jvms     map[int32]*ttJVM
	jobsDone map[string]bool
	jobsSeen map[string]bool
	wg       sync.WaitGroup
	stopping bool
}

type ttJVM struct {
	id          int32
	jvmID       string
	unit        string
	job, typ    string
	reuse, ran  int
	state       string // launching, idle, running, dying, lost
	pending     *ttAttempt
	current     *ttAttempt
	first       string
	logLocation string
	work        string
	pid         int
	stopIndex   chan struct{}
	announced   chan struct{} // closed once "started" is sent: the JVM's other events come after it
}

type ttAttempt struct {
	req    *assignReq
	dir    string
	jobXML string
	logDir string
	offs   [3]int64
}

var logIndexFiles = [3]string{"stdout", "stderr", "syslog"}

func runTaskTracker(cfg *daemonConfig, c *conn, log *slog.Logger) error {
	tt := &taskTracker{cfg: cfg, c: c, log: log, jvms: map[int32]*ttJVM{}, jobsDone: map[string]bool{}, jobsSeen: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	defer ln.Close()
	tt.port = ln.Addr().(*net.TCPAddr).Port
	go tt.serve(ln)
	site := confList(cfg.SiteConf).clone()
	site.set("mapred.task.tracker.report.address", ln.Addr().String())
	site.set("mapred.tasktracker.map.tasks.maximum", strconv.Itoa(cfg.MapSlots))
	site.set("mapred.tasktracker.reduce.tasks.maximum", strconv.Itoa(cfg.ReduceSlots))
	if err := writeFileAtomic(filepath.Join(cfg.ConfDir, "mapred-site.xml"), xmlConf(site, "mapred-site.xml"), 0o644); err != nil {
		return err
	}
	log.Info("TaskTracker started", "umbilical", ln.Addr().String())
	sendEvent(c, log, &message{Op: evReady, Ready: &readyInfo{PID: os.Getpid(), Umbilical: ln.Addr().String()}})
	for {
		m, err := c.recv()
		if err != nil {
			log.Info("controller gone; stopping", "err", err)
			tt.shutdown()
			return nil
		}
		switch m.Op {
		case opAssign:
			if err := tt.assign(m.Assign); err != nil {
				log.Error("cannot run task", "attempt", m.Assign.Attempt, "err", err)
				sendEvent(c, log, &message{Op: evTaskDone, Attempt: m.Assign.Attempt, Code: -1, Text: err.Error()})
			}
		case opJobDone:
			tt.mu.Lock()
			tt.jobsDone[m.Job] = true
			tt.mu.Unlock()
		case opKill:
			tt.kill(m.Key)
		case opShutdown:
			tt.shutdown()
			sendEvent(c, log, &message{Op: opShutdown})
			return nil
		}
	}
}

func (tt *taskTracker) shutdown() {
	tt.mu.Lock()
	tt.stopping = true
	var pids []int
	for _, j := range tt.jvms {
		pids = append(pids, j.pid)
	}
	tt.mu.Unlock()
	for _, pid := range pids {
		killGroupAndPid(pid, syscall.SIGKILL)
	}
	tt.wg.Wait()
}

func (tt *taskTracker) kill(unit string) {
	tt.mu.Lock()
	var pids []int
	for _, j := range tt.jvms {
		if j.unit == unit {
			pids = append(pids, j.pid)
		}
	}
	tt.mu.Unlock()
	for _, pid := range pids {
		killGroupAndPid(pid, syscall.SIGKILL)
	}
}

func (tt *taskTracker) jobDir(user, job string) string {
	return filepath.Join(tt.cfg.LocalDir, "taskTracker", user, "jobcache", job)
}

// prepare lays out the job (once) and the attempt's directories and files.
func (tt *taskTracker) prepare(req *assignReq) (*ttAttempt, error) {
	jobDir := tt.jobDir(req.User, req.Job)
	tt.mu.Lock()
	seen := tt.jobsSeen[req.Job]
	tt.jobsSeen[req.Job] = true
	tt.mu.Unlock()
	if !seen {
		if err := writeFileAtomic(filepath.Join(jobDir, "job.xml"), xmlConf(req.JobConf, "job.xml"), 0o644); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(filepath.Join(jobDir, "jobToken"), []byte("HDTS\x00taskscope-simulator-token\n"), 0o600); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(jobDir, "jars", "classes"), 0o755); err != nil {
			return nil, err
		}
		for _, r := range req.Jars {
			mode := os.FileMode(0o644)
			if r.Exec {
				mode = 0o755
			}
			if err := writeFileAtomic(filepath.Join(jobDir, "jars", r.Name), r.Data, mode); err != nil {
				return nil, err
			}
		}
	}
	a := &ttAttempt{req: req, dir: filepath.Join(jobDir, req.Attempt)}
	work := filepath.Join(a.dir, "work")
	if err := os.MkdirAll(filepath.Join(work, "tmp"), 0o755); err != nil {
		return nil, err
	}
	// TaskRunner.setupWorkDir links everything in the job's jars directory into the work directory.
	for _, r := range req.Jars {
		os.Symlink(filepath.Join(jobDir, "jars", r.Name), filepath.Join(work, r.Link))
	}
	conf := confList(req.JobConf).clone()
	part := strings.TrimLeft(strings.Split(req.Attempt, "_")[4], "0")
	if part == "" {
		part = "0"
	}
	tip := "task" + strings.TrimPrefix(req.Attempt[:strings.LastIndexByte(req.Attempt, '_')], "attempt")
	conf.set("mapred.task.id", req.Attempt)
	conf.set("mapred.tip.id", tip)
	conf.set("mapred.task.partition", part)
	conf.set("mapred.task.is.map", strconv.FormatBool(req.Type == "m"))
	conf.set("mapred.job.id", req.Job)
	conf.set("mapred.local.dir", a.dir)
	conf.set("job.local.dir", filepath.Join(jobDir, "work"))
	conf.set("mapred.work.output.dir", filepath.Join(work, "output"))
	if req.Hang {
		conf.set("taskscope.sim.child.hang", "true")
	}
	a.jobXML = filepath.Join(a.dir, "job.xml")
	if err := writeFileAtomic(a.jobXML, xmlConf(conf, "job.xml"), 0o644); err != nil {
		return nil, err
	}
	a.logDir = filepath.Join(tt.cfg.LogDir, "userlogs", req.Job, req.Attempt)
	if err := os.MkdirAll(a.logDir, 0o755); err != nil {
		return nil, err
	}
	return a, nil
}

func (tt *taskTracker) assign(req *assignReq) error {
	a, err := tt.prepare(req)
	if err != nil {
		return err
	}
	slots := tt.cfg.MapSlots
	if req.Type == "r" {
		slots = tt.cfg.ReduceSlots
	}
	tt.mu.Lock()
	if tt.stopping {
		tt.mu.Unlock()
		return fmt.Errorf("the TaskTracker is stopping")
	}
	counted := 0
	var evict *ttJVM
	for _, j := range tt.jvms {
		if j.typ != req.Type {
			continue
		}
		switch j.state {
		case "idle":
			if j.job == req.Job && (j.reuse < 0 || j.ran < j.reuse) && j.pending == nil {
				j.pending = a
				tt.mu.Unlock()
				tt.log.Info("giving task to an idle JVM", "attempt", req.Attempt, "jvm", j.jvmID)
				return nil
			}
			if evict == nil {
				evict = j
			}
			counted++
		case "launching", "running":
			counted++
		}
	}
	if counted >= slots && evict != nil {
		// JvmManager.reapJvm: make room by killing an idle JVM.
		evict.state = "dying"
	}
	tt.mu.Unlock()
	return tt.launchJVM(a)
}

func (tt *taskTracker) launchJVM(a *ttAttempt) error {
	cfg, req := tt.cfg, a.req
	id := int32(rand.Uint32())
	j := &ttJVM{
		id: id, jvmID: "jvm_" + strings.TrimPrefix(req.Job, "job_") + "_" + req.Type + "_" + strconv.Itoa(int(id)),
		job: req.Job, typ: req.Type, reuse: req.Reuse, state: "launching", pending: a, first: req.Attempt,
		logLocation: a.logDir, work: filepath.Join(a.dir, "work"), announced: make(chan struct{}),
	}
	if j.reuse == 0 {
		j.reuse = 1
	}
	j.unit = req.Attempt
	if j.reuse != 1 {
		j.unit = j.jvmID
	}
	script := tt.taskJVMScript(j, a)
	scriptPath := filepath.Join(cfg.LocalDir, "ttprivate", "taskTracker", req.User, "jobcache", req.Job, req.Attempt, "taskjvm.sh")
	if err := writeFileAtomic(scriptPath, script, 0o700); err != nil {
		return err
	}
	for _, f := range logIndexFiles[:2] {
		os.WriteFile(filepath.Join(a.logDir, f), nil, 0o644)
	}
	cmd := exec.Command("bash", scriptPath)
	cmd.Dir = j.work
	cmd.Env = childEnv(kv{EnvUnit, j.unit}, kv{EnvCluster, cfg.ClusterID})
	tt.mu.Lock()
	if tt.stopping {
		tt.mu.Unlock()
		return fmt.Errorf("the TaskTracker is stopping")
	}
	if err := cmd.Start(); err != nil {
		tt.mu.Unlock()
		return fmt.Errorf("cannot start %s: %w", scriptPath, err)
	}
	j.pid = cmd.Process.Pid
	tt.jvms[id] = j
	tt.wg.Add(1)
	tt.mu.Unlock()
	start := time.Now()
	typ := "map"
	if req.Type == "r" {
		typ = "reduce"
	}
	tt.log.Info("launched JVM", "jvm", j.jvmID, "pid", j.pid, "attempt", req.Attempt)
	exited := make(chan struct{})
	go func() {
		// Reported once bash has exec'd the JVM (the pid stays the same).
	wait:
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			if st, err := statOf(j.pid); err != nil || st.Comm == "java" && execDone(j.pid) || st.State == 'Z' {
				break
			}
			select {
			case <-exited:
				break wait
			case <-time.After(2 * time.Millisecond):
			}
		}
		sendEvent(tt.c, tt.log, &message{Op: evStarted, Key: j.unit, Proc: &procInfo{
			Key: j.unit, Unit: j.unit, AttemptID: req.Attempt, JVMID: j.jvmID, MainClass: "org.apache.hadoop.mapred.Child",
			Type: typ, LauncherPID: j.pid, RootPID: j.pid, JVMPID: j.pid, Start: start.UnixNano(),
			WorkDir: j.work, LogDir: j.logLocation, ExitCode: -1,
		}})
		close(j.announced)
	}()
	if req.Hang {
		go tt.lostTimer(j, time.Duration(req.LostAfterMs)*time.Millisecond)
	}
	go tt.reap(j, cmd, start, exited)
	return nil
}

// taskJVMScript renders taskjvm.sh as TaskLog.buildCommandLine does.
func (tt *taskTracker) taskJVMScript(j *ttJVM, a *ttAttempt) []byte {
	cfg, req := tt.cfg, a.req
	jobDir := tt.jobDir(req.User, req.Job)
	native := filepath.Join(cfg.HadoopHome, "lib", "native", "Linux-amd64-64")
	env := []kv{
		{"LD_LIBRARY_PATH", j.work + ":" + native},
		{"HADOOP_WORK_DIR", j.work},
		{"HADOOP_TOKEN_FILE_LOCATION", filepath.Join(jobDir, "jobToken")},
		{"HADOOP_ROOT_LOGGER", "INFO,TLA"},
		{"HADOOP_CLIENT_OPTS", "-Dhadoop.tasklog.taskid=" + req.Attempt + " -Dhadoop.tasklog.iscleanup=false -Dhadoop.tasklog.totalLogFileSize=0"},
		{"USER", req.User},
		{"SHELL", "/bin/bash"},
		{"LOGNAME", req.User},
		{"HOME", "/homes/"},
	}
	for _, e := range strings.Split(req.ChildEnv, ",") {
		if k, v, ok := strings.Cut(e, "="); ok && k != "" {
			env = append(env, kv{k, v})
		}
	}
	cp := []string{
		cfg.ConfDir, filepath.Join(cfg.JavaHome, "lib", "tools.jar"), cfg.HadoopHome,
		filepath.Join(cfg.HadoopHome, "hadoop-core-1.2.1.jar"), filepath.Join(cfg.HadoopHome, "lib", "commons-logging-1.1.1.jar"),
		filepath.Join(cfg.HadoopHome, "lib", "log4j-1.2.15.jar"), cfg.Classes,
		filepath.Join(jobDir, "jars", "classes"), filepath.Join(jobDir, "jars"), j.work,
	}
	argv := []string{cfg.Java, "-Djava.library.path=" + native + ":" + j.work}
	argv = append(argv, strings.Fields(strings.ReplaceAll(req.JavaOpts, "@taskid@", req.Attempt))...)
	argv = append(argv,
		"-Djava.io.tmpdir="+filepath.Join(j.work, "tmp"),
		"-classpath", strings.Join(cp, ":"),
		"-Dlog4j.configuration=task-log4j.properties",
		"-Dhadoop.log.dir="+cfg.LogDir,
		"-Dhadoop.root.logger=INFO,TLA",
		"-Dhadoop.tasklog.taskid="+req.Attempt,
		"-Dhadoop.tasklog.iscleanup=false",
		"-Dhadoop.tasklog.totalLogFileSize=0",
		"org.apache.hadoop.mapred.Child", "127.0.0.1", strconv.Itoa(tt.port), req.Attempt, j.logLocation, strconv.Itoa(int(j.id)),
	)
	var b bytes.Buffer
	b.WriteString("export JVM_PID=`echo $$`\n")
	for _, e := range env {
		fmt.Fprintf(&b, "export %s=\"%s\"\n", e.K, shellDQ(e.V))
	}
	b.WriteString("\n") // the ulimit setup command, empty without mapred.child.ulimit
	b.WriteString("exec setsid ")
	for _, a := range argv {
		b.WriteString("'" + a + "' ")
	}
	fmt.Fprintf(&b, " < /dev/null  1>> %s 2>> %s", filepath.Join(j.logLocation, "stdout"), filepath.Join(j.logLocation, "stderr"))
	return b.Bytes()
}

// lostTimer removes a JVM that has not asked for its task in time, without
// signalling it: JvmRunner.kill() before the pid is known.
func (tt *taskTracker) lostTimer(j *ttJVM, after time.Duration) {
	time.Sleep(after)
	tt.mu.Lock()
	if j.state != "launching" {
		tt.mu.Unlock()
		return
	}
	j.state = "lost"
	attempt := ""
	if j.pending != nil {
		attempt = j.pending.req.Attempt
		j.pending = nil
	}
	tt.mu.Unlock()
	<-j.announced
	tt.log.Info("JVM Not killed " + j.jvmID + " but just removed")
	sendEvent(tt.c, tt.log, &message{Op: evLost, Key: j.unit, Attempt: attempt})
}

func (tt *taskTracker) reap(j *ttJVM, cmd *exec.Cmd, start time.Time, exited chan struct{}) {
	defer tt.wg.Done()
	end, _ := reapLate(cmd, time.Duration(tt.cfg.ReapDelayMs)*time.Millisecond)
	close(exited)
	<-j.announced
	ps := cmd.ProcessState
	tt.mu.Lock()
	delete(tt.jvms, j.id)
	var failed []string
	if j.current != nil {
		failed = append(failed, j.current.req.Attempt)
		j.current = nil
	}
	if j.pending != nil && j.state != "lost" {
		failed = append(failed, j.pending.req.Attempt)
		j.pending = nil
	}
	if j.stopIndex != nil {
		close(j.stopIndex)
		j.stopIndex = nil
	}
	tt.mu.Unlock()
	code := exitCode(ps)
	for _, at := range failed {
		// A task whose JVM exits before its done failed, whatever the
		// exit code (TaskInProgress.reportTaskFinished): a Child whose
		// task failed exits 0.
		c, text := code, "Task process exit with nonzero status of "+strconv.Itoa(code)
		if c == 0 {
			c, text = 1, "JVM exited 0 without the task's done"
		}
		sendEvent(tt.c, tt.log, &message{Op: evTaskDone, Key: j.unit, Attempt: at, Code: c, Text: text})
	}
	info := &procInfo{Key: j.unit, Unit: j.unit, JVMID: j.jvmID, RootPID: j.pid, JVMPID: j.pid, LauncherPID: j.pid,
		Start: start.UnixNano(), End: end.UnixNano(), ExitCode: code}
	if ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			info.CPUNanos = ru.Utime.Nano() + ru.Stime.Nano()
			info.MaxRSS = ru.Maxrss * 1024
		}
	}
	tt.log.Info("JVM exited", "jvm", j.jvmID, "exit", code)
	sendEvent(tt.c, tt.log, &message{Op: evExited, Key: j.unit, Proc: info})
}

// serve answers the umbilical: one line in, one line out.
func (tt *taskTracker) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			c.Write([]byte(tt.handle(strings.Fields(line)) + "\n"))
		}()
	}
}

func (tt *taskTracker) handle(f []string) string {
	if len(f) == 0 {
		return "error"
	}
	switch f[0] {
	case "getTask":
		if len(f) < 3 {
			return "error"
		}
		id, _ := strconv.ParseInt(f[1], 10, 32)
		pid, _ := strconv.Atoi(f[2])
		return tt.getTask(int32(id), pid)
	case "ping":
		return "ok"
	case "done":
		if len(f) < 3 {
			return "error"
		}
		rc, _ := strconv.Atoi(f[2])
		tt.done(f[1], rc)
		return "ok"
	}
	return "error"
}

func (tt *taskTracker) getTask(id int32, pid int) string {
	tt.mu.Lock()
	j := tt.jvms[id]
	if j == nil || j.state == "lost" {
		tt.mu.Unlock()
		tt.log.Info("Killing unknown JVM", "id", id, "pid", pid)
		return "die"
	}
	if j.state == "dying" {
		tt.mu.Unlock()
		return "die"
	}
	if a := j.pending; a != nil {
		j.pending = nil
		j.current = a
		j.state = "running"
		j.ran++
		for i, f := range logIndexFiles {
			if st, err := os.Stat(filepath.Join(j.logLocation, f)); err == nil {
				a.offs[i] = st.Size()
			}
		}
		stop := make(chan struct{})
		j.stopIndex = stop
		tt.mu.Unlock()
		<-j.announced
		now := time.Now()
		tt.writeLogIndex(j, a)
		go tt.refreshLogIndex(j, a, stop)
		tt.log.Info("JVM given task", "jvm", j.jvmID, "attempt", a.req.Attempt)
		sendEvent(tt.c, tt.log, &message{Op: evSwitch, Key: j.unit, Attempt: a.req.Attempt, At: now.UnixNano()})
		return "task " + a.req.Attempt + " " + a.jobXML
	}
	if tt.jobsDone[j.job] || (j.reuse >= 0 && j.ran >= j.reuse) {
		j.state = "dying"
		tt.mu.Unlock()
		return "die"
	}
	if j.state == "launching" {
		j.state = "idle"
	}
	tt.mu.Unlock()
	return "wait"
}

func (tt *taskTracker) done(attempt string, rc int) {
	tt.mu.Lock()
	var j *ttJVM
	var a *ttAttempt
	for _, x := range tt.jvms {
		if x.current != nil && x.current.req.Attempt == attempt {
			j, a = x, x.current
			break
		}
	}
	if j == nil {
		tt.mu.Unlock()
		return
	}
	j.current = nil
	j.state = "idle"
	if j.stopIndex != nil {
		close(j.stopIndex)
		j.stopIndex = nil
	}
	tt.mu.Unlock()
	tt.writeLogIndex(j, a)
	sendEvent(tt.c, tt.log, &message{Op: evTaskDone, Key: j.unit, Attempt: attempt, Code: rc})
}

// writeLogIndex writes userlogs/<job>/<attempt>/log.index as TaskLog.writeToIndexFile does:
// the first attempt's log directory, then where this attempt's part of each log starts and how long it is.
func (tt *taskTracker) writeLogIndex(j *ttJVM, a *ttAttempt) {
	var b bytes.Buffer
	b.WriteString("LOG_DIR:" + j.logLocation + "\n")
	for i, f := range logIndexFiles {
		var size int64
		if st, err := os.Stat(filepath.Join(j.logLocation, f)); err == nil {
			size = st.Size()
		}
		fmt.Fprintf(&b, "%s:%d %d\n", f, a.offs[i], max(size-a.offs[i], 0))
	}
	if err := writeFileAtomic(filepath.Join(a.logDir, "log.index"), b.Bytes(), 0o644); err != nil {
		tt.log.Warn("cannot write log.index", "err", err)
	}
}

func (tt *taskTracker) refreshLogIndex(j *ttJVM, a *ttAttempt, stop chan struct{}) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			tt.writeLogIndex(j, a)
		}
	}
}
