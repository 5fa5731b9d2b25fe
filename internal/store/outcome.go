package store

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/taskscope/taskscope/internal/wire"
)

// An attempt's outcome (Attempt.Outcome): how it ended, as the node showed
// it. "" while it runs, or when nothing of its end was seen (an agent
// without taskstats on a node without a NodeManager to ask).
const (
	OutcomeSucceeded = "succeeded" // exit status 0
	OutcomeFailed    = "failed"    // another exit status, or a crash (SIGSEGV, SIGABRT, ...)
	OutcomeKilled    = "killed"    // SIGKILL, SIGTERM, SIGINT, SIGHUP (137, 143, 130, 129), or YARN's -102, -105, -106, -107
	// OutcomeKilledMemory is an attempt killed for its memory: by YARN's
	// check of the container's physical (-104) or virtual (-103) memory,
	// or by the kernel's OOM killer (SIGKILL while the container's memory
	// cgroup counted an OOM kill).
	OutcomeKilledMemory = "killed_memory"
	// OutcomeLost is an attempt whose node lost it: YARN's -100 (ABORTED:
	// released, or its node lost), or an attempt that did not end and has
	// not been heard of for Clock.StaleAfter (StateLost) with no exit seen.
	OutcomeLost = "lost"
)

// Where an attempt's exit status came from (Attempt.ExitSource), most
// trusted first: the NodeManager's verdict, the exit-code file it wrote,
// the attempt's own log, the container root's status, the task JVM's.
const (
	ExitSourceNodeManager  = "nodemanager"
	ExitSourceExitCodeFile = "exit_code_file"
	// ExitSourceTaskLog is what the attempt's own log said (Hadoop 1's
	// syslog): 0 the task said it was done, 1 it logged its failure. On
	// Hadoop 1 it is the truth where the JVM's exit is not: a Child whose
	// task failed exits 0 (it catches the exception and returns), and a
	// reused JVM's last attempt, done, is killed idle at the job's end.
	ExitSourceTaskLog       = "task_log"
	ExitSourceContainerRoot = "container_root"
	ExitSourceTaskJVM       = "task_jvm"
)

// YARN's ContainerExitStatus values (org.apache.hadoop.yarn.api.records).
const (
	YarnAborted                 = -100
	YarnDisksFailed             = -101
	YarnPreempted               = -102
	YarnKilledExceededVmem      = -103
	YarnKilledExceededPmem      = -104
	YarnKilledByAppMaster       = -105
	YarnKilledByResourceManager = -106
	YarnKilledAfterAppComplete  = -107
	YarnInvalid                 = -1000
)

// ShellCode is a wait status as a shell's $? and YARN's exit-code file say
// it: the exit code, or 128 + the signal that ended the process.
func ShellCode(wait int32) int32 {
	if sig := wait & 0x7f; sig != 0 {
		return 128 + sig
	}
	return (wait >> 8) & 0xff
}

// Outcome says how an attempt ended from what its node showed (m, as
// merged by MergeAttempt) and its state (AttemptState): the outcome, the
// exit code it is read from (nil when none was seen: the exit code as
// ShellCode gives it, or YARN's negative ContainerExitStatus), and where
// that came from (ExitSource...). The most trusted source seen decides:
// the NodeManager, its exit-code file, the attempt's own log, the
// container root, the task JVM.
// A SIGKILL (137) while the container's memory cgroup counted an OOM kill
// is OutcomeKilledMemory. An attempt still running has no outcome, even if
// a process of it exited; a lost one with no exit seen is OutcomeLost.
func Outcome(m *wire.Attempt, state string) (outcome string, code *int32, source string) {
	if state == StateRunning {
		return "", nil, ""
	}
	var c int32
	switch {
	case m.NMExit.Seen() && m.NMExit.Status != YarnInvalid:
		c, source = m.NMExit.Status, ExitSourceNodeManager
	case m.FileExit.Seen():
		c, source = m.FileExit.Status, ExitSourceExitCodeFile
	case m.TaskLog.Seen():
		c, source = m.TaskLog.Status, ExitSourceTaskLog
	case m.RootExit.Seen():
		c, source = ShellCode(m.RootExit.Status), ExitSourceContainerRoot
	case m.JVMExit.Seen():
		c, source = ShellCode(m.JVMExit.Status), ExitSourceTaskJVM
	default:
		if state == StateLost {
			return OutcomeLost, nil, ""
		}
		return "", nil, ""
	}
	return outcomeOfCode(c, m.OOMKills), &c, source
}

func outcomeOfCode(c int32, oomKills uint32) string {
	switch c {
	case 0:
		return OutcomeSucceeded
	case YarnKilledExceededPmem, YarnKilledExceededVmem:
		return OutcomeKilledMemory
	case YarnAborted:
		return OutcomeLost
	case YarnPreempted, YarnKilledByAppMaster, YarnKilledByResourceManager, YarnKilledAfterAppComplete:
		return OutcomeKilled
	case 128 + 9: // SIGKILL
		if oomKills > 0 {
			return OutcomeKilledMemory
		}
		return OutcomeKilled
	case 128 + 15, 128 + 2, 128 + 1: // SIGTERM (a JVM exits 143 on it), SIGINT, SIGHUP
		return OutcomeKilled
	}
	return OutcomeFailed
}

// SpeculativeOverlap is how long after an attempt started an earlier
// attempt of its task must still have run for the later one to be a
// speculative copy rather than a retry: an attempt's end is when its
// agent saw it gone (up to an interval, 1 s by default, late), and a
// retry can start within that (YARN takes an AM heartbeat and an
// allocation, a second or more; a speculative copy runs beside its
// original for longer). An earlier attempt that succeeded is not retried:
// any overlap makes the later one its copy.
const SpeculativeOverlap = 1000 // ms

// LinkAttempts sets RetryOf and Speculative of the attempts of one job (in
// any order; a subset of a job's attempts links within itself): an
// attempt numbered n > 0 repeats an earlier-numbered attempt of the same
// task (its attempt id but the number: attempt_..._m_000003_1 repeats
// attempt_..._m_000003_0). It is a speculative copy when an earlier
// attempt of its task was still running when it started (started no
// later, and ended, or was last seen, more than SpeculativeOverlap after
// its start; after its start at all if it succeeded): it repeats the
// first started of those. Otherwise it is a retry of the latest-numbered
// earlier attempt (which had ended: failed, killed, lost). An attempt
// whose earlier attempts were never seen repeats none. Containers that
// run no task attempt are not linked.
func LinkAttempts(atts []Attempt) {
	type ref struct {
		i    int
		task string
		n    int
	}
	refs := make([]ref, 0, len(atts))
	for i := range atts {
		atts[i].RetryOf, atts[i].Speculative = "", false
		if task, n, ok := taskOf(atts[i].AttemptID); ok {
			refs = append(refs, ref{i, task, n})
		}
	}
	slices.SortFunc(refs, func(a, b ref) int { return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.n, b.n)) })
	for lo := 0; lo < len(refs); {
		hi := lo + 1
		for hi < len(refs) && refs[hi].task == refs[lo].task {
			hi++
		}
		for k := lo + 1; k < hi; k++ {
			a := &atts[refs[k].i]
			if refs[k].n == refs[k-1].n {
				continue // the same attempt twice: nothing to repeat
			}
			orig := -1
			for j := lo; j < k && refs[j].n < refs[k].n; j++ {
				e := &atts[refs[j].i]
				end := e.End
				if end == 0 {
					end = e.LastSeen
				}
				overlap := Time(SpeculativeOverlap)
				if e.Outcome == OutcomeSucceeded {
					overlap = 0
				}
				if e.Start <= a.Start && end > a.Start+overlap && (orig < 0 || e.Start < atts[orig].Start) {
					orig = refs[j].i
				}
			}
			if orig >= 0 {
				a.RetryOf, a.Speculative = atts[orig].AttemptID, true
				continue
			}
			a.RetryOf = atts[refs[k-1].i].AttemptID // the latest-numbered earlier attempt
		}
		lo = hi
	}
}

// LinkAttempt sets a's RetryOf and Speculative from the attempts of its
// task (task, which may hold a itself; LinkAttempts of them and a).
func LinkAttempt(a *Attempt, task []Attempt) {
	all := make([]Attempt, 0, len(task)+1)
	for _, t := range task {
		if t.AttemptID != a.AttemptID {
			all = append(all, t)
		}
	}
	all = append(all, *a)
	LinkAttempts(all)
	a.RetryOf, a.Speculative = all[len(all)-1].RetryOf, all[len(all)-1].Speculative
}

// taskOf splits a task attempt id (MapReduce's or Tez's) into its task's
// prefix (the id up to the attempt number, with the last '_') and its
// number; hadoop.ParseAttempt's shape, checked without its regular
// expression (a job's list of 10,000 attempts is linked at every read).
func taskOf(id string) (task string, n int, ok bool) {
	rest, found := strings.CutPrefix(id, "attempt_")
	if !found {
		return "", 0, false
	}
	parts := 0
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '_':
			parts++
		case c >= '0' && c <= '9':
		case parts == 2 && c >= 'a' && c <= 'z' && i > 0 && rest[i-1] == '_' && (i+1 < len(rest) && rest[i+1] == '_'):
			// MapReduce's task type (m, r, s, c, t)
		default:
			return "", 0, false
		}
	}
	last := strings.LastIndexByte(id, '_')
	if parts < 4 || parts > 5 || last == len(id)-1 || id[last-1] == '_' {
		return "", 0, false
	}
	v, err := strconv.Atoi(id[last+1:])
	if err != nil {
		return "", 0, false
	}
	return id[:last+1], v, true
}

// TaskPrefix is the prefix every attempt id of attemptID's task shares
// (its id up to the attempt number, with the last '_'), for a backend to
// find the attempts LinkAttempts needs beside one; "" for an id that is
// no task attempt's.
func TaskPrefix(attemptID string) string {
	task, _, _ := taskOf(attemptID)
	return task
}
