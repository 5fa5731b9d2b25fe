package chtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// ZooKeeper is a standalone ZooKeeper the test started (Debian's jars, run
// by the java on the PATH).
type ZooKeeper struct {
	Dir  string
	Port int
	proc
}

// StartZooKeeper starts a standalone ZooKeeper on loopback; the test's
// cleanup stops it.
func StartZooKeeper(tb testing.TB) *ZooKeeper {
	tb.Helper()
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		tb.Fatalf("ZooKeeper is not installed %s: %v", installedHint, err)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		tb.Fatalf("ZooKeeper needs java: %v", err)
	}
	z := &ZooKeeper{Dir: tb.TempDir(), Port: testsrv.FreePort(tb)}
	tb.Cleanup(z.Kill)
	cfg := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
		"maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n", z.Dir, z.Port)
	if err := os.WriteFile(filepath.Join(z.Dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	// A small heap and the serial collector: it holds a few hundred nodes.
	cmd := exec.Command(java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", ZooKeeperJar,
		"org.apache.zookeeper.server.ZooKeeperServerMain", filepath.Join(z.Dir, "zoo.cfg"))
	if err := z.run(cmd, z.Dir, "ZooKeeper"); err != nil {
		tb.Fatal(err)
	}
	// Up when a client gets a session and reads the root: ruok answers
	// imok as soon as the process listens, before it serves sessions.
	if !z.waitUp(tb, "ZooKeeper", func() bool { return z.ruok() && z.session() == nil }) {
		tb.Fatalf("ZooKeeper exited at start:\n%s", tails(z.Dir, "stdout.log"))
	}
	return z
}

// session opens a ZooKeeper session, reads the root and closes it.
func (z *ZooKeeper) session() error {
	c, events, err := zk.Connect([]string{fmt.Sprintf("127.0.0.1:%d", z.Port)}, 4*time.Second,
		zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer c.Close()
	timeout := time.After(3 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State != zk.StateHasSession {
				continue
			}
			_, _, err := c.Exists("/")
			return err
		case <-timeout:
			return fmt.Errorf("no ZooKeeper session in 3 s (state %v)", c.State())
		}
	}
}

// quiet drops the ZooKeeper client's log.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// ruok asks ZooKeeper whether it serves (its four-letter command).
func (z *ZooKeeper) ruok() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", z.Port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.HasPrefix(line, "imok")
}

// Cluster is ClickHouse servers forming one cluster of shards, each of
// replicas, on one ZooKeeper: Shards[i][j] is replica j of shard i.
type Cluster struct {
	Name   string // its name in remote_servers
	ZK     *ZooKeeper
	Shards [][]*Server
}

// StartCluster starts a ZooKeeper and shards × replicas ClickHouse
// servers, each configured with the cluster (remote_servers, internal
// replication: each replica of a shard gets the writes and replicates them
// itself), ZooKeeper, and its macros {shard} (01, 02, ...) and {replica}
// (r1, r2, ...).
func StartCluster(tb testing.TB, name string, shards, replicas int) *Cluster {
	tb.Helper()
	skipShort(tb)
	c := &Cluster{Name: name, ZK: StartZooKeeper(tb)}
	for i := 0; i < shards; i++ {
		var row []*Server
		for j := 0; j < replicas; j++ {
			row = append(row, newServer(tb, fmt.Sprintf("clickhouse shard %d replica %d", i+1, j+1)))
		}
		c.Shards = append(c.Shards, row)
	}
	// Started one after the other (each takes a second or so), each until
	// it reads ZooKeeper. A server that exits at start (seen under load)
	// is started again: the whole cluster, twice at most, on new ports
	// when one was taken meanwhile (by another test's server), as every
	// server's configuration names every other's port.
	for try := 1; ; try++ {
		c.configure(tb, name)
		err := c.startAll(tb)
		if err == nil {
			break
		}
		for _, s := range c.Servers() {
			s.Kill()
		}
		if try == 3 {
			tb.Fatal(err)
		}
		tb.Logf("starting the cluster again (try %d of 3): %v", try+1, err)
		if strings.Contains(err.Error(), "Address already in use") {
			for _, s := range c.Servers() {
				s.HTTPPort, s.TCPPort, s.InterserverPort = testsrv.FreePort(tb), testsrv.FreePort(tb), testsrv.FreePort(tb)
			}
		}
	}
	return c
}

// configure writes every server's configuration: the cluster (each
// replica by its native port), ZooKeeper and its macros.
func (c *Cluster) configure(tb testing.TB, name string) {
	tb.Helper()
	var xml strings.Builder
	fmt.Fprintf(&xml, "\n  <remote_servers><%s>", name)
	for _, row := range c.Shards {
		xml.WriteString("<shard><internal_replication>true</internal_replication>")
		for _, s := range row {
			fmt.Fprintf(&xml, "<replica><host>127.0.0.1</host><port>%d</port></replica>", s.TCPPort)
		}
		xml.WriteString("</shard>")
	}
	fmt.Fprintf(&xml, "</%s></remote_servers>", name)
	for i, row := range c.Shards {
		for j, s := range row {
			s.zk = true
			s.configure(tb, Options{clusterXML: xml.String(), zkPort: c.ZK.Port, shard: i + 1, replica: j + 1})
		}
	}
}

// startAll starts every server, one after the other.
func (c *Cluster) startAll(tb testing.TB) error {
	tb.Helper()
	for _, s := range c.Servers() {
		if err := s.start(tb); err != nil {
			return err
		}
	}
	return nil
}

// Servers lists every server, shard by shard.
func (c *Cluster) Servers() []*Server {
	var out []*Server
	for _, row := range c.Shards {
		out = append(out, row...)
	}
	return out
}

// RSS is the resident memory of ZooKeeper and every server now.
func (c *Cluster) RSS() int64 {
	n := c.ZK.RSS()
	for _, s := range c.Servers() {
		n += s.RSS()
	}
	return n
}
