package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/taskscope/taskscope/internal/analysis"
)

// path prints the critical path, the waves and the what-ifs.
func path(w io.Writer, p *analysis.Path) {
	if p == nil || len(p.Steps) == 0 {
		return
	}
	fmt.Fprintf(w, "\nCritical path (%s, %d attempts set the job's duration)\n", Duration(int64(p.Duration*1000)), len(p.Steps))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  attempt\ttype\twave\thost\tstart\tend\twaited\twhat its processes did")
	for i, s := range p.Steps {
		waited := "-"
		switch {
		case i == 0:
		case s.Shuffle > 0:
			waited = "shuffle " + Duration(int64(s.Shuffle*1000))
		default:
			waited = Duration(int64(s.Gap * 1000))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.AttemptID, s.Type, s.Wave, Clean(s.Host), clock(s.Start), clock(s.End), waited, Clean(s.Note))
	}
	tw.Flush()
	if len(p.Waves) > 0 {
		fmt.Fprintln(w, "\nWaves")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "type\tattempts\tcontainers\twaves\tlast wave\tfull\tidle\tmedian\tlast wave is\t")
		for _, v := range p.Waves {
			typ := v.TaskType
			if v.Vertex != "" {
				typ += " " + v.Vertex
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", typ, v.Attempts, v.Slots, v.Waves, v.LastWave,
				pct(v.LastWaveFill), pct(v.IdleShare), Duration(int64(v.MedianDuration*1000)), v.Kind)
		}
		tw.Flush()
	}
	if len(p.WhatIf) > 0 {
		fmt.Fprintln(w, "\nWhat if (the measured durations replayed through the containers)")
		for _, x := range p.WhatIf {
			fmt.Fprintf(w, "  %s\n", Clean(x.Text))
		}
	}
}

// History prints a recurring job's runs and their bands.
func History(w io.Writer, h *analysis.History) error {
	fmt.Fprintf(w, "Recurring job %q  user %s  queue %s\n", Clean(h.Name), Clean(h.User), Clean(h.Queue))
	if len(h.Median) > 0 {
		fmt.Fprintf(w, "  band of %s (median of the %d runs before it; outside: above the limit)\n", h.JobID, h.Baseline)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  measure\tmedian\tlimit\t")
		for _, b := range h.Median {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", b.Measure, Unit(b.Median, b.Unit), Unit(b.Limit, b.Unit))
		}
		tw.Flush()
	} else {
		fmt.Fprintf(w, "  no earlier runs of %s\n", h.JobID)
	}
	fmt.Fprintln(w, "\nRuns")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "job\tstart\tduration\tCPU\tpeak RSS\tGC\tIO\toutside its band\t")
	for _, r := range h.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.JobID, ts(r.Start), Duration(int64(r.Duration*1000)),
			Duration(int64(r.CPU*1000)), Bytes(int64(r.PeakRSS)), pct(r.GCShare), Bytes(int64(r.IO)), orDash(strings.Join(r.Outside, ", ")))
	}
	return tw.Flush()
}

// Waste prints the cost of waste by its key.
func Waste(w io.Writer, r *analysis.WasteReport) error {
	fmt.Fprintf(w, "Waste by %s, jobs active %s to %s UTC: %d jobs", r.By, ts(r.From), ts(r.To), r.Jobs)
	if r.Truncated {
		fmt.Fprint(w, " (the first of more)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  core-h: CPU allocated (a core per container) / used; GB-h: memory allocated / used;")
	fmt.Fprintln(w, "  failed, killed, speculative: what those attempts were given; over: allocated beyond use by the others")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, r.By+"\tjobs\tattempts\tcore-h\tused\tGB-h\tused\tfailed\tkilled\tspeculative\tover core-h\tover GB-h\twasted\t")
	row := func(key string, jobs int, c analysis.Cost) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%.2f\t%.2f\t%s\t\n", Clean(orDash(key)), jobs, c.Attempts,
			c.CPUHours, c.UsedCPUHours, c.MemGBHours, c.UsedMemGBHours, wasteCell(c.Failed), wasteCell(c.Killed), wasteCell(c.Speculative),
			c.OverAllocated.CPUHours, c.OverAllocated.MemGBHours, pct(c.WastedShare))
	}
	for _, g := range r.Groups {
		row(g.Key, g.Jobs, g.Cost)
	}
	row("all", r.Jobs, r.Total)
	return tw.Flush()
}

func wasteCell(x analysis.Waste) string {
	if x.Attempts == 0 {
		return "-"
	}
	return fmt.Sprintf("%d: %.2f core-h %.2f GB-h", x.Attempts, x.CPUHours, x.MemGBHours)
}
