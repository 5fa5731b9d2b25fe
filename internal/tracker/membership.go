package tracker

import (
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/taskstats"
	"github.com/taskscope/taskscope/internal/wire"
)

// accountant is the part of the tracker that keeps memberships and the CPU
// that adds up (docs/architecture.md, "CPU that adds up"): a process's
// membership of an attempt starts from what it had used (a reused unit's
// processes move on to its next attempt), and ends folding what it used
// into the attempt's totals of exited processes; the CPU of an exited
// process goes to its parent when a member reaped it (pending until the
// parent's cutime shows it, credit when the cutime grew first), else to
// its attempt through its reaper's ledger (reapers.go); each tick an
// attempt's sample sums its members.
//
// Its state is in the records it keeps: each tracked process's
// cpuAccount, each attempt's attemptTotals, each membership.
type accountant struct {
	view   memberView
	ledger *reaperLedger
	idx    metricIndex
	stats  *Stats // ExitCorrectionMs, ExitsWithoutRecord
	// exact: exited processes' CPU comes from exit records (short-lived
	// processes are counted).
	exact bool
	ncpu  int
	vals  []int64         // an attempt sample's values, reused
	msg   wire.Membership // the record a Sink is given, reused

	debugExit func(p *proc, attempt string, own, children, final, charge int64, charged bool) // tests
}

// memberView is what the accountant needs of the process table.
type memberView interface {
	// proc is the process known by pid (nil: none).
	proc(pid int32) *proc
	// listed reports whether p was in this tick's listing.
	listed(p *proc) bool
	// alive reports whether a tracked process will be sampled again.
	alive(p *proc) bool
	// bootNow is CLOCK_BOOTTIME at this tick's listing, ms.
	bootNow() int64
}

func newAccountant(view memberView, ledger *reaperLedger, idx metricIndex, stats *Stats, exact bool, ncpu int) *accountant {
	return &accountant{view: view, ledger: ledger, idx: idx, stats: stats, exact: exact, ncpu: ncpu,
		vals: make([]int64, len(wire.AttemptMetrics))}
}

// cpuAccount is what a tracked process keeps for the CPU and IO of the
// children it reaps.
type cpuAccount struct {
	// pending is CPU of exited children that this process reaped (or will)
	// but that its cutime/cstime did not show yet; lastChildren is its
	// cutime+cstime at the last sample; credit is cutime growth that came
	// before the exit it stands for was seen (the parent reaped the child
	// between two of the tracker's reads).
	pending      int64
	pendDoubt    int64 // how far off pending may be (children gone without their exit records)
	pendGuess    bool  // pending holds a guess: a child's exit record (or its short-lived children's) lost
	certain      int64 // reaped children's CPU that the next sample's cutime must show
	lastChildren int64
	credit       int64
	// pendRead and pendWrite are IO of children reaped after this process's
	// last sample: its io counters will never show them.
	pendRead, pendWrite int64
	// shortMs is the CPU of short-lived children (known by their exit
	// records alone) charged to it since its last sample; shortLastMs is
	// that of its last interval whose records were whole (the socket did
	// not overflow), of shortDtMs: their rate, for those whose records
	// may be lost (lostChildren).
	shortMs, shortLastMs, shortDtMs int64
}

// attemptTotals are what an attempt's processes that left it used (and,
// for a reused unit, what its processes that moved on used in it).
type attemptTotals struct {
	exitedCPU   int64
	exitedRead  int64
	exitedWrite int64
	exitedGC    int64
	exitedWait  int64
	shortLived  int64
}

// member is one process's membership of one attempt.
type member struct {
	att                                   *attempt
	fromMs                                int64
	cpuBase                               int64
	readBase, writeBase, gcBase, waitBase int64
}

// cpuAcct is the CPU charged to a process so far: its own, that of the
// children it reaped (cutime/cstime, as the kernel charges a parent), and
// that of children that exited but do not show in its cutime yet.
func (c *accountant) cpuAcct(tr *tracked) int64 {
	return tr.vals[c.idx.cpuUser] + tr.vals[c.idx.cpuSys] + tr.vals[c.idx.cpuCUser] + tr.vals[c.idx.cpuCSys] + tr.pending + tr.certain
}

// parentMember returns the tracked process of attempt a that was the
// parent of an exited process (ppid at its exit): the kernel adds a reaped
// child's whole CPU and IO, its exit included, to the parent's
// cutime/cstime and io. Exits are handled children first, so the parent
// is still known even if it exited in the same interval.
func (c *accountant) parentMember(ppid int32, a *attempt) *tracked {
	parent := c.view.proc(ppid)
	if parent == nil || parent.t == nil || parent.t.mem == nil || parent.t.mem.att != a {
		return nil
	}
	return parent.t
}

func val(tr *tracked, i int) int64 {
	if i < 0 || tr.present&(1<<uint(i)) == 0 {
		return 0
	}
	return tr.vals[i]
}

// join makes p a member of a. A process that moves from an earlier
// attempt of the same unit (carry) starts from what it has used so far.
func (c *accountant) join(p *proc, a *attempt, carry bool, ms int64, sink Sink) {
	tr := p.t
	m := &member{att: a, fromMs: ms}
	if carry {
		m.cpuBase = c.cpuAcct(tr)
		m.readBase, m.writeBase = val(tr, c.idx.read), val(tr, c.idx.write)
		m.gcBase, m.waitBase = val(tr, c.idx.gc), val(tr, c.idx.wait)
	} else {
		m.fromMs = tr.startMs
		if m.fromMs < a.info.FirstMs || m.fromMs == 0 {
			m.fromMs = a.info.FirstMs
		}
	}
	tr.mem = m
	c.msg = wire.Membership{Process: tr.key, AttemptID: a.info.AttemptID, FromMs: m.fromMs, CPUBaseMs: m.cpuBase, Role: tr.role}
	sink.Membership(&c.msg)
}

// recordLagMs is how far a process's exit records' runtime falls short of
// what its parent (its cutime, wait4) counts: the kernel sends a thread's
// record before its last runtime is added up (a running thread's scheduler
// runtime is brought up to date at the scheduler's ticks, 4 ms apart at
// HZ=250) and before the exit unmaps its memory. Measured on the 2-core
// host (2026-12-07, HZ=250, load 13-15): 1.7-1.8 ms a process for a
// Streaming mapper's short children (sort, awk, sh -c, a subshell's sleep:
// 251 of them 432-456 ms short of wait4), 4.4-4.9 ms for `java -version`
// (about 20 thread records); live, a YARN container (a JVM of 13-15
// threads, three shells, their children's clock ticks) 17-28 ms. It
// weighs the split of a reaper's cutime among the processes it reaped: a
// tree whose estimate folds many records (a Streaming mapper's last
// children) is that much less sure than one JVM's.
const recordLagMs = 2

// threadLagQuarters: each thread of a process beyond its first adds a
// quarter of a ms to its records' lag (a JVM's 13 threads: 5 ms).
const threadLagQuarters = 4

// tickMs is a clock tick: stat's CPU times are cut to it.
const tickMs = 1000 / procfs.UserHZ

// leave ends p's membership, folding what p used in its attempt into the
// attempt's totals for exited processes (or, for a process that moves on,
// for the past). final is p's exit records' sums, if it exited and they
// came, and threads how many records they sum.
func (c *accountant) leave(p *proc, final *taskstats.Record, threads int64, ms int64, sink Sink) {
	tr := p.t
	m := tr.mem
	if m == nil {
		return
	}
	a := m.att
	cpu := c.cpuAcct(tr)
	var tail int64 // the estimate of what it used after its last sample
	// doubt is how far off cpu may be: the tail, or what its last interval
	// may have held when no exit record told (a reaper's correction is
	// split in proportion to it), and what its children's pending
	// estimates may be off by.
	var doubt int64
	// guess: cpu holds a guess of what it (or its short-lived children)
	// used after its last sample, their exit records lost: its doubt is
	// no bound then (a reaper's split of it is a guess too, markGuessed).
	guess := tr.pendGuess
	exited := !c.view.listed(p) || tr.exited
	read, write := val(tr, c.idx.read)+tr.pendRead, val(tr, c.idx.write)+tr.pendWrite
	if final == nil && exited && !tr.exited {
		// Gone without its exit record: none come without taskstats, and
		// the kernel drops them when the agent's socket is full (counted:
		// ExitsWithoutRecord). It ran for some part of the time since its
		// last sample: half of it at its last rate, give or take as much.
		if c.exact {
			c.stats.ExitsWithoutRecord++
		}
		tail = c.tailUnknown(p)
		cpu += tail
		doubt = tail
		guess = true
	}
	// stands: its own CPU is what its exit records say (their runtime),
	// not its stat's clock ticks.
	stands := false
	if final != nil {
		// The threads' records add up to the whole process when the agent saw
		// it born (for one that predates the agent they miss the threads that
		// exited before: the last sample is then the better figure). What it
		// had reaped is in its last sample's cutime/cstime.
		own := tr.vals[c.idx.cpuUser] + tr.vals[c.idx.cpuSys]
		whole := c.wholeRecords(tr, final)
		if !tr.exited {
			// (A zombie's last stat is read after its exit: nothing follows it.)
			raw := max(0, final.CPUMs()-own)
			tail = c.tail(p, final, raw)
			cpu += tail
			doubt = tail
			if final.RunNs > 0 {
				// The records' scheduler runtime is exact but for what
				// the process ran after them (recordLagMs): not more for
				// one that ran more since its last sample, a little more
				// for one of many threads (a JVM), most of which sleep
				// when it exits. Records that may not be whole (it is
				// older than the tracker, or the socket overflowed since
				// it was found) give way to its last rate carried to its
				// exit where that says more, or to what it could have used
				// where they say more than that (tail): by as much as the
				// two are apart.
				doubt = recordLagMs + max(threads-1, 0)/threadLagQuarters + max(tail-raw, raw-tail)
				stands = whole || (tail == raw && final.CPUMs() >= own)
			}
		} else if whole {
			// A zombie's stat holds its exit too, but in clock ticks (up
			// to a tick short each of user and system time); its records'
			// runtime is exact but for the exit: a JVM's 2,150 ms read
			// as a zombie, 2,158 in its records.
			if extra := final.CPUMs() - own; extra > 0 {
				tail = extra
				cpu += tail
			}
			stands = true
		}
		read, write = max(read, int64(final.ReadBytes)+tr.pendRead), max(write, int64(final.WriteBytes)+tr.pendWrite)
	}
	if exited && !tr.exited && c.exact && c.stats.ExitOverflows != tr.sampledOverflows {
		// The records' socket overflowed since its last sample: records of
		// short-lived children it reaped since may be lost, and its last
		// cutime does not show them. Without its own record, it ran
		// for half that time on average, as its own CPU (tailUnknown);
		// with it, they may or may not have come.
		lost := c.lostChildren(p, final)
		if final == nil {
			cpu += lost / 2
			lost -= lost / 2
		}
		doubt += lost
		guess = guess || lost > 0
	}
	// And the clock ticks its figures from stat were cut to: its children's
	// user and system time, and its own unless its records stand for them.
	if val(tr, c.idx.cpuCUser) > 0 {
		doubt += tickMs
	}
	if val(tr, c.idx.cpuCSys) > 0 {
		doubt += tickMs
	}
	if !stands {
		doubt += 2 * tickMs
	}
	// An exited process reaped by a parent of the same attempt is in that
	// parent's counters (exit costs included): charging it here would count
	// it twice. It stays pending there until the parent's cutime shows it.
	doubt += tr.pendDoubt
	charged := true
	ppid := int32(0)
	if exited {
		ppid = p.ppid
		if final != nil && final.PPID > 0 {
			ppid = final.PPID
		}
		if par := c.parentMember(ppid, a); par != nil && par != tr {
			charged = false
			// The parent's cutime will show all the child used; what of it
			// earlier attempts had (a reused unit) is not this attempt's.
			parentAlive := c.view.alive(c.view.proc(ppid))
			if parentAlive && !tr.exited {
				// It left /proc before the listing, so its parent had reaped
				// it: the parent's stat, read after, shows it.
				par.addCertain(max(0, cpu))
			} else {
				// Its parent exited too, or has not reaped it yet (a
				// zombie): its cutime will show it when it does.
				par.addPending(max(0, cpu))
			}
			// Until the parent's stat shows it, its estimate is the
			// parent's: certain too, when the parent is found gone before
			// its next sample (reaped right after the listing).
			par.pendDoubt += doubt
			par.pendGuess = par.pendGuess || guess
			par.mem.cpuBase += m.cpuBase
			if !parentAlive {
				par.pendRead += max(0, read-m.readBase)
				par.pendWrite += max(0, write-m.writeBase)
			}
		} else if zp := c.view.proc(ppid); zp != nil && zp.t == nil && zp.zombieAtt == a && zp.zombieCredit > 0 {
			// Its parent ended as a zombie before this exit was handled
			// (it was gone when read, at the tick its parent was found a
			// zombie): it had reaped it, and its last cutime, charged
			// then, holds it already.
			used := min(max(cpu, 0), zp.zombieCredit)
			zp.zombieCredit -= used
			cpu -= used
		}
	}
	if c.debugExit != nil && exited {
		fin := int64(-1)
		if final != nil {
			fin = final.CPUMs()
		}
		c.debugExit(p, a.info.AttemptID, tr.vals[c.idx.cpuUser]+tr.vals[c.idx.cpuSys], tr.vals[c.idx.cpuCUser]+tr.vals[c.idx.cpuCSys], fin, cpu-m.cpuBase, charged)
	}
	if charged {
		// Reaped by a process that is no task's (a NodeManager, a
		// TaskTracker, init): that process's cutime says what it cost.
		if tr.exited {
			// Not reaped yet: its stat's last figures are final, and its
			// reaper's cutime will show them when it reaps it (reaped).
			// Its cutime's growth that no exit handled yet stands for
			// children whose exits come later.
			p.zombieLife = max(cpu, 1)
			p.zombieCredit, p.zombieAtt = tr.credit, a
		}
		if cpu > m.cpuBase && (ppid == 0 || tr.exited || !c.ledger.charge(ppid, a, cpu, cpu-m.cpuBase, doubt, guess)) {
			a.exitedCPU += cpu - m.cpuBase
			if guess {
				// No reaper's growth settles it: the guess in it stands.
				guessStands(a, doubt, c.stats)
			}
		}
		if read > m.readBase {
			a.exitedRead += read - m.readBase
		}
		if write > m.writeBase {
			a.exitedWrite += write - m.writeBase
		}
	}
	if gc := val(tr, c.idx.gc); gc > m.gcBase {
		a.exitedGC += gc - m.gcBase
	}
	if w := val(tr, c.idx.wait); w > m.waitBase {
		a.exitedWait += w - m.waitBase
	}
	tr.mem = nil
	c.msg = wire.Membership{Process: tr.key, AttemptID: a.info.AttemptID, FromMs: m.fromMs, ToMs: ms,
		CPUBaseMs: m.cpuBase, Role: tr.role}
	sink.Membership(&c.msg)
}

// guessStands tells that a's CPU holds an estimate with a guess in it (a
// lost exit record, its own or its short-lived children's) that no
// reaper's growth settled, so that it stands: off by up to its doubt
// either way, which adds to what a's CPU may be off by
// (wire.Attempt.CPUDoubtMs); a is counted once (Stats.StandingGuesses).
func guessStands(a *attempt, doubt int64, st *Stats) {
	if !a.guessStood {
		a.guessStood = true
		st.StandingGuesses++
	}
	a.info.CPUDoubtMs += max(doubt, 1)
}

// tail estimates the CPU an exited process used after its last sample.
// raw is what its exit records say (their sum less the last sample). Their
// threads' scheduler runtime is exact, and for a process born under the
// agent every thread's record is in unless the records' socket overflowed
// since (a record the kernel dropped then may be one of its threads'):
// raw is the tail then. Else (a kernel
// that leaves the runtime 0 counts clock ticks, an error over a whole life
// that for a process that ran for minutes can be far more than a tick's
// worth; a process older than the agent misses the records of the threads
// that exited before it started), for a process sampled twice or more the
// tail is bounded by what it could have used between its last sample and
// its exit (the record gives its life, hence the moment of its exit): that
// time on as many CPUs as it had threads, and it is at least what it used
// at its last rate. (That rate, carried to an exit long after the sample
// or in a JVM's quieter last moments, made a map 35 ms more than its
// records and wait4 said.)
func (c *accountant) tail(p *proc, final *taskstats.Record, raw int64) int64 {
	tr := p.t
	if c.wholeRecords(tr, final) {
		return raw
	}
	if tr.age < 2 || final.EtimeUs == 0 || tr.bootMs <= 0 || tr.tMs <= tr.tPrevMs {
		return raw
	}
	exitMs := int64(p.startTicks)*1000/procfs.UserHZ + int64(final.EtimeUs/1000)
	dt := min(max(exitMs-tr.bootMs, 0), max(c.view.bootNow()-tr.bootMs, 0))
	rate := (tr.cpuMs - tr.cpuPrevMs) * dt / (tr.tMs - tr.tPrevMs)
	cpus := int64(min(max(val(tr, c.idx.threads), 1), int64(c.ncpu)))
	return max(max(rate, 0), min(raw, dt*cpus))
}

// wholeRecords reports whether final, an exited process's exit records'
// sums, is all it used but for what its exit cost after them: their
// threads' scheduler runtime (exact), every thread's record in (it was
// born under the tracker, and the records' socket has not overflowed
// since it was found).
func (c *accountant) wholeRecords(tr *tracked, final *taskstats.Record) bool {
	return final.RunNs > 0 && tr.bornUnder && c.stats.ExitOverflows == tr.overflows
}

// lostChildren is how much CPU the children of an exited process known
// by their exit records alone (short-lived: a Streaming mapper's sort and
// awk) may have used between its last sample and its exit, unseen when
// their records were lost: their rate in its last interval whose records
// were whole, carried to its exit (to this tick's listing when its own
// record is not in).
func (c *accountant) lostChildren(p *proc, final *taskstats.Record) int64 {
	tr := p.t
	if tr.shortLastMs <= 0 || tr.shortDtMs <= 0 || tr.bootMs <= 0 {
		return 0
	}
	dt := max(c.view.bootNow()-tr.bootMs, 0)
	if final != nil && final.EtimeUs > 0 {
		exitMs := int64(p.startTicks)*1000/procfs.UserHZ + int64(final.EtimeUs/1000)
		dt = min(max(exitMs-tr.bootMs, 0), dt)
	}
	return tr.shortLastMs * dt / tr.shortDtMs
}

// tailUnknown estimates what an exited process whose exit record never
// came used after its last sample: it exited at some moment between that
// sample and this tick's listing, running meanwhile at its last rate (half
// of that time, on average).
func (c *accountant) tailUnknown(p *proc) int64 {
	tr := p.t
	if tr.age < 2 || tr.bootMs <= 0 || tr.tMs <= tr.tPrevMs {
		return 0
	}
	dt := max(c.view.bootNow()-tr.bootMs, 0)
	return max(0, (tr.cpuMs-tr.cpuPrevMs)*dt/(tr.tMs-tr.tPrevMs)/2)
}

// attemptSample sums the attempt's processes at this tick, to sink.
func (c *accountant) attemptSample(a *attempt, ms int64, sink Sink) {
	v := c.vals
	for i := range v {
		v[i] = 0
	}
	v[0], v[5], v[6], v[8], v[9] = a.exitedCPU, a.exitedRead, a.exitedWrite, a.exitedGC, a.exitedWait
	present := uint64(1<<0 | 1<<1 | 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<9)
	if c.exact {
		v[10] = a.shortLived // counted from exit records only
		present |= 1 << 10
	}
	for _, p := range a.unit.members {
		tr := p.t
		m := tr.mem
		if m == nil || m.att != a {
			continue
		}
		if cpu := c.cpuAcct(tr) - m.cpuBase; cpu > 0 {
			v[0] += cpu
		}
		if r := val(tr, c.idx.read) + tr.pendRead - m.readBase; r > 0 {
			v[5] += r
		}
		if w := val(tr, c.idx.write) + tr.pendWrite - m.writeBase; w > 0 {
			v[6] += w
		}
		if w := val(tr, c.idx.wait) - m.waitBase; w > 0 {
			v[9] += w
		}
		if tr.vanished {
			continue
		}
		v[1] += val(tr, c.idx.rss)
		v[3] += val(tr, c.idx.vms)
		v[4]++
		if c.idx.pss >= 0 && tr.present&(1<<uint(c.idx.pss)) != 0 {
			v[2] += tr.vals[c.idx.pss]
			present |= 1 << 2
		}
		if c.idx.heap >= 0 && tr.present&(1<<uint(c.idx.heap)) != 0 {
			v[7] += tr.vals[c.idx.heap]
			present |= 1 << 7
		}
		if c.idx.gc >= 0 && tr.present&(1<<uint(c.idx.gc)) != 0 {
			v[8] += tr.vals[c.idx.gc] - m.gcBase
			present |= 1 << 8
		}
	}
	sink.AttemptSample(a.info.AttemptID, ms, v, present)
}

// addPending charges a reaped child's CPU to the parent until its cutime
// shows it, unless its cutime already grew by that much.
func (ca *cpuAccount) addPending(ms int64) {
	used := min(ms, ca.credit)
	ca.credit -= used
	ca.pending += ms - used
}

// addCertain charges the CPU of a child that the parent has reaped
// already: its next stat shows it in cutime/cstime, exactly, and replaces
// the estimate.
func (ca *cpuAccount) addCertain(ms int64) {
	used := min(ms, ca.credit)
	ca.credit -= used
	ca.certain += ms - used
}

// settleChildren takes the growth d of a process's cutime+cstime since
// its last sample. The kernel adds a reaped child's CPU there as wait4
// reports it (its scheduler runtime), its exit included; exit records miss
// what the exit costs after them. So the children the
// process is known to have reaped (certain) cost what cutime says, not
// what their records said; an estimate that the growth does not cover by
// half at least (a parent that ignores SIGCHLD accrues nothing) stays
// pending.
func (c *accountant) settleChildren(ca *cpuAccount, d int64) {
	if ca.certain > 0 {
		used := min(max(d, 0), ca.certain)
		rest := ca.certain - used
		ca.certain = 0
		d -= used
		if 2*used < used+rest {
			ca.pending += rest
		} else if rest > 0 {
			c.stats.ExitCorrectionMs += rest
		}
	}
	if d > 0 {
		used := min(d, ca.pending)
		ca.pending -= used
		ca.credit += d - used
	}
	if ca.pending == 0 {
		ca.pendDoubt, ca.pendGuess = 0, false
	}
}
