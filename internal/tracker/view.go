package tracker

import (
	"sort"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/wire"
)

// ProcessView is one tracked process as the tracker saw it at the last tick.
type ProcessView struct {
	Key        uint64
	PID        int32
	PPID       int32
	StartMs    int64
	Cmdline    string
	Comm       string
	Role       string
	User       string
	Values     map[string]int64 // the metrics read at the last tick
	CPUPercent float64          // over the last interval; -1 before the second sample
}

// AttemptView is one unit's current attempt with its processes.
type AttemptView struct {
	AttemptID   string
	ContainerID string
	JobID       string
	Type        string
	Framework   string
	Orphaned    bool
	Info        wire.Attempt
	CPUMs       int64 // all CPU of the attempt so far, exited processes included
	Processes   []ProcessView
}

// JobView groups attempts by job.
type JobView struct {
	JobID     string
	Framework string
	Attempts  []AttemptView
}

// View returns what the tracker sees now, sorted by job, attempt and pid.
func (t *Tracker) View() []JobView {
	jobs := map[string]*JobView{}
	for _, u := range t.attr.units {
		a := u.cur
		if a == nil {
			continue
		}
		av := AttemptView{AttemptID: a.info.AttemptID, ContainerID: a.info.ContainerID, JobID: a.info.JobID,
			Type: a.info.Type, Framework: a.info.Framework, Orphaned: u.orphaned, Info: a.info, CPUMs: a.exitedCPU}
		for _, p := range u.members {
			tr := p.t
			if tr.mem != nil && tr.mem.att == a {
				if c := t.acct.cpuAcct(tr) - tr.mem.cpuBase; c > 0 {
					av.CPUMs += c
				}
			}
			pv := ProcessView{Key: tr.key, PID: p.pid, PPID: p.ppid, StartMs: tr.startMs, Cmdline: tr.cmdline,
				Comm: tr.comm, Role: tr.role, User: tr.user, Values: map[string]int64{}, CPUPercent: -1}
			for i, m := range t.metrics {
				if tr.present&(1<<uint(i)) != 0 {
					pv.Values[m] = tr.vals[i]
				}
			}
			if tr.tPrevMs > 0 && tr.tMs > tr.tPrevMs {
				pv.CPUPercent = float64(tr.cpuMs-tr.cpuPrevMs) * 100 / float64(tr.tMs-tr.tPrevMs)
			}
			av.Processes = append(av.Processes, pv)
		}
		sort.Slice(av.Processes, func(i, j int) bool { return av.Processes[i].PID < av.Processes[j].PID })
		j := jobs[av.JobID]
		if j == nil {
			j = &JobView{JobID: av.JobID, Framework: av.Framework}
			jobs[av.JobID] = j
		}
		if j.Framework == hadoop.FrameworkUnknown {
			// A container that runs no attempt yet does not know it.
			j.Framework = av.Framework
		}
		j.Attempts = append(j.Attempts, av)
	}
	out := make([]JobView, 0, len(jobs))
	for _, j := range jobs {
		sort.Slice(j.Attempts, func(a, b int) bool { return j.Attempts[a].AttemptID < j.Attempts[b].AttemptID })
		out = append(out, *j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].JobID < out[b].JobID })
	return out
}
