package taskstats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

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
	rc     syscall.RawConn
	buf    []byte
	// The receive of Drain: one method value, its results in fields, and a
	// scratch record, so that draining allocates nothing per record.
	recvFn func(fd uintptr) bool
	recvN  int
	recvEr error
	rec    Record
}

// recv receives one datagram without waiting (recvfrom without a source
// address: unix.Recvfrom would allocate one per call).
func (l *Listener) recv(fd uintptr) bool {
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&l.buf[0])), uintptr(len(l.buf)),
		unix.MSG_DONTWAIT, 0, 0)
	l.recvN, l.recvEr = int(n), nil
	if errno != 0 {
		l.recvN, l.recvEr = 0, errno
	}
	return true
}

// ErrPIDNamespace says that this process is not in the initial pid
// namespace: the kernel sends exit records with the pids of that namespace,
// which are not the ones this process sees in /proc.
var ErrPIDNamespace = errors.New("taskstats: not in the initial pid namespace (exit records carry the host's pids)")

// initPIDNamespace is the inode number of the initial pid namespace
// (PROC_PID_INIT_INO, a constant of the kernel).
const initPIDNamespace = "pid:[4026531836]"

// InInitialPIDNamespace reports whether this process sees the host's pids
// (true when it cannot tell).
func InInitialPIDNamespace() bool {
	ns, err := os.Readlink("/proc/self/ns/pid")
	return err != nil || ns == initPIDNamespace
}

// dialFamily opens a generic netlink connection and looks up the TASKSTATS
// family on it (in the initial pid namespace only: elsewhere the kernel's
// pids are not the ones /proc shows).
func dialFamily() (*genetlink.Conn, genetlink.Family, error) {
	if !InInitialPIDNamespace() {
		return nil, genetlink.Family{}, ErrPIDNamespace
	}
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, genetlink.Family{}, fmt.Errorf("taskstats: cannot open a generic netlink socket: %w", err)
	}
	f, err := c.GetFamily("TASKSTATS")
	if err != nil {
		c.Close()
		return nil, genetlink.Family{}, fmt.Errorf("taskstats: no TASKSTATS family: %w", err)
	}
	return c, f, nil
}

// Listen registers for the exit records of all CPUs.
func Listen() (*Listener, error) {
	c, f, err := dialFamily()
	if err != nil {
		return nil, err
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

// Drain delivers every record queued on the socket, without waiting: it
// reads with MSG_DONTWAIT until the queue is empty, into one reused buffer.
// (A read deadline would not do: a read whose deadline has passed fails at
// once without looking at the socket, and one that is still running when
// thousands of records are queued stops half-way, leaving the records of
// processes the caller already saw leave /proc for the next call.)
func (l *Listener) Drain(fn func(*Record)) error {
	if l.rc == nil {
		rc, err := l.c.SyscallConn()
		if err != nil {
			return err
		}
		// No deadline: the reads below never wait (the probe set one).
		if err := l.c.SetReadDeadline(time.Time{}); err != nil {
			return err
		}
		l.rc = rc
		l.buf = make([]byte, 64<<10)
	}
	for {
		if l.recvFn == nil {
			l.recvFn = l.recv
		}
		if err := l.rc.Read(l.recvFn); err != nil {
			return fmt.Errorf("taskstats: receive: %w", err)
		}
		n, rerr := l.recvN, l.recvEr
		switch {
		case rerr == unix.EAGAIN || rerr == unix.EWOULDBLOCK:
			return nil
		case rerr == unix.EINTR:
			continue
		case rerr == unix.ENOBUFS:
			l.lost++
			continue
		case rerr != nil:
			return fmt.Errorf("taskstats: receive: %w", rerr)
		case n == 0:
			return nil
		}
		if err := parseNetlinkInto(l.buf[:n], l.family.ID, &l.rec, fn); err != nil {
			return err
		}
	}
}

// parseNetlink walks the netlink messages of one datagram and hands the
// generic netlink payload of those of the family to ParseMessage.
func parseNetlink(b []byte, family uint16, fn func(*Record)) error {
	var r Record
	return parseNetlinkInto(b, family, &r, fn)
}

// parseNetlinkInto is parseNetlink with a scratch Record of the caller's.
func parseNetlinkInto(b []byte, family uint16, r *Record, fn func(*Record)) error {
	const nlHdr, genlHdr = 16, 4
	for len(b) >= nlHdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < nlHdr || l > len(b) {
			return fmt.Errorf("taskstats: netlink message of %d bytes in %d", l, len(b))
		}
		if typ == family && l >= nlHdr+genlHdr {
			if err := parseMessage(b[nlHdr+genlHdr:l], r, fn); err != nil {
				return err
			}
		}
		next := (l + 3) &^ 3
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return nil
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
