package simulator

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskscope/taskscope/internal/procfs"
)

// The NodeManager stand-in launches containers exactly as YARN's
// DefaultContainerExecutor does:
//
//	<local>/nmPrivate/<app>/<container>/launch_container.sh, <container>.tokens, <container>.pid
//	<local>/usercache/<user>/appcache/<app>/<container>/   the working directory, with
//	    launch_container.sh and container_tokens (copies), default_container_executor.sh,
//	    default_container_executor_session.sh, tmp/, and links to the localized resources
//	<logs>/<app>/<container>/   stdout, stderr, syslog, prelaunch.out, prelaunch.err, launch_container.sh, directory.info
//
// and the chain: the NM forks `bash default_container_executor.sh`, which
// runs `/bin/bash default_container_executor_session.sh`, which writes the
// pid file and `exec setsid /bin/bash launch_container.sh`, which ends
// `exec /bin/bash -c "<java command> 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr"`:
// that bash (the pid in the pid file, session and group leader) forks the
// JVM. The NM waits for its child with wait4 and reports the rusage.
//
// How a container ends, as a NodeManager tells it: the launch script's
// <container>.pid.exitcode beside the pid file (deleted with it by the
// container's cleanup, a moment later: exitFilesKeep), and in the REST API
// the container COMPLETE with its exitCode and diagnostics (until the
// ResourceManager would acknowledge it: completedKeep). Its monitor
// (ContainersMonitorImpl, every yarn.nodemanager.container-monitor.interval-ms)
// kills a container whose process tree's RSS is over its memory (twice
// running, or more than twice at once), exitCode -104 (KILLED_EXCEEDED_PMEM)
// with YARN's diagnostics; a kill by the ApplicationMaster is -105. A
// kill signals the container's process group with SIGTERM, and SIGKILL
// 250 ms later (yarn.nodemanager.sleep-delay-before-sigkill.ms).

type nodeManager struct {
	cfg      *daemonConfig
	c        *conn
	log      *slog.Logger
	nmPort   int
	httpPort int
	webAddr  string
	scheme   string // http, or https when secured
	host     string

	mu         sync.Mutex
	containers map[string]*nmContainer
	wg         sync.WaitGroup
	stopping   bool
}

type nmContainer struct {
	req      *launchReq
	state    string
	cmd      *exec.Cmd
	launcher int
	root     int
	start    time.Time
	work     string
	logDir   string
	cgroups  []string
	// How it ends: killStatus is the ContainerExitStatus of a kill (0:
	// none), exitStatus the exitCode once done; diag the diagnostics.
	killStatus int
	exitStatus int
	diag       string
	done       bool
	overOnce   bool // over its memory at the monitor's last look
}

// YARN's ContainerExitStatus values the stand-in gives.
const (
	yarnInvalid              = -1000
	yarnKilledExceededPmem   = -104
	yarnKilledByAppMaster    = -105
	completedKeep            = 3 * time.Second // a COMPLETE container stays listed
	exitFilesKeep            = time.Second     // the pid and exit-code files stay
	sleepDelayBeforeSIGKILL  = 250 * time.Millisecond
	defaultMonitorIntervalMs = 3000
)

func runNodeManager(cfg *daemonConfig, c *conn, log *slog.Logger) error {
	nm := &nodeManager{cfg: cfg, c: c, log: log, containers: map[string]*nmContainer{}, host: cfg.Name}
	// The ContainerManager port (NM_PORT): nothing talks to it, but it is a real listening port.
	cm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	defer cm.Close()
	go func() {
		for {
			conn, err := cm.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	nm.nmPort = cm.Addr().(*net.TCPAddr).Port
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	nm.httpPort = web.Addr().(*net.TCPAddr).Port
	nm.webAddr = web.Addr().String()
	srv := nm.webServer()
	site := confList(cfg.SiteConf).clone()
	site.set("yarn.nodemanager.address", "127.0.0.1:"+strconv.Itoa(nm.nmPort))
	site.set("yarn.nodemanager.hostname", cfg.Name)
	if cfg.Secure != nil {
		// HTTPS only, SPNEGO: at its https address, on every address as
		// by default (it listens on loopback alone: the agent dials that).
		if srv.Handler, err = secureHandler(cfg.Secure, srv.Handler); err != nil {
			return err
		}
		if srv.TLSConfig, err = cfg.Secure.tlsConfig(); err != nil {
			return err
		}
		nm.scheme = "https"
		site.set("yarn.nodemanager.webapp.https.address", "0.0.0.0:"+strconv.Itoa(nm.httpPort))
		go srv.ServeTLS(web, "", "")
	} else {
		nm.scheme = "http"
		site.set("yarn.nodemanager.webapp.address", nm.webAddr)
		go srv.Serve(web)
	}
	defer srv.Close()
	if err := writeFileAtomic(filepath.Join(cfg.ConfDir, "yarn-site.xml"), xmlConf(site, "yarn-site.xml"), 0o644); err != nil {
		return err
	}
	stopMonitor := make(chan struct{})
	defer close(stopMonitor)
	go nm.monitor(site, stopMonitor)
	log.Info("NodeManager started", "web", nm.webAddr, "nm_port", nm.nmPort)
	sendEvent(c, log, &message{Op: evReady, Ready: &readyInfo{PID: os.Getpid(), WebAddr: nm.webAddr, NMAddr: "127.0.0.1:" + strconv.Itoa(nm.nmPort)}})

	for {
		m, err := c.recv()
		if err != nil {
			log.Info("controller gone; stopping", "err", err)
			nm.shutdown()
			return nil
		}
		switch m.Op {
		case opLaunch:
			nm.wg.Add(1)
			go func() {
				defer nm.wg.Done()
				nm.launch(m.Launch)
			}()
		case opKill:
			nm.kill(m.Key)
		case opShutdown:
			nm.shutdown()
			sendEvent(c, log, &message{Op: opShutdown})
			return nil
		}
	}
}

// shutdown kills every container and waits for the launch goroutines.
func (nm *nodeManager) shutdown() {
	nm.mu.Lock()
	nm.stopping = true
	var all []*nmContainer
	for _, ct := range nm.containers {
		if !ct.done {
			all = append(all, ct)
		}
	}
	nm.mu.Unlock()
	for _, ct := range all {
		nm.killContainer(ct, syscall.SIGKILL)
	}
	nm.wg.Wait()
}

// kill kills a container (by its id, or its unit's key) for the
// ApplicationMaster.
func (nm *nodeManager) kill(id string) {
	nm.mu.Lock()
	ct := nm.containers[id]
	for _, c := range nm.containers {
		if ct == nil && c.req.Unit == id && !c.done {
			ct = c
		}
	}
	nm.mu.Unlock()
	if ct == nil {
		return
	}
	nm.killFor(ct, yarnKilledByAppMaster, "Container killed by the ApplicationMaster.\n")
}

// killFor kills a container for a reason (its ContainerExitStatus and
// diagnostics), as ContainerLaunch.cleanupContainer does: SIGTERM to its
// process group, SIGKILL after the delay.
func (nm *nodeManager) killFor(ct *nmContainer, status int, diag string) {
	nm.mu.Lock()
	if ct.done {
		nm.mu.Unlock()
		return
	}
	if ct.killStatus == 0 {
		ct.killStatus, ct.diag = status, diag
	}
	nm.mu.Unlock()
	nm.signalGroup(ct, syscall.SIGTERM)
	go func() {
		time.Sleep(sleepDelayBeforeSIGKILL)
		nm.signalGroup(ct, syscall.SIGKILL)
	}()
}

// signalGroup signals the container's process group (the session its
// launch script made), or its launcher while that is not known yet.
func (nm *nodeManager) signalGroup(ct *nmContainer, sig syscall.Signal) {
	nm.mu.Lock()
	root, launcher, done := ct.root, ct.launcher, ct.done
	if ct.state == "RUNNING" {
		ct.state = "KILLING"
	}
	nm.mu.Unlock()
	switch {
	case done:
	case root > 1:
		syscall.Kill(-root, sig)
	case launcher > 1:
		syscall.Kill(launcher, sig)
	}
}

// killContainer signals the container's process group (the session the
// launch script made), as the NM's ContainerLaunch does, and the launcher.
func (nm *nodeManager) killContainer(ct *nmContainer, sig syscall.Signal) {
	nm.mu.Lock()
	root, launcher := ct.root, ct.launcher
	if ct.state == "RUNNING" {
		ct.state = "KILLING"
	}
	nm.mu.Unlock()
	if root > 1 {
		syscall.Kill(-root, sig)
	}
	if launcher > 1 {
		syscall.Kill(launcher, sig)
	}
}

// launch runs one container to its end.
func (nm *nodeManager) launch(req *launchReq) {
	ct, err := nm.prepare(req)
	if err == nil {
		err = nm.start(ct)
	}
	if err != nil {
		nm.log.Error("cannot launch container", "container", req.ContainerID, "err", err)
		sendEvent(nm.c, nm.log, &message{Op: evExited, Key: req.Unit, Text: err.Error(),
			Proc: &procInfo{Key: req.Unit, Unit: req.Unit, ContainerID: req.ContainerID, ExitCode: -1, End: time.Now().UnixNano()}})
		return
	}
	nm.follow(ct)
}

func (nm *nodeManager) prepare(req *launchReq) (*nmContainer, error) {
	cfg := nm.cfg
	user := req.User
	appDir := filepath.Join(cfg.LocalDir, "usercache", user, "appcache", req.AppID)
	work := filepath.Join(appDir, req.ContainerID)
	logDir := filepath.Join(cfg.LogDir, req.AppID, req.ContainerID)
	priv := filepath.Join(cfg.LocalDir, "nmPrivate", req.AppID, req.ContainerID)
	for _, d := range []string{filepath.Join(work, "tmp"), logDir, priv, filepath.Join(cfg.LocalDir, "usercache", user, "filecache")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cannot create %s: %w", d, err)
		}
	}
	// Localization: the resources go to the application's filecache.
	var links []kv
	for _, r := range req.Resources {
		dst := filepath.Join(appDir, "filecache", strconv.Itoa(r.ID), r.Name)
		if r.Files != nil {
			for _, name := range sortedKeys(r.Files) {
				if err := writeFileAtomic(filepath.Join(dst, name), r.Files[name], 0o644); err != nil {
					return nil, err
				}
			}
		} else {
			mode := os.FileMode(0o644)
			if r.Exec {
				mode = 0o755
			}
			if err := writeFileAtomic(dst, r.Data, mode); err != nil {
				return nil, err
			}
		}
		links = append(links, kv{dst, r.Link})
	}
	tokens := filepath.Join(priv, req.ContainerID+".tokens")
	tok := []byte("HDTS\x00taskscope-simulator-token\n")
	if err := os.WriteFile(tokens, tok, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "container_tokens"), tok, 0o644); err != nil {
		return nil, err
	}
	env := nm.containerEnv(req, work, logDir, appDir)
	script := launchScript(cfg, req, env, links, logDir, work)
	if err := os.WriteFile(filepath.Join(priv, "launch_container.sh"), script, 0o700); err != nil {
		return nil, err
	}
	// DefaultContainerExecutor copies the launch script into the working directory.
	if err := os.WriteFile(filepath.Join(work, "launch_container.sh"), script, 0o700); err != nil {
		return nil, err
	}
	pidFile := filepath.Join(priv, req.ContainerID+".pid")
	session := fmt.Sprintf("#!/bin/bash\n\necho $$ > %s.tmp\n/bin/mv -f %s.tmp %s\nexec setsid /bin/bash \"%s\"\n",
		pidFile, pidFile, pidFile, filepath.Join(work, "launch_container.sh"))
	sessionPath := filepath.Join(work, "default_container_executor_session.sh")
	if err := os.WriteFile(sessionPath, []byte(session), 0o700); err != nil {
		return nil, err
	}
	exitFile := pidFile + ".exitcode"
	wrapper := fmt.Sprintf("#!/bin/bash\n/bin/bash \"%s\"\nrc=$?\necho $rc > \"%s.tmp\"\n/bin/mv -f \"%s.tmp\" \"%s\"\nexit $rc\n",
		sessionPath, exitFile, exitFile, exitFile)
	wrapperPath := filepath.Join(work, "default_container_executor.sh")
	if err := os.WriteFile(wrapperPath, []byte(wrapper), 0o700); err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", wrapperPath)
	cmd.Dir = work
	// ShellCommandExecutor: the NM's environment plus the launch context's.
	extra := append([]kv(nil), env...)
	extra = append(extra, kv{EnvUnit, req.Unit}, kv{EnvCluster, cfg.ClusterID})
	cmd.Env = childEnv(extra...)
	cmd.Stdout, cmd.Stderr = nil, nil
	ct := &nmContainer{req: req, state: "LOCALIZED", cmd: cmd, work: work, logDir: logDir}
	return ct, nil
}

// containerEnv is the container's environment in launch_container.sh
// order: what the NM sets, then the launch context's.
func (nm *nodeManager) containerEnv(req *launchReq, work, logDir, appDir string) []kv {
	cfg := nm.cfg
	env := []kv{
		{"HADOOP_TOKEN_FILE_LOCATION", filepath.Join(work, "container_tokens")},
		{"CONTAINER_ID", req.ContainerID},
		{"NM_PORT", strconv.Itoa(nm.nmPort)},
		{"NM_HOST", nm.host},
		{"NM_HTTP_PORT", strconv.Itoa(nm.httpPort)},
		{"LOCAL_DIRS", appDir},
		{"LOCAL_USER_DIRS", filepath.Join(cfg.LocalDir, "usercache", req.User) + "/"},
		{"LOG_DIRS", logDir},
		{"USER", req.User},
		{"LOGNAME", req.User},
		{"HOME", "/home/"},
		{"PWD", work},
		{"LOCALIZATION_COUNTERS", fmt.Sprintf("0,%d,0,%d,3", 4096*len(req.Resources), len(req.Resources))},
		{"JVM_PID", "$$"},
		{"NM_AUX_SERVICE_mapreduce_shuffle", "AAA0+gAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
	}
	for _, e := range req.Env {
		e.V = strings.ReplaceAll(e.V, "<LOG_DIR>", logDir)
		env = append(env, e)
	}
	return env
}

// launchScript renders launch_container.sh as Hadoop 3's ContainerLaunch does.
func launchScript(cfg *daemonConfig, req *launchReq, env []kv, links []kv, logDir, work string) []byte {
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("#!/bin/bash\n\nset -o pipefail -e\n")
	w("export PRELAUNCH_OUT=\"%s\"\nexec >\"${PRELAUNCH_OUT}\"\n", filepath.Join(logDir, "prelaunch.out"))
	w("export PRELAUNCH_ERR=\"%s\"\nexec 2>\"${PRELAUNCH_ERR}\"\n", filepath.Join(logDir, "prelaunch.err"))
	w("echo \"Setting up env variables\"\n")
	for _, e := range []kv{
		{"JAVA_HOME", cfg.JavaHome}, {"HADOOP_COMMON_HOME", cfg.HadoopHome}, {"HADOOP_HDFS_HOME", cfg.HadoopHome},
		{"HADOOP_CONF_DIR", cfg.ConfDir}, {"HADOOP_YARN_HOME", cfg.HadoopHome}, {"HADOOP_MAPRED_HOME", cfg.HadoopHome},
	} {
		w("export %s=${%s:-\"%s\"}\n", e.K, e.K, e.V)
	}
	for _, e := range env {
		w("export %s=\"%s\"\n", e.K, shellDQ(e.V))
	}
	w("echo \"Setting up job resources\"\n")
	for _, l := range links {
		if dir := filepath.Dir(l.V); dir != "." {
			w("mkdir -p %s\n", dir)
		}
		w("ln -sf -- \"%s\" \"%s\"\n", l.K, l.V)
	}
	w("echo \"Copying debugging information\"\n")
	w("# Creating copy of launch script\n")
	w("cp \"launch_container.sh\" \"%s/launch_container.sh\"\n", logDir)
	w("chmod 640 \"%s/launch_container.sh\"\n", logDir)
	w("# Determining directory contents\n")
	w("echo \"ls -l:\" 1>\"%s/directory.info\"\n", logDir)
	w("ls -l 1>>\"%s/directory.info\"\n", logDir)
	w("echo \"Launching container\"\n")
	cmd := strings.ReplaceAll(req.Command, "<LOG_DIR>", logDir)
	w("exec /bin/bash -c \"%s\"\n", cmd)
	return b.Bytes()
}

// shellDQ escapes what Hadoop escapes in a double-quoted export: quotes and backslashes.
func shellDQ(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}

func (nm *nodeManager) start(ct *nmContainer) error {
	nm.mu.Lock()
	if nm.stopping {
		nm.mu.Unlock()
		return fmt.Errorf("the NodeManager is stopping")
	}
	nm.containers[ct.req.ContainerID] = ct
	nm.mu.Unlock()
	if ct.req.MemoryLimit && len(nm.cfg.Cgroups) == 0 {
		nm.forget(ct)
		return fmt.Errorf("a memory limit needs cgroups")
	}
	if len(nm.cfg.Cgroups) > 0 {
		var limit int64
		if ct.req.MemoryLimit {
			limit = int64(ct.req.MemoryMB) << 20
		}
		paths, err := containerCgroups(nm.cfg.Cgroups, ct.req.ContainerID, ct.req.VCores, limit)
		if err != nil {
			nm.forget(ct)
			return err
		}
		ct.cgroups = paths
	}
	if err := startIn(ct.cmd, ct.cgroups, ct.req.CPUs); err != nil {
		removeCgroups(ct.cgroups)
		nm.forget(ct)
		return fmt.Errorf("cannot start %s: %w", ct.cmd.Path, err)
	}
	nm.mu.Lock()
	ct.launcher = ct.cmd.Process.Pid
	ct.start = time.Now()
	ct.state = "RUNNING"
	nm.mu.Unlock()
	return nil
}

func (nm *nodeManager) forget(ct *nmContainer) {
	nm.mu.Lock()
	if nm.containers[ct.req.ContainerID] == ct {
		delete(nm.containers, ct.req.ContainerID)
	}
	nm.mu.Unlock()
}

// monitor is ContainersMonitorImpl's physical memory check: every
// interval, the RSS of each running container's processes (its session:
// the launch script's setsid) against its memory; a container over it at
// two looks in a row, or over twice it at once, is killed with -104. A
// container whose memory cgroup is limited (MemoryLimit) is left to the
// kernel.
func (nm *nodeManager) monitor(site confList, stop <-chan struct{}) {
	ms, err := strconv.Atoi(site.get("yarn.nodemanager.container-monitor.interval-ms"))
	if err != nil || ms <= 0 {
		ms = defaultMonitorIntervalMs
	}
	t := time.NewTicker(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		nm.checkMemory()
	}
}

func (nm *nodeManager) checkMemory() {
	nm.mu.Lock()
	var cts []*nmContainer
	for _, ct := range nm.containers {
		if !ct.done && ct.state == "RUNNING" && ct.root > 1 && ct.req.MemoryMB > 0 && !ct.req.MemoryLimit {
			cts = append(cts, ct)
		}
	}
	nm.mu.Unlock()
	if len(cts) == 0 {
		return
	}
	trees := sessionTrees()
	for _, ct := range cts {
		tree := trees[ct.root]
		var rss, vmem int64
		for _, p := range tree {
			rss += p.rssBytes
			vmem += p.vsize
		}
		limit := int64(ct.req.MemoryMB) << 20
		nm.mu.Lock()
		over := rss > limit && (ct.overOnce || rss > 2*limit)
		ct.overOnce = rss > limit
		nm.mu.Unlock()
		if !over {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Container [pid=%d,containerID=%s] is running %dB beyond the 'PHYSICAL' memory limit. "+
			"Current usage: %s of %s physical memory used; %s of %s virtual memory used. Killing container.\n",
			ct.root, ct.req.ContainerID, rss-limit, humanMB(rss), humanMB(limit), humanMB(vmem), humanMB(limit*21/10))
		fmt.Fprintf(&b, "Dump of the process-tree for %s :\n\t|- PID PPID PGRPID SESSID CMD_NAME USER_MODE_TIME(MILLIS) "+
			"SYSTEM_TIME(MILLIS) VMEM_USAGE(BYTES) RSSMEM_USAGE(PAGES) FULL_CMD_LINE\n", ct.req.ContainerID)
		for _, p := range tree {
			cmdline := ""
			if cl, err := os.ReadFile("/proc/" + strconv.Itoa(int(p.pid)) + "/cmdline"); err == nil {
				cmdline = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
			}
			fmt.Fprintf(&b, "\t|- %d %d %d %d (%s) %d %d %d %d %s\n", p.pid, p.ppid, p.pgrp, p.sid, p.comm, p.utimeMs, p.stimeMs,
				p.vsize, p.rssBytes/int64(os.Getpagesize()), cmdline)
		}
		b.WriteString("\n")
		nm.log.Info("container over its physical memory: killing", "container", ct.req.ContainerID, "rss", rss, "limit", limit)
		nm.killFor(ct, yarnKilledExceededPmem, b.String())
	}
}

// humanMB writes bytes as YARN's monitor does (StringUtils.TraditionalBinaryPrefix).
func humanMB(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
}

// treeProc is a process of a container's tree as the monitor dumps it.
type treeProc struct {
	pid, ppid, pgrp, sid int32
	comm                 string
	utimeMs, stimeMs     int64
	vsize, rssBytes      int64
}

// sessionTrees reads every process's stat, by session.
func sessionTrees() map[int][]treeProc {
	out := map[int][]treeProc{}
	pids, err := procFS.NewLister().List(nil)
	if err != nil {
		return out
	}
	var buf []byte
	var st procfs.Stat
	page := int64(os.Getpagesize())
	for _, e := range pids {
		buf, err = procFS.ReadPidFile(e.PID, "stat", buf)
		if err != nil || procfs.ParseStat(buf, &st) != nil || st.Session <= 1 {
			continue
		}
		p := treeProc{pid: st.PID, ppid: st.PPID, pgrp: st.PGRP, sid: st.Session, comm: string(st.Comm),
			utimeMs: int64(st.UTime) * 1000 / procfs.UserHZ, stimeMs: int64(st.STime) * 1000 / procfs.UserHZ,
			vsize: int64(st.VSize), rssBytes: st.RSS * page}
		out[int(st.Session)] = append(out[int(st.Session)], p)
	}
	return out
}

// follow reports the container's pids, then waits for it.
func (nm *nodeManager) follow(ct *nmContainer) {
	req := ct.req
	waited := make(chan struct{})
	var ps *os.ProcessState
	var werr error
	var end time.Time
	go func() {
		end, werr = reapLate(ct.cmd, time.Duration(nm.cfg.ReapDelayMs)*time.Millisecond)
		ps = ct.cmd.ProcessState
		close(waited)
	}()
	info := &procInfo{
		Key: req.Unit, Unit: req.Unit, ContainerID: req.ContainerID, AttemptID: req.AttemptID,
		MainClass: req.MainClass, Type: req.Type, LauncherPID: ct.launcher, Start: ct.start.UnixNano(),
		WorkDir: ct.work, LogDir: ct.logDir, ExitCode: -1,
	}
	pidFile := filepath.Join(nm.cfg.LocalDir, "nmPrivate", req.AppID, req.ContainerID, req.ContainerID+".pid")
	if b, err := waitFile(pidFile, 30*time.Second, waited); err == nil {
		info.RootPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		nm.mu.Lock()
		ct.root = info.RootPID
		stopping := nm.stopping
		nm.mu.Unlock()
		if stopping {
			nm.killContainer(ct, syscall.SIGKILL)
		}
		// The JVM is the root's child once launch_container.sh has exec'd bash -c.
		deadline := time.Now().Add(30 * time.Second)
	find:
		for time.Now().Before(deadline) {
			if pid := childJVM(info.RootPID); pid > 0 {
				info.JVMPID = pid
				break
			}
			select {
			case <-waited:
				break find
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	sendEvent(nm.c, nm.log, &message{Op: evStarted, Key: req.Unit, Proc: info})
	<-waited
	done := *info
	done.End = end.UnixNano()
	if werr == nil || ps != nil {
		done.ExitCode = exitCode(ps)
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			done.CPUNanos = ru.Utime.Nano() + ru.Stime.Nano()
			done.MaxRSS = ru.Maxrss * 1024
		}
	}
	// The verdict: a kill's status, else the exit code; YARN's diagnostics.
	nm.mu.Lock()
	status, diag := ct.killStatus, ct.diag
	if status != 0 {
		diag += fmt.Sprintf("Container killed on request. Exit code is %d\n", done.ExitCode)
	} else {
		status = done.ExitCode
	}
	if done.ExitCode != 0 {
		diag += fmt.Sprintf("Container exited with a non-zero exit code %d. \n", done.ExitCode)
	}
	ct.state, ct.done, ct.exitStatus, ct.diag = "COMPLETE", true, status, diag
	nm.mu.Unlock()
	done.YarnExitStatus, done.Diagnostics = status, diag
	if len(ct.cgroups) > 0 {
		if err := removeCgroups(ct.cgroups); err != nil {
			nm.log.Warn("cgroup cleanup", "err", err)
		}
	}
	// The container's cleanup deletes its pid and exit-code files; the
	// ResourceManager's acknowledgement takes it off the NodeManager's list.
	time.AfterFunc(exitFilesKeep, func() {
		os.Remove(pidFile)
		os.Remove(pidFile + ".exitcode")
	})
	time.AfterFunc(completedKeep, func() { nm.forget(ct) })
	nm.log.Info("container exited", "container", req.ContainerID, "exit", done.ExitCode, "cpu_ms", done.CPUNanos/1e6)
	sendEvent(nm.c, nm.log, &message{Op: evExited, Key: req.Unit, Proc: &done})
}

// exitCode is the exit status, or 128+signal as a shell reports it.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
