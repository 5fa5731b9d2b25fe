package analysis

import (
	"fmt"
	"math"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
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
			if a.PeakHeap <= 0 {
				continue
			}
			if a.XmxBytes <= 0 {
				a.XmxBytes = j.heapMax(a)
			}
			if a.XmxBytes <= 0 {
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
		for _, a := range growthAttempts(byType[typ]) {
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
		what := map[string]string{"rss_bytes": "memory (RSS)", "heap_used_bytes": "JVM heap"}[worst.metric]
		msg := fmt.Sprintf("The %s of %d %s attempts grows steadily: %s by %.1f MB/s over %.0f s (from %.0f MB to %.0f MB, fit R² %.2f).",
			what, len(hits), typ, worst.a.AttemptID, worst.slope/(1<<20), worst.secs, worst.from/(1<<20), worst.to/(1<<20), worst.r2)
		nums := []Number{{"slope", worst.slope, "bytes/s"}, {"growth", worst.to - worst.from, "bytes"}, {"r2", worst.r2, ""},
			{"attempts", float64(len(hits)), "count"}}
		if !math.IsNaN(worst.ttl) {
			nums = append(nums, Number{"seconds_to_limit", worst.ttl, "s"})
			if worst.ttl <= 0 {
				msg += " It has reached " + worst.limitName + "."
			} else {
				msg += fmt.Sprintf(" At that rate it reaches %s in %.0f s (it has run %.0f s).", worst.limitName, worst.ttl, float64(worst.a.DurationMs)/1000)
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
	metric         string  // rss_bytes or heap_used_bytes: what grows
	slope, r2      float64 // bytes/s
	from, to, secs float64
	ttl            float64 // seconds until the container's (or the heap's) limit (0: reached; NaN: no limit)
	limitName      string
	sev            Severity
}

// fitGrowth fits a line to a series after its start-up (the first fifth of
// the attempt's life). RSS grows in steps (the JVM touches new pages when it
// expands its heap): it must rise steadily (most steps not down) rather than
// fit a line closely; a heap that leaks grows along a line.
func fitGrowth(r *store.SeriesResult, metric string, minR2 float64) (slope, icept, r2, x0, x1, last float64, ok bool) {
	ts, vs := values(r, metric)
	skip := len(ts) / 5
	ts, vs = ts[skip:], vs[skip:]
	if len(ts) < 6 {
		return
	}
	for i := range ts {
		ts[i] /= 1000
	}
	up := 0
	for i := 1; i < len(vs); i++ {
		if vs[i] >= vs[i-1] {
			up++
		}
	}
	slope, icept, r2 = linearFit(ts, vs)
	x0, x1, last = ts[0], ts[len(ts)-1], vs[len(vs)-1]
	from, to := icept+slope*x0, icept+slope*x1
	grew := to - from
	// Past start-up a JVM holds tens of MB: a line from (nearly) nothing is
	// the start-up itself (slow on a loaded node), not growth.
	ok = slope > 0 && r2 >= minR2 && float64(up) >= 0.8*float64(len(vs)-1) && grew >= 32<<20 && grew >= 0.3*from &&
		from >= 32<<20 && x1-x0 >= 4
	return
}

// growthAttempts are the attempts of a type whose growth memoryGrowth
// looks at: the largest by peak RSS, of 6 s or more.
func growthAttempts(atts []store.Attempt) []store.Attempt {
	var out []store.Attempt
	for _, a := range top(atts, maxSeriesAttempts, func(a store.Attempt) float64 { return float64(a.PeakRSS) }) {
		if a.DurationMs >= 6000 {
			out = append(out, a)
		}
	}
	return out
}

// growthQuery is the series growthOf fits lines to.
func growthQuery(a store.Attempt) store.SeriesQuery {
	return attemptQuery(a, []string{"rss_bytes", "heap_used_bytes"}, max(250, a.DurationMs/120))
}

// growthOf looks for steady growth of the attempt's RSS (against its
// container) and of its JVMs' heap (against -Xmx).
func (j *Job) growthOf(a store.Attempt) (growth, bool) {
	g := growth{a: a, ttl: math.NaN()}
	if a.DurationMs < 6000 {
		return g, false
	}
	r, err := j.series(growthQuery(a))
	if err != nil {
		return g, false
	}
	life := float64(a.DurationMs) / 1000
	sevOf := func(ttl float64) Severity {
		switch {
		case ttl <= 0:
			return Critical
		case ttl < life:
			return Severe
		case ttl < 3*life:
			return Moderate
		}
		return Low
	}
	found := false
	if slope, icept, r2, x0, x1, last, ok := fitGrowth(r, "rss_bytes", 0.6); ok {
		found = true
		g.metric, g.slope, g.r2, g.from, g.to, g.secs = "rss_bytes", slope, r2, icept+slope*x0, icept+slope*x1, x1-x0
		g.sev = Low
		if a.MemoryMB > 0 {
			g.ttl = max(0, (float64(a.MemoryMB<<20)-last)/slope)
			g.limitName = fmt.Sprintf("its %d MB container", a.MemoryMB)
			g.sev = sevOf(g.ttl)
		}
	}
	if a.XmxBytes <= 0 {
		a.XmxBytes = j.heapMax(a)
		g.a.XmxBytes = a.XmxBytes
	}
	if slope, icept, r2, x0, x1, last, ok := fitGrowth(r, "heap_used_bytes", 0.8); ok && a.XmxBytes > 0 {
		ttl := max(0, (float64(a.XmxBytes)-last)/slope)
		if s := sevOf(ttl); !found || s > g.sev {
			found = true
			g.metric, g.slope, g.r2, g.from, g.to, g.secs = "heap_used_bytes", slope, r2, icept+slope*x0, icept+slope*x1, x1-x0
			g.ttl, g.sev, g.limitName = ttl, s, fmt.Sprintf("its %d MB heap (-Xmx)", a.XmxBytes>>20)
		}
	}
	return g, found
}

// heapMax is the largest heap maximum of the attempt's JVMs as their
// hsperfdata says (for attempts whose -Xmx the agent could not read from
// their configuration or command line); 0 if unknown.
// (Heap and memory growth ask for it of the same attempts: it is read once.)
func (j *Job) heapMax(a store.Attempt) int64 {
	if m, ok := j.reads.heapMax[a.AttemptID]; ok {
		return m
	}
	qs := j.heapMaxQueries(a)
	j.readSeries(qs)
	var m int64
	for _, q := range qs {
		r, err := j.series(q)
		if err != nil {
			continue
		}
		_, vs := values(r, "heap_max_bytes")
		for _, v := range vs {
			m = max(m, int64(v))
		}
	}
	j.reads.heapMax[a.AttemptID] = m
	return m
}

// heapMaxQueries are the series heapMax reads: the heap maximum of each of
// the attempt's JVMs over its life.
func (j *Job) heapMaxQueries(a store.Attempt) []store.SeriesQuery {
	ps, err := j.processes(a.AttemptID)
	if err != nil {
		return nil
	}
	var qs []store.SeriesQuery
	for _, p := range ps {
		if p.Role != wire.RoleTaskJVM && p.Role != wire.RoleExecutor {
			continue
		}
		from, to := int64(p.Start), max(int64(p.End), int64(p.LastSeen))+1
		if from <= 0 || to <= from {
			from, to = span(a)
		}
		qs = append(qs, store.SeriesQuery{Scope: store.ScopeProcess, Process: p.Key,
			Metrics: []string{"heap_max_bytes"}, From: from, To: to, Step: to - from})
	}
	return qs
}
