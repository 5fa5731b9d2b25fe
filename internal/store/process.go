package store

import "github.com/taskscope/taskscope/internal/wire"

// ProcessView merges what a store holds of one process in one attempt into
// the process the attempt's page shows: the process's descriptions
// (wire.Process: at its first sight, when it exec'd, at its exit) and its
// memberships in the attempt (wire.Membership), each stored at an order: a
// number that grows with the time the agent sent it (DuckDB's commit; a
// process's records all come from one agent, in order). Records may be
// given in any order. The zero value is empty.
//
// Of its descriptions, the latest wins, except that one without a role or
// a user keeps the role or user said before; its start is the earliest
// said, its end the latest. Its command line is the latest stored (a store
// that keeps command lines aside asks LatestCmd). Of its memberships, it
// joined at the earliest start, left at the latest end (none while one of
// them has no end: it is a member still), with the smallest CPU base. Its
// role in the attempt is the one it joined with, unless it was described
// again since or at the same order with another: a process seen between
// fork and exec (a wrapper's child, a jspawnhelper) joins as a child and
// is described again as the task JVM or the Streaming process it exec'd
// into, often in the batch it joined in (a batch keeps a process's latest
// description; its role is the process's latest, which a membership in the
// same batch never postdates).
type ProcessView struct {
	p         Process
	uid       uint32
	described bool // a description was taken
	member    bool // a membership was taken
	openEnded bool // a membership without an end
	hasCmd    bool
	descOrder uint64 // of the latest description
	cmdOrder  uint64 // of the latest command line
	role      string // the latest role described
	roleOrder uint64
	userOrder uint64 // of the latest user described
	joinRole  string // the role of the earliest membership that said one
	joinOrder uint64
}

// Describe takes a description of the process stored at order, sent by
// the agent of host. (p's Key and Cmdline are not read: the view's key is
// its caller's, and command lines go through LatestCmd.)
func (v *ProcessView) Describe(order uint64, host string, p *wire.Process) {
	q := &v.p
	if !v.described || order >= v.descOrder {
		v.described, v.descOrder = true, order
		q.Host, q.PID, q.PPID, q.SID, q.Comm, v.uid = host, p.PID, p.PPID, p.SID, p.Comm, p.UID
	}
	if p.Role != "" && (v.role == "" || order >= v.roleOrder) {
		v.role, v.roleOrder = p.Role, order
	}
	if p.User != "" && (q.User == "" || order >= v.userOrder) {
		q.User, v.userOrder = p.User, order
	}
	if p.StartMs != 0 && (q.Start == 0 || Time(p.StartMs) < q.Start) {
		q.Start = Time(p.StartMs)
	}
	q.End = max(q.End, Time(p.EndMs))
}

// LatestCmd reports whether a command line of the process stored at order
// is the latest so far: then the caller keeps it as the process's.
func (v *ProcessView) LatestCmd(order uint64) bool {
	if v.hasCmd && order < v.cmdOrder {
		return false
	}
	v.hasCmd, v.cmdOrder = true, order
	return true
}

// Join takes a membership of the process in the attempt stored at order.
func (v *ProcessView) Join(order uint64, m *wire.Membership) {
	q := &v.p
	if !v.member {
		v.member, q.CPUBaseMs = true, m.CPUBaseMs
	}
	q.CPUBaseMs = min(q.CPUBaseMs, m.CPUBaseMs)
	if m.FromMs != 0 && (q.From == 0 || Time(m.FromMs) < q.From) {
		q.From = Time(m.FromMs)
	}
	if m.ToMs != 0 {
		q.To = max(q.To, Time(m.ToMs))
	} else {
		v.openEnded = true
	}
	if m.Role != "" && (v.joinRole == "" || order < v.joinOrder) {
		v.joinRole, v.joinOrder = m.Role, order
	}
}

// Member reports whether the view has a membership (a process the attempt
// lists), and Described whether it has a description.
func (v *ProcessView) Member() bool    { return v.member }
func (v *ProcessView) Described() bool { return v.described }

// DescribeFrom gives a member that the attempt's own records do not
// describe (a process described before its store knew its attempt, as
// after a restart) the description o merged from its records elsewhere
// (its other attempts'). It reports whether the view takes o's command
// line too: when it has none of its own.
func (v *ProcessView) DescribeFrom(o *ProcessView) (takeCmd bool) {
	q := &v.p
	q.Host, q.PID, q.PPID, q.SID, q.Comm, q.User = o.p.Host, o.p.PID, o.p.PPID, o.p.SID, o.p.Comm, o.p.User
	v.uid, v.role, v.described = o.uid, o.role, true
	if q.Start == 0 || (o.p.Start > 0 && o.p.Start < q.Start) {
		q.Start = o.p.Start
	}
	q.End = max(q.End, o.p.End)
	if !v.hasCmd && o.hasCmd {
		v.hasCmd = true
		return true
	}
	return false
}

// Description is the process as its latest description says, as the
// agent of host would send it (without its key and command line): for a
// record of it that a store copies to the rows of another attempt it
// joins.
func (v *ProcessView) Description() (p wire.Process, host string) {
	return wire.Process{PID: v.p.PID, PPID: v.p.PPID, SID: v.p.SID, StartMs: int64(v.p.Start), EndMs: int64(v.p.End),
		Comm: v.p.Comm, Role: v.role, UID: v.uid, User: v.p.User}, v.p.Host
}

// Process is the process as the attempt lists it, with key k, its role in
// the attempt resolved, and no command line (the caller's) nor summary
// (ProcessAgg's).
func (v *ProcessView) Process(k Key) Process {
	p := v.p
	p.Key = k
	if v.openEnded {
		p.To = 0
	}
	p.Role = v.joinRole
	if p.Role == "" || (v.roleOrder >= v.joinOrder && v.role != "") {
		p.Role = v.role
	}
	return p
}
