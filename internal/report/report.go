// Package report prints jobs and attempts as text tables, for terminals,
// tickets and mail (`taskscope report`). It shows what the web UI's job and
// attempt pages show: the summary, the findings with their numbers, the
// attempts by type and state, the distributions per task type, the
// attempts, the process tree with command lines, and the events.
package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

// Bytes formats a byte count in binary units.
func Bytes(b int64) string {
	a := b
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1<<40:
		return fmt.Sprintf("%.2f TiB", float64(b)/(1<<40))
	case a >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// Duration formats milliseconds as the UI does: 850ms, 12.3s, 4m05s, 2h03m.
func Duration(ms int64) string {
	if ms < 0 {
		return "-" + Duration(-ms)
	}
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if math.Abs(v) < 10 {
		return fmt.Sprintf("%.1f%%", v)
	}
	return fmt.Sprintf("%.0f%%", v)
}

// Unit formats a number of one of the API's units (findings' numbers).
func Unit(v float64, unit string) string {
	switch unit {
	case "bytes":
		return Bytes(int64(v))
	case "bytes/s":
		return Bytes(int64(v)) + "/s"
	case "percent":
		return pct(v)
	case "ms":
		return Duration(int64(v))
	case "s", "seconds":
		return Duration(int64(v * 1000))
	case "count":
		return fmt.Sprintf("%.0f", v)
	case "ratio", "x":
		return fmt.Sprintf("%.1fx", v)
	case "mb", "MB":
		return Bytes(int64(v * (1 << 20)))
	}
	s := fmt.Sprintf("%.2f", v)
	if unit != "" {
		s += " " + unit
	}
	return s
}

func ts(t store.Time) string {
	if t == 0 {
		return "-"
	}
	return time.UnixMilli(int64(t)).UTC().Format("2006-01-02 15:04:05")
}

func clock(t store.Time) string {
	if t == 0 {
		return "-"
	}
	return time.UnixMilli(int64(t)).UTC().Format("15:04:05")
}

// Clean makes untrusted text (command lines) safe for a terminal: control
// characters, escape sequences included, become visible \xNN.
func Clean(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			fmt.Fprintf(&b, `\x%02x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var typeOrder = map[string]int{"am": 0, "map": 1, "reduce": 2, "tez": 3, "executor": 4}

func sortTypes(types []string) {
	sort.Slice(types, func(i, j int) bool {
		oi, iok := typeOrder[types[i]]
		oj, jok := typeOrder[types[j]]
		if iok != jok {
			return iok
		}
		if oi != oj {
			return oi < oj
		}
		return types[i] < types[j]
	})
}

// ByType is "40 map, 5 reduce, 1 am".
func ByType(m map[string]int) string {
	types := make([]string, 0, len(m))
	for t := range m {
		types = append(types, t)
	}
	sortTypes(types)
	parts := make([]string, 0, len(types))
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("%d %s", m[t], t))
	}
	return strings.Join(parts, ", ")
}

func endOf(j *store.Job) store.Time {
	if j.End != 0 {
		return j.End
	}
	return j.LastSeen
}

// Job prints a job: summary, attempts by type and state, findings,
// distributions per task type, attempts.
func Job(w io.Writer, j *store.JobDetail, r *analysis.Report) error {
	fmt.Fprintf(w, "Job %s  %s\n", j.JobID, Clean(j.Name))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  framework\t%s\tuser\t%s\tqueue\t%s\tapplication\t%s\n", j.Framework, Clean(j.User), Clean(j.Queue), orDash(j.AppID))
	end := "running (last data " + ts(j.LastSeen) + ")"
	if j.State != store.StateRunning {
		end = ts(j.End)
	}
	fmt.Fprintf(tw, "  state\t%s\tstart\t%s UTC\tend\t%s\tduration\t%s\n", j.State, ts(j.Start), end, Duration(int64(endOf(&j.Job)-j.Start)))
	fmt.Fprintf(tw, "  attempts\t%d (%d running)\tby type\t%s\thosts\t%d\tCPU\t%.2f core-h (%s)\n", j.Attempts, j.Running, orDash(ByType(j.ByType)), j.Hosts,
		float64(j.CPUMs)/3.6e6, Duration(j.CPUMs))
	used := "-"
	if j.MemGBHours > 0 {
		used = pct(100 * j.UsedGBHours / j.MemGBHours)
	}
	fmt.Fprintf(tw, "  memory\t%.2f GB-h allocated\tused\t%.2f GB-h (%s of allocated)\tpeak RSS\t%s (largest attempt)\n", j.MemGBHours, j.UsedGBHours, used, Bytes(j.PeakRSS))
	tw.Flush()

	typeState(w, j.AttemptList)
	typeOutcome(w, j.AttemptList)
	if r != nil {
		findings(w, r)
		path(w, r.Path)
	}
	distributions(w, j.AttemptList)

	fmt.Fprintln(w, "\nAttempts")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "attempt\ttype\tstate\toutcome\texit\trepeats\thost\tstart\tduration\tCPU\tCPU %\tpeak RSS\tpeak PSS\tlimit\tused\tprocs\tread\twritten\tGC\t")
	for _, a := range j.AttemptList {
		limit, used := "-", "-"
		if a.MemoryMB > 0 {
			limit = Bytes(a.MemoryMB << 20)
			used = pct(100 * float64(a.PeakRSS) / float64(a.MemoryMB<<20))
		}
		util := "-"
		if a.DurationMs > 0 {
			util = pct(100 * float64(a.CPUMs) / float64(a.DurationMs))
		}
		pss := "-"
		if a.PeakPSS > 0 {
			pss = Bytes(a.PeakPSS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", a.AttemptID, a.Type, a.State,
			orDash(a.Outcome), exitCode(&a), orDash(repeats(&a)), Clean(a.Host), clock(a.Start), Duration(a.DurationMs), cpuOf(&a), util,
			Bytes(a.PeakRSS), pss, limit, used, a.Processes, Bytes(a.ReadBytes), Bytes(a.WriteBytes), Duration(a.GCTimeMs))
	}
	return tw.Flush()
}

// cpuOf is the attempt's CPU, with how far off it may be when it is an
// estimate ("55.0s ±1.20s": store.Attempt.CPUDoubtMs).
func cpuOf(a *store.Attempt) string {
	if a.CPUDoubtMs > 0 {
		return Duration(a.CPUMs) + " ±" + Duration(a.CPUDoubtMs)
	}
	return Duration(a.CPUMs)
}

// exitCode is the attempt's exit code, "-" when none was seen.
func exitCode(a *store.Attempt) string {
	if a.ExitCode == nil {
		return "-"
	}
	return fmt.Sprint(*a.ExitCode)
}

// repeats names the attempt a retry or a speculative copy repeats by its
// number: "retry of _0", "copy of _0".
func repeats(a *store.Attempt) string {
	if a.RetryOf == "" {
		return ""
	}
	n := a.RetryOf[strings.LastIndexByte(a.RetryOf, '_'):]
	if a.Speculative {
		return "copy of " + n
	}
	return "retry of " + n
}

// typeOutcome prints the ended attempts counted by type and outcome, when
// any did not succeed.
func typeOutcome(w io.Writer, as []store.Attempt) {
	counts := map[string]map[string]int{}
	seen := map[string]bool{}
	bad := false
	for _, a := range as {
		o := a.Outcome
		if a.State == store.StateRunning {
			continue
		}
		if o == "" {
			o = "unknown"
		}
		bad = bad || o != store.OutcomeSucceeded
		if counts[a.Type] == nil {
			counts[a.Type] = map[string]int{}
		}
		counts[a.Type][o]++
		seen[o] = true
	}
	if !bad {
		return
	}
	var outcomes []string
	for _, o := range []string{store.OutcomeSucceeded, store.OutcomeFailed, store.OutcomeKilled, store.OutcomeKilledMemory, store.OutcomeLost, "unknown"} {
		if seen[o] {
			outcomes = append(outcomes, o)
		}
	}
	types := make([]string, 0, len(counts))
	for t := range counts {
		types = append(types, t)
	}
	sortTypes(types)
	fmt.Fprintln(w, "\nEnded attempts by type and outcome")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "type\t%s\t\n", strings.Join(outcomes, "\t"))
	for _, t := range types {
		row := []string{}
		for _, o := range outcomes {
			if n := counts[t][o]; n > 0 {
				row = append(row, fmt.Sprint(n))
			} else {
				row = append(row, "")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", t, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// typeState prints the attempts counted by type and state.
func typeState(w io.Writer, as []store.Attempt) {
	counts := map[string]map[string]int{}
	stateSet := map[string]bool{}
	for _, a := range as {
		if counts[a.Type] == nil {
			counts[a.Type] = map[string]int{}
		}
		counts[a.Type][a.State]++
		stateSet[a.State] = true
	}
	if len(counts) == 0 {
		return
	}
	types := make([]string, 0, len(counts))
	for t := range counts {
		types = append(types, t)
	}
	sortTypes(types)
	states := make([]string, 0, len(stateSet))
	for s := range stateSet {
		states = append(states, s)
	}
	sort.Strings(states)
	fmt.Fprintln(w, "\nAttempts by type and state")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "type\t%s\tall\t\n", strings.Join(states, "\t"))
	for _, t := range types {
		row, all := []string{}, 0
		for _, s := range states {
			n := counts[t][s]
			all += n
			if n == 0 {
				row = append(row, "")
			} else {
				row = append(row, fmt.Sprint(n))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t\n", t, strings.Join(row, "\t"), all)
	}
	tw.Flush()
}

// findings prints the findings worse than none, as the UI lists them.
func findings(w io.Writer, r *analysis.Report) {
	var real []analysis.Finding
	for _, f := range r.Findings {
		if f.Severity > analysis.None {
			real = append(real, f)
		}
	}
	if len(real) == 0 {
		fmt.Fprintln(w, "\nFindings: nothing to report")
		return
	}
	fmt.Fprintf(w, "\nFindings (worst: %s)\n", r.Worst)
	for _, f := range real {
		kind := strings.ReplaceAll(f.Heuristic, "_", " ")
		if f.TaskType != "" {
			kind += " (" + f.TaskType + ")"
		}
		fmt.Fprintf(w, "  [%s] %s: %s\n", strings.ToUpper(f.Severity.String()), kind, Clean(f.Message))
		if f.Recommendation != "" || f.Parameter != "" {
			fmt.Fprintf(w, "      -> %s", Clean(f.Recommendation))
			if f.Parameter != "" {
				fmt.Fprintf(w, "  %s=%s", f.Parameter, f.Value)
			}
			fmt.Fprintln(w)
		}
		if len(f.Numbers) > 0 {
			parts := make([]string, 0, len(f.Numbers))
			for _, n := range f.Numbers {
				parts = append(parts, strings.ReplaceAll(n.Name, "_", " ")+" "+Unit(n.Value, n.Unit))
			}
			fmt.Fprintf(w, "      %s\n", strings.Join(parts, ", "))
		}
		if len(f.AttemptIDs) > 0 {
			ids := f.AttemptIDs
			more := ""
			if len(ids) > 6 {
				more = fmt.Sprintf(" and %d more", len(ids)-6)
				ids = ids[:6]
			}
			fmt.Fprintf(w, "      attempts: %s%s\n", strings.Join(ids, " "), more)
		}
	}
}

// Box is what a box plot shows: whiskers (the furthest values within 1.5
// interquartile ranges), quartiles, median, and the values beyond the
// whiskers.
type Box struct {
	N                      int
	Lo, Q1, Median, Q3, Hi float64
	Min, Max               float64
	Outliers               int
}

func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	pos := float64(len(s)-1) * q
	lo, hi := int(math.Floor(pos)), int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// BoxOf computes a Box the way the UI's distributions do.
func BoxOf(v []float64) Box {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return Box{}
	}
	b := Box{N: len(s), Q1: quantile(s, 0.25), Median: quantile(s, 0.5), Q3: quantile(s, 0.75), Min: s[0], Max: s[len(s)-1]}
	iqr := b.Q3 - b.Q1
	loF, hiF := b.Q1-1.5*iqr, b.Q3+1.5*iqr
	b.Lo, b.Hi = s[0], s[len(s)-1]
	for _, x := range s {
		if x >= loF {
			b.Lo = x
			break
		}
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] <= hiF {
			b.Hi = s[i]
			break
		}
	}
	// With few values the interpolated quartiles can lie beyond the
	// whiskers; the box is never wider than its whiskers.
	b.Lo, b.Hi = math.Min(b.Lo, b.Q1), math.Max(b.Hi, b.Q3)
	for _, x := range s {
		if x < b.Lo || x > b.Hi {
			b.Outliers++
		}
	}
	return b
}

// distributions prints, per task type, the duration, CPU and peak memory
// spread (the UI's box plots) and the attempts that stand out.
func distributions(w io.Writer, as []store.Attempt) {
	byType := map[string][]store.Attempt{}
	for _, a := range as {
		byType[a.Type] = append(byType[a.Type], a)
	}
	if len(byType) == 0 {
		return
	}
	types := make([]string, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sortTypes(types)
	figs := []struct {
		name string
		get  func(store.Attempt) float64
		fmt  func(float64) string
	}{
		{"duration", func(a store.Attempt) float64 { return float64(a.DurationMs) }, func(v float64) string { return Duration(int64(v)) }},
		{"CPU time", func(a store.Attempt) float64 { return float64(a.CPUMs) }, func(v float64) string { return Duration(int64(v)) }},
		{"peak RSS", func(a store.Attempt) float64 { return float64(a.PeakRSS) }, func(v float64) string { return Bytes(int64(v)) }},
	}
	fmt.Fprintln(w, "\nDistributions per task type (whiskers: furthest values within 1.5 IQR; outliers beyond)")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "type\t\tattempts\tmin\tlow\tQ1\tmedian\tQ3\thigh\tmax\toutliers\t")
	for _, t := range types {
		for i, f := range figs {
			v := make([]float64, len(byType[t]))
			for k, a := range byType[t] {
				v[k] = f.get(a)
			}
			b := BoxOf(v)
			name, n := "", ""
			if i == 0 {
				name, n = t, fmt.Sprint(b.N)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", name, f.name, n, f.fmt(b.Min), f.fmt(b.Lo), f.fmt(b.Q1), f.fmt(b.Median),
				f.fmt(b.Q3), f.fmt(b.Hi), f.fmt(b.Max), b.Outliers)
		}
	}
	tw.Flush()
}

// Attempt prints an attempt: summary, process tree, events.
func Attempt(w io.Writer, d *store.AttemptDetail) error {
	fmt.Fprintf(w, "Attempt %s  (%s, %s, job %s)\n", d.AttemptID, d.Type, d.State, d.JobID)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  host\t%s\tcontainer\t%s\tframework\t%s\tstreaming\t%v\n", Clean(d.Host), orDash(d.ContainerID), d.Framework, d.Streaming)
	end := d.State
	if d.End != 0 {
		end = ts(d.End)
	}
	util := "-"
	if d.DurationMs > 0 {
		util = pct(100*float64(d.CPUMs)/float64(d.DurationMs)) + " of a core on average"
	}
	fmt.Fprintf(tw, "  start\t%s UTC\tend\t%s\tduration\t%s\tCPU\t%s (%s)\n", ts(d.Start), end, Duration(d.DurationMs), cpuOf(&d.Attempt), util)
	limit, used := "-", "no limit known"
	if d.MemoryMB > 0 {
		limit = Bytes(d.MemoryMB << 20)
		used = pct(100*float64(d.PeakRSS)/float64(d.MemoryMB<<20)) + " of memory.mb"
	}
	xmx := "-"
	if d.XmxBytes > 0 {
		xmx = Bytes(d.XmxBytes)
	}
	fmt.Fprintf(tw, "  peak RSS\t%s (%s)\tpeak PSS\t%s\tmemory.mb\t%s\t-Xmx\t%s\n", Bytes(d.PeakRSS), used, Bytes(d.PeakPSS), limit, xmx)
	fmt.Fprintf(tw, "  processes\t%d\tread / written\t%s / %s\tGC\t%s\tpeak heap\t%s\n", d.Processes, Bytes(d.ReadBytes), Bytes(d.WriteBytes), Duration(d.GCTimeMs), Bytes(d.PeakHeap))
	if d.JavaOpts != "" {
		fmt.Fprintf(tw, "  java opts\t%s\n", Clean(d.JavaOpts))
	}
	if d.State != store.StateRunning {
		from := ""
		if d.ExitSource != "" {
			from = " (from " + strings.ReplaceAll(d.ExitSource, "_", " ") + ")"
		}
		fmt.Fprintf(tw, "  outcome\t%s\texit\t%s%s\n", orDash(d.Outcome), exitCode(&d.Attempt), from)
	}
	if d.RetryOf != "" {
		kind := "retry of"
		if d.Speculative {
			kind = "speculative copy of"
		}
		fmt.Fprintf(tw, "  repeats\t%s %s\n", kind, d.RetryOf)
	}
	tw.Flush()
	if d.CPUDoubtMs > 0 {
		fmt.Fprintf(w, "  Its CPU is an estimate, off by up to %s either way: an exit record was lost, so what its processes\n"+
			"  used last, or its share of what the node knew only in sum for containers that ended with it, is a guess.\n",
			Duration(d.CPUDoubtMs))
	}
	if d.ExitDiagnostics != "" {
		fmt.Fprintln(w, "\nThe NodeManager's diagnostics")
		for _, l := range strings.Split(strings.TrimRight(d.ExitDiagnostics, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", Clean(l))
		}
	}
	fmt.Fprintf(w, "\nProcesses (%d, children under their parent)\n", len(d.ProcessList))
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "pid\tppid\trole\tstart\tlived\tCPU\tchildren CPU\tpeak RSS\tpeak PSS\tthreads\tread\twritten\tcommand")
	depth := treeDepth(d.ProcessList)
	for _, p := range treeOrder(d.ProcessList) {
		cmd := Clean(p.Cmdline)
		if cmd == "" {
			cmd = "[" + Clean(p.Comm) + "]"
		}
		if len([]rune(cmd)) > 160 {
			cmd = string([]rune(cmd)[:159]) + "…"
		}
		lived := "running"
		if p.End != 0 {
			lived = Duration(int64(p.End - p.Start))
		}
		pss := "-"
		if p.PeakPSS > 0 {
			pss = Bytes(p.PeakPSS)
		}
		child := ""
		if p.ChildCPUMs > 0 {
			child = Duration(p.ChildCPUMs)
		}
		fmt.Fprintf(tw, "%s%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", strings.Repeat("  ", depth[p.Key]), p.PID, p.PPID, orDash(p.Role),
			clock(p.Start), lived, Duration(p.CPUMs), child, Bytes(p.PeakRSS), pss, p.MaxThreads, Bytes(p.ReadBytes), Bytes(p.WriteBytes), cmd)
	}
	tw.Flush()
	if len(d.Events) > 0 {
		fmt.Fprintln(w, "\nEvents")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "time\tkind\tpid\tvalue\tmessage")
		for _, e := range d.Events {
			pid, val := "", ""
			if e.PID != 0 {
				pid = fmt.Sprint(e.PID)
			}
			if e.Value != 0 {
				val = fmt.Sprint(e.Value)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ts(e.Time), e.Kind, pid, val, Clean(e.Message))
		}
		tw.Flush()
	}
	return nil
}

// treeOrder lists processes parents first, children under them (by ppid),
// each level by start time.
func treeOrder(ps []store.Process) []store.Process {
	byPID := map[int32]bool{}
	for _, p := range ps {
		byPID[p.PID] = true
	}
	children := map[int32][]store.Process{}
	var roots []store.Process
	for _, p := range ps {
		if byPID[p.PPID] && p.PPID != p.PID {
			children[p.PPID] = append(children[p.PPID], p)
		} else {
			roots = append(roots, p)
		}
	}
	byStart := func(l []store.Process) {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Start < l[j].Start })
	}
	byStart(roots)
	var out []store.Process
	seen := map[store.Key]bool{}
	var walk func(p store.Process)
	walk = func(p store.Process) {
		if seen[p.Key] {
			return
		}
		seen[p.Key] = true
		out = append(out, p)
		kids := children[p.PID]
		byStart(kids)
		for _, c := range kids {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	for _, p := range ps {
		if !seen[p.Key] {
			out = append(out, p)
		}
	}
	return out
}

func treeDepth(ps []store.Process) map[store.Key]int {
	byPID := map[int32]store.Process{}
	for _, p := range ps {
		byPID[p.PID] = p
	}
	out := map[store.Key]int{}
	for _, p := range ps {
		d, q := 0, p
		for i := 0; i < 32; i++ {
			par, ok := byPID[q.PPID]
			if !ok || par.PID == q.PID {
				break
			}
			d++
			q = par
		}
		out[p.Key] = d
	}
	return out
}
