// Package chtest starts ClickHouse servers for tests, on loopback, each in
// a temporary directory with a configuration of its own: one server
// (Start), or a cluster of shards and replicas with the ZooKeeper its
// replicated tables need (StartCluster). It runs the servers the project's
// scripts install (scripts/test-deps.sh: Debian's clickhouse-server 18.16
// and zookeeper 3.8); a test fails, not skips, when they are missing.
package chtest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/deathsig"
	"github.com/taskscope/taskscope/internal/testsrv"
)

// Binaries, as Debian installs them.
const (
	ServerBinary  = "/usr/sbin/clickhouse-server"
	ZooKeeperJar  = "/usr/share/java/zookeeper.jar"
	startTimeout  = 60 * time.Second
	stopTimeout   = 30 * time.Second
	installedHint = "(scripts/test-deps.sh installs it; make test runs that)"
)

// Server is a ClickHouse server the test started.
type Server struct {
	Name                               string
	Dir                                string // its configuration, data and logs
	HTTPPort, TCPPort, InterserverPort int
	// zk: a member of a cluster, whose start waits until it reads
	// ZooKeeper (system.zookeeper), not only until it answers.
	zk bool
	proc
}

// URL is the server's HTTP interface.
func (s *Server) URL() string { return fmt.Sprintf("http://127.0.0.1:%d/", s.HTTPPort) }

// Addr is host:port of the HTTP interface.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.HTTPPort) }

// Options change what a server's configuration says.
type Options struct {
	// QueryLog has the server log every query (system.query_log, with
	// each query's ProfileEvents) and every part written and merged
	// (system.part_log): for benchmarks that say where its CPU goes
	// (QueryCPU).
	QueryLog bool
	// Cluster, ZooKeeper port, shard and replica macros: set by
	// StartCluster.
	clusterXML string
	zkPort     int
	shard      int
	replica    int
}

// Start starts one ClickHouse server; the test's cleanup stops it. A
// port taken between its choice and the server's start (by another test's
// server) is chosen again.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with options.
func StartWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	skipShort(tb)
	for try := 0; ; try++ {
		s := newServer(tb, "clickhouse")
		s.configure(tb, o)
		err := s.start(tb)
		if err == nil {
			return s
		}
		if try == 2 || !strings.Contains(err.Error(), "Address already in use") {
			tb.Fatal(err)
		}
	}
}

// skipShort skips a test that needs a ClickHouse server in a -short run
// (make check: the quick loop starts no server; make test runs them).
func skipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts a ClickHouse server: not in -short runs (make check); make test runs it")
	}
}

func newServer(tb testing.TB, name string) *Server {
	tb.Helper()
	if _, err := os.Stat(ServerBinary); err != nil {
		tb.Fatalf("ClickHouse is not installed %s: %v", installedHint, err)
	}
	s := &Server{Name: name, Dir: tb.TempDir(), HTTPPort: testsrv.FreePort(tb), TCPPort: testsrv.FreePort(tb),
		InterserverPort: testsrv.FreePort(tb)}
	// Killed, not stopped: its data goes with the test's directory, and a
	// graceful stop of 18.16 takes 10 s.
	tb.Cleanup(s.Kill)
	return s
}

// configure writes the server's config.xml (users and settings profiles
// included: without users_config the server reads them from it).
func (s *Server) configure(tb testing.TB, o Options) {
	tb.Helper()
	var extra strings.Builder
	profile := ""
	if o.QueryLog {
		profile = "<log_queries>1</log_queries>"
		extra.WriteString(`
  <query_log><database>system</database><table>query_log</table><flush_interval_milliseconds>1000</flush_interval_milliseconds></query_log>
  <part_log><database>system</database><table>part_log</table><flush_interval_milliseconds>1000</flush_interval_milliseconds></part_log>`)
	}
	if o.clusterXML != "" {
		extra.WriteString(o.clusterXML)
		fmt.Fprintf(&extra, `
  <zookeeper><node><host>127.0.0.1</host><port>%d</port></node><session_timeout_ms>10000</session_timeout_ms></zookeeper>
  <macros><shard>%02d</shard><replica>r%d</replica></macros>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>`, o.zkPort, o.shard, o.replica)
	}
	conf := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>%[1]s/server.log</log><errorlog>%[1]s/server.err.log</errorlog><size>50M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>%[2]d</http_port>
  <tcp_port>%[3]d</tcp_port>
  <interserver_http_port>%[4]d</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <path>%[1]s/data/</path>
  <tmp_path>%[1]s/data/tmp/</tmp_path>
  <user_files_path>%[1]s/data/user_files/</user_files_path>
  <format_schema_path>%[1]s/data/format_schemas/</format_schema_path>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>0</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <max_table_size_to_drop>0</max_table_size_to_drop>
  <max_partition_size_to_drop>0</max_partition_size_to_drop>
  <compression><case><method>zstd</method></case></compression>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage><background_pool_size>4</background_pool_size>%[6]s</default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>%[5]s
</yandex>
`, s.Dir, s.HTTPPort, s.TCPPort, s.InterserverPort, extra.String(), profile)
	if err := os.WriteFile(filepath.Join(s.Dir, "config.xml"), []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Start starts the server (again, after Kill or Stop, on the same data)
// and waits until it answers.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	if err := s.start(tb); err != nil {
		tb.Fatal(err)
	}
}

// StartRecovering starts a server killed before as ClickHouse's
// documentation says to recover a replica after a failure, with the flag
// flags/force_restore_data. A replica killed between writing a part and
// committing it to ZooKeeper finds the part unexpected at its start, and
// 18.16 refuses to attach a table whose unexpected parts hold more than
// half its rows (replicated_max_ratio_of_wrong_parts), as the one part of
// a table of a few rows can. With the flag it moves such parts aside
// (detached) and starts: an insert cut so was never answered, and its
// writer sends it again.
func (s *Server) StartRecovering(tb testing.TB) {
	tb.Helper()
	flags := filepath.Join(s.Dir, "data", "flags")
	if err := os.MkdirAll(flags, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(flags, "force_restore_data"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	s.Start(tb)
}

func (s *Server) start(tb testing.TB) error {
	tb.Helper()
	cmd := exec.Command(ServerBinary, "--config-file="+filepath.Join(s.Dir, "config.xml"))
	if err := s.run(cmd, s.Dir, s.Name); err != nil {
		return err
	}
	ready := func() bool { return ping(s.URL()+"ping") == nil }
	if s.zk {
		// Its session with ZooKeeper is up when it can list the root (the
		// first replicated DDL would otherwise fail on a server that
		// answers but has not yet connected).
		ready = func() bool { return s.readsZooKeeper() == nil }
	}
	if !s.waitUp(tb, s.Name, ready) {
		return fmt.Errorf("%s exited at start:\n%s", s.Name, s.Logs())
	}
	return nil
}

// readsZooKeeper asks the server for the root of ZooKeeper.
func (s *Server) readsZooKeeper() error {
	q := url.Values{"query": {"SELECT count() FROM system.zookeeper WHERE path = '/'"}}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.URL() + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// proc is a server process the test started (ClickHouse, ZooKeeper).
type proc struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// run starts cmd in dir, its output appended to dir/stdout.log.
func (p *proc) run(cmd *exec.Cmd, dir, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is running", name)
	}
	out, err := os.OpenFile(filepath.Join(dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	// Killed with the test binary, should it die without its cleanups
	// (and not before: an in-process agent ends threads).
	exited, err := deathsig.Start(cmd, syscall.SIGKILL)
	if err != nil {
		out.Close()
		return fmt.Errorf("cannot start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { <-exited; out.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// waitUp waits until ready holds (true), or the process exits (false).
func (p *proc) waitUp(tb testing.TB, name string, ready func() bool) bool {
	tb.Helper()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	exited := false
	testsrv.WaitUntil(tb, name+" to answer", startTimeout, func() bool {
		select {
		case <-done:
			exited = true
			return true
		default:
		}
		return ready()
	})
	if exited {
		p.mu.Lock()
		p.cmd = nil
		p.mu.Unlock()
	}
	return !exited
}

func ping(url string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// Kill kills the process with SIGKILL and waits for it to exit.
func (p *proc) Kill() { p.signal(syscall.SIGKILL, 0) }

// Stop stops the server (SIGTERM; SIGKILL after 30 s) and waits for it
// (18.16 takes 10 s).
func (s *Server) Stop() { s.signal(syscall.SIGTERM, stopTimeout) }

func (p *proc) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-p.done:
		case <-time.After(grace):
			p.cmd.Process.Kill()
		}
	}
	<-p.done
	p.cmd = nil
}

// Pid is the process's id (0 when it is not running).
func (p *proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// RSS is the process's resident memory now, in bytes (0 if not running).
func (p *proc) RSS() int64 { return rssOf(p.Pid()) }

// CPU is the CPU (user and system) the process has used, from
// /proc/PID/stat (0 if not running).
func (p *proc) CPU() time.Duration {
	pid := p.Pid()
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+k) * time.Second / 100 // (clock ticks)
}

// Logs is the tail of the server's error log and output, for a failure's
// message.
func (s *Server) Logs() string { return tails(s.Dir, "server.err.log", "stdout.log") }

func tails(dir string, names ...string) string {
	var b bytes.Buffer
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", n, data)
	}
	return b.String()
}

// rssOf reads VmRSS of a process, in bytes.
func rssOf(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// TruncateLogs empties the query and part logs of a server started with
// Options.QueryLog: QueryCPU then says where its CPU went from now on.
func (s *Server) TruncateLogs(tb testing.TB) {
	tb.Helper()
	for _, q := range []string{"SYSTEM FLUSH LOGS", "TRUNCATE TABLE system.query_log", "TRUNCATE TABLE system.part_log"} {
		if _, err := s.query(q); err != nil {
			tb.Fatalf("cannot empty the query log: %v", err)
		}
	}
}

// QueryCPU sums up, on a server started with Options.QueryLog, where its
// CPU went: its queries' CPU (user and system, from their ProfileEvents)
// by kind (an insert by table; a select by its text, numbers and quoted
// values taken out) with the time they took (the sum of their durations:
// what a caller that runs them one after another waits), and the parts it
// wrote and merged by table (their time; merges run in the background
// pool, beside the queries). One line each, the costliest first.
func (s *Server) QueryCPU() ([]string, error) {
	if _, err := s.query("SYSTEM FLUSH LOGS"); err != nil {
		return nil, err
	}
	queries, err := s.query(`SELECT kind, count() AS n, round((sum(ue) + sum(se)) / 1e6, 2) AS cpu_s, sum(written_rows), sum(read_rows),
	round(sum(query_duration_ms) / 1e3, 2)
FROM (SELECT if(query LIKE 'INSERT%', concat('INSERT INTO ', extract(query, 'INTO ([a-zA-Z0-9_.]+)')),
		concat(substring(replaceRegexpAll(replaceRegexpAll(query, '\'[^\']*\'', '?'), '[0-9]+', 'N'), 1, 90),
			' ... ', substring(replaceRegexpAll(replaceRegexpAll(extract(query, 'WHERE (.*)$'), '\'[^\']*\'', '?'), '[0-9]+', 'N'), 1, 70))) AS kind,
	ProfileEvents.Values[indexOf(ProfileEvents.Names, 'UserTimeMicroseconds')] AS ue,
	ProfileEvents.Values[indexOf(ProfileEvents.Names, 'SystemTimeMicroseconds')] AS se, written_rows, read_rows, query_duration_ms
	FROM system.query_log WHERE type = 2 AND query NOT LIKE 'SYSTEM%')
GROUP BY kind ORDER BY cpu_s DESC LIMIT 40 FORMAT TSV`)
	if err != nil {
		return nil, err
	}
	parts, err := s.query(`SELECT event_type, table, count(), round(sum(duration_ms) / 1e3, 2) AS s, sum(rows)
FROM system.part_log GROUP BY event_type, table ORDER BY s DESC LIMIT 30 FORMAT TSV`)
	if err != nil {
		return nil, err
	}
	out := []string{"query kind\tcount\tCPU s\twritten rows\tread rows\ttime s"}
	out = append(out, strings.Split(strings.TrimSpace(queries), "\n")...)
	out = append(out, "part event\ttable\tcount\ttime s\trows")
	return append(out, strings.Split(strings.TrimSpace(parts), "\n")...), nil
}

// query runs q on the server and returns its answer's text.
func (s *Server) query(q string) (string, error) {
	c := http.Client{Timeout: 60 * time.Second}
	resp, err := c.Post(s.URL(), "text/plain", strings.NewReader(q))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return string(body), nil
}
