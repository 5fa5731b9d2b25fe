package taskstats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
)

// statsStruct lays out a struct taskstats of the given version and length.
func statsStruct(version uint16, size int, r Record) []byte {
	b := make([]byte, size)
	put32 := func(o int, v uint32) {
		if o+4 <= size {
			binary.NativeEndian.PutUint32(b[o:], v)
		}
	}
	put64 := func(o int, v uint64) {
		if o+8 <= size {
			binary.NativeEndian.PutUint64(b[o:], v)
		}
	}
	binary.NativeEndian.PutUint16(b[offVersion:], version)
	put32(offExitcode, uint32(r.ExitCode))
	if offComm+32 <= size {
		copy(b[offComm:offComm+32], r.Comm)
	}
	put32(offPID, uint32(r.TID))
	put32(offPPID, uint32(r.PPID))
	put32(offBtime, uint32(r.BtimeSec))
	put64(offEtime, r.EtimeUs)
	put64(offUtime, r.UTimeUs)
	put64(offStime, r.STimeUs)
	put64(offRunVirtual, r.RunNs)
	put64(offReadBytes, r.ReadBytes)
	put64(offWriteBytes, r.WriteBytes)
	put32(offTGID, uint32(r.PID))
	return b
}

// sizeV14 is sizeof(struct taskstats) of version 14 (Linux 6.x, x86-64).
const sizeV14 = 432

func TestParseStats(t *testing.T) {
	leader := Record{PID: 4243, TID: 4243, PPID: 4242, BtimeSec: 1700000000, EtimeUs: 2_500_000, UTimeUs: 1_234_567, STimeUs: 89_000,
		RunNs: 1_210_499_999, ReadBytes: 4096, WriteBytes: 1 << 20, ExitCode: 143 << 8, Comm: "java"}
	thread := Record{PID: 4243, TID: 4301, PPID: 4242, BtimeSec: 1700000001, UTimeUs: 5, Comm: "GC Thread#0"}
	full := leader
	full.Comm = strings.Repeat("c", 32) // no NUL: all 32 bytes
	tests := []struct {
		name    string
		in      []byte
		want    Record
		wantErr error
	}{
		{"thread group leader, v14", statsStruct(14, sizeV14, leader), leader, nil},
		{"other thread, v14", statsStruct(14, sizeV14, thread), thread, nil},
		{"v12, exactly up to ac_tgid", statsStruct(12, minLen, leader), leader, nil},
		{"comm of 32 bytes", statsStruct(13, sizeV14, full), full, nil},
		{"no tgid: pid is the thread's", statsStruct(12, minLen, Record{TID: 77, Comm: "x"}), Record{PID: 77, TID: 77, Comm: "x"}, nil},
		{"v11", statsStruct(11, minLen, leader), Record{}, ErrOldKernel},
		{"v12 cut before ac_tgid", statsStruct(12, minLen-1, leader), Record{}, ErrOldKernel},
		{"v8 of 328 bytes", statsStruct(8, 328, leader), Record{}, ErrOldKernel},
		{"one byte", []byte{14}, Record{}, nil},
		{"empty", nil, Record{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Record
			err := ParseStats(tc.in, &r)
			if len(tc.in) < 2 {
				if err == nil || !strings.Contains(err.Error(), "struct of") {
					t.Fatalf("error %v", err)
				}
				return
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r != tc.want {
				t.Errorf("ParseStats:\n got %+v\nwant %+v", r, tc.want)
			}
		})
	}
	// The scheduler's runtime, rounded to the millisecond; the clock
	// ticks' user and system time where the kernel leaves it 0.
	if ms := leader.CPUMs(); ms != 1210 {
		t.Errorf("CPUMs = %d, want 1210 (the runtime)", ms)
	}
	if r := (Record{RunNs: 1_500_000}); r.CPUMs() != 2 {
		t.Errorf("CPUMs of 1.5 ms = %d, want 2", r.CPUMs())
	}
	noRun := leader
	noRun.RunNs = 0
	if ms := noRun.CPUMs(); ms != 1323 {
		t.Errorf("CPUMs without the runtime = %d, want 1323 (utime+stime)", ms)
	}
}

// message encodes the attributes of a TASKSTATS_CMD_NEW message as the
// kernel sends them: nested AGGR_PID and AGGR_TGID.
func message(t testing.TB, recs ...Record) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	for _, r := range recs {
		ae.Nested(typeAggrPID, func(nae *netlink.AttributeEncoder) error {
			nae.Uint32(typePID, uint32(r.TID))
			nae.Bytes(typeStats, statsStruct(14, sizeV14, r))
			return nil
		})
		if r.TID == r.PID { // the last thread: the group's aggregate follows
			ae.Nested(typeAggrTGID, func(nae *netlink.AttributeEncoder) error {
				nae.Uint32(typeTGID, uint32(r.PID))
				nae.Bytes(typeStats, statsStruct(14, sizeV14, Record{PID: r.PID, TID: r.PID, UTimeUs: 999_999_999}))
				return nil
			})
		}
	}
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseMessage(t *testing.T) {
	thread := Record{PID: 4243, TID: 4301, PPID: 4242, UTimeUs: 5, Comm: "GC Thread#0"}
	leader := Record{PID: 4243, TID: 4243, PPID: 4242, UTimeUs: 1_000_000, ExitCode: 256, Comm: "java"}
	odd := Record{PID: 9, TID: 9, PPID: 1, Comm: "abc"} // a comm whose attribute needs no padding, and one that does
	var got []Record
	collect := func(r *Record) { got = append(got, *r) }
	for name, tc := range map[string]struct {
		in   []byte
		want []Record
	}{
		"thread": {message(t, thread), []Record{thread}},
		"leader with the group aggregate, which is skipped": {message(t, leader), []Record{leader}},
		"several": {message(t, thread, leader, odd), []Record{thread, leader, odd}},
		"empty":   {nil, nil},
		"trailing bytes shorter than an attribute": {append(message(t, thread), 1, 2), []Record{thread}},
		"aggregate without stats":                  {nest(typeAggrPID, attr(typePID, []byte{1, 0, 0, 0})), nil},
		"unknown attributes":                       {append(attr(99, []byte("hello")), message(t, odd)...), []Record{odd}},
	} {
		t.Run(name, func(t *testing.T) {
			got = nil
			if err := ParseMessage(tc.in, collect); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d records, want %d: %+v", len(got), len(tc.want), got)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	bad := map[string][]byte{
		"attribute longer than the message": {200, 0, 4, 0, 1, 2, 3, 4},
		"attribute shorter than its header": {2, 0, 4, 0},
		"nested attribute too long":         nest(typeAggrPID, []byte{100, 0, 3, 0, 0, 0, 0, 0}),
		"old kernel's stats":                nest(typeAggrPID, attr(typeStats, statsStruct(10, 328, Record{}))),
	}
	for name, in := range bad {
		if err := ParseMessage(in, collect); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func attr(typ uint16, v []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nest(typ uint16, body []byte) []byte { return attr(typ|netlink.Nested, body) }

// nlmsg wraps a generic netlink payload in a netlink header of type typ.
func nlmsg(typ uint16, payload []byte) []byte {
	return nlmsgSeq(typ, 0, append([]byte{3, 1, 0, 0}, payload...)) // genl: TASKSTATS_CMD_NEW, version 1
}

// nlmsgSeq wraps payload in a netlink header of type typ and sequence seq.
func nlmsgSeq(typ uint16, seq uint32, payload []byte) []byte {
	b := binary.NativeEndian.AppendUint32(nil, uint32(16+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, 0, 0) // flags
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = append(b, 0, 0, 0, 0) // pid
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestParseNetlink(t *testing.T) {
	const family = 27
	a := Record{PID: 10, TID: 10, PPID: 1, Comm: "a"}
	b := Record{PID: 11, TID: 12, PPID: 1, Comm: "bb"}
	var got []Record
	collect := func(r *Record) { got = append(got, *r) }
	in := append(nlmsg(family, message(t, a)), nlmsg(2 /* NLMSG_ERROR */, []byte{0, 0, 0, 0})...)
	in = append(in, nlmsg(family, message(t, b))...)
	if err := parseNetlink(in, family, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("records %+v, want %+v and %+v", got, a, b)
	}
	for name, in := range map[string][]byte{
		"length beyond the datagram": append(binary.NativeEndian.AppendUint32(nil, 999), make([]byte, 16)...),
		"length below the header":    append(binary.NativeEndian.AppendUint32(nil, 8), make([]byte, 16)...),
	} {
		if err := parseNetlink(in, family, collect); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	got = nil
	if err := parseNetlink(nlmsg(family+1, message(t, a)), family, collect); err != nil || len(got) != 0 {
		t.Errorf("another family's message: %v, %+v", err, got)
	}
}

// A listener's parser keeps each command name once: a record whose name it
// has seen costs no allocation (under churn the same few names exit by the
// thousand), and distinct names are kept up to maxComms.
func TestParseMessageComms(t *testing.T) {
	msg := message(t, Record{PID: 4243, TID: 4243, PPID: 4242, UTimeUs: 5, Comm: "sort"})
	p := parser{comms: comms{}}
	var got string
	fn := func(r *Record) { got = r.Comm }
	if err := parseMessage(msg, &p, fn); err != nil || got != "sort" {
		t.Fatalf("comm %q, %v", got, err)
	}
	if n := testing.AllocsPerRun(100, func() { parseMessage(msg, &p, fn) }); n != 0 {
		t.Errorf("%v allocations per record of a name seen", n)
	}
	for i := 0; i < 2*maxComms; i++ {
		p.comms.of([]byte(fmt.Sprint("c", i)))
	}
	if len(p.comms) != maxComms {
		t.Errorf("%d names kept, want %d", len(p.comms), maxComms)
	}
}
