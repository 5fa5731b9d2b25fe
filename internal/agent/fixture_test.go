package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/simulator"
)

func TestMain(m *testing.M) {
	simulator.RunDaemonIfRequested()
	os.Exit(m.Run())
}

// The node of the agent's fixture tests: a NodeManager running an
// ApplicationMaster container and a Streaming map container.
const (
	fxBoot      = 1_700_000_000
	fxAttempt   = "attempt_1700000000123_0001_m_000000_0"
	fxJob       = "job_1700000000123_0001"
	fxMapC      = "container_e01_1700000000123_0001_01_000002"
	fxAMC       = "container_e01_1700000000123_0001_01_000001"
	fxJava      = "/usr/lib/jvm/java-8/bin/java"
	fxProcesses = 11
	fxTracked   = 7
)

// Secrets on the fixture node, in the forms real nodes have them: a JVM
// option, a program's flag and its value, a job.xml's java opts, an
// environment entry, parameters of JDBC URLs (a query's, SQL Server's
// ;key=value). None may leave the agent.
var fxSecrets = []string{"FXSECRET1", "FXSECRET2", "FXSECRET3", "FXSECRET4", "FXSECRET5", "FXSECRET6"}

type fxProc struct {
	pid, ppid, sid int32
	argv           []string
	utime, stime   uint64
	rssPages       int64
	threads        int64
	env            []string
	garbageIO      bool
}

// writeNode writes the fixture /proc tree and returns its root.
func writeNode(t testing.TB) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "proc")
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", fmt.Sprintf("cpu  1 2 3 4\nbtime %d\n", fxBoot))
	logs := func(c string) string { return "/data/yarn/logs/application_1700000000123_0001/" + c }
	work := func(c string) string {
		return "/data/yarn/local/usercache/alice/appcache/application_1700000000123_0001/" + c
	}
	jvm := func(c, main string, args ...string) []string {
		return append([]string{fxJava, "-Xmx820m", "-Dyarn.app.container.log.dir=" + logs(c), main}, args...)
	}
	mapJVM := jvm(fxMapC, "org.apache.hadoop.mapred.YarnChild", "10.0.0.7", "40123", fxAttempt, "2")
	mapJVM = append(mapJVM[:2:2], append([]string{"-Dfs.s3a.secret.key=FXSECRET1"}, mapJVM[2:]...)...)
	amJVM := jvm(fxAMC, "org.apache.hadoop.mapreduce.v2.app.MRAppMaster")
	streaming := []string{"CONTAINER_ID=" + fxMapC, "mapreduce_task_attempt_id=" + fxAttempt, "mapreduce_job_id=" + fxJob, "DB_PASSWORD=FXSECRET4"}
	procs := []fxProc{
		{pid: 1, argv: []string{"/sbin/init"}},
		{pid: 2, argv: nil},
		{pid: 50, ppid: 1, argv: []string{"/usr/sbin/sshd", "-D"}},
		{pid: 100, ppid: 1, argv: []string{fxJava, "-Dproc_nodemanager", "org.apache.hadoop.yarn.server.nodemanager.NodeManager"}, threads: 80},
		{pid: 2001, ppid: 100, sid: 100, argv: []string{"bash", work(fxAMC) + "/default_container_executor.sh"}},
		{pid: 2002, ppid: 2001, argv: []string{"/bin/bash", "-c", strings.Join(amJVM, " ")}},
		{pid: 2003, ppid: 2002, sid: 2002, argv: amJVM, utime: 150, stime: 20, rssPages: 60_000, threads: 50},
		{pid: 2101, ppid: 100, sid: 100, argv: []string{"bash", work(fxMapC) + "/default_container_executor.sh"}},
		{pid: 2102, ppid: 2101, argv: []string{"/bin/bash", "-c", strings.Join(mapJVM, " ")}},
		{pid: 2103, ppid: 2102, sid: 2102, argv: mapJVM, utime: 1234, stime: 56, rssPages: 80_000, threads: 40},
		{pid: 2110, ppid: 2103, sid: 2102, argv: []string{"/usr/bin/python3", "mapper.py", "<b>", "--password", "FXSECRET2",
			"--jdbc", "jdbc:mysql://db:3306/x?user=etl&password=FXSECRET5", "--mssql", "jdbc:sqlserver://db:1433;user=sa;password=FXSECRET6;encrypt=true"}, env: streaming, utime: 300, rssPages: 2000, garbageIO: true},
	}
	for _, p := range procs {
		if p.sid == 0 {
			p.sid = p.pid
		}
		if p.threads == 0 {
			p.threads = 1
		}
		if p.rssPages == 0 {
			p.rssPages = 500
		}
		dir := strconv.Itoa(int(p.pid)) + "/"
		comm := "kthreadd"
		if len(p.argv) > 0 {
			comm = filepath.Base(p.argv[0])
		}
		ppid := p.ppid
		if p.pid == 2 {
			ppid = 0
		}
		write(dir+"stat", fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194304 100 0 0 0 %d %d 0 0 20 0 %d 0 %d %d %d 18446744073709551615 1 1 %d 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
			p.pid, comm, ppid, p.sid, p.sid, p.utime, p.stime, p.threads, 90_000+int(p.pid), 200<<20, p.rssPages, 140_000_000_000_000+int(p.pid)*4096))
		cmd := ""
		for _, a := range p.argv {
			cmd += a + "\x00"
		}
		write(dir+"cmdline", cmd)
		write(dir+"status", fmt.Sprintf("Name:\t%s\nUid:\t0\t0\t0\t0\nvoluntary_ctxt_switches:\t%d\nnonvoluntary_ctxt_switches:\t3\n", comm, p.pid))
		io := "rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: 8192\n"
		if p.garbageIO {
			io = "not io\n"
		}
		write(dir+"io", io)
		write(dir+"schedstat", "1000 2000 3\n")
		write(dir+"environ", strings.Join(p.env, "\x00"))
		write(dir+"cgroup", "0::/\n")
	}
	// The map JVM's working directory holds its job.xml.
	write("2103/cwd/job.xml", `<configuration>
<property><name>mapreduce.job.name</name><value>fixture</value></property>
<property><name>mapreduce.map.memory.mb</name><value>1024</value></property>
<property><name>mapreduce.map.java.opts</name><value>-Xmx820m -Djavax.net.ssl.trustStorePassword=FXSECRET3</value></property>
</configuration>`)
	return root
}
