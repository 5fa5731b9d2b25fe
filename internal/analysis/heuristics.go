package analysis

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/taskscope/taskscope/internal/store"
)

// stragglers finds attempts that take far longer than the median of their
// type, finished or still running.
func stragglers(j *Job) []Finding {
	var out []Finding
	for typ, atts := range j.byType() {
		if len(atts) < 3 {
			continue
		}
		var d []float64
		for _, a := range atts {
			d = append(d, elapsed(a))
		}
		med := median(d)
		if med <= 0 {
			continue
		}
		var slow []store.Attempt
		worst := 0.0
		for _, a := range atts {
			r := elapsed(a) / med
			if r >= 2 {
				slow = append(slow, a)
			}
			worst = math.Max(worst, r)
		}
		if len(slow) == 0 {
			continue
		}
		sev := grade(worst, [4]float64{2, 3, 4, 6})
		sort.Slice(slow, func(x, y int) bool { return slow[x].DurationMs > slow[y].DurationMs })
		ids := []string{}
		for _, a := range slow {
			ids = append(ids, a.AttemptID)
		}
		f := Finding{Severity: sev, TaskType: typ, AttemptIDs: ids,
			Message: fmt.Sprintf("%d of %d %s attempts take at least twice the median of %.0f s; the slowest %.1f× as long (%s on %s).",
				len(slow), len(atts), typ, med, worst, slow[0].AttemptID, slow[0].Host),
			Numbers: []Number{{"median_duration", med, "s"}, {"worst_ratio", worst, "x"}, {"slow_attempts", float64(len(slow)), "count"}},
		}
		// A straggler that also used much more CPU did more work (skew); one
		// that did not was slowed by its node.
		var cpus []float64
		for _, a := range atts {
			cpus = append(cpus, float64(a.CPUMs))
		}
		mc := median(cpus)
		cr := ratio(float64(slow[0].CPUMs), mc)
		if mc > 0 {
			f.Numbers = append(f.Numbers, Number{"slowest_cpu_ratio", cr, "x"})
		}
		switch {
		case mc <= 0:
			f.Recommendation = "No CPU was measured of its type: look at the slow attempt's processes and at its node (noisy neighbours, disk, network)."
		case cr < 1.5:
			f.Recommendation = "The slow attempt did not do much more work (" + cpuText(slow[0].CPUMs, mc) + "): look at its node (noisy neighbours, disk, network). " +
				"Speculative execution re-runs such attempts elsewhere."
			f.Parameter, f.Value = "mapreduce."+typ+".speculative", "true"
		default:
			f.Recommendation = "The slow attempt also did more work (" + cpuText(slow[0].CPUMs, mc) + "): its input is larger. " +
				"Split the input more evenly, or use a better partitioner for reduces."
			if typ == "reduce" {
				f.Parameter, f.Value = "mapreduce.job.reduces", fmt.Sprint(2*len(atts))
			} else {
				f.Parameter, f.Value = "mapreduce.input.fileinputformat.split.maxsize", fmt.Sprint(128<<20)
			}
		}
		out = append(out, f)
	}
	return out
}

// memoryHeadroom compares the peak memory of a type's attempts with the
// container size: too little headroom risks kills, too much wastes the cluster.
func memoryHeadroom(j *Job) []Finding {
	var out []Finding
	for typ, atts := range j.byType() {
		var limit int64
		var peak int64
		var peakA store.Attempt
		for _, a := range atts {
			if a.MemoryMB > limit {
				limit = a.MemoryMB
			}
			p := peakMemory(a)
			if p > peak {
				peak, peakA = p, a
			}
		}
		if limit <= 0 || peak <= 0 {
			continue
		}
		limitB := float64(limit << 20)
		used := float64(peak) / limitB
		param := "mapreduce." + typ + ".memory.mb"
		// Recommend the peak plus 25% headroom, rounded up to 256 MB.
		var xmx int64
		for _, a := range atts {
			xmx = max(xmx, a.XmxBytes)
		}
		// Larger: room for the heap too (-Xmx at 80% of the container).
		// Smaller: the heap follows the container down (the text says so),
		// so the size comes from the peak alone.
		larger := roundUp256(max(float64(peak)*1.25, float64(xmx)/0.8))
		smaller := max(roundUp256(float64(peak)*1.25), 512)
		nums := func(rec int64) []Number {
			return []Number{{"peak_memory", float64(peak), "bytes"}, {"peak_pss", float64(peakA.PeakPSS), "bytes"},
				{"container_memory", limitB, "bytes"}, {"used_share", used * 100, "percent"},
				{"xmx", float64(xmx), "bytes"}, {"recommended_memory", float64(rec << 20), "bytes"}}
		}
		switch {
		case used >= 0.9:
			out = append(out, Finding{Severity: grade(used, [4]float64{0.9, 0.95, 1.0, 1.1}), TaskType: typ,
				AttemptIDs: []string{peakA.AttemptID},
				Message: fmt.Sprintf("%s attempts peak at %.0f%% of their %d MB container: close to being killed by the NodeManager.",
					typ, used*100, limit),
				Recommendation: "Give them more memory, or find what grows (the attempt's memory chart shows which process).",
				Parameter:      param, Value: fmt.Sprint(larger), Numbers: nums(larger)})
		case used < 0.5 && limit > 1024 && smaller < limit:
			sev := gradeBelow(used, [4]float64{0.5, 0.4, 0.3, 0.2})
			out = append(out, Finding{Severity: sev, TaskType: typ, AttemptIDs: []string{peakA.AttemptID},
				Message: fmt.Sprintf("The largest %s attempt peaked at %.1f%% of its %d MB container: memory is reserved but unused.",
					typ, used*100, limit),
				Recommendation: "Smaller containers let more tasks run at once. Keep the JVM heap (-Xmx) at about 80% of the new size.",
				Parameter:      param, Value: fmt.Sprint(smaller), Numbers: nums(smaller)})
		}
	}
	return out
}

// cpuEfficiency is the time on a CPU over wall time: tasks that mostly
// wait off a CPU. Time waiting for a CPU (sched_wait, as in runnable)
// counts as on it: tasks of a busy node wait for the CPU, not for IO, and
// are not told to look at their IO (a healthy job on a loaded node read
// 19 to 29 %, moderate, in e2e).
func cpuEfficiency(j *Job) []Finding {
	var out []Finding
	for typ, atts := range j.byType() {
		var cpu, run, wall float64
		for _, a := range atts {
			cpu += float64(a.CPUMs)
			run += runnable(a)
			wall += float64(a.DurationMs)
		}
		if wall < 60_000 || len(atts) < 2 {
			continue
		}
		eff := run / wall
		sev := gradeBelow(eff, [4]float64{0.4, 0.25, 0.15, 0.05})
		if sev == None {
			continue
		}
		out = append(out, Finding{Severity: sev, TaskType: typ,
			Message: fmt.Sprintf("%s attempts used a CPU (or waited for one) %.0f%% of the time they ran: they mostly wait (IO, shuffle, a slow child process).",
				typ, eff*100),
			Recommendation: "Look at the IO and the per-process CPU of an attempt: a Streaming child or the shuffle may be the bottleneck.",
			Numbers: []Number{{"cpu_efficiency", eff * 100, "percent"}, {"cpu_time", cpu / 1000, "s"}, {"runnable_time", run / 1000, "s"},
				{"wall_time", wall / 1000, "s"}},
		})
	}
	return out
}

// gcPressure is JVM GC time against the time the JVMs were runnable (see
// gcShare), over each task type and of each attempt on its own: one
// GC-bound attempt among many healthy ones is named even when its type's
// share stays low.
func gcPressure(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		atts := byType[typ]
		var gc, run float64
		var worst store.Attempt
		for _, a := range atts {
			gc += float64(a.GCTimeMs)
			run += runnable(a)
			if a.GCTimeMs > worst.GCTimeMs {
				worst = a
			}
		}
		typeSev := None
		if run >= gcMinCPUMs && gc >= gcMinPerAttemptMs*float64(len(atts)) {
			r := gc / run
			typeSev = grade(r, gcThresholds)
			if typeSev > None {
				out = append(out, Finding{Severity: typeSev, TaskType: typ, AttemptIDs: []string{worst.AttemptID},
					Message: fmt.Sprintf("%s JVMs spent %.0f%% of their runnable time (CPU time and time waiting for a CPU) in garbage collection.",
						typ, r*100),
					Recommendation: "Give the heap more room (and the container with it), or make the task allocate less.",
					Parameter:      "mapreduce." + typ + ".java.opts", Value: heapAdvice(worst, typ),
					Numbers: []Number{{"gc_share", r * 100, "percent"}, {"gc_time", gc / 1000, "s"}, {"runnable_time", run / 1000, "s"},
						{"attempts", float64(len(atts)), "count"}}})
			}
		}
		// The attempts GC-bound on their own, beyond their type's grade:
		// graded by their own share, and moderate at least when one
		// stands out among its type's (gcStandsOut).
		med := typeMedians(j)[typ].gcShare
		own := func(a store.Attempt) Severity {
			s := grade(gcShare(a), gcThresholds)
			if s == Low && len(atts) >= 3 && gcShare(a) >= gcStandsOut*med {
				s = Moderate
			}
			return s
		}
		var bound []store.Attempt
		for _, a := range atts {
			if a.GCTimeMs >= gcMinPerAttemptMs && !pausesWereWaits(a) && runnable(a) >= gcMinCPUMs/3 && own(a) > typeSev {
				bound = append(bound, a)
			}
		}
		if len(bound) == 0 {
			continue
		}
		sort.SliceStable(bound, func(x, y int) bool {
			if gx, gy := gcShare(bound[x]), gcShare(bound[y]); gx != gy {
				return gx > gy
			}
			return bound[x].AttemptID < bound[y].AttemptID
		})
		// Beside an attempt that stands out (moderate or worse), one
		// graded low on its own is not named: 5 % is where a healthy
		// JVM's pauses, stretched on a busy node, begin.
		if own(bound[0]) > Low {
			bound = slices.DeleteFunc(bound, func(a store.Attempt) bool { return own(a) <= Low })
		}
		w := bound[0]
		ids := []string{}
		for _, a := range bound {
			ids = append(ids, a.AttemptID)
		}
		out = append(out, Finding{Severity: own(w), TaskType: typ, AttemptIDs: ids,
			Message: fmt.Sprintf("%d of %d %s attempts spent much of their time in garbage collection on their own: %s on %s %.0f%% of its runnable time (%.1f s of GC, %.1f s of CPU).",
				len(bound), len(atts), typ, w.AttemptID, w.Host, gcShare(w)*100, float64(w.GCTimeMs)/1000, float64(w.CPUMs)/1000),
			Recommendation: "Its heap is too small for what it holds (a larger input, a big key): give it more room, or make it keep less in memory.",
			Parameter:      "mapreduce." + typ + ".java.opts", Value: heapAdvice(w, typ),
			Numbers: []Number{{"gc_share", gcShare(w) * 100, "percent"}, {"type_gc_share", med * 100, "percent"}, {"gc_time", float64(w.GCTimeMs) / 1000, "s"},
				{"cpu_time", float64(w.CPUMs) / 1000, "s"}, {"sched_wait", float64(w.SchedWaitMs) / 1000, "s"},
				{"gc_bound_attempts", float64(len(bound)), "count"}}})
	}
	return out
}

// pausesWereWaits reports whether an attempt's GC pauses were longer
// than all the CPU its JVM used: then they were waits (for a CPU, for its
// starved threads to reach a safepoint), not collection work, and the
// attempt is a starved straggler, not a GC-bound one.
func pausesWereWaits(a store.Attempt) bool { return a.GCTimeMs > a.CPUMs }

// gcThresholds grade a GC share.
var gcThresholds = [4]float64{0.05, 0.1, 0.15, 0.25}

// gcStandsOut: an attempt (of 3 or more of its type) whose GC share grades
// low but is this many times its type's median is GC-bound among healthy
// ones, and moderate: a heavy load stretches the runnable time of its
// JVM's other threads beside its collector's (sched_wait sums over
// threads), and e2e's GC-bound map among five read 8 to 14 % on a busy
// machine where its siblings read about 1 %.
const gcStandsOut = 3

// heapAdvice is the -Xmx to give an attempt's type (1.5× its own).
func heapAdvice(a store.Attempt, typ string) string {
	if a.XmxBytes <= 0 {
		return ""
	}
	rec := fmt.Sprintf("-Xmx%dm", a.XmxBytes>>20*3/2)
	if a.MemoryMB > 0 && a.XmxBytes*3/2 > a.MemoryMB<<20*8/10 {
		rec += fmt.Sprintf(" (and mapreduce.%s.memory.mb=%d)", typ, roundUp256(float64(a.XmxBytes)*1.5/0.8))
	}
	return rec
}

// GC pressure is judged for a type whose attempts used gcMinCPUMs of CPU
// and spent on average gcMinPerAttemptMs in collections (less than a second
// of GC per task is not worth tuning).
const (
	gcMinCPUMs        = 3000
	gcMinPerAttemptMs = 500
)

// roundUp256 returns bytes in MB, rounded up to a multiple of 256 MB.
func roundUp256(bytes float64) int64 {
	return int64(math.Ceil(bytes/float64(256<<20))) * 256
}

// SlowAttempts are the attempts r's findings name as stragglers or
// outliers (those of severity low or more), each once, worst finding
// first: the attempts worth a profile while they run.
func SlowAttempts(r *Report) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range r.Findings {
		if f.Severity == store.SeverityNone || f.Heuristic != "straggler" && f.Heuristic != "outlier" {
			continue
		}
		for _, id := range f.AttemptIDs {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}
