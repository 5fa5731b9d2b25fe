package taskstats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Group is what the kernel says of a whole thread group (a process): the
// sums over its threads, live and exited, of their time on a CPU and of
// their time runnable but waiting for one. /proc/PID/schedstat has the
// leader thread's only, which in a JVM is the thread that waits for main()
// to return.
type Group struct {
	RunNs  uint64 // cpu_run_virtual_total: the threads' scheduler runtime
	WaitNs uint64 // cpu_delay_total: the threads' run-queue wait
	// Context switches, voluntary and not, of the live threads only (the
	// kernel does not keep exited threads' here): the sum drops when a
	// thread exits.
	VolCtx, InvolCtx uint64
}

// Querier asks the kernel for the accounting of thread groups
// (TASKSTATS_CMD_GET with TASKSTATS_CMD_ATTR_TGID), one request and one
// reply on a netlink socket of its own, with buffers it reuses. It needs
// CAP_NET_ADMIN, and the caller's pid namespace to be the initial one (pids
// are the caller's). It is not safe for concurrent use.
type Querier struct {
	fd     int
	family uint16
	seq    uint32
	req    [28]byte
	buf    []byte
	sa     unix.RawSockaddrNetlink
}

// Attribute of a TASKSTATS_CMD_GET request.
const cmdAttrTGID = 2

// Offsets in struct taskstats of the fields a Group takes.
const (
	offCPUDelayTotal   = 24
	offCPURunVirtTotal = 72
	offNVCSW           = 272
	offNIVCSW          = 280
	groupMinLen        = offNIVCSW + 8
)

// NewQuerier opens the socket and checks with a query of this process that
// the kernel answers.
func NewQuerier() (*Querier, error) {
	f, lk, err := dialFamily()
	if err != nil {
		return nil, err
	}
	// The family's id and version: queries go on a socket of their own,
	// bound while the lookup's sockets hold their port ids (one may be a
	// port id a listener's registration still names: dialFamily).
	fd, err := netlinkSocket()
	lk.close()
	if err != nil {
		return nil, err
	}
	// A reply that never comes must not stop the agent's tick for long.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("taskstats: receive timeout: %w", err)
	}
	q := &Querier{fd: fd, family: f.ID, buf: make([]byte, 4096)}
	q.sa.Family = unix.AF_NETLINK
	// The request: nlmsghdr, genlmsghdr, one u32 attribute (the tgid).
	binary.NativeEndian.PutUint32(q.req[0:], uint32(len(q.req)))
	binary.NativeEndian.PutUint16(q.req[4:], f.ID)
	binary.NativeEndian.PutUint16(q.req[6:], unix.NLM_F_REQUEST)
	q.req[16], q.req[17] = cmdGet, f.Version
	binary.NativeEndian.PutUint16(q.req[20:], 8)
	binary.NativeEndian.PutUint16(q.req[22:], cmdAttrTGID)
	var g Group
	if err := q.ThreadGroup(int32(os.Getpid()), &g); err != nil {
		q.Close()
		return nil, fmt.Errorf("taskstats: thread group query (needs CAP_NET_ADMIN): %w", err)
	}
	return q, nil
}

// ThreadGroup fills g with the totals of the thread group tgid. A process
// that is gone (or a zombie) gives syscall.ESRCH.
func (q *Querier) ThreadGroup(tgid int32, g *Group) error {
	q.seq++
	binary.NativeEndian.PutUint32(q.req[8:], q.seq)
	binary.NativeEndian.PutUint32(q.req[24:], uint32(tgid))
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(q.fd), uintptr(unsafe.Pointer(&q.req[0])), uintptr(len(q.req)),
			0, uintptr(unsafe.Pointer(&q.sa)), unix.SizeofSockaddrNetlink)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("taskstats: send: %w", errno)
		}
		break
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(q.fd), uintptr(unsafe.Pointer(&q.buf[0])), uintptr(len(q.buf)),
			0, 0, 0)
		switch errno {
		case 0:
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("taskstats: receive: %w", errno)
		}
		// A reply to an earlier request (one that timed out) is skipped.
		if ok, err := parseGroupReply(q.buf[:n], q.family, q.seq, g); ok || err != nil {
			return err
		}
	}
}

// Close closes the socket.
func (q *Querier) Close() error { return unix.Close(q.fd) }

// errNoStats says that a reply of the family carried no stats of a thread group.
var errNoStats = errors.New("taskstats: reply without thread group stats")

// parseGroupReply decodes the netlink messages of one datagram: it reports
// whether one answered request seq, with the error it carried (a netlink
// error, or the reply's stats missing or short) or with g filled.
func parseGroupReply(b []byte, family uint16, seq uint32, g *Group) (bool, error) {
	const nlHdr, genlHdr = 16, 4
	for len(b) >= nlHdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < nlHdr || l > len(b) {
			return false, fmt.Errorf("taskstats: netlink message of %d bytes in %d", l, len(b))
		}
		typ := binary.NativeEndian.Uint16(b[4:6])
		if binary.NativeEndian.Uint32(b[8:12]) == seq {
			switch {
			case typ == unix.NLMSG_ERROR:
				if l < nlHdr+4 {
					return true, fmt.Errorf("taskstats: short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(b[nlHdr:])); e < 0 {
					return true, syscall.Errno(-e)
				}
				// An acknowledgement: the reply comes separately.
			case typ == family && l >= nlHdr+genlHdr:
				return true, parseGroup(b[nlHdr+genlHdr:l], g)
			}
		}
		next := (l + 3) &^ 3
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return false, nil
}

// parseGroup finds the stats inside the TASKSTATS_TYPE_AGGR_TGID attribute.
func parseGroup(data []byte, g *Group) error {
	found := false
	err := eachAttr(data, func(t uint16, v []byte) error {
		if t != typeAggrTGID {
			return nil
		}
		return eachAttr(v, func(t uint16, s []byte) error {
			if t != typeStats {
				return nil
			}
			if len(s) < groupMinLen {
				return fmt.Errorf("taskstats: stats of %d bytes", len(s))
			}
			found = true
			g.WaitNs = binary.NativeEndian.Uint64(s[offCPUDelayTotal:])
			g.RunNs = binary.NativeEndian.Uint64(s[offCPURunVirtTotal:])
			g.VolCtx = binary.NativeEndian.Uint64(s[offNVCSW:])
			g.InvolCtx = binary.NativeEndian.Uint64(s[offNIVCSW:])
			return nil
		})
	})
	if err == nil && !found {
		err = errNoStats
	}
	return err
}
