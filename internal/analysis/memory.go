package analysis

import (
	"fmt"
	"math"

	"github.com/taskscope/taskscope/internal/store"
)

// heapHeadroom compares the JVMs' peak heap use (hsperfdata) with their
// -Xmx: a heap that runs full makes the collector work all the time and
// ends in OutOfMemoryError; one that stays nearly empty wastes memory.
func heapHeadroom(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		var worst store.Attempt
		worstShare, xmx := 0.0, int64(0)
		var full []string
		maxHeap := int64(0)
		for _, a := range byType[typ] {
			if a.PeakHeap <= 0 || a.XmxBytes <= 0 {
				continue
			}
			xmx = max(xmx, a.XmxBytes)
			maxHeap = max(maxHeap, a.PeakHeap)
			s := float64(a.PeakHeap) / float64(a.XmxBytes)
			if s >= 0.9 {
				full = append(full, a.AttemptID)
			}
			if s > worstShare {
				worstShare, worst = s, a
			}
		}
		if xmx == 0 {
			continue
		}
		param := "mapreduce." + typ + ".java.opts"
		nums := []Number{{"peak_heap", float64(maxHeap), "bytes"}, {"xmx", float64(xmx), "bytes"}, {"heap_share", worstShare * 100, "percent"}}
		switch {
		case worstShare >= 0.9:
			sev := grade(worstShare, [4]float64{0.9, 0.95, 0.98, 1.0})
			newXmx := roundUp256(float64(maxHeap) * 1.5) // MB
			rec := fmt.Sprintf("-Xmx%dm", newXmx)
			f := Finding{Severity: sev, TaskType: typ, AttemptIDs: full,
				Message: fmt.Sprintf("%d %s attempts filled their heap to at least 90%% of -Xmx (the fullest %s at %.0f%% of %d MB): the collector runs all the time and the task risks OutOfMemoryError.",
					len(full), typ, worst.AttemptID, worstShare*100, xmx>>20),
				Recommendation: fmt.Sprintf("Raise the heap to about 1.5× the peak (%s) and the container with it, keeping -Xmx at 80%% of it; or make the task keep less in memory.", rec),
				Parameter:      param, Value: rec, Numbers: nums}
			if worst.MemoryMB > 0 && newXmx<<20 > worst.MemoryMB<<20*8/10 {
				f.Recommendation += fmt.Sprintf(" mapreduce.%s.memory.mb=%d.", typ, roundUp256(float64(newXmx<<20)/0.8))
			}
			out = append(out, f)
		case worstShare < 0.3 && xmx > 1<<30:
			newXmx := max(roundUp256(float64(maxHeap)*2), 256)
			out = append(out, Finding{Severity: Low, TaskType: typ, AttemptIDs: []string{worst.AttemptID},
				Message:        fmt.Sprintf("%s JVMs used at most %.0f%% of their %d MB heap.", typ, worstShare*100, xmx>>20),
				Recommendation: fmt.Sprintf("A smaller heap (-Xmx%dm: twice the peak) and container would let more tasks run at once.", newXmx),
				Parameter:      param, Value: fmt.Sprintf("-Xmx%dm", newXmx), Numbers: nums})
		}
	}
	return out
}

// memoryGrowth looks for attempts whose memory grows steadily (a leak, or
// a cache without bounds): the slope of the attempt's RSS, and when, at that
// rate, it reaches the container's limit.
func memoryGrowth(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		var hits []growth
		for _, a := range top(byType[typ], maxSeriesAttempts, func(a store.Attempt) float64 { return float64(a.PeakRSS) }) {
			if g, ok := j.growthOf(a); ok {
				hits = append(hits, g)
			}
		}
		if len(hits) == 0 {
			continue
		}
		worst := hits[0]
		ids := []string{}
		for _, g := range hits {
			ids = append(ids, g.a.AttemptID)
			if g.sev > worst.sev || g.sev == worst.sev && g.slope > worst.slope {
				worst = g
			}
		}
		limit := float64(worst.a.MemoryMB << 20)
		msg := fmt.Sprintf("The memory of %d %s attempts grows steadily: %s by %.1f MB/s over %.0f s (from %.0f MB to %.0f MB, fit R² %.2f).",
			len(hits), typ, worst.a.AttemptID, worst.slope/(1<<20), worst.secs, worst.from/(1<<20), worst.to/(1<<20), worst.r2)
		nums := []Number{{"slope", worst.slope, "bytes/s"}, {"growth", worst.to - worst.from, "bytes"}, {"r2", worst.r2, ""},
			{"attempts", float64(len(hits)), "count"}}
		if limit > 0 {
			nums = append(nums, Number{"container_memory", limit, "bytes"}, Number{"seconds_to_limit", worst.ttl, "s"})
			if worst.ttl <= 0 {
				msg += fmt.Sprintf(" It has reached its %d MB container.", worst.a.MemoryMB)
			} else {
				msg += fmt.Sprintf(" At that rate it reaches its %d MB container in %.0f s.", worst.a.MemoryMB, worst.ttl)
			}
		}
		f := Finding{Severity: worst.sev, TaskType: typ, AttemptIDs: ids, Message: msg, Numbers: nums,
			Recommendation: "Something keeps growing (a leak, a cache or a collection without bounds): look at which process grows " +
				"in the attempt's memory chart, and at the heap (a growing heap is a Java leak; a growing RSS with a flat heap, native memory or a child process)."}
		if worst.a.XmxBytes > 0 && worst.a.PeakHeap > worst.a.XmxBytes*8/10 {
			f.Recommendation += " The heap is nearly full too."
		}
		out = append(out, f)
	}
	return out
}

type growth struct {
	a              store.Attempt
	slope, r2      float64 // bytes/s
	from, to, secs float64
	ttl            float64 // seconds until the container's limit (0: reached; NaN: no limit)
	sev            Severity
}

// growthOf fits a line to the attempt's RSS after its start-up (the first
// fifth of its life).
func (j *Job) growthOf(a store.Attempt) (growth, bool) {
	g := growth{a: a}
	if a.DurationMs < 3000 {
		return g, false
	}
	step := max(250, a.DurationMs/120)
	r, err := j.attemptSeries(a, []string{"rss_bytes"}, step)
	if err != nil {
		return g, false
	}
	ts, vs := values(r, "rss_bytes")
	skip := len(ts) / 5
	ts, vs = ts[skip:], vs[skip:]
	if len(ts) < 6 {
		return g, false
	}
	for i := range ts {
		ts[i] /= 1000
	}
	slope, icept, r2 := linearFit(ts, vs)
	g.slope, g.r2 = slope, r2
	g.secs = ts[len(ts)-1] - ts[0]
	g.from, g.to = icept+slope*ts[0], icept+slope*ts[len(ts)-1]
	grew := g.to - g.from
	if slope <= 0 || r2 < 0.8 || grew < 32<<20 || grew < 0.3*g.from {
		return g, false
	}
	g.sev = Low
	g.ttl = math.NaN()
	if a.MemoryMB > 0 {
		limit := float64(a.MemoryMB << 20)
		last := vs[len(vs)-1]
		g.ttl = max(0, (limit-last)/slope)
		life := float64(a.DurationMs) / 1000
		switch {
		case g.ttl <= 0:
			g.sev = Critical
		case g.ttl < life:
			g.sev = Severe
		case g.ttl < 3*life:
			g.sev = Moderate
		}
	}
	return g, true
}
