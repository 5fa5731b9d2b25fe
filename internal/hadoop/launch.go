package hadoop

import (
	"path"
	"strings"
)

// Kind says what a process is, judged from its command line alone.
type Kind uint8

// The kinds of process Hadoop starts for a task, and the daemons that start them.
const (
	KindNone              Kind = iota
	KindYarnChild              // org.apache.hadoop.mapred.YarnChild: a MapReduce task JVM on YARN
	KindMRAppMaster            // org.apache.hadoop.mapreduce.v2.app.MRAppMaster
	KindChild                  // org.apache.hadoop.mapred.Child: a Hadoop 1 task JVM
	KindSparkExecutor          // (Yarn)CoarseGrainedExecutorBackend
	KindTezChild               // org.apache.tez.runtime.task.TezChild
	KindSparkAM                // org.apache.spark.deploy.yarn.ExecutorLauncher (client mode) or ApplicationMaster
	KindTezAM                  // org.apache.tez.dag.app.DAGAppMaster
	KindContainerShell         // /bin/bash -c "<java ...>": the root of a YARN container's command
	KindLaunchContainer        // launch_container.sh
	KindContainerExecutor      // default_container_executor(_session).sh, container-executor
	KindTaskJVMScript          // bash taskjvm.sh (Hadoop 1)
	KindTaskController         // Hadoop 1 task-controller (LinuxTaskController)
	KindNodeManager            // a daemon: never part of a task
	KindTaskTracker            // a daemon: never part of a task
	KindOtherDaemon            // DataNode, ResourceManager, JobTracker, ...: never part of a task
)

var kindNames = [...]string{
	KindNone: "none", KindYarnChild: "yarn-child", KindMRAppMaster: "mr-app-master", KindChild: "child",
	KindSparkExecutor: "spark-executor", KindTezChild: "tez-child", KindSparkAM: "spark-am", KindTezAM: "tez-am", KindContainerShell: "container-shell",
	KindLaunchContainer: "launch-container", KindContainerExecutor: "container-executor",
	KindTaskJVMScript: "taskjvm-script", KindTaskController: "task-controller",
	KindNodeManager: "nodemanager", KindTaskTracker: "tasktracker", KindOtherDaemon: "daemon",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// IsJVM reports whether the kind is one of the task JVMs (the processes that
// name the attempt or container they run).
func (k Kind) IsJVM() bool {
	switch k {
	case KindYarnChild, KindMRAppMaster, KindChild, KindSparkExecutor, KindTezChild, KindSparkAM, KindTezAM:
		return true
	}
	return false
}

// IsAppMaster reports whether the kind is an ApplicationMaster.
func (k Kind) IsAppMaster() bool {
	return k == KindMRAppMaster || k == KindSparkAM || k == KindTezAM
}

// IsWrapper reports whether the kind is one of the shells and helpers that sit
// above a task JVM.
func (k Kind) IsWrapper() bool {
	switch k {
	case KindContainerShell, KindLaunchContainer, KindContainerExecutor, KindTaskJVMScript, KindTaskController:
		return true
	}
	return false
}

// IsDaemon reports whether the kind is a Hadoop daemon, which is never part of a task.
func (k Kind) IsDaemon() bool {
	return k == KindNodeManager || k == KindTaskTracker || k == KindOtherDaemon
}

// Frameworks, as the snapshot and the API name them.
const (
	FrameworkMapReduce = "mapreduce"
	FrameworkSpark     = "spark"
	FrameworkTez       = "tez"
	FrameworkUnknown   = "unknown"
)

// Launch is what a command line tells about a process.
type Launch struct {
	Kind         Kind
	MainClass    string // the Java main class, for JVMs
	Attempt      AttemptID
	HasAttempt   bool
	Container    ContainerID
	HasContainer bool
	AppID        string
	LogDir       string  // Hadoop 1: Child's argv[3]; YARN: -Dyarn.app.container.log.dir
	ExecutorID   string  // Spark
	Inner        *Launch // for wrappers whose command line holds the JVM's (bash -c, task-controller)
}

// Framework is the framework the process belongs to, where the command line tells.
func (l *Launch) Framework() string {
	switch l.Kind {
	case KindYarnChild, KindMRAppMaster, KindChild:
		return FrameworkMapReduce
	case KindSparkExecutor, KindSparkAM:
		return FrameworkSpark
	case KindTezChild, KindTezAM:
		return FrameworkTez
	}
	if l.Inner != nil {
		return l.Inner.Framework()
	}
	return FrameworkUnknown
}

// JobID is the job the command line names: from the attempt, else from the
// container or application.
func (l *Launch) JobID() string {
	fw := l.Framework()
	switch {
	case l.HasAttempt:
		return l.Attempt.JobID()
	case fw == FrameworkSpark || fw == FrameworkTez:
		if l.AppID != "" {
			return l.AppID
		}
		if l.HasContainer {
			return l.Container.AppID()
		}
	case l.HasContainer:
		return l.Container.JobID()
	case l.AppID != "":
		return JobForApp(l.AppID)
	}
	return ""
}

// The Java main classes that start task processes.
var mainClasses = map[string]Kind{
	"org.apache.hadoop.mapred.YarnChild":                            KindYarnChild,
	"org.apache.hadoop.mapreduce.v2.app.MRAppMaster":                KindMRAppMaster,
	"org.apache.hadoop.mapred.Child":                                KindChild,
	"org.apache.spark.executor.YarnCoarseGrainedExecutorBackend":    KindSparkExecutor,
	"org.apache.spark.executor.CoarseGrainedExecutorBackend":        KindSparkExecutor,
	"org.apache.tez.runtime.task.TezChild":                          KindTezChild,
	"org.apache.spark.deploy.yarn.ExecutorLauncher":                 KindSparkAM,
	"org.apache.spark.deploy.yarn.ApplicationMaster":                KindSparkAM,
	"org.apache.tez.dag.app.DAGAppMaster":                           KindTezAM,
	"org.apache.hadoop.yarn.server.nodemanager.NodeManager":         KindNodeManager,
	"org.apache.hadoop.mapred.TaskTracker":                          KindTaskTracker,
	"org.apache.hadoop.hdfs.server.datanode.DataNode":               KindOtherDaemon,
	"org.apache.hadoop.yarn.server.resourcemanager.ResourceManager": KindOtherDaemon,
	"org.apache.hadoop.mapred.JobTracker":                           KindOtherDaemon,
	"org.apache.hadoop.hdfs.server.namenode.NameNode":               KindOtherDaemon,
}

// JVM options that take the next word as their argument.
var javaArgOpts = map[string]bool{"-cp": true, "-classpath": true, "--class-path": true, "-jar": true, "--module-path": true, "-p": true, "--add-modules": true, "-m": true}

// IsSpawnHelper reports whether argv is the JDK's jspawnhelper: what a JVM's
// ProcessBuilder runs first on Linux (posix_spawn, the default since JDK 13)
// and what then execs the real command with its own environment. Streaming's
// mapper shows as one for a moment; it is a process between fork and exec.
func IsSpawnHelper(argv []string) bool {
	return len(argv) > 0 && path.Base(argv[0]) == "jspawnhelper"
}

// Classify tells what a process is from its argv. It never fails: a command
// line it does not know is KindNone.
func Classify(argv []string) Launch {
	if len(argv) == 0 {
		return Launch{}
	}
	base := path.Base(argv[0])
	switch {
	case base == "java" || strings.HasSuffix(argv[0], "/bin/java"):
		return classifyJava(argv)
	case isShell(base):
		return classifyShell(argv)
	case base == "task-controller":
		// task-controller <user> <localdirs> LAUNCH_TASK_JVM <jobId> <attemptId> <workDir> <taskjvm.sh>
		l := Launch{Kind: KindTaskController}
		for _, a := range argv[1:] {
			if at, ok := ParseAttempt(a); ok && !l.HasAttempt {
				l.Attempt, l.HasAttempt = at, true
			}
		}
		return l
	case base == "container-executor":
		l := Launch{Kind: KindContainerExecutor}
		for _, a := range argv[1:] {
			if c, ok := FindContainer(a); ok && !l.HasContainer {
				l.Container, l.HasContainer = c, true
			}
			if app, ok := FindApp(a); ok && l.AppID == "" {
				l.AppID = app
			}
		}
		return l
	}
	return Launch{}
}

func isShell(base string) bool {
	return base == "bash" || base == "sh" || base == "dash"
}

// Shell options that take the next word as their argument (set -o, shopt -O).
var shellArgOpts = map[string]bool{"-o": true, "+o": true, "-O": true, "+O": true}

func classifyShell(argv []string) Launch {
	// bash -c "<command>": the root of a YARN container, whose command is the JVM's.
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a == "-c" && i+1 < len(argv) {
			words := splitCommand(argv[i+1])
			inner := Classify(words)
			if inner.Kind == KindNone {
				// A shell that runs a script: bash -c "... launch_container.sh"
				l, _ := classifyScript(words)
				return l
			}
			if inner.Kind.IsDaemon() {
				return Launch{}
			}
			l := Launch{Kind: KindContainerShell, Inner: &inner}
			l.Attempt, l.HasAttempt = inner.Attempt, inner.HasAttempt
			l.Container, l.HasContainer = inner.Container, inner.HasContainer
			l.AppID, l.LogDir = inner.AppID, inner.LogDir
			return l
		}
		if shellArgOpts[a] {
			i++
			continue
		}
		if strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+") {
			continue
		}
		l, _ := classifyScript(argv[i:])
		return l
	}
	return Launch{}
}

// classifyScript recognises the scripts Hadoop writes and runs: argv[0] is the script.
func classifyScript(argv []string) (Launch, bool) {
	if len(argv) == 0 {
		return Launch{}, false
	}
	script := argv[0]
	var l Launch
	switch path.Base(script) {
	case "launch_container.sh":
		l.Kind = KindLaunchContainer
	case "default_container_executor.sh", "default_container_executor_session.sh":
		l.Kind = KindContainerExecutor
	case "taskjvm.sh":
		l.Kind = KindTaskJVMScript
		if at, ok := FindAttempt(script); ok {
			l.Attempt, l.HasAttempt = at, true
		}
	default:
		return Launch{}, false
	}
	if c, ok := FindContainer(script); ok {
		l.Container, l.HasContainer = c, true
	}
	if app, ok := FindApp(script); ok {
		l.AppID = app
	}
	return l, true
}

func classifyJava(argv []string) Launch {
	var l Launch
	main := -1
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if strings.HasPrefix(a, "-") {
			if javaArgOpts[a] {
				i++
				continue
			}
			if v, ok := strings.CutPrefix(a, "-Dyarn.app.container.log.dir="); ok {
				l.LogDir = v
			} else if v, ok := strings.CutPrefix(a, "-Dspark.yarn.app.container.log.dir="); ok {
				l.LogDir = v
			}
			continue
		}
		if strings.HasPrefix(a, "1>") || strings.HasPrefix(a, "2>") || a == "<" {
			break
		}
		main = i
		break
	}
	if main < 0 {
		return Launch{}
	}
	l.MainClass = argv[main]
	kind, ok := mainClasses[l.MainClass]
	if !ok {
		return Launch{}
	}
	l.Kind = kind
	if kind.IsDaemon() {
		return l
	}
	args := argv[main+1:]
	if l.LogDir != "" {
		if c, ok := FindContainer(l.LogDir); ok {
			l.Container, l.HasContainer = c, true
		}
		if app, ok := FindApp(l.LogDir); ok {
			l.AppID = app
		}
	}
	switch kind {
	case KindYarnChild:
		// YarnChild <amHost> <amPort> <attemptId> <jvmId>
		if len(args) > 2 {
			l.Attempt, l.HasAttempt = ParseAttempt(args[2])
		}
	case KindChild:
		// Child <ttHost> <ttPort> <firstAttempt> <logDir> <jvmIdInt>
		if len(args) > 2 {
			l.Attempt, l.HasAttempt = ParseAttempt(args[2])
		}
		if len(args) > 3 {
			l.LogDir = args[3]
		}
	case KindTezChild:
		// TezChild <amHost> <amPort> <containerId> <applicationId> <appAttemptNumber>
		if len(args) > 2 {
			if c, ok := FindContainer(args[2]); ok {
				l.Container, l.HasContainer = c, true
			}
		}
		if len(args) > 3 {
			if app, ok := FindApp(args[3]); ok {
				l.AppID = app
			}
		}
	case KindSparkExecutor:
		for i := 0; i+1 < len(args); i++ {
			switch args[i] {
			case "--app-id":
				l.AppID = args[i+1]
			case "--executor-id":
				l.ExecutorID = args[i+1]
			}
		}
	}
	return l
}

// splitCommand splits a shell command string into words the way a simple
// shell would: on blanks, honouring single and double quotes. It does not
// expand anything. Redirections stay words of their own.
func splitCommand(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' && i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote = c
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	// "exec", "exec setsid" and variable assignments in front of the command
	// (Spark's LD_LIBRARY_PATH="..." prefix) are not the command.
	for len(words) > 0 && (words[0] == "exec" || words[0] == "setsid" || words[0] == "nice" || words[0] == "nohup" || isAssignment(words[0])) {
		words = words[1:]
	}
	return words
}

// isAssignment reports whether a shell word is NAME=value.
func isAssignment(w string) bool {
	eq := strings.IndexByte(w, '=')
	if eq <= 0 {
		return false
	}
	for i := 0; i < eq; i++ {
		c := w[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ClassifyScript reads a launch script Hadoop wrote (launch_container.sh,
// taskjvm.sh) and classifies the command its last exec line runs, so that a
// container's attempt is known before its JVM starts.
func ClassifyScript(b []byte) (Launch, bool) {
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		rest, ok := strings.CutPrefix(line, "exec ")
		if !ok {
			continue
		}
		l := Classify(splitCommand(rest))
		if l.Kind == KindNone {
			continue
		}
		if l.Inner != nil {
			return *l.Inner, true
		}
		return l, true
	}
	return Launch{}, false
}
