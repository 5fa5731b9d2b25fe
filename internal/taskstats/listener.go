package taskstats

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

const (
	cmdGet              = 1
	attrRegisterCPUMask = 3
)

// Listener receives exit records for every CPU.
type Listener struct {
	c      *genetlink.Conn
	family genetlink.Family
	mask   string
	lost   uint64
}

// Listen registers for the exit records of all CPUs.
func Listen() (*Listener, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("taskstats: cannot open a generic netlink socket: %w", err)
	}
	f, err := c.GetFamily("TASKSTATS")
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("taskstats: no TASKSTATS family: %w", err)
	}
	mask := "0-1023"
	if b, err := os.ReadFile("/sys/devices/system/cpu/possible"); err == nil {
		mask = strings.TrimSpace(string(b))
	}
	_ = c.SetReadBuffer(8 << 20)
	ae := netlink.NewAttributeEncoder()
	ae.String(attrRegisterCPUMask, mask)
	body, err := ae.Encode()
	if err != nil {
		c.Close()
		return nil, err
	}
	msg := genetlink.Message{Header: genetlink.Header{Command: cmdGet, Version: f.Version}, Data: body}
	if _, err := c.Send(msg, f.ID, netlink.Request); err != nil {
		c.Close()
		return nil, fmt.Errorf("taskstats: cannot register for CPUs %s (needs CAP_NET_ADMIN): %w", mask, err)
	}
	l := &Listener{c: c, family: f, mask: mask}
	// A first record proves the registration works: wait for our own child.
	if err := l.probe(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Listener) probe() error {
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		return nil // nothing to probe with: trust the registration
	}
	pid := p.Pid
	p.Wait()
	found := false
	for deadline := time.Now().Add(2 * time.Second); !found && time.Now().Before(deadline); {
		if err := l.receive(time.Now().Add(50*time.Millisecond), func(r *Record) {
			if r.PID == int32(pid) {
				found = true
			}
		}); err != nil {
			return err
		}
	}
	if !found {
		return errors.New("taskstats: registered, but no exit record arrived")
	}
	return nil
}

// drainWait is how long Drain waits for a record when none is queued. It
// cannot be 0: a read whose deadline has already passed fails at once,
// without looking at the socket, so nothing would ever be delivered.
const drainWait = time.Millisecond

// Drain delivers the records that arrived, waiting at most drainWait when
// there are none.
func (l *Listener) Drain(fn func(*Record)) error {
	return l.receive(time.Now().Add(drainWait), fn)
}

// Lost is the number of times the socket overflowed (records lost).
func (l *Listener) Lost() uint64 { return l.lost }

// receive delivers records until a read finds none before deadline.
func (l *Listener) receive(deadline time.Time, fn func(*Record)) error {
	if err := l.c.SetReadDeadline(deadline); err != nil {
		return err
	}
	for {
		msgs, _, err := l.c.Receive()
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				return nil
			}
			if errors.Is(err, unix.ENOBUFS) {
				l.lost++
				continue
			}
			return fmt.Errorf("taskstats: receive: %w", err)
		}
		for _, m := range msgs {
			if err := ParseMessage(m.Data, fn); err != nil {
				return err
			}
		}
		if len(msgs) == 0 && !deadline.After(time.Now()) {
			return nil
		}
	}
}

// Close deregisters and closes the socket.
func (l *Listener) Close() error { return l.c.Close() }
