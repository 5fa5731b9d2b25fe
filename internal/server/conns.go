package server

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/taskscope/taskscope/internal/auth"
)

// clientConns bounds the open connections of one client address: a
// connection past the bound is closed as soon as it is accepted, before
// the server reads from it or gives it a goroutine's buffers. A client
// that opens connections and leaves them idle (a new HTTP transport for
// each request keeps each one open) would otherwise have the server hold
// every one until its idle timeout, and slow every other request. What it
// keeps is bounded by the connections open: an address is forgotten with
// its last one.
type clientConns struct {
	max     int
	mu      sync.Mutex
	open    map[string]int
	counted map[net.Conn]string
	refused atomic.Int64
}

func newClientConns(max int) *clientConns {
	return &clientConns{max: max, open: map[string]int{}, counted: map[net.Conn]string{}}
}

// state is the http.Server's ConnState hook.
func (c *clientConns) state(conn net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		addr := auth.PeerHost(conn.RemoteAddr().String())
		c.mu.Lock()
		if c.open[addr] >= c.max {
			c.mu.Unlock()
			c.refused.Add(1)
			conn.Close()
			return
		}
		c.open[addr]++
		c.counted[conn] = addr
		c.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		c.mu.Lock()
		if addr, ok := c.counted[conn]; ok {
			delete(c.counted, conn)
			if c.open[addr]--; c.open[addr] <= 0 {
				delete(c.open, addr)
			}
		}
		c.mu.Unlock()
	}
}
