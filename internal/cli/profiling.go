package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
)

// profilingFlags are the server's switches of the profiles of task JVMs
// (docs/operations.md, "Profiles"): which it asks the agents for, on
// which nodes not, and how many automatic ones.
type profilingFlags struct {
	mode, offHosts     string
	perHour            int
	autoWindow, window time.Duration
}

func (f *profilingFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.mode, "profiling", "on-demand,auto", "profiles of task JVMs the server asks the agents for: on-demand (from an attempt's page, by operators and the job's owner), "+
		"auto (stragglers and outliers the analysis names while they run, each with a healthy sibling), both comma-separated, or off")
	fl.StringVar(&f.offHosts, "profiling-off-hosts", "", "nodes (their --host names, comma-separated) where no profile is taken")
	fl.IntVar(&f.perHour, "auto-profiles-per-hour", profiling.DefaultAutoPerHour, "automatic profiles each node takes in an hour at most (one at a time)")
	fl.DurationVar(&f.autoWindow, "auto-profile-window", profiling.DefaultAutoWindow, "how long an automatic profile lasts")
	fl.DurationVar(&f.window, "profile-window", profiling.DefaultWindow, "how long a profile asked for lasts, unless the request says (at most 5m)")
}

func (f *profilingFlags) config(log *slog.Logger) (profiling.Config, error) {
	c := profiling.Config{AutoPerHour: f.perHour, AutoWindow: f.autoWindow, Window: f.window, Log: log}
	for _, w := range strings.Split(f.mode, ",") {
		switch strings.TrimSpace(w) {
		case "on-demand":
			c.OnDemand = true
		case "auto":
			c.Auto = true
		case "off":
		default:
			return c, fmt.Errorf("--profiling takes on-demand, auto (or both, comma-separated) or off, not %q", w)
		}
	}
	for _, h := range strings.Split(f.offHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.OffHosts = append(c.OffHosts, h)
		}
	}
	if f.perHour < 0 || f.autoWindow < 0 || f.window < 0 || f.autoWindow > profiling.MaxWindow || f.window > profiling.MaxWindow {
		return c, fmt.Errorf("--auto-profiles-per-hour, --auto-profile-window and --profile-window must not be negative, the windows at most %s", profiling.MaxWindow)
	}
	return c, nil
}

// control is the server's profile requests over st (nil if st keeps no
// profiles).
func (f *profilingFlags) control(st store.Store, log *slog.Logger) (*profiling.Control, error) {
	c, err := f.config(log)
	if err != nil {
		return nil, err
	}
	return profiling.New(st, c), nil
}
