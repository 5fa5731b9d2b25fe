// Package taskstats receives the Linux kernel's per-task accounting at every
// thread's exit (the taskstats genetlink family, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK):
// the exact CPU and IO of processes, even of those that lived only a few
// milliseconds. It needs CAP_NET_ADMIN (root); without it the agent falls
// back to cutime/cstime.
package taskstats

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record is the kernel's accounting of one thread at its exit. The CPU of a
// process is the sum over the records of all its threads; the record of the
// thread group leader (TID == PID) carries the exit code.
type Record struct {
	PID        int32  // the thread group id (the process)
	TID        int32  // the thread
	PPID       int32  // the process's parent at exit
	BtimeSec   int64  // the thread's start, unix seconds
	EtimeUs    uint64 // the thread's life, start to exit (CLOCK_MONOTONIC), µs
	UTimeUs    uint64
	STimeUs    uint64
	RunNs      uint64 // cpu_run_virtual_total: the thread's scheduler runtime (sum_exec_runtime), ns
	ReadBytes  uint64
	WriteBytes uint64
	ExitCode   int32 // wait status
	Comm       string
}

// CPUMs is the record's CPU in milliseconds (rounded): its scheduler
// runtime (RunNs), the exact time /proc/PID/stat and wait4 scale their user
// and system times to. Where the kernel leaves that 0 (it fills it with
// its delay accounting's fields), ac_utime + ac_stime, which count clock
// ticks: under load they can be off by a fifth either way for a process
// that runs in short bursts.
func (r *Record) CPUMs() int64 {
	if r.RunNs > 0 {
		return int64((r.RunNs + 500_000) / 1_000_000)
	}
	return int64(r.UTimeUs+r.STimeUs) / 1000
}

// Attribute types of a TASKSTATS_CMD_NEW message (linux/taskstats.h).
const (
	typePID      = 1
	typeTGID     = 2
	typeStats    = 3
	typeAggrPID  = 4
	typeAggrTGID = 5
)

// Offsets in struct taskstats (x86-64 and arm64 share this layout).
const (
	offVersion    = 0
	offExitcode   = 4
	offComm       = 80
	offPID        = 128
	offPPID       = 132
	offBtime      = 136
	offRunVirtual = 72
	offEtime      = 144
	offUtime      = 152
	offStime      = 160
	offReadBytes  = 248
	offWriteBytes = 256
	offTGID       = 368
	minLen        = offTGID + 4 // version 12 and later carry ac_tgid
)

// ErrOldKernel says the kernel's struct taskstats predates ac_tgid (version 12).
var ErrOldKernel = errors.New("taskstats: kernel struct too old (no ac_tgid)")

// ParseStats decodes a struct taskstats.
func ParseStats(b []byte, r *Record) error { return parseStats(b, r, nil) }

// comms are the command names of records, each one string: under churn the
// same few names exit thousands of times a second. Up to maxComms are kept.
type comms map[string]string

const maxComms = 1024

// of is b as a string: the one kept, if any.
func (c comms) of(b []byte) string {
	if s, ok := c[string(b)]; ok {
		return s
	}
	s := string(b)
	if c != nil && len(c) < maxComms {
		c[s] = s
	}
	return s
}

// parser is what parseMessage reuses from one record to the next.
type parser struct {
	rec   Record // the record handed to the callback (valid during the call)
	comms comms
}

// parseStats is ParseStats taking comm names from c (nil: none).
func parseStats(b []byte, r *Record, c comms) error {
	if len(b) < 2 {
		return fmt.Errorf("taskstats: struct of %d bytes", len(b))
	}
	if v := binary.NativeEndian.Uint16(b[offVersion:]); v < 12 || len(b) < minLen {
		return fmt.Errorf("%w: version %d, %d bytes", ErrOldKernel, v, len(b))
	}
	u32 := func(o int) uint32 { return binary.NativeEndian.Uint32(b[o:]) }
	u64 := func(o int) uint64 { return binary.NativeEndian.Uint64(b[o:]) }
	r.ExitCode = int32(u32(offExitcode))
	comm := b[offComm : offComm+32]
	n := 0
	for n < len(comm) && comm[n] != 0 {
		n++
	}
	r.Comm = c.of(comm[:n])
	r.TID = int32(u32(offPID))
	r.PPID = int32(u32(offPPID))
	r.BtimeSec = int64(u32(offBtime))
	r.EtimeUs = u64(offEtime)
	r.UTimeUs = u64(offUtime)
	r.STimeUs = u64(offStime)
	r.RunNs = u64(offRunVirtual)
	r.ReadBytes = u64(offReadBytes)
	r.WriteBytes = u64(offWriteBytes)
	r.PID = int32(u32(offTGID))
	if r.PID == 0 {
		r.PID = r.TID
	}
	return nil
}

// ParseMessage decodes the attributes of one TASKSTATS_CMD_NEW message and
// calls fn for its per-thread record. Per-thread-group aggregates are
// skipped: without delay accounting they carry no CPU.
func ParseMessage(data []byte, fn func(*Record)) error {
	var p parser
	return parseMessage(data, &p, fn)
}

// parseMessage is ParseMessage with the caller's parser (reused: no
// allocation per record).
func parseMessage(data []byte, p *parser, fn func(*Record)) error {
	r := &p.rec
	for len(data) >= 4 {
		l := int(binary.NativeEndian.Uint16(data[0:2]))
		typ := binary.NativeEndian.Uint16(data[2:4]) & 0x3fff
		if l < 4 || l > len(data) {
			return fmt.Errorf("taskstats: attribute length %d of %d bytes", l, len(data))
		}
		payload := data[4:l]
		if typ == typeAggrPID {
			*r = Record{}
			found := false
			// The nested attributes, inline (a closure here would be
			// allocated for every record).
			for a := payload; len(a) >= 4; {
				al := int(binary.NativeEndian.Uint16(a[0:2]))
				at := binary.NativeEndian.Uint16(a[2:4]) & 0x3fff
				if al < 4 || al > len(a) {
					return fmt.Errorf("taskstats: attribute length %d of %d bytes", al, len(a))
				}
				if at == typeStats {
					found = true
					if err := parseStats(a[4:al], r, p.comms); err != nil {
						return err
					}
				}
				next := (al + 3) &^ 3
				if next > len(a) {
					break
				}
				a = a[next:]
			}
			if found {
				fn(r)
			}
		}
		next := (l + 3) &^ 3
		if next > len(data) {
			break
		}
		data = data[next:]
	}
	return nil
}

func eachAttr(data []byte, fn func(t uint16, v []byte) error) error {
	for len(data) >= 4 {
		l := int(binary.NativeEndian.Uint16(data[0:2]))
		typ := binary.NativeEndian.Uint16(data[2:4]) & 0x3fff
		if l < 4 || l > len(data) {
			return fmt.Errorf("taskstats: attribute length %d of %d bytes", l, len(data))
		}
		if err := fn(typ, data[4:l]); err != nil {
			return err
		}
		next := (l + 3) &^ 3
		if next > len(data) {
			break
		}
		data = data[next:]
	}
	return nil
}
