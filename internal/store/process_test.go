package store

import (
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

// rec is a stored record of a process: a description, a membership or
// both, at an order.
type rec struct {
	order uint64
	host  string
	desc  *wire.Process
	cmd   string // a command line logged with it
	mem   *wire.Membership
}

func viewOf(recs []rec) (*ProcessView, string) {
	var v ProcessView
	var cmd string
	for _, r := range recs {
		if r.desc != nil {
			v.Describe(r.order, r.host, r.desc)
		}
		if r.cmd != "" && v.LatestCmd(r.order) {
			cmd = r.cmd
		}
		if r.mem != nil {
			v.Join(r.order, r.mem)
		}
	}
	return &v, cmd
}

func TestProcessView(t *testing.T) {
	child := &wire.Process{PID: 7, PPID: 6, SID: 5, StartMs: 1000, Comm: "bash", Role: wire.RoleChild, User: "alice", UID: 1000}
	jvm := &wire.Process{PID: 7, PPID: 6, SID: 5, StartMs: 1000, Comm: "java", Role: wire.RoleTaskJVM}
	exited := &wire.Process{PID: 7, PPID: 1, SID: 5, StartMs: 1000, EndMs: 9000, Comm: "java"}
	for _, c := range []struct {
		name string
		recs []rec
		want Process
		cmd  string
	}{
		{"joined between fork and exec, then described as what it exec'd into", []rec{
			{order: 1, host: "h", desc: child, cmd: "bash -c java", mem: &wire.Membership{FromMs: 1000, Role: wire.RoleChild}},
			{order: 3, host: "h", desc: jvm, cmd: "java YarnChild"},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 6, SID: 5, Start: 1000, Comm: "java", Role: wire.RoleTaskJVM, User: "alice",
			From: 1000}, "java YarnChild"},
		{"joined between fork and exec, described as what it exec'd into in the same batch", []rec{
			{order: 1, host: "h", desc: jvm, cmd: "java YarnChild", mem: &wire.Membership{FromMs: 1000, Role: wire.RoleChild}},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 6, SID: 5, Start: 1000, Comm: "java", Role: wire.RoleTaskJVM,
			From: 1000}, "java YarnChild"},
		{"the role it joined with, over an older description and a later exit without a role", []rec{
			{order: 1, host: "h", desc: child},
			{order: 2, mem: &wire.Membership{FromMs: 1000, Role: wire.RoleStreaming}},
			{order: 3, host: "h", desc: &wire.Process{PID: 7, PPID: 6, SID: 5, StartMs: 1000, EndMs: 4000, Comm: "bash"}},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 6, SID: 5, Start: 1000, End: 4000, Comm: "bash", Role: wire.RoleStreaming,
			User: "alice", From: 1000}, ""},
		{"the role it joined with, over an older description", []rec{
			{order: 1, host: "h", desc: child},
			{order: 2, mem: &wire.Membership{FromMs: 1000, Role: wire.RoleStreaming}},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 6, SID: 5, Start: 1000, Comm: "bash", Role: wire.RoleStreaming,
			User: "alice", From: 1000}, ""},
		{"an exit without a role or user keeps them; start earliest, end latest", []rec{
			{order: 1, host: "h", desc: jvm, mem: &wire.Membership{FromMs: 1000, Role: wire.RoleTaskJVM}},
			{order: 2, host: "h", desc: &wire.Process{PID: 7, PPID: 6, StartMs: 1200, Comm: "java", User: "bob"}},
			{order: 4, host: "h", desc: exited},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 1, SID: 5, Start: 1000, End: 9000, Comm: "java", Role: wire.RoleTaskJVM,
			User: "bob", From: 1000}, ""},
		{"memberships: earliest from, latest to, smallest base", []rec{
			{order: 1, host: "h", desc: jvm, mem: &wire.Membership{FromMs: 2000, ToMs: 3000, CPUBaseMs: 50, Role: wire.RoleTaskJVM}},
			{order: 2, mem: &wire.Membership{FromMs: 1500, ToMs: 5000, CPUBaseMs: 20}},
			{order: 3, mem: &wire.Membership{FromMs: 2500, ToMs: 4000, CPUBaseMs: 30}},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 6, SID: 5, Start: 1000, Comm: "java", Role: wire.RoleTaskJVM,
			From: 1500, To: 5000, CPUBaseMs: 20}, ""},
		{"a membership without an end: a member still", []rec{
			{order: 1, host: "h", desc: jvm, mem: &wire.Membership{FromMs: 1000, ToMs: 3000}},
			{order: 2, mem: &wire.Membership{FromMs: 1000}},
		}, Process{Key: 9, Host: "h", PID: 7, PPID: 6, SID: 5, Start: 1000, Comm: "java", Role: wire.RoleTaskJVM, From: 1000}, ""},
		{"the latest command line", []rec{
			{order: 1, host: "h", desc: child, cmd: "bash -c java", mem: &wire.Membership{FromMs: 1000}},
			{order: 2, host: "h", cmd: "java YarnChild"},
			{order: 2, host: "h2", desc: jvm},
		}, Process{Key: 9, Host: "h2", PID: 7, PPID: 6, SID: 5, Start: 1000, Comm: "java", Role: wire.RoleTaskJVM,
			User: "alice", From: 1000}, "java YarnChild"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, cmd := viewOf(c.recs)
			if !v.Member() || !v.Described() {
				t.Fatalf("member %v, described %v", v.Member(), v.Described())
			}
			if got := v.Process(9); !reflect.DeepEqual(got, c.want) || cmd != c.cmd {
				t.Errorf("got  %+v %q\nwant %+v %q", got, cmd, c.want, c.cmd)
			}
			// The same records in the reverse order (a store that reads
			// them back unordered) make the same process, as long as no two
			// have the same order.
			distinct := map[uint64]bool{}
			for _, r := range c.recs {
				distinct[r.order] = true
			}
			if len(distinct) < len(c.recs) {
				return
			}
			rev := make([]rec, len(c.recs))
			for i, r := range c.recs {
				rev[len(rev)-1-i] = r
			}
			rv, rcmd := viewOf(rev)
			if got := rv.Process(9); !reflect.DeepEqual(got, c.want) || rcmd != c.cmd {
				t.Errorf("in reverse order: got  %+v %q\nwant %+v %q", got, rcmd, c.want, c.cmd)
			}
		})
	}
}

// A member its attempt's records do not describe takes the description of
// its records elsewhere, and their command line if it has none.
func TestProcessViewDescribeFrom(t *testing.T) {
	var v ProcessView
	v.Join(5, &wire.Membership{FromMs: 3000, Role: wire.RoleTaskJVM})
	if v.Described() {
		t.Fatal("described by a membership")
	}
	o, _ := viewOf([]rec{{order: 2, host: "h", desc: &wire.Process{PID: 7, StartMs: 1000, Comm: "java", Role: wire.RoleTaskJVM,
		User: "u", UID: 3}, cmd: "java YarnChild"}})
	if !v.DescribeFrom(o) {
		t.Error("the command line of the other records is not taken")
	}
	want := Process{Key: 1, Host: "h", PID: 7, Start: 1000, Comm: "java", Role: wire.RoleTaskJVM, User: "u", From: 3000}
	if got := v.Process(1); !v.Described() || !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	d, host := v.Description()
	if host != "h" || d != (wire.Process{PID: 7, StartMs: 1000, Comm: "java", Role: wire.RoleTaskJVM, UID: 3, User: "u"}) {
		t.Errorf("description %+v on %q", d, host)
	}
	var w ProcessView
	w.Join(1, &wire.Membership{FromMs: 1})
	w.LatestCmd(1)
	if w.DescribeFrom(o) {
		t.Error("a command line of its own is replaced")
	}
}
