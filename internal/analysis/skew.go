package analysis

import (
	"fmt"

	"github.com/taskscope/taskscope/internal/store"
)

// skewMeasure is one thing compared across a type's attempts.
type skewMeasure struct {
	name   string
	unit   string
	div    float64 // to the unit shown
	min    float64 // the median must reach this (raw units) for skew to matter
	thresh [4]float64
	value  func(a store.Attempt) float64
}

var skewMeasures = []skewMeasure{
	{"cpu", "s", 1000, 500, [4]float64{2, 4, 8, 16}, func(a store.Attempt) float64 { return float64(a.CPUMs) }},
	{"duration", "s", 1000, 1000, [4]float64{2, 4, 8, 16}, func(a store.Attempt) float64 { return float64(a.DurationMs) }},
	{"memory", "MB", 1 << 20, 16 << 20, [4]float64{1.5, 2, 3, 4}, func(a store.Attempt) float64 { return float64(peakMemory(a)) }},
}

// peakMemory is an attempt's peak memory: RSS, as YARN's ContainersMonitor
// counts it against the limit (PSS is sampled less often and may miss the
// peak).
func peakMemory(a store.Attempt) int64 { return a.PeakRSS }

// skew compares, across the maps and across the reduces (and other task
// types), the busiest attempts with the median: CPU, duration, peak memory.
func skew(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		atts := byType[typ]
		if len(atts) < 4 {
			continue
		}
		for _, m := range skewMeasures {
			var v []float64
			maxA := atts[0]
			for _, a := range atts {
				v = append(v, m.value(a))
				if m.value(a) > m.value(maxA) {
					maxA = a
				}
			}
			med := median(v)
			if med < m.min {
				continue
			}
			r := m.value(maxA) / med
			sev := grade(r, m.thresh)
			if sev == None {
				continue
			}
			var ids []string
			for _, a := range atts {
				if m.value(a)/med >= m.thresh[0] {
					ids = append(ids, a.AttemptID)
				}
			}
			f := Finding{Severity: sev, TaskType: typ, AttemptIDs: ids,
				Message: fmt.Sprintf("%s %s is skewed: the largest attempt (%s) took %.1f× the median (%.1f %s against %.1f %s); %d of %d attempts are at least %.1f× the median.",
					typ, m.name, maxA.AttemptID, r, m.value(maxA)/m.div, m.unit, med/m.div, m.unit, len(ids), len(atts), m.thresh[0]),
				Numbers: []Number{{"max_" + m.name, m.value(maxA) / m.div, m.unit}, {"median_" + m.name, med / m.div, m.unit},
					{"ratio", r, "x"}, {"skewed_attempts", float64(len(ids)), "count"}},
			}
			switch typ {
			case "reduce":
				f.Recommendation = "Some reduces get much more data than others: a hot key or a poor partitioner. Spread the keys " +
					"(salt the hot key, a custom Partitioner) or use more reduces so that each gets less."
				f.Parameter, f.Value = "mapreduce.job.reduces", fmt.Sprint(2*len(atts))
			case "map":
				f.Recommendation = "Some maps read much more than others: uneven input splits (unsplittable compressed files, " +
					"a few large files). Split the input more evenly, or cap the split size."
				f.Parameter, f.Value = "mapreduce.input.fileinputformat.split.maxsize", fmt.Sprint(128<<20)
			default:
				f.Recommendation = "Work is spread unevenly across tasks: repartition the data more evenly."
			}
			out = append(out, f)
		}
	}
	return out
}
