package analysis

import (
	"fmt"
	"sort"
	"strings"
)

// noisyNeighbours looks, for each straggler that did not do more work than
// its peers, at what else ran on its host meanwhile: the other attempts
// that overlapped it in time (and their CPU in the overlap), and how long
// the straggler waited for a CPU while runnable (sched_wait).
func noisyNeighbours(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		atts := byType[typ]
		if len(atts) < 3 {
			continue
		}
		var d, c []float64
		for _, a := range atts {
			d = append(d, float64(a.DurationMs))
			c = append(c, float64(a.CPUMs))
		}
		medD, medC := median(d), median(c)
		if medD <= 0 {
			continue
		}
		for _, a := range atts {
			ratio := float64(a.DurationMs) / medD
			if ratio < 2 || (medC > 0 && float64(a.CPUMs)/medC >= 1.5) {
				continue // not a straggler, or one that did more work
			}
			from, to := span(a)
			others, err := j.st.HostAttempts(j.ctx, a.Host, from, to)
			if err != nil {
				continue
			}
			wait := float64(a.SchedWaitMs) / float64(max(a.DurationMs, 1))
			var names []string
			var cpu float64
			jobs := map[string]bool{}
			for _, o := range others {
				if o.AttemptID == a.AttemptID {
					continue
				}
				of, ot := span(o)
				ov := float64(min(ot, to) - max(of, from))
				if ov <= 0 {
					continue
				}
				share := ov / float64(max(ot-of, 1))
				cpu += float64(o.CPUMs) * share
				jobs[o.JobID] = true
				names = append(names, o.AttemptID)
			}
			busy := cpu / float64(max(to-from, 1)) // cores the neighbours kept busy, on average
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
			out = append(out, Finding{Severity: sev, TaskType: typ, AttemptIDs: ids,
				Message: fmt.Sprintf("%s took %.1f× the median time without doing more work. On %s meanwhile %d other attempts of %d jobs ran (%s), keeping %.1f cores busy on average, and its threads waited for a CPU %.0f%% of the time.",
					a.AttemptID, ratio, a.Host, len(names), len(jobs), strings.Join(shown, ", "), busy, wait*100),
				Recommendation: "The node was busy with other work: speculative execution re-runs such attempts elsewhere; " +
					"fewer concurrent containers on the node (or CPU isolation with cgroups) keeps tasks from starving each other.",
				Parameter: "mapreduce." + typ + ".speculative", Value: "true",
				Numbers: []Number{{"duration_ratio", ratio, "x"}, {"sched_wait_percent", wait * 100, "percent"},
					{"neighbour_cores", busy, "cores"}, {"neighbours", float64(len(names)), "count"}}})
		}
	}
	return out
}
