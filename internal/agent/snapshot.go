package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/collect"
	"github.com/taskscope/taskscope/internal/nodemanager"
	"github.com/taskscope/taskscope/internal/procfs"
	"github.com/taskscope/taskscope/internal/redact"
	"github.com/taskscope/taskscope/internal/tracker"
	"github.com/taskscope/taskscope/internal/wire"
)

// Snapshot is the JSON of `taskscope-agent snapshot --json` (CONTRACT.md).
type Snapshot struct {
	Host    string            `json:"host"`
	Time    string            `json:"time"`
	Jobs    []SnapshotJob     `json:"jobs"`
	Orphans []SnapshotProcess `json:"orphans"`
	// NodeManagers are the node's NodeManagers and how they answered the
	// agent; Kerberos the agent's credentials (with --nm-keytab).
	NodeManagers []nodemanager.EndpointStatus `json:"nodemanagers"`
	Kerberos     *nodemanager.KerberosStatus  `json:"kerberos,omitempty"`
}

// SnapshotJob is one job.
type SnapshotJob struct {
	JobID     string            `json:"job_id"`
	Framework string            `json:"framework"`
	Attempts  []SnapshotAttempt `json:"attempts"`
}

// SnapshotAttempt is one attempt.
type SnapshotAttempt struct {
	AttemptID   string            `json:"attempt_id"`
	ContainerID string            `json:"container_id"`
	Type        string            `json:"type"`
	CPUMs       int64             `json:"cpu_ms"`
	MemoryMB    int64             `json:"memory_mb,omitempty"`
	JobName     string            `json:"job_name,omitempty"`
	User        string            `json:"user,omitempty"`
	Queue       string            `json:"queue,omitempty"`
	Orphaned    bool              `json:"orphaned,omitempty"`
	Processes   []SnapshotProcess `json:"processes"`
}

// SnapshotProcess is one process.
type SnapshotProcess struct {
	PID        int32    `json:"pid"`
	PPID       int32    `json:"ppid"`
	StartTime  string   `json:"start_time"`
	Cmdline    string   `json:"cmdline"`
	Role       string   `json:"role"`
	CPUUserMs  int64    `json:"cpu_user_ms"`
	CPUSysMs   int64    `json:"cpu_sys_ms"`
	RSSBytes   int64    `json:"rss_bytes"`
	VMSBytes   int64    `json:"vms_bytes"`
	Threads    int64    `json:"threads"`
	CPUPercent *float64 `json:"cpu_percent,omitempty"`
	PSSBytes   *int64   `json:"pss_bytes,omitempty"`
	ReadBytes  *int64   `json:"read_bytes,omitempty"`
	WriteBytes *int64   `json:"write_bytes,omitempty"`
	AttemptID  string   `json:"attempt_id,omitempty"` // orphans only
	User       string   `json:"user,omitempty"`
}

// SnapshotConfig is what `taskscope-agent snapshot` looks at.
type SnapshotConfig struct {
	ProcFS string
	Host   string // default: the hostname
	// Scope limits it to one daemon's tasks.
	Scope tracker.Scope
	// Interval is the time between the two samples (0: one sample).
	Interval time.Duration
	// Redact masks secrets (nil: redact.Default()).
	Redact *redact.Masker
	// NM is how NodeManagers are reached; NMURL names one (default: the
	// one found on the node, at the address of its conf dir).
	NM    nodemanager.ClientConfig
	NMURL string
}

// TakeSnapshot samples twice, Interval apart, and returns what it saw (of
// the scope's daemon only, when it names one), with the values of secrets
// masked, and how the node's NodeManagers answered a poll.
func TakeSnapshot(cfg SnapshotConfig) (*Snapshot, error) {
	m, host := cfg.Redact, cfg.Host
	if m == nil {
		m = redact.Default()
	}
	fs := procfs.NewFS(cfg.ProcFS)
	if host == "" {
		host, _ = os.Hostname()
	}
	nmc, err := nodemanager.NewClient(cfg.NM)
	if err != nil {
		return nil, fmt.Errorf("cannot make the NodeManager client: %w", err)
	}
	defer nmc.Close()
	tr, err := tracker.New(tracker.Config{FS: &fs, Host: host, Scope: cfg.Scope, Collect: collect.Config{FS: &fs, PSSEvery: 1, JVM: true},
		Lost: tracker.LostConfig{Enabled: true, NMURL: cfg.NMURL, NMPoll: time.Hour, NMClient: nmc}})
	if err != nil {
		return nil, fmt.Errorf("cannot take a snapshot: %w", err)
	}
	defer tr.Close()
	if err := tr.Tick(time.Now(), tracker.NopSink{}); err != nil {
		return nil, fmt.Errorf("cannot take a snapshot: %w", err)
	}
	if cfg.Interval > 0 {
		time.Sleep(cfg.Interval)
		if err := tr.Tick(time.Now(), tracker.NopSink{}); err != nil {
			return nil, fmt.Errorf("cannot take a snapshot's second sample: %w", err)
		}
	}
	nms := waitNMPolls(tr, nmc)
	now := time.Now()
	s := &Snapshot{Host: host, Time: now.UTC().Format(time.RFC3339), Jobs: []SnapshotJob{}, Orphans: []SnapshotProcess{},
		NodeManagers: nms, Kerberos: nmc.Kerberos()}
	for _, j := range tr.View() {
		sj := SnapshotJob{JobID: j.JobID, Framework: j.Framework}
		for _, a := range j.Attempts {
			sa := SnapshotAttempt{AttemptID: a.AttemptID, ContainerID: a.ContainerID, Type: a.Type, CPUMs: a.CPUMs,
				MemoryMB: a.Info.MemoryMB, JobName: m.String(a.Info.JobName), User: a.Info.User, Queue: a.Info.Queue, Orphaned: a.Orphaned}
			for _, p := range a.Processes {
				sp := snapshotProcess(p)
				sp.Cmdline = m.String(sp.Cmdline)
				sa.Processes = append(sa.Processes, sp)
				if a.Orphaned {
					sp.AttemptID = a.AttemptID
					s.Orphans = append(s.Orphans, sp)
				}
			}
			sj.Attempts = append(sj.Attempts, sa)
		}
		s.Jobs = append(s.Jobs, sj)
	}
	return s, nil
}

// nmPollWait bounds the wait for the NodeManagers' first polls (a
// request's timeout, twice: SPNEGO asks again).
const nmPollWait = 11 * time.Second

// waitNMPolls waits until every NodeManager the tracker found was polled
// once (their pollers start at the first tick), and returns how each
// answered.
func waitNMPolls(tr *tracker.Tracker, c *nodemanager.Client) []nodemanager.EndpointStatus {
	urls := tr.NodeManagers()
	deadline := time.Now().Add(nmPollWait)
	for {
		st := c.Status()
		byURL := map[string]nodemanager.EndpointStatus{}
		for _, s := range st {
			byURL[s.URL] = s
		}
		out := []nodemanager.EndpointStatus{}
		for _, u := range urls {
			s, ok := byURL[u]
			if !ok || (!s.OK && s.Error == "") {
				break
			}
			out = append(out, s)
		}
		if len(out) == len(urls) {
			return out
		}
		if time.Now().After(deadline) {
			for _, u := range urls[len(out):] {
				out = append(out, nodemanager.EndpointStatus{URL: u, Error: "no answer yet"})
			}
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func snapshotProcess(p tracker.ProcessView) SnapshotProcess {
	sp := SnapshotProcess{PID: p.PID, PPID: p.PPID, StartTime: time.UnixMilli(p.StartMs).UTC().Format(time.RFC3339Nano),
		Cmdline: p.Cmdline, Role: p.Role, User: p.User,
		CPUUserMs: p.Values[wire.CPUUserMs], CPUSysMs: p.Values[wire.CPUSysMs], RSSBytes: p.Values[wire.RSSBytes],
		VMSBytes: p.Values[wire.VMSBytes], Threads: p.Values[wire.Threads]}
	if p.CPUPercent >= 0 {
		c := p.CPUPercent
		sp.CPUPercent = &c
	}
	opt := func(name string) *int64 {
		if v, ok := p.Values[name]; ok {
			return &v
		}
		return nil
	}
	sp.PSSBytes, sp.ReadBytes, sp.WriteBytes = opt(wire.PSSBytes), opt(wire.ReadBytes), opt(wire.WriteBytes)
	return sp
}

// WriteJSON writes the snapshot as indented JSON.
func (s *Snapshot) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(s)
}

// WriteText writes the snapshot as a tree: job, attempt, processes.
func (s *Snapshot) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "host %s at %s: %d jobs\n", s.Host, s.Time, len(s.Jobs))
	for _, j := range s.Jobs {
		fmt.Fprintf(w, "%s (%s)\n", j.JobID, j.Framework)
		for _, a := range j.Attempts {
			extra := ""
			if a.MemoryMB > 0 {
				extra = fmt.Sprintf(" limit %d MB", a.MemoryMB)
			}
			if a.Orphaned {
				extra += " ORPHANED"
			}
			fmt.Fprintf(w, "  %s %s cpu %.1fs%s\n", a.AttemptID, a.Type, float64(a.CPUMs)/1000, extra)
			for _, p := range a.Processes {
				pct := "    -"
				if p.CPUPercent != nil {
					pct = fmt.Sprintf("%5.1f", *p.CPUPercent)
				}
				fmt.Fprintf(w, "    %7d %-15s cpu%% %s rss %7.1f MB thr %3d  %s\n", p.PID, p.Role, pct,
					float64(p.RSSBytes)/(1<<20), p.Threads, shorten(p.Cmdline, 100))
			}
		}
	}
	if len(s.Orphans) > 0 {
		fmt.Fprintf(w, "orphaned task processes: %d\n", len(s.Orphans))
	}
	for _, nm := range s.NodeManagers {
		how := []string{}
		if nm.Host != "" {
			how = append(how, nm.Host)
		}
		if nm.TLS {
			how = append(how, "HTTPS")
		}
		if nm.Kerberos {
			how = append(how, "SPNEGO")
		}
		desc := nm.URL
		if len(how) > 0 {
			desc += " (" + strings.Join(how, ", ") + ")"
		}
		if nm.OK {
			fmt.Fprintf(w, "NodeManager %s: answers, %d containers\n", desc, nm.Containers)
		} else {
			fmt.Fprintf(w, "NodeManager %s: FAILING (%s): %s\n", desc, nm.Cause, nm.Error)
		}
	}
	if k := s.Kerberos; k != nil {
		valid := "no ticket"
		if !k.ValidUntil.IsZero() {
			valid = "ticket valid until " + k.ValidUntil.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "Kerberos: %s (keytab %s), %s\n", k.Principal, k.Keytab, valid)
		if k.RenewError != "" {
			fmt.Fprintf(w, "  renewal failing: %s\n", k.RenewError)
		}
	}
	return nil
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
