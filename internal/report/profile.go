package report

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/taskscope/taskscope/internal/flame"
	"github.com/taskscope/taskscope/internal/store"
)

// ProfileFrames is how many of the hottest frames a report names.
const ProfileFrames = 8

// Profile writes where an attempt's JVM spent its time, from the profile
// v (the API's view of it): its hottest frames on a CPU and waiting, and,
// for a straggler's, what it did more than its sibling. others is how
// many more profiles the attempt has.
func Profile(w io.Writer, v *ProfileData, others int) {
	p := &v.Profile
	fmt.Fprintf(w, "\nWhere the time went: profile %s (%s", p.ID, p.Status)
	if p.Error != "" {
		fmt.Fprintf(w, ": %s", Clean(p.Error))
	}
	fmt.Fprintf(w, "), %d thread dumps over %s", p.Dumps, Duration(int64(p.End-p.Start)))
	fmt.Fprintf(w, ", the JVM stopped %s for them; ", Duration(int64(p.PausedMs)))
	if p.Trigger == store.TriggerRequest {
		fmt.Fprintf(w, "asked for by %s", Clean(orDash(p.RequestedBy)))
	} else {
		fmt.Fprintf(w, "taken on its own (%s)", p.Trigger)
	}
	if others > 0 {
		fmt.Fprintf(w, "; %d other profile(s) of the attempt", others)
	}
	fmt.Fprintln(w)
	frames(w, "On a CPU", v.Hottest["cpu"])
	frames(w, "Waiting (blocked, asleep, in IO)", v.Hottest["wait"])
	if b := v.Baseline; b != nil {
		fmt.Fprintf(w, "\nAgainst its sibling %s over the same window (%s)\n", b.AttemptID, b.Status)
		frames(w, "More on a CPU than the sibling", v.More["cpu"])
		frames(w, "More waiting than the sibling", v.More["wait"])
	}
}

// ProfileData is what Profile reads of the API's view of a profile.
type ProfileData struct {
	Profile  store.ProfileInfo        `json:"profile"`
	Hottest  map[string][]flame.Frame `json:"hottest"`
	Baseline *store.ProfileInfo       `json:"baseline"`
	More     map[string][]flame.Frame `json:"more"`
}

func frames(w io.Writer, title string, fs []flame.Frame) {
	if len(fs) == 0 {
		fmt.Fprintf(w, "  %s: none\n", title)
		return
	}
	fmt.Fprintf(w, "  %s\n", title)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "    frame\tthreads\ttime\tshare")
	for i, f := range fs {
		if i == ProfileFrames {
			break
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", Clean(f.Name), f.Thread, Duration(time.Duration(f.SelfNs).Milliseconds()), pct(100*f.Share))
	}
	tw.Flush()
}
