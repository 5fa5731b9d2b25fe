package server

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// alertFeed tells the alerter of each job's analysis: its findings, and
// its lost and orphaned task processes (one alert per host and kind,
// while some of them were not ended by the agent), read from the job's
// events when its analysis found some.
type alertFeed struct {
	al *alert.Alerter
	st store.Store
}

// analysedJob is a job's analysis as the feed is told of it.
type analysedJob struct {
	ID, Name, User, Queue string
	Ended                 bool
	Findings              []analysis.Finding
	// Hosts are the hosts of the attempts the findings name, by attempt.
	Hosts map[string]string
}

// listener is the analyser's listener that tells the feed of each job's
// analysis (a store error reading its lost processes is logged: the next
// analysis tells it again).
func (f *alertFeed) listener(log *slog.Logger) analysis.Listener {
	var mu sync.Mutex
	var logged time.Time
	return func(ctx context.Context, a *analysis.Analysed) {
		j := analysedJob{ID: a.JobID, Name: a.Name, User: a.User, Queue: a.Queue, Ended: a.Ended, Hosts: a.Hosts}
		if a.Report != nil {
			j.Findings = a.Report.Findings
		}
		if err := f.analysed(ctx, j); err != nil && ctx.Err() == nil {
			mu.Lock()
			if time.Since(logged) > time.Minute {
				logged = time.Now()
				log.Warn("cannot tell the alerts of a job's analysis", "job", a.JobID, "err", err)
			}
			mu.Unlock()
		}
	}
}

// analysed tells the alerter of one job's analysis.
func (f *alertFeed) analysed(ctx context.Context, j analysedJob) error {
	var lost []store.Event
	for _, fd := range j.Findings {
		if fd.Heuristic == "lost_processes" {
			evs, err := f.st.Events(ctx, store.EventFilter{JobID: j.ID, Limit: 10000})
			if err != nil {
				return fmt.Errorf("cannot read the lost processes of %s: %w", j.ID, err)
			}
			lost = evs
			break
		}
	}
	f.al.Update(alertJob(j, lost))
	return nil
}

// alertJob is what the alerter is told of a job: its findings (the
// alerter keeps those at its minimum severity), each on the one host of
// the attempts it names if they share one, and its lost task processes
// grouped by host and kind with the severity of its lost_processes
// finding of that kind.
func alertJob(j analysedJob, events []store.Event) alert.Job {
	out := alert.Job{ID: j.ID, Name: j.Name, User: j.User, Queue: j.Queue, Ended: j.Ended}
	lostSev := map[string]analysis.Severity{}
	for _, f := range j.Findings {
		if f.Heuristic == "lost_processes" {
			lostSev[f.Cause] = f.Severity
			continue
		}
		if f.Severity == analysis.None {
			continue
		}
		host := ""
		for i, id := range f.AttemptIDs {
			h := j.Hosts[id]
			if i > 0 && h != host {
				host = ""
				break
			}
			host = h
		}
		what := f.Heuristic
		if f.TaskType != "" {
			what += " (" + f.TaskType + ")"
		}
		desc := f.Message
		if f.Recommendation != "" {
			desc += "\n" + f.Recommendation
		}
		if f.Parameter != "" && f.Value != "" {
			desc += fmt.Sprintf(" (%s=%s)", f.Parameter, f.Value)
		}
		out.Findings = append(out.Findings, alert.Finding{Alert: alert.AlertFinding, Heuristic: f.Heuristic, Severity: f.Severity,
			Host: host, Summary: fmt.Sprintf("%s %s of %s: %s", f.Severity, what, jobText(j), firstSentence(f.Message)), Description: desc})
	}
	out.Findings = append(out.Findings, lostAlerts(j, events, lostSev)...)
	return out
}

// lostAlerts groups a job's lost and orphaned task processes by host and
// kind: a group alerts while some of its processes were not ended by the
// agent (a reap event of the same host and pid), at the severity of the
// job's lost_processes finding of its kind.
func lostAlerts(j analysedJob, events []store.Event, sev map[string]analysis.Severity) []alert.Finding {
	type proc struct {
		host string
		pid  int32
	}
	reaped := map[proc]bool{}
	for _, e := range events {
		if e.Kind == wire.EventReap {
			reaped[proc{e.Host, e.PID}] = true
		}
	}
	type group struct {
		name, host, kind string
		pids             map[int32]bool
	}
	groups := map[string]*group{}
	for _, e := range events {
		s, ok := sev[e.Kind]
		if !ok || s == analysis.None || reaped[proc{e.Host, e.PID}] {
			continue
		}
		name := alert.AlertLostTaskJVM
		if e.Kind == wire.EventOrphan {
			name = alert.AlertOrphanedProcess
		}
		key := e.Kind + "\x00" + e.Host
		g := groups[key]
		if g == nil {
			g = &group{name: name, host: e.Host, kind: e.Kind, pids: map[int32]bool{}}
			groups[key] = g
		}
		g.pids[e.PID] = true
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []alert.Finding
	for _, k := range keys {
		g := groups[k]
		var pids []int
		for p := range g.pids {
			pids = append(pids, int(p))
		}
		sort.Ints(pids)
		shown := pids
		if len(shown) > 10 {
			shown = shown[:10]
		}
		text := fmt.Sprintf("%d task processes of %s on %s %s (pids %s)", len(pids), jobText(j), g.host,
			analysis.LostWhat(g.kind), strings.Trim(fmt.Sprint(shown), "[]"))
		out = append(out, alert.Finding{Alert: g.name, Heuristic: "lost_processes", Severity: sev[g.kind], Host: g.host,
			Summary: text, Description: text + ": they hold memory and CPU outside the scheduler's control. " +
				"The agent ends them with --reap-orphans; the host's page lists them."})
	}
	return out
}

// jobText names a job in a summary.
func jobText(j analysedJob) string {
	if j.Name == "" {
		return j.ID
	}
	name := j.Name
	if len(name) > 80 {
		name = strings.ToValidUTF8(name[:80], "") + "…"
	}
	return j.ID + " (" + name + ")"
}

// firstSentence is a message's first sentence ("." followed by a space or
// its end).
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}
