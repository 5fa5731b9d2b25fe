package taskstats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/genetlink"
	"golang.org/x/sys/unix"
)

const (
	cmdGet                = 1
	attrRegisterCPUMask   = 3
	attrDeregisterCPUMask = 4
)

// Listener receives exit records for every CPU, on a netlink socket of its
// own that the Go runtime's poller does not watch: the kernel queues a
// record on it for every thread that exits on the machine, and a socket
// in the poller would wake one of the agent's threads for each (500 new
// processes a second: 500 wake-ups). Records wait in the socket's buffer
// until Drain reads them, without waiting, into one reused buffer.
type Listener struct {
	fd      int
	lost    uint64
	dropped uint64 // the socket's drop count when an overflow was last seen
	buf     []byte
	fam     uint16
	ver     uint8
	mask    string // the CPUs it registered for ("": not registered)
	parse   parser // scratch: draining allocates nothing per record
	// Drain receives up to len(msgs) datagrams (a record each) with one
	// recvmmsg, into slots of buf.
	msgs []mmsghdr
	iovs []unix.Iovec
}

// mmsghdr is struct mmsghdr: a msghdr and the length received.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// Drain's batches: drainSlots datagrams of up to drainSlot bytes (an exit
// record with its thread group's aggregate is under 1 KiB).
const (
	drainSlots = 32
	drainSlot  = 2 << 10
)

// recv receives one datagram (the probe's), waiting at most the socket's
// receive timeout (recvfrom without a source address: unix.Recvfrom would
// allocate one per call).
func (l *Listener) recv() (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(l.fd), uintptr(unsafe.Pointer(&l.buf[0])), uintptr(len(l.buf)),
		0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
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

// dialFamily looks up the TASKSTATS family on a generic netlink socket
// (in the initial pid namespace only: elsewhere the kernel's pids are not
// the ones /proc shows), and returns it with the lookup's sockets, for the
// caller to close once it opened its own: while they hold their port ids,
// the caller's gets another.
//
// A port id that a taskstats listener's registration still names gets
// every thread's exit record on the machine (a listener not closed, or a
// killed process's, stays registered until a record finds no socket
// there), and a lookup on it may read one as its reply ("mismatched
// sequence in netlink reply"). Such a port id is a pid: a socket bound
// without one gets its process's pid if no socket holds it. So a guard
// socket, never read, is bound first and takes this process's pid if it
// is free; the lookup's socket gets another port id.
func dialFamily() (genetlink.Family, *familyLookup, error) {
	if !InInitialPIDNamespace() {
		return genetlink.Family{}, nil, ErrPIDNamespace
	}
	guard, err := netlinkSocket()
	if err != nil {
		return genetlink.Family{}, nil, err
	}
	c, err := genetlink.Dial(nil)
	if err != nil {
		unix.Close(guard)
		return genetlink.Family{}, nil, fmt.Errorf("taskstats: cannot open a generic netlink socket: %w", err)
	}
	lk := &familyLookup{c: c, guard: guard}
	f, err := c.GetFamily("TASKSTATS")
	if err != nil {
		lk.close()
		return genetlink.Family{}, nil, fmt.Errorf("taskstats: no TASKSTATS family: %w", err)
	}
	return f, lk, nil
}

// familyLookup is the sockets of a family lookup (dialFamily): the
// lookup's and its guard's.
type familyLookup struct {
	c     *genetlink.Conn
	guard int
}

func (lk *familyLookup) close() {
	lk.c.Close()
	unix.Close(lk.guard)
}

// netlinkSocket opens a generic netlink socket bound to a port id the
// kernel picks: this process's pid if no socket holds it, else another.
func netlinkSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return -1, fmt.Errorf("taskstats: cannot open a generic netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("taskstats: bind: %w", err)
	}
	return fd, nil
}

// rcvBuf is the exit-record socket's receive buffer: room for the records
// of a burst of exits between two ticks (beyond the system's limit as
// root; else the limit). A record takes about 1.3 KB of it (TestDropped).
const rcvBuf = 8 << 20

// Listen registers for the exit records of all CPUs.
func Listen() (*Listener, error) { return listen(rcvBuf) }

// listen is Listen with a receive buffer of rcvbuf bytes.
func listen(rcvbuf int) (*Listener, error) {
	f, lk, err := dialFamily()
	if err != nil {
		return nil, err
	}
	lk.close() // the family's id and version: records come on a socket of their own
	mask := "0-1023"
	if b, err := os.ReadFile("/sys/devices/system/cpu/possible"); err == nil {
		mask = strings.TrimSpace(string(b))
	}
	fd, err := netlinkSocket()
	if err != nil {
		return nil, err
	}
	l := &Listener{fd: fd, fam: f.ID, ver: f.Version, parse: parser{comms: comms{}}, buf: make([]byte, drainSlots*drainSlot),
		msgs: make([]mmsghdr, drainSlots), iovs: make([]unix.Iovec, drainSlots)}
	for i := range l.msgs {
		l.iovs[i].Base = &l.buf[i*drainSlot]
		l.iovs[i].SetLen(drainSlot)
		l.msgs[i].hdr.Iov = &l.iovs[i]
		l.msgs[i].hdr.SetIovlen(1)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	// The probe's reads wait at most this long.
	tv := unix.Timeval{Usec: 50000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		l.Close()
		return nil, fmt.Errorf("taskstats: receive timeout: %w", err)
	}
	// TASKSTATS_CMD_GET with TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, acknowledged.
	l.mask = mask
	if err := l.cpuMask(attrRegisterCPUMask, unix.NLM_F_ACK); err != nil {
		l.Close()
		return nil, fmt.Errorf("taskstats: cannot register for CPUs %s: %w", mask, err)
	}
	// A first record proves the registration works: wait for our own child.
	if err := l.probe(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// cpuMask sends TASKSTATS_CMD_GET with attr (register or deregister) for
// the listener's CPUs, and flags beside NLM_F_REQUEST. The kernel handles
// it before the send returns, for the socket's port id.
func (l *Listener) cpuMask(attr uint16, flags uint16) error {
	n := len(l.mask) + 1
	msg := make([]byte, 16+4+(4+n+3)&^3)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], l.fam)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg[16], msg[17] = cmdGet, l.ver
	binary.NativeEndian.PutUint16(msg[20:], uint16(4+n))
	binary.NativeEndian.PutUint16(msg[22:], attr)
	copy(msg[24:], l.mask)
	return unix.Sendto(l.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// probe waits for the exit record of a thread of this process's own,
// started for it and ended at once: a thread costs a fraction of a child
// process (fork, exec and the child's own start, counted in the agent's
// CPU).
func (l *Listener) probe() error {
	tid := exitThread()
	found := false
	for deadline := time.Now().Add(2 * time.Second); !found && time.Now().Before(deadline); {
		n, ok, err := l.read()
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := ackError(l.buf[:n]); err != nil {
			return fmt.Errorf("taskstats: cannot register for exit records (needs CAP_NET_ADMIN): %w", err)
		}
		if err := parseNetlinkInto(l.buf[:n], l.fam, &l.parse, func(r *Record) {
			if r.TID == tid && r.PID == int32(os.Getpid()) {
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

// exitThread ends one thread of this process and returns its id: a
// goroutine that returns locked to its thread takes the thread with it,
// except the main thread, which the runtime keeps (wedged). A goroutine
// that finds itself on the main thread holds it while a second one, which
// then runs on another thread, ends its own.
func exitThread() int32 {
	tids := make(chan int32, 1)
	go func() {
		runtime.LockOSThread()
		if tid := unix.Gettid(); tid != unix.Getpid() {
			tids <- int32(tid)
			return // locked: the thread exits
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			tids <- int32(unix.Gettid())
		}()
		<-done
		runtime.UnlockOSThread()
	}()
	return <-tids
}

// ackError is the error a netlink acknowledgement in b carries, if any.
func ackError(b []byte) error {
	const nlHdr = 16
	for len(b) >= nlHdr+4 {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < nlHdr || l > len(b) {
			return nil
		}
		if binary.NativeEndian.Uint16(b[4:6]) == unix.NLMSG_ERROR {
			if code := int32(binary.NativeEndian.Uint32(b[nlHdr:])); code != 0 {
				return syscall.Errno(-code)
			}
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return nil
}

// Drain delivers every record queued on the socket, without waiting: it
// receives with MSG_DONTWAIT until the queue is empty, up to 32 records
// with each recvmmsg (one system call for a tick's records, not one per
// record), into one reused buffer.
func (l *Listener) Drain(fn func(*Record)) error {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.msgs[0])),
			uintptr(len(l.msgs)), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
		case unix.EAGAIN:
			return nil
		case unix.EINTR:
			continue
		case unix.ENOBUFS:
			if err := l.overflowed(); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("taskstats: receive: %w", errno)
		}
		for i := range int(n) {
			m := &l.msgs[i]
			if m.hdr.Flags&unix.MSG_TRUNC != 0 {
				return fmt.Errorf("taskstats: a datagram longer than %d bytes", drainSlot)
			}
			if err := parseNetlinkInto(l.buf[i*drainSlot:i*drainSlot+int(m.n)], l.fam, &l.parse, fn); err != nil {
				return err
			}
		}
		if int(n) < len(l.msgs) {
			return nil // the queue is empty
		}
	}
}

// read receives one datagram into l.buf; ok is false when there was none
// (the probe's wait ran out). Overflows are counted.
func (l *Listener) read() (n int, ok bool, err error) {
	for {
		n, err := l.recv()
		switch {
		case err == unix.EAGAIN || err == unix.EWOULDBLOCK:
			return 0, false, nil
		case err == unix.EINTR:
			continue
		case err == unix.ENOBUFS:
			if err := l.overflowed(); err != nil {
				return 0, false, err
			}
			continue
		case err != nil:
			return 0, false, fmt.Errorf("taskstats: receive: %w", err)
		}
		return n, n > 0, nil
	}
}

// parseNetlink walks the netlink messages of one datagram and hands the
// generic netlink payload of those of the family to ParseMessage.
func parseNetlink(b []byte, family uint16, fn func(*Record)) error {
	var p parser
	return parseNetlinkInto(b, family, &p, fn)
}

// parseNetlinkInto is parseNetlink with a parser of the caller's.
func parseNetlinkInto(b []byte, family uint16, p *parser, fn func(*Record)) error {
	const nlHdr, genlHdr = 16, 4
	for len(b) >= nlHdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < nlHdr || l > len(b) {
			return fmt.Errorf("taskstats: netlink message of %d bytes in %d", l, len(b))
		}
		if typ == family && l >= nlHdr+genlHdr {
			if err := parseMessage(b[nlHdr+genlHdr:l], p, fn); err != nil {
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

// Lost is the number of times the socket overflowed (records lost). Not
// safe to call during Drain.
func (l *Listener) Lost() uint64 { return l.lost }

// Indexes in the socket's SO_MEMINFO (linux/sock_diag.h SK_MEMINFO_*).
const (
	memInfoRmemAlloc = 0
	memInfoDrops     = 8
	memInfoVars      = 9
)

// memInfo reads the socket's SO_MEMINFO.
func (l *Listener) memInfo() ([memInfoVars]uint32, error) {
	var mi [memInfoVars]uint32
	n := uint32(unsafe.Sizeof(mi))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(l.fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return mi, fmt.Errorf("taskstats: SO_MEMINFO: %w", errno)
	}
	return mi, nil
}

// overflowed counts an overflow the socket reported (ENOBUFS: the kernel
// dropped records since the last receive) and reads how many records it
// has dropped so far.
func (l *Listener) overflowed() error {
	l.lost++
	mi, err := l.memInfo()
	if err != nil {
		return err
	}
	l.dropped = uint64(mi[memInfoDrops])
	return nil
}

// Dropped is the number of exit records the kernel dropped because the
// socket's buffer was full (its drop count, SO_MEMINFO, read when Drain
// met an overflow): the exits of processes and threads the agent was not
// told of. Not safe to call during Drain.
func (l *Listener) Dropped() uint64 { return l.dropped }

// Close deregisters the listener's CPUs and closes the socket. The kernel
// forgets a listener whose socket is gone only when a record it sends
// there finds no socket: a socket opened meanwhile that gets the same port
// id (the first of a process gets its pid, as the listener's did) would
// get every thread's exit record on the machine. The next Listen's lookup
// of the family got one for its reply ("mismatched sequence in netlink
// reply"), and a Querier would read through them for each of its replies.
func (l *Listener) Close() error {
	var err error
	if l.mask != "" {
		if e := l.cpuMask(attrDeregisterCPUMask, 0); e != nil {
			err = fmt.Errorf("taskstats: cannot deregister for CPUs %s: %w", l.mask, e)
		}
	}
	if e := unix.Close(l.fd); e != nil {
		err = errors.Join(err, fmt.Errorf("taskstats: close: %w", e))
	}
	return err
}
