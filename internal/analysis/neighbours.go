package analysis

import (
	"fmt"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// noisyNeighbours looks, for each straggler that did not do more work than
// its peers, at what else ran on its host meanwhile: the other attempts
// that overlapped it in time (and their CPU in the overlap), and how long
// the straggler waited for a CPU while runnable (sched_wait).
func noisyNeighbours(j *Job) []Finding {
	var out []Finding
	for _, a := range neighbourCandidates(j) {
		typ := a.Type
		durRatio := float64(a.DurationMs) / typeMedians(j)[typ].duration
		others, busy := neighbourLoad(j, a) // busy: cores the neighbours kept busy, on average
		wait := float64(a.SchedWaitMs) / float64(max(a.DurationMs, 1))
		var names []string
		jobs := map[string]bool{}
		for _, o := range others {
			jobs[o.JobID] = true
			names = append(names, o.AttemptID)
		}
		sev := max(grade(wait, [4]float64{0.05, 0.1, 0.25, 0.5}), grade(busy, [4]float64{1, 2, 4, 8}))
		if sev == None {
			continue
		}
		sort.Strings(names)
		shown := names
		if len(shown) > 5 {
			shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(names)-5))
		}
		ids := append([]string{a.AttemptID}, names...)
		msg := fmt.Sprintf("%s took %.1f× the median time without doing much more work (%s). On %s meanwhile %d other attempts of %d jobs ran (%s), keeping %.1f cores busy on average, and its threads waited for a CPU %s.",
			a.AttemptID, durRatio, cpuText(a.CPUMs, typeMedians(j)[typ].cpu), a.Host, len(names), len(jobs), strings.Join(shown, ", "), busy,
			waitText(float64(max(a.SchedWaitMs, 0)), float64(a.DurationMs)))
		nums := []Number{{"duration_ratio", durRatio, "x"}, {"sched_wait_percent", wait * 100, "percent"},
			{"cpu_ratio", ratio(float64(a.CPUMs), typeMedians(j)[typ].cpu), "x"}, {"neighbour_cores", busy, "cores"}, {"neighbours", float64(len(names)), "count"}}
		if j.private {
			// What its own threads measured alone.
			msg = fmt.Sprintf("%s took %.1f× the median time without doing much more work (%s), and on %s its threads waited for a CPU %s: other work kept the node busy.",
				a.AttemptID, durRatio, cpuText(a.CPUMs, typeMedians(j)[typ].cpu), a.Host, waitText(float64(max(a.SchedWaitMs, 0)), float64(a.DurationMs)))
			nums = nums[:3]
		}
		out = append(out, Finding{Severity: sev, TaskType: typ, AttemptIDs: ids,
			Message: msg,
			Recommendation: "The node was busy with other work: speculative execution re-runs such attempts elsewhere; " +
				"fewer concurrent containers on the node (or CPU isolation with cgroups) keeps tasks from starving each other.",
			Parameter: "mapreduce." + typ + ".speculative", Value: "true", Numbers: nums})
	}
	return out
}

// neighbourCandidates are the stragglers noisyNeighbours looks at: at
// least twice the median duration of their type (3+ attempts) without 1.5×
// its median CPU.
func neighbourCandidates(j *Job) []store.Attempt {
	var out []store.Attempt
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		atts := byType[typ]
		m := typeMedians(j)[typ]
		if len(atts) < 3 || m.duration <= 0 {
			continue
		}
		for _, a := range atts {
			if float64(a.DurationMs)/m.duration < 2 || (m.cpu > 0 && float64(a.CPUMs)/m.cpu >= 1.5) {
				continue // not a straggler, or one that did more work
			}
			out = append(out, a)
		}
	}
	return out
}

// cpuText says an attempt's CPU (ms) against its type's median (ms).
func cpuText(cpu int64, med float64) string {
	if med <= 0 {
		return fmt.Sprintf("%.1f s of CPU where its type's median used none", float64(cpu)/1000)
	}
	if r := float64(cpu) / med; r < 0.1 {
		return fmt.Sprintf("%.2f× the median CPU", r)
	}
	return fmt.Sprintf("%.1f× the median CPU", float64(cpu)/med)
}
