package server

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/testsrv"
)

// A client address with ClientConns connections open has the next one
// closed at once; when one of its own closes, it may open another; the
// refusals are counted in /metrics.
func TestClientConnsBounded(t *testing.T) {
	srv := startOnDuckDB(t, Config{ClientConns: 3})
	healthz := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		buf := make([]byte, 12)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "HTTP/1.1 200" {
			t.Errorf("answer %q", buf)
		}
		return nil
	}
	var open []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := healthz(c); err != nil { // kept alive: open and idle
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
	}
	extra, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := healthz(extra); err == nil {
		t.Fatal("a fourth connection of the same address was served")
	}
	open[0].Close()
	testsrv.WaitUntil(t, "a connection served again after one of the three closed", 10*time.Second, func() bool {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			return false
		}
		defer c.Close()
		return healthz(c) == nil
	})
	for _, c := range open[1:] {
		c.Close()
	}
	var refused string
	testsrv.WaitUntil(t, "/metrics once the connections closed", 10*time.Second, func() bool {
		resp, err := http.Get(srv.URL() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "taskscope_server_connections_refused_total "); ok {
				refused = v
			}
		}
		return true
	})
	if refused == "" || refused == "0" {
		t.Errorf("taskscope_server_connections_refused_total %q, want the refusal counted", refused)
	}
}
