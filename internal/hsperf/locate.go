package hsperf

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Owner is what /proc/<pid>/status says about a process that matters for
// finding its hsperfdata file.
type Owner struct {
	EUID  uint32 // the effective uid: the JVM creates its file as this user
	NSPID int32  // the pid in the process's innermost pid namespace: the file's name
}

// ParseStatus takes the effective uid and the innermost namespace pid out
// of /proc/<pid>/status. Kernels before 4.1 have no NSpid line: the pid is
// then the one given.
func ParseStatus(b []byte, pid int32) (Owner, error) {
	o := Owner{NSPID: pid}
	hasUID := false
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(k) {
		case "Uid":
			f := bytes.Fields(v)
			if len(f) < 2 {
				return o, fmt.Errorf("cannot parse status of pid %d: bad Uid line", pid)
			}
			u, err := strconv.ParseUint(string(f[1]), 10, 32)
			if err != nil {
				return o, fmt.Errorf("cannot parse status of pid %d: bad Uid line: %w", pid, err)
			}
			o.EUID, hasUID = uint32(u), true
		case "NSpid":
			f := bytes.Fields(v)
			if len(f) == 0 {
				continue
			}
			n, err := strconv.ParseInt(string(f[len(f)-1]), 10, 32)
			if err != nil || n <= 0 {
				return o, fmt.Errorf("cannot parse status of pid %d: bad NSpid line", pid)
			}
			o.NSPID = int32(n)
		}
	}
	if !hasUID {
		return o, fmt.Errorf("cannot parse status of pid %d: no Uid line", pid)
	}
	return o, nil
}

// ErrNoFile says that a JVM has no hsperfdata file (yet, or at all: it was
// started with -XX:-UsePerfData or -XX:+PerfDisableSharedMem).
var ErrNoFile = errors.New("no hsperfdata file")

// Locate finds the hsperfdata file of a process whose file name is nspid:
// <tmp>/hsperfdata_<user>/<nspid> when the user is known and the file is
// there, else the first <tmp>/hsperfdata_*/<nspid> (a JVM in a container
// may run as a user the node does not know by that name). tmp is the JVM's
// /tmp as the agent sees it: <procfs>/<pid>/root/tmp reaches it in any mount
// namespace.
func Locate(tmp string, nspid int32, user string) (string, error) {
	name := strconv.Itoa(int(nspid))
	if user != "" && !strings.ContainsRune(user, '/') {
		p := tmp + "/hsperfdata_" + user + "/" + name
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	d, err := os.Open(tmp)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", ErrNoFile
		}
		return "", err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return "", err
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "hsperfdata_") {
			continue
		}
		p := tmp + "/" + n + "/" + name
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", ErrNoFile
}
