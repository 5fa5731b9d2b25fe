package analysis

import (
	"fmt"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// lostKinds are the events of task processes that escaped the framework's
// control, and how each is explained (a lost_processes finding's Cause is
// its kind).
var lostKinds = []struct {
	kind string
	what string
}{
	{wire.EventOrphan, "whose launcher (NodeManager or TaskTracker) died"},
	{wire.EventLostJVM, "lost by their TaskTracker (Child JVMs beyond the slots, or that never got their task)"},
	{wire.EventUnknownContainer, "whose container the NodeManager no longer knows"},
	{wire.EventOutlived, "that outlived their job"},
}

// eventKinds are the kinds of events the heuristics read (lostProcesses):
// the lost ones', and the agent's reaps.
var eventKinds = func() []string {
	out := []string{wire.EventReap}
	for _, k := range lostKinds {
		out = append(out, k.kind)
	}
	return out
}()

// LostWhat says what a task process that an event of this kind reports
// is ("whose launcher (NodeManager or TaskTracker) died", ...), or "" for
// a kind that reports no lost process.
func LostWhat(kind string) string {
	for _, k := range lostKinds {
		if k.kind == kind {
			return k.what
		}
	}
	return ""
}

// lostProcesses reports the job's task processes that the agents found
// lost: they hold memory and CPU that the scheduler no longer counts.
func lostProcesses(j *Job) []Finding {
	evs, err := j.events()
	if err != nil {
		return nil
	}
	var out []Finding
	reaped := map[string]bool{}
	for _, e := range evs {
		if e.Kind == wire.EventReap {
			reaped[e.Host+"/"+fmt.Sprint(e.PID)] = true
		}
	}
	for _, k := range lostKinds {
		procs := map[string]store.Event{}
		attempts := map[string]bool{}
		for _, e := range evs {
			if e.Kind == k.kind {
				procs[e.Host+"/"+fmt.Sprint(e.PID)] = e
				if e.AttemptID != "" {
					attempts[e.AttemptID] = true
				}
			}
		}
		if len(procs) == 0 {
			continue
		}
		var ids []string
		for id := range attempts {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		var where []string
		nReaped := 0
		for key, e := range procs {
			where = append(where, fmt.Sprintf("pid %d on %s", e.PID, e.Host))
			if reaped[key] {
				nReaped++
			}
		}
		sort.Strings(where)
		sev := Severe
		if len(procs) >= 3 {
			sev = Critical
		}
		if nReaped == len(procs) {
			sev = Moderate // the agent ended them
		}
		var example store.Event
		for _, e := range evs {
			if e.Kind == k.kind {
				example = e
				break
			}
		}
		f := Finding{Severity: sev, AttemptIDs: ids, Cause: k.kind,
			Message: fmt.Sprintf("%d task processes %s (%s); %d were ended by the agent. For instance: %s",
				len(procs), k.what, strings.Join(where, ", "), nReaped, example.Message),
			Recommendation: "They keep memory and CPU (and on Hadoop 1, ports and slots) outside the scheduler's control. " +
				"Let the agent end them (taskscope-agent run --reap-orphans 10m; try --reap-dry-run first), and find out why the daemon lost them.",
			Parameter: "taskscope-agent --reap-orphans", Value: "10m",
			Numbers: []Number{{"processes", float64(len(procs)), "count"}, {"reaped", float64(nReaped), "count"}}}
		if k.kind == wire.EventLostJVM {
			f.Recommendation = "A Child JVM that hangs before it asks for its task is \"just removed\" by the TaskTracker and never " +
				"killed (HADOOP-5488): it keeps its memory while the slot is given to another. " + f.Recommendation
		}
		out = append(out, f)
	}
	return out
}
