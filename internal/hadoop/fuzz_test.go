package hadoop

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// seedArgvs are the command lines of TestClassify, for the fuzzers' corpora.
func seedArgvs() [][]string {
	return [][]string{
		yarnChildArgv(), mrAppMasterArgv(), childArgv(h1Attempt, h1LogDir, false), sparkArgv("org.apache.spark.executor.YarnCoarseGrainedExecutorBackend"),
		sparkArgv("org.apache.spark.executor.CoarseGrainedExecutorBackend"), tezArgv(), bashC(yarnChildArgv(), mrLogDir),
		bashC(tezArgv(), tezLogDir), {"/bin/bash", mrWorkDir + "/launch_container.sh"}, {"bash", "-c", mrWorkDir + "/default_container_executor.sh"},
		{"task-controller", "bob", "/data", "1", h1Job, h1Attempt, h1Work, "taskjvm.sh"},
		{"container-executor", "alice", "alice", "1", mrApp, mrContainer}, {"grep", mrAttempt}, {"bash", "-o", "x", "-c"},
	}
}

func FuzzClassify(f *testing.F) {
	for _, argv := range seedArgvs() {
		f.Add(strings.Join(argv, "\x00"))
	}
	f.Add(`bash` + "\x00" + `-c` + "\x00" + `exec setsid 'java' "-Dyarn.app.container.log.dir=/x/` + mrContainer + `" org.apache.tez.runtime.task.TezChild h 1 c a`)
	f.Fuzz(func(t *testing.T, joined string) {
		argv := strings.Split(joined, "\x00")
		l := Classify(argv)
		if got := Classify(argv); summarize(got) != summarize(l) {
			t.Fatalf("Classify is not deterministic")
		}
		if l.Kind == KindNone {
			if s := summarize(l); s != (summary{Framework: FrameworkUnknown}) {
				t.Fatalf("KindNone with details: %+v", s)
			}
			return
		}
		if l.Kind.IsDaemon() && (l.HasAttempt || l.HasContainer || l.AppID != "" || l.JobID() != "") {
			t.Fatalf("a daemon names a task: %+v", summarize(l))
		}
		if l.Kind.IsJVM() && l.MainClass == "" {
			t.Fatalf("JVM kind %v without a main class", l.Kind)
		}
		if (l.Inner != nil) != (l.Kind == KindContainerShell) {
			t.Fatalf("kind %v with inner %v", l.Kind, l.Inner)
		}
		if l.Inner != nil && (l.Inner.Kind == KindNone || l.Inner.Kind.IsDaemon()) {
			t.Fatalf("container shell around %v", l.Inner.Kind)
		}
		if l.HasAttempt {
			if a, ok := ParseAttempt(l.Attempt.Raw); !ok || a != l.Attempt {
				t.Fatalf("attempt %+v does not parse back (%+v, %v)", l.Attempt, a, ok)
			}
			if l.JobID() != l.Attempt.JobID() {
				t.Fatalf("job %q of attempt %q", l.JobID(), l.Attempt.Raw)
			}
		} else if l.Attempt != (AttemptID{}) {
			t.Fatalf("attempt set without HasAttempt: %+v", l.Attempt)
		}
		if l.HasContainer {
			if c, ok := FindContainer(l.Container.Raw); !ok || c != l.Container {
				t.Fatalf("container %+v does not parse back", l.Container)
			}
		} else if l.Container != (ContainerID{}) {
			t.Fatalf("container set without HasContainer: %+v", l.Container)
		}
		switch l.Framework() {
		case FrameworkMapReduce, FrameworkSpark, FrameworkTez, FrameworkUnknown:
		default:
			t.Fatalf("framework %q", l.Framework())
		}
	})
}

func FuzzFindAttempt(f *testing.F) {
	for _, s := range []string{"attempt_1700000000000_0042_m_000003_0", "x/attempt_201401011200_0007_t_000002_10/y",
		"syslog_attempt_1700000000000_0200_1_00_000005_0", "attempt_1_0001_1_00_000000_0 attempt_2_0002_m_000000_0",
		"attempt_1700000000000_0042_x_000003_0", "attempt_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := FindAttempt(s)
		if !ok {
			if a != (AttemptID{}) {
				t.Fatalf("not found but %+v", a)
			}
			return
		}
		i := strings.Index(s, a.Raw)
		if i < 0 {
			t.Fatalf("%q is not in the input", a.Raw)
		}
		if b, ok := ParseAttempt(a.Raw); !ok || b != a {
			t.Fatalf("ParseAttempt(%q) = %+v, %v; FindAttempt gave %+v", a.Raw, b, ok, a)
		}
		// Leftmost: no attempt id starts before the one found.
		if j := strings.Index(s, "attempt_"); j < i {
			if b, ok := FindAttempt(s[j : i+len("attempt_")-1]); ok {
				t.Fatalf("%q at %d is before %q at %d", b.Raw, j, a.Raw, i)
			}
		}
		var want string
		if a.Tez {
			want = strings.Join([]string{"attempt", a.ClusterTS, a.Seq, a.DAG, a.Vertex, a.Task}, "_")
			if !strings.HasPrefix(a.JobID(), "application_") || a.Type != "tez" {
				t.Fatalf("Tez attempt %+v: job %q", a, a.JobID())
			}
		} else {
			letter := ""
			for l, name := range mrTaskTypes {
				if name == a.Type {
					letter = l
				}
			}
			want = strings.Join([]string{"attempt", a.ClusterTS, a.Seq, letter, a.Task}, "_")
			if _, ok := FindJob(a.JobID()); !ok || letter == "" {
				t.Fatalf("attempt %+v: job %q", a, a.JobID())
			}
		}
		if !strings.HasPrefix(a.Raw, want+"_") {
			t.Fatalf("%q is not made of its parts %q", a.Raw, want)
		}
		if n, err := strconv.Atoi(a.Raw[len(want)+1:]); err == nil && n != a.Attempt {
			t.Fatalf("attempt number %d of %q", a.Attempt, a.Raw)
		}
		if "attempt"+strings.TrimPrefix(a.TaskID(), "task") != want {
			t.Fatalf("TaskID %q of %q", a.TaskID(), a.Raw)
		}
	})
}

// findContainerRE is FindContainer by ContainerId's regular expression:
// the oracle of the hand-written matcher.
func findContainerRE(s string) (ContainerID, bool) {
	m := reContainerOracle.FindStringSubmatch(s)
	if m == nil {
		return ContainerID{}, false
	}
	e, _ := strconv.Atoi(m[1])
	return ContainerID{Raw: m[0], Epoch: e, ClusterTS: m[2], AppSeq: m[3], AppAttempt: m[4], Seq: m[5]}, true
}

var reContainerOracle = regexp.MustCompile(`container_(?:e(\d+)_)?(\d+)_(\d{4,})_(\d{2,})_(\d{6,})`)

func FuzzFindContainer(f *testing.F) {
	for _, s := range []string{"container_1700000000000_0042_01_000005", "/hadoop-yarn/container_e07_1700000000000_0042_01_000001/tasks",
		"container_e_1_0001_01_000001", "container_", "container_container_1_0001_01_0000012x", "xcontainer_e99999999999999999999_1_0001_01_000001",
		"container_1_001_01_000001 container_2_0002_1_000001 container_3_0003_03_000003_7", "container_ecl_1_0001_01_000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := FindContainer(s)
		if want, wok := findContainerRE(s); c != want || ok != wok {
			t.Fatalf("FindContainer(%q) = %+v, %v; the expression finds %+v, %v", s, c, ok, want, wok)
		}
		if !ok {
			if c != (ContainerID{}) {
				t.Fatalf("not found but %+v", c)
			}
			return
		}
		if !strings.Contains(s, c.Raw) {
			t.Fatalf("%q is not in the input", c.Raw)
		}
		if d, ok := FindContainer(c.Raw); !ok || d != c {
			t.Fatalf("FindContainer(%q) = %+v, %v; want %+v", c.Raw, d, ok, c)
		}
		if !strings.HasSuffix(c.Raw, "_"+c.ClusterTS+"_"+c.AppSeq+"_"+c.AppAttempt+"_"+c.Seq) {
			t.Fatalf("%q is not made of its parts %+v", c.Raw, c)
		}
		if app, ok := FindApp(c.AppID()); !ok || app != c.AppID() {
			t.Fatalf("AppID %q is not an application id", c.AppID())
		}
		if JobForApp(c.AppID()) != c.JobID() || AppForJob(c.JobID()) != c.AppID() {
			t.Fatalf("job %q and app %q do not map", c.JobID(), c.AppID())
		}
	})
}

// confXML writes conf as Hadoop writes a job.xml.
func confXML(names, values []string) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="no"?><configuration>`)
	for i := range names {
		b.WriteString("\n<property><name>")
		xml.EscapeText(&b, []byte(names[i]))
		b.WriteString("</name><value>")
		xml.EscapeText(&b, []byte(values[i]))
		b.WriteString("</value><final>false</final><source>job.xml</source></property>")
	}
	b.WriteString("\n</configuration>\n")
	return b.Bytes()
}

func FuzzParseConf(f *testing.F) {
	files, _ := filepath.Glob("testdata/conf/*")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConf(bytes.NewReader(b))
		if err != nil {
			return
		}
		// What parsed, written back as a job.xml, parses to the same.
		var names, values []string
		for k, v := range c {
			if k == "" || k != strings.TrimSpace(k) || v != strings.TrimSpace(v) {
				t.Fatalf("untrimmed or empty entry %q=%q", k, v)
			}
			names, values = append(names, k), append(values, v)
		}
		d, err := ParseConf(bytes.NewReader(confXML(names, values)))
		if err != nil {
			t.Fatalf("written back: %v", err)
		}
		if len(d) != len(c) {
			t.Fatalf("written back: %d entries, want %d", len(d), len(c))
		}
		for k, v := range c {
			if d[k] != v {
				t.Fatalf("written back: %q = %q, want %q", k, d[k], v)
			}
		}
	})
}

// isXMLText reports whether s can be written as XML character data.
func isXMLText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !(r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
	}
	return true
}

func FuzzConfRoundTrip(f *testing.F) {
	f.Add("mapreduce.map.java.opts", "-Xmx820m", "a", "b")
	f.Add(" spaced ", " v ", "x&y", "<![CDATA[ ]]>")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		if !isXMLText(n1) || !isXMLText(v1) || !isXMLText(n2) || !isXMLText(v2) || strings.TrimSpace(n1) == "" || strings.TrimSpace(n2) == "" {
			return
		}
		c, err := ParseConf(bytes.NewReader(confXML([]string{n1, n2}, []string{v1, v2})))
		if err != nil {
			t.Fatalf("ParseConf: %v", err)
		}
		want := map[string]string{strings.TrimSpace(n1): strings.TrimSpace(v1)}
		want[strings.TrimSpace(n2)] = strings.TrimSpace(v2) // the later definition wins
		if len(c) != len(want) {
			t.Fatalf("got %q, want %q", c, want)
		}
		for k, v := range want {
			if c[k] != v {
				t.Fatalf("%q = %q, want %q", k, c[k], v)
			}
		}
	})
}

func FuzzParseTaskEnv(f *testing.F) {
	f.Add(environ("CONTAINER_ID="+mrContainer, "USER=alice", "JVM_PID=1", "LOG_DIRS=/x"))
	f.Add(environ("mapreduce_task_attempt_id="+mrAttempt, "mapred_task_id="+h1Attempt, "mapreduce_job_id="+mrJob, "mapred_job_id="+h1Job))
	f.Add([]byte("\x00\x00CONTAINER_ID"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := ParseTaskEnv(b)
		if e.AttemptID != "" {
			if a, ok := ParseAttempt(e.AttemptID); !ok || a.Raw != e.AttemptID {
				t.Fatalf("attempt %q is not an attempt id", e.AttemptID)
			}
			if !e.Streaming {
				t.Fatalf("attempt id %q without Streaming", e.AttemptID)
			}
		}
		if e.ContainerID != "" {
			if c, ok := FindContainer(e.ContainerID); !ok || c.Raw != e.ContainerID {
				t.Fatalf("container %q is not a container id", e.ContainerID)
			}
		}
		if e.Any() != (e.ContainerID != "" || e.AttemptID != "") {
			t.Fatal("Any() disagrees")
		}
		entries := bytes.Split(b, []byte{0})
		has := func(keys []string, v string) bool {
			for _, kv := range entries {
				for _, k := range keys {
					if string(kv) == k+"="+v {
						return true
					}
				}
			}
			return false
		}
		for _, c := range []struct {
			v    string
			keys []string
		}{
			{e.ContainerID, []string{"CONTAINER_ID"}}, {e.AttemptID, []string{"mapreduce_task_attempt_id", "mapred_task_id"}},
			{e.JobID, []string{"mapreduce_job_id", "mapred_job_id"}}, {e.User, []string{"USER"}}, {e.JVMPid, []string{"JVM_PID"}},
			{e.LogDirs, []string{"LOG_DIRS"}},
		} {
			if c.v != "" && !has(c.keys, c.v) {
				t.Fatalf("%q is in no entry %v", c.v, c.keys)
			}
		}
	})
}

func FuzzParseLogIndex(f *testing.F) {
	f.Add([]byte("LOG_DIR:" + h1LogDir + "\nstdout:0 -1\nstderr:0 -1\nsyslog:0 -1\n"))
	f.Add([]byte("LOG_DIR:\r\r\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir, ok := ParseLogIndex(b)
		if !ok {
			if dir != "" {
				t.Fatalf("not ok but %q", dir)
			}
			return
		}
		if dir == "" || strings.ContainsAny(dir, "\n") || strings.HasSuffix(dir, "\r") {
			t.Fatalf("dir %q", dir)
		}
		if !bytes.HasPrefix(b, []byte("LOG_DIR:"+dir)) {
			t.Fatalf("dir %q is not the first line of %q", dir, b)
		}
	})
}

func FuzzClassifyScript(f *testing.F) {
	files, _ := filepath.Glob("testdata/scripts/*.sh")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, ok := ClassifyScript(b)
		if ok != (l.Kind != KindNone) {
			t.Fatalf("ok %v with kind %v", ok, l.Kind)
		}
		if ok && !bytes.Contains(b, []byte("exec ")) {
			t.Fatal("classified a script without an exec line")
		}
	})
}

func FuzzParseJavaSize(f *testing.F) {
	for _, s := range []string{"512m", "2G", "64k", "1t", "1048576", "0", "-1g", "4194304t", "+1k", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseJavaSize(s)
		if !ok {
			if n != 0 {
				t.Fatalf("not ok but %d", n)
			}
			return
		}
		if n < 0 || n > 1<<62 {
			t.Fatalf("%q = %d: out of range", s, n)
		}
		mult := map[byte]int64{'k': 1 << 10, 'K': 1 << 10, 'm': 1 << 20, 'M': 1 << 20, 'g': 1 << 30, 'G': 1 << 30, 't': 1 << 40, 'T': 1 << 40}[s[len(s)-1]]
		digits := s
		if mult == 0 {
			mult = 1
		} else {
			digits = s[:len(s)-1]
		}
		d, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || d*mult != n {
			t.Fatalf("%q = %d, want %d × %d", s, n, d, mult)
		}
		if m, ok := ParseJavaSize(strconv.FormatInt(n, 10)); !ok || m != n {
			t.Fatalf("%d written back parses to %d, %v", n, m, ok)
		}
	})
}

// BenchmarkFindContainer: the matcher against the expression it replaced,
// on a container id as CONTAINER_ID has it and on a cgroup path.
func BenchmarkFindContainer(b *testing.B) {
	for _, s := range []string{"container_e07_1700000000000_0042_01_000005", "12:cpu,cpuacct:/hadoop-yarn/container_e07_1700000000000_0042_01_000005\n"} {
		b.Run("matcher", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				FindContainer(s)
			}
		})
		b.Run("expression", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				findContainerRE(s)
			}
		})
	}
}

func FuzzParseTezDAGLog(f *testing.F) {
	f.Add([]byte("2026-12-04 10:00:00,123 [INFO] [IPC Server handler 0 on 40123] |app.DAGAppMaster|: Running DAG: wordcount, callerContext={ context=HIVE, callerType=HIVE_QUERY_ID }\n"))
	f.Add([]byte("Running DAG: cut off"))
	f.Add([]byte("Running DAG: \r\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		name := ParseTezDAGLog(b)
		if name == "" {
			return
		}
		if strings.ContainsAny(name, "\n") || !bytes.Contains(b, []byte("Running DAG: ")) || !bytes.Contains(b, []byte(name)) {
			t.Fatalf("name %q from %q", name, b)
		}
		if strings.Contains(name, ", callerContext=") {
			t.Fatalf("name %q keeps the caller context", name)
		}
	})
}
