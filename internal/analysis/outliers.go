package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/store"
)

// typeStats are the medians of a task type's attempts, against which its
// outliers are measured.
type typeStats struct {
	n                                    int
	duration, cpu, io, rss, wait, offCPU float64 // ms, ms, bytes, bytes, ms, ms
	gcShare                              float64
}

// typeMedians are the job's typeStats by task type (computed once).
func typeMedians(j *Job) map[string]typeStats {
	if j.medians != nil {
		return j.medians
	}
	j.medians = map[string]typeStats{}
	for typ, atts := range j.byType() {
		var d, c, io, rss, w, off, gc []float64
		for _, a := range atts {
			d = append(d, float64(a.DurationMs))
			c = append(c, float64(a.CPUMs))
			io = append(io, float64(a.ReadBytes+a.WriteBytes))
			rss = append(rss, float64(peakMemory(a)))
			w = append(w, float64(max(a.SchedWaitMs, 0)))
			off = append(off, offCPU(a))
			gc = append(gc, gcShare(a))
		}
		j.medians[typ] = typeStats{n: len(atts), duration: median(d), cpu: median(c), io: median(io), rss: median(rss),
			wait: median(w), offCPU: median(off), gcShare: median(gc)}
	}
	return j.medians
}

// gcShare is an attempt's GC time against the time it was runnable (see
// runnable). GC time is wall-clock time of pauses, which stretch on a
// loaded node as the collector's threads wait for a CPU; CPU time does
// not, so GC over CPU alone rises with the node's load. Runnable time
// stretches with the pauses, and on an idle node it is the CPU time (Dr.
// Elephant's GC over CPU).
func gcShare(a store.Attempt) float64 {
	d := runnable(a)
	if d <= 0 || a.GCTimeMs <= 0 {
		return 0
	}
	return float64(a.GCTimeMs) / d
}

// runnable is the time an attempt's processes were on a CPU or waiting for
// one (ms): its CPU time and its sched_wait, counted up to its wall time
// (its threads' waits add up over threads: several waiting together, a
// JVM's parallel collector on few cores, are wall time once), or its CPU
// time where that is more (threads running in parallel).
func runnable(a store.Attempt) float64 {
	cpu := float64(a.CPUMs)
	return math.Max(cpu, math.Min(cpu+float64(max(a.SchedWaitMs, 0)), float64(a.DurationMs)))
}

// offCPU is the time an attempt was neither on a CPU nor waiting for one
// (ms): blocked in IO, sleeping, waiting for the shuffle or a child. With
// several busy threads it is 0.
func offCPU(a store.Attempt) float64 {
	return math.Max(0, float64(a.DurationMs-a.CPUMs-max(a.SchedWaitMs, 0)))
}

// cause is one measured explanation of an outlier: the seconds of its
// extra time it accounts for, as far as that can be said.
type cause struct {
	name  string  // more_work, more_io, gc, cpu_wait, io_wait, memory, slow_node
	secs  float64 // extra seconds it explains (0 when it explains size, not time)
	text  string
	score float64 // to rank causes that explain no time
}

// The outliers a report explains one by one, the worst first.
const maxOutliers = 20

// outlierReads: the attempts on the hosts of the slow outliers (their
// neighbours).
func outlierReads(j *Job, p *plan) {
	for _, o := range findOutliers(j) {
		if o.slow {
			from, to := span(o.a)
			p.host(o.a.Host, from, to)
		}
	}
}

// outlier is an attempt slow or large against its type.
type outlier struct {
	a                            store.Attempt
	slow                         bool
	durRatio, cpuRatio, memRatio float64
	sev                          Severity
}

// findOutliers are the job's attempts that are slow (at least twice the
// median duration of their type, 3+ attempts) or large (twice its median
// CPU or 1.5 times its median peak memory, 4+ attempts): straggler's and
// skew's attempts, worst first, at most maxOutliers.
func findOutliers(j *Job) []outlier {
	var out []outlier
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		m := typeMedians(j)[typ]
		if m.n < 3 {
			continue
		}
		for _, a := range byType[typ] {
			o := outlier{a: a}
			if m.duration >= 1000 {
				o.durRatio = float64(a.DurationMs) / m.duration
			}
			if m.n >= 4 && m.cpu >= 500 {
				o.cpuRatio = float64(a.CPUMs) / m.cpu
			}
			if m.n >= 4 && m.rss >= 16<<20 {
				o.memRatio = float64(peakMemory(a)) / m.rss
			}
			o.slow = o.durRatio >= 2
			o.sev = max(grade(o.durRatio, [4]float64{2, 3, 4, 6}), grade(o.cpuRatio, [4]float64{2, 4, 8, 16}),
				grade(o.memRatio, [4]float64{1.5, 2, 3, 4}))
			if o.sev > None {
				out = append(out, o)
			}
		}
	}
	sort.SliceStable(out, func(x, y int) bool {
		if out[x].sev != out[y].sev {
			return out[x].sev > out[y].sev
		}
		return out[x].a.AttemptID < out[y].a.AttemptID
	})
	if len(out) > maxOutliers {
		out = out[:maxOutliers]
	}
	return out
}

// outliers explains each outlier attempt by what was measured of it: more
// work (CPU, IO), garbage collection, waiting for a CPU (and its host's
// other attempts), time off a CPU while doing IO, memory pressure, a slow
// node (its type slower on its host than elsewhere).
func outliers(j *Job) []Finding {
	var out []Finding
	for _, o := range findOutliers(j) {
		a := o.a
		m := typeMedians(j)[a.Type]
		causes, nums := explain(j, o, m)
		sortCauses(causes)
		what := []string{}
		if o.slow {
			what = append(what, fmt.Sprintf("took %.1f× the median time of its type (%.0f s against %.0f s)",
				o.durRatio, float64(a.DurationMs)/1000, m.duration/1000))
		}
		if o.cpuRatio >= 2 {
			what = append(what, fmt.Sprintf("used %.1f× the median CPU (%.1f s against %.1f s)", o.cpuRatio, float64(a.CPUMs)/1000, m.cpu/1000))
		}
		if o.memRatio >= 1.5 {
			what = append(what, fmt.Sprintf("peaked at %.1f× the median memory (%d MB against %.0f MB)", o.memRatio, peakMemory(a)>>20, m.rss/(1<<20)))
		}
		f := Finding{Severity: o.sev, TaskType: a.Type, AttemptIDs: []string{a.AttemptID}, Numbers: nums}
		msg := fmt.Sprintf("%s (%s on %s) %s", a.AttemptID, a.Type, a.Host, strings.Join(what, " and "))
		if len(causes) == 0 {
			f.Cause = "unexplained"
			f.Message = msg + "; nothing measured explains it (" + measuredText(o, m, nums) + ")."
			f.Recommendation = "Look at its processes and their series: the time may have gone to the network (shuffle) or to a slow disk."
		} else {
			f.Cause = causes[0].name
			var texts []string
			for _, c := range causes {
				texts = append(texts, c.text)
			}
			f.Message = msg + ": " + strings.Join(texts, "; ") + "."
			f.Recommendation, f.Parameter, f.Value = causeAdvice(causes[0].name, a)
		}
		out = append(out, f)
	}
	return out
}

// explain measures each possible cause of an outlier.
func explain(j *Job, o outlier, m typeStats) ([]cause, []Number) {
	a := o.a
	dur := float64(a.DurationMs)
	extra := math.Max(0, dur-m.duration) // ms
	nums := []Number{{"duration_ratio", o.durRatio, "x"}, {"cpu_ratio", ratio(float64(a.CPUMs), m.cpu), "x"},
		{"memory_ratio", ratio(float64(peakMemory(a)), m.rss), "x"}, {"extra_time", extra / 1000, "s"}}
	var cs []cause
	explains := func(ms float64) float64 { return math.Min(math.Max(ms, 0), extra) / 1000 }

	// More work: CPU, IO.
	if r := ratio(float64(a.CPUMs), m.cpu); r >= 1.5 && a.CPUMs-int64(m.cpu) >= 500 {
		cs = append(cs, cause{name: "more_work", secs: explains(float64(a.CPUMs) - m.cpu), score: r,
			text: fmt.Sprintf("more work: %.1f× the median CPU (%.1f s more)", r, (float64(a.CPUMs)-m.cpu)/1000)})
	}
	io := float64(a.ReadBytes + a.WriteBytes)
	nums = append(nums, Number{"io_ratio", ratio(io, m.io), "x"}, Number{"io", io, "bytes"})
	if r := ratio(io, m.io); io >= 16<<20 && (m.io <= 0 || r >= 1.5) {
		cs = append(cs, cause{name: "more_io", secs: 0, score: math.Min(r, 100),
			text: fmt.Sprintf("more IO: %.0f MB read and written, %s", io/(1<<20), timesText(r))})
	}
	// Garbage collection: its own share.
	g := gcShare(a)
	nums = append(nums, Number{"gc_share", g * 100, "percent"}, Number{"type_gc_share", m.gcShare * 100, "percent"})
	if a.GCTimeMs >= gcMinPerAttemptMs && !pausesWereWaits(a) && gcAboveType(g, m.gcShare) {
		cs = append(cs, cause{name: "gc", secs: explains(float64(a.GCTimeMs) - m.gcShare*runnable(a)), score: g * 10,
			text: fmt.Sprintf("garbage collection: %.0f%% of its runnable time (%.1f s) against %.0f%% for its type",
				g*100, float64(a.GCTimeMs)/1000, m.gcShare*100)})
	}
	// Waiting for a CPU, and what else ran on its host.
	wait := float64(max(a.SchedWaitMs, 0))
	nums = append(nums, Number{"sched_wait_share", wait / math.Max(dur, 1) * 100, "percent"})
	if o.slow {
		others, busy := neighbourLoad(j, a)
		n := len(others)
		if !j.private {
			nums = append(nums, Number{"neighbour_cores", busy, "cores"}, Number{"neighbours", float64(n), "count"})
		}
		if wait/math.Max(dur, 1) >= 0.1 || busy >= 1 {
			if wait/math.Max(dur, 1) >= 0.05 {
				text := fmt.Sprintf("waiting for a CPU: its threads were runnable but not running %s; %d other attempts on %s kept %.1f cores busy meanwhile",
					waitText(wait, dur), n, a.Host, busy)
				if j.private {
					text = fmt.Sprintf("waiting for a CPU: its threads were runnable but not running %s on %s", waitText(wait, dur), a.Host)
				}
				cs = append(cs, cause{name: "cpu_wait", secs: explains(wait - m.wait), score: busy, text: text})
			} else if busy >= 1 {
				cs = append(cs, cause{name: "neighbours", score: busy,
					text: fmt.Sprintf("noisy neighbours: %d other attempts on %s kept %.1f cores busy meanwhile", n, a.Host, busy)})
			}
		}
	}
	// Time off a CPU while doing IO.
	off := offCPU(a)
	nums = append(nums, Number{"off_cpu_share", off / math.Max(dur, 1) * 100, "percent"})
	if o.slow && off/math.Max(dur, 1) >= 0.5 && off-m.offCPU >= 1000 && io >= 1<<20 {
		cs = append(cs, cause{name: "io_wait", secs: explains(off - m.offCPU),
			text: fmt.Sprintf("waiting on IO: off a CPU %.0f%% of the time (%.1f s more than its type's median) while it read and wrote %.0f MB",
				off/dur*100, (off-m.offCPU)/1000, io/(1<<20))})
	}
	// Memory pressure.
	if a.MemoryMB > 0 {
		s := float64(peakMemory(a)) / float64(a.MemoryMB<<20)
		nums = append(nums, Number{"memory_share", s * 100, "percent"})
		if s >= 0.9 {
			cs = append(cs, cause{name: "memory", score: s,
				text: fmt.Sprintf("memory pressure: its peak RSS reached %.0f%% of its %d MB container", s*100, a.MemoryMB)})
		}
	}
	if a.XmxBytes > 0 && a.PeakHeap > 0 {
		if s := float64(a.PeakHeap) / float64(a.XmxBytes); s >= 0.9 {
			cs = append(cs, cause{name: "memory", score: s,
				text: fmt.Sprintf("memory pressure: its heap reached %.0f%% of -Xmx (%d MB)", s*100, a.XmxBytes>>20)})
		}
	}
	// A slow node: its type slower on its host than on the others.
	if o.slow {
		if here, there, n := hostRatio(j, a); n >= 2 && there > 0 {
			nums = append(nums, Number{"host_ratio", here / there, "x"})
			if here/there >= 1.5 {
				cs = append(cs, cause{name: "slow_node", secs: explains(here - there), score: here / there,
					text: fmt.Sprintf("a slow node: the %d %s attempts on %s took a median %.0f s, %.1f× the %.0f s elsewhere",
						n, a.Type, a.Host, here/1000, here/there, there/1000)})
			}
		}
	}
	return cs, nums
}

// gcAboveType reports whether an attempt's GC share (g) is well above its
// type's median share: at least 5 % and twice the type's, or a few per
// cent (gcStandsOutBy more) and gcStandsOut times the type's, as a GC-bound
// attempt among siblings that collect next to nothing is, whatever its
// absolute share (its collector's time stretches its wall time, not its
// CPU time, and its share reads low beside a long runnable time).
func gcAboveType(g, typ float64) bool {
	return g >= 0.05 && g >= 2*typ || g-typ >= gcStandsOutBy && g >= gcStandsOut*typ
}

// gcStandsOutBy: the share of its runnable time (0.02: 2 points) by which
// an attempt's GC share must exceed its type's to stand out.
const gcStandsOutBy = 0.02

// measuredText says what was measured of an outlier that no cause
// explains, from the same figures as its numbers (nums), so that it never
// says "no GC" beside a GC share: each measure with its value, or "no"
// where it is zero.
func measuredText(o outlier, m typeStats, nums []Number) string {
	a := o.a
	num := func(name string) (float64, bool) {
		for _, n := range nums {
			if n.Name == name {
				return n.Value, true
			}
		}
		return 0, false
	}
	var parts []string
	parts = append(parts, "its CPU "+cpuText(a.CPUMs, m.cpu))
	if io, _ := num("io"); io <= 0 {
		parts = append(parts, "no IO")
	} else {
		r, _ := num("io_ratio")
		parts = append(parts, fmt.Sprintf("%.0f MB of IO, %s", io/(1<<20), timesText(r)))
	}
	switch g, _ := num("gc_share"); {
	case a.GCTimeMs <= 0:
		parts = append(parts, "no GC")
	case pausesWereWaits(a):
		parts = append(parts, fmt.Sprintf("GC pauses of %.1f s, longer than its %.1f s of CPU (the pauses were waits, not collection work)",
			float64(a.GCTimeMs)/1000, float64(a.CPUMs)/1000))
	default:
		parts = append(parts, fmt.Sprintf("GC %.0f%% of its runnable time (%.1f s) against %.0f%% for its type", g, float64(a.GCTimeMs)/1000, m.gcShare*100))
	}
	if w := float64(max(a.SchedWaitMs, 0)); w <= 0 {
		parts = append(parts, "no wait for a CPU")
	} else {
		parts = append(parts, "waiting for a CPU "+waitText(w, float64(a.DurationMs)))
	}
	if busy, ok := num("neighbour_cores"); ok {
		n, _ := num("neighbours")
		parts = append(parts, fmt.Sprintf("%.0f other attempts on %s kept %.1f cores busy", n, a.Host, busy))
	}
	if off, _ := num("off_cpu_share"); o.slow && off >= 1 {
		parts = append(parts, fmt.Sprintf("off a CPU %.0f%% of the time", off))
	}
	if s, ok := num("memory_share"); ok {
		parts = append(parts, fmt.Sprintf("its peak memory %.0f%% of its container", s))
	}
	if a.XmxBytes > 0 && a.PeakHeap > 0 {
		parts = append(parts, fmt.Sprintf("its heap %.0f%% of -Xmx", float64(a.PeakHeap)/float64(a.XmxBytes)*100))
	}
	if r, ok := num("host_ratio"); ok {
		parts = append(parts, fmt.Sprintf("its type %.1f× as slow on its node as elsewhere", r))
	}
	return strings.Join(parts, ", ")
}

// causeOrder ranks causes that explain about as much time (within 10 %):
// the more basic first (a slow node explains the IO wait of its attempts).
var causeOrder = map[string]int{"more_work": 0, "gc": 1, "slow_node": 2, "cpu_wait": 3, "io_wait": 4, "neighbours": 5,
	"memory": 6, "more_io": 7}

// sortCauses puts the cause that explains the most time first.
func sortCauses(cs []cause) {
	sort.SliceStable(cs, func(x, y int) bool {
		a, b := cs[x], cs[y]
		if math.Abs(a.secs-b.secs) > 0.1*math.Max(a.secs, b.secs) {
			return a.secs > b.secs
		}
		if causeOrder[a.name] != causeOrder[b.name] {
			return causeOrder[a.name] < causeOrder[b.name]
		}
		return a.score > b.score
	})
}

// waitText says how long an attempt's threads waited for a CPU (ms) over
// its wall time (ms): a share of the time, or, when several waited at
// once (sched_wait sums over threads), the seconds in all.
func waitText(wait, dur float64) string {
	if wait <= dur {
		return fmt.Sprintf("%.0f%% of the time (%.1f s)", wait/math.Max(dur, 1)*100, wait/1000)
	}
	return fmt.Sprintf("%.1f s in all over its %.0f s (%.1f threads at once on average)", wait/1000, dur/1000, wait/dur)
}

func ratio(v, med float64) float64 {
	if med <= 0 {
		return 0
	}
	return v / med
}

func timesText(r float64) string {
	if r <= 0 {
		return "where the median did none"
	}
	return fmt.Sprintf("%.1f× the median", r)
}

// neighbourLoad is the other attempts on a's host that overlapped it, and
// their CPU in the overlap as cores kept busy on average over a's life. A
// store error leaves none: the Job recorded it, and the report fails.
func neighbourLoad(j *Job, a store.Attempt) ([]store.Attempt, float64) {
	if j.private {
		return nil, 0
	}
	from, to := span(a)
	others, err := j.hostAttempts(a.Host, from, to)
	if err != nil {
		return nil, 0
	}
	var out []store.Attempt
	var cpu float64
	for _, o := range others {
		if o.AttemptID == a.AttemptID {
			continue
		}
		of, ot := span(o)
		ov := float64(min(ot, to) - max(of, from))
		if ov <= 0 {
			continue
		}
		cpu += float64(o.CPUMs) * ov / float64(max(ot-of, 1))
		out = append(out, o)
	}
	return out, cpu / float64(max(to-from, 1))
}

// hostRatio is the median duration of a's type on its host and on the
// other hosts, and how many of that type ran on its host.
func hostRatio(j *Job, a store.Attempt) (here, there float64, n int) {
	var h, o []float64
	for _, b := range j.byType()[a.Type] {
		if b.Host == a.Host {
			h = append(h, float64(b.DurationMs))
		} else {
			o = append(o, float64(b.DurationMs))
		}
	}
	if len(o) < 2 {
		return 0, 0, len(h)
	}
	return median(h), median(o), len(h)
}

// causeAdvice is what to do about an outlier's main cause.
func causeAdvice(c string, a store.Attempt) (rec, param, value string) {
	typ := a.Type
	switch c {
	case "more_work", "more_io":
		if typ == "reduce" {
			return "Its input is larger than the others': a hot key or a poor partitioner. Spread the keys, or use more reduces.",
				"mapreduce.job.reduces", ""
		}
		return "Its input is larger than the others': split the input more evenly, or cap the split size.",
			"mapreduce.input.fileinputformat.split.maxsize", fmt.Sprint(128 << 20)
	case "gc":
		rec := ""
		if a.XmxBytes > 0 {
			rec = fmt.Sprintf("-Xmx%dm", a.XmxBytes>>20*3/2)
		}
		return "Its JVM spent its time collecting garbage: give the heap more room (and the container with it), or make the task keep less in memory.",
			"mapreduce." + typ + ".java.opts", rec
	case "cpu_wait", "neighbours":
		return "The node was busy: speculative execution re-runs such attempts elsewhere; fewer containers per node or CPU isolation keeps tasks from starving each other.",
			"mapreduce." + typ + ".speculative", "true"
	case "io_wait":
		return "It waited on its disks or the network: look at the node's disks (a failing or full one) and at its IO series.", "", ""
	case "memory":
		return "It ran close to its memory limit: give it more memory or find what grows.", "mapreduce." + typ + ".memory.mb", ""
	case "slow_node":
		return "Its node is slower than the others for this work: check its disks, CPU frequency and load; exclude it if it stays slow.", "", ""
	}
	return "", "", ""
}
