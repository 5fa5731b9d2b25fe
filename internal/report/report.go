// Package report prints jobs and attempts as text tables, for terminals,
// tickets and mail (`taskscope report`).
package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

// Bytes formats a byte count.
func Bytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// Duration formats milliseconds.
func Duration(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}

func ts(t store.Time) string {
	if t == 0 {
		return "-"
	}
	return time.UnixMilli(int64(t)).UTC().Format("2006-01-02 15:04:05")
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

// Job prints a job: summary, findings, attempts by type, attempts.
func Job(w io.Writer, j *store.JobDetail, r *analysis.Report) error {
	fmt.Fprintf(w, "Job %s  %s\n", j.JobID, Clean(j.Name))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  framework\t%s\tuser\t%s\tqueue\t%s\n", j.Framework, Clean(j.User), Clean(j.Queue))
	end := "running"
	if j.State != store.StateRunning {
		end = ts(j.End)
	}
	fmt.Fprintf(tw, "  state\t%s\tstart\t%s\tend\t%s\n", j.State, ts(j.Start), end)
	fmt.Fprintf(tw, "  attempts\t%d (%d running)\thosts\t%d\tCPU\t%.2f h\n", j.Attempts, j.Running, j.Hosts, float64(j.CPUMs)/3.6e6)
	fmt.Fprintf(tw, "  memory\t%.2f GB-h allocated\t\t%.2f GB-h used\tpeak attempt\t%s\n", j.MemGBHours, j.UsedGBHours, Bytes(j.PeakRSS))
	tw.Flush()
	if r != nil {
		fmt.Fprintf(w, "\nFindings (worst: %s)\n", r.Worst)
		if len(r.Findings) == 0 {
			fmt.Fprintln(w, "  none")
		}
		for _, f := range r.Findings {
			fmt.Fprintf(w, "  [%s] %s: %s\n", strings.ToUpper(f.Severity.String()), f.Heuristic, f.Message)
			if f.Recommendation != "" {
				fmt.Fprintf(w, "      -> %s", f.Recommendation)
				if f.Parameter != "" {
					fmt.Fprintf(w, " (%s=%s)", f.Parameter, f.Value)
				}
				fmt.Fprintln(w)
			}
		}
	}
	byType := map[string][]store.Attempt{}
	for _, a := range j.AttemptList {
		byType[a.Type] = append(byType[a.Type], a)
	}
	types := make([]string, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Strings(types)
	fmt.Fprintln(w, "\nBy task type")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "type\tattempts\tduration min\tmedian\tmax\tCPU median\tmax\tpeak RSS median\tmax\t")
	for _, t := range types {
		as := byType[t]
		d, c, m := stats(as, func(a store.Attempt) float64 { return float64(a.DurationMs) }),
			stats(as, func(a store.Attempt) float64 { return float64(a.CPUMs) }),
			stats(as, func(a store.Attempt) float64 { return float64(a.PeakRSS) })
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t, len(as), Duration(int64(d[0])), Duration(int64(d[1])),
			Duration(int64(d[2])), Duration(int64(c[1])), Duration(int64(c[2])), Bytes(int64(m[1])), Bytes(int64(m[2])))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nAttempts")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "attempt\ttype\tstate\thost\tstart\tduration\tCPU\tpeak RSS\tmemory.mb\tprocs")
	for _, a := range j.AttemptList {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", a.AttemptID, a.Type, a.State, Clean(a.Host), ts(a.Start),
			Duration(a.DurationMs), Duration(a.CPUMs), Bytes(a.PeakRSS), a.MemoryMB, a.Processes)
	}
	return tw.Flush()
}

// stats returns min, median, max.
func stats(as []store.Attempt, f func(store.Attempt) float64) [3]float64 {
	v := make([]float64, len(as))
	for i, a := range as {
		v[i] = f(a)
	}
	sort.Float64s(v)
	if len(v) == 0 {
		return [3]float64{}
	}
	return [3]float64{v[0], v[len(v)/2], v[len(v)-1]}
}

// Attempt prints an attempt: summary, process tree, events.
func Attempt(w io.Writer, d *store.AttemptDetail) error {
	fmt.Fprintf(w, "Attempt %s  (%s, job %s)\n", d.AttemptID, d.Type, d.JobID)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  host\t%s\tcontainer\t%s\tstate\t%s\n", Clean(d.Host), d.ContainerID, d.State)
	fmt.Fprintf(tw, "  start\t%s\tduration\t%s\tCPU\t%s\n", ts(d.Start), Duration(d.DurationMs), Duration(d.CPUMs))
	fmt.Fprintf(tw, "  peak RSS\t%s\tpeak PSS\t%s\tlimit\t%d MB\n", Bytes(d.PeakRSS), Bytes(d.PeakPSS), d.MemoryMB)
	fmt.Fprintf(tw, "  read\t%s\twritten\t%s\tGC\t%s\n", Bytes(d.ReadBytes), Bytes(d.WriteBytes), Duration(d.GCTimeMs))
	tw.Flush()
	fmt.Fprintln(w, "\nProcesses")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "pid\tppid\trole\tstart\tend\tCPU\tchildren CPU\tpeak RSS\tthreads\tcommand")
	depth := treeDepth(d.ProcessList)
	for _, p := range treeOrder(d.ProcessList) {
		cmd := Clean(p.Cmdline)
		if len([]rune(cmd)) > 120 {
			cmd = string([]rune(cmd)[:119]) + "…"
		}
		fmt.Fprintf(tw, "%s%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", strings.Repeat("  ", depth[p.Key]), p.PID, p.PPID, p.Role,
			ts(p.Start), ts(p.End), Duration(p.CPUMs), Duration(p.ChildCPUMs), Bytes(p.PeakRSS), p.MaxThreads, cmd)
	}
	tw.Flush()
	if len(d.Events) > 0 {
		fmt.Fprintln(w, "\nEvents")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		for _, e := range d.Events {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", ts(e.Time), e.Kind, e.PID, Clean(e.Message))
		}
		tw.Flush()
	}
	return nil
}

// treeOrder lists processes parents first, children under them (by ppid).
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
	var out []store.Process
	seen := map[store.Key]bool{}
	var walk func(p store.Process)
	walk = func(p store.Process) {
		if seen[p.Key] {
			return
		}
		seen[p.Key] = true
		out = append(out, p)
		for _, c := range children[p.PID] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
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
