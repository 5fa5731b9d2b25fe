package tracker

import (
	"context"
	"sort"
	"time"

	"github.com/taskscope/taskscope/internal/nodemanager"
	orphanreaper "github.com/taskscope/taskscope/internal/reaper"
	"github.com/taskscope/taskscope/internal/wire"
)

// ContainerLister is what the tracker needs of a NodeManager: its last
// two listings of containers and applications (the newest first; nil
// before any), and a poll soon, beside the regular ones (a container just
// ended: its exit status is listed for a short while). nodemanager.Watcher
// is one.
type ContainerLister interface {
	Latest() (last, prev *nodemanager.Listing)
	PollSoon()
}

// Reaper ends the processes of lost units: given every process to end now
// (all of them at each call), it signals what is due and says what it did
// (package reaper's Reaper).
type Reaper interface {
	Update(now time.Time, targets []orphanreaper.Target) []wire.Event
}

// poller is a ContainerLister that polls in the background until stopped
// or its context is done, and counts the polls that failed.
type poller interface {
	ContainerLister
	URL() string
	Errors() uint64
	Stop()
}

// nmPollers polls the node's NodeManagers: the one LostConfig.NMURL names
// (then no other), else one per NodeManager process found, at the web
// address of its yarn-site.xml. Each poller stops with the pollers'
// context (Tracker.Close cancels it, as does LostConfig.Context).
type nmPollers struct {
	ctx     context.Context
	cancel  context.CancelFunc
	every   time.Duration
	client  *nodemanager.Client
	static  poller
	byPID   map[int32]poller
	stopped uint64 // errors of the pollers stopped since
	// start makes a poller of ep (tests replace it).
	start func(ctx context.Context, ep nodemanager.Endpoint) poller
}

func newNMPollers(c *LostConfig) *nmPollers {
	parent := c.Context
	if parent == nil {
		parent = context.Background()
	}
	n := &nmPollers{every: c.NMPoll, client: c.NMClient, byPID: map[int32]poller{}}
	n.ctx, n.cancel = context.WithCancel(parent)
	n.start = func(ctx context.Context, ep nodemanager.Endpoint) poller {
		w := nodemanager.NewWatcher(n.every, n.client)
		w.SetEndpoint(ep)
		w.StartContext(ctx)
		return w
	}
	if !c.NoNM && c.NMURL != "" {
		n.static = n.start(n.ctx, nodemanager.Endpoint{URL: c.NMURL})
	}
	return n
}

// watch polls the NodeManager pid at ep, unless a URL was configured or
// it is polled already.
func (n *nmPollers) watch(pid int32, ep nodemanager.Endpoint) {
	if n.static != nil || ep.URL == "" || n.byPID[pid] != nil {
		return
	}
	n.byPID[pid] = n.start(n.ctx, ep)
}

// keep stops the pollers of the NodeManagers that are gone.
func (n *nmPollers) keep(alive func(pid int32) bool) {
	for pid, p := range n.byPID {
		if !alive(pid) {
			p.Stop()
			n.stopped += p.Errors()
			delete(n.byPID, pid)
		}
	}
}

// forLauncher is the NodeManager of a unit launched by pid: the one
// configured, that process's, else the node's only one (nil if none).
func (n *nmPollers) forLauncher(pid int32) ContainerLister {
	if n.static != nil {
		return n.static
	}
	if p := n.byPID[pid]; p != nil {
		return p
	}
	if len(n.byPID) == 1 {
		for _, p := range n.byPID {
			return p
		}
	}
	return nil
}

// all are every NodeManager polled.
func (n *nmPollers) all() []ContainerLister {
	var out []ContainerLister
	if n.static != nil {
		out = append(out, n.static)
	}
	for _, p := range n.byPID {
		out = append(out, p)
	}
	return out
}

// urls are the NodeManagers polled.
func (n *nmPollers) urls() []string {
	var out []string
	if n.static != nil {
		out = append(out, n.static.URL())
	}
	for _, p := range n.byPID {
		out = append(out, p.URL())
	}
	sort.Strings(out)
	return out
}

// NodeManagers are the URLs of the NodeManagers the tracker polls (none
// before the lost checks first ran).
func (t *Tracker) NodeManagers() []string {
	if t.lost == nil {
		return nil
	}
	return t.lost.nm.urls()
}

// errors counts the failed polls, cumulative.
func (n *nmPollers) errors() uint64 {
	e := n.stopped
	if n.static != nil {
		e += n.static.Errors()
	}
	for _, p := range n.byPID {
		e += p.Errors()
	}
	return e
}

// stop stops every poller.
func (n *nmPollers) stop() {
	n.cancel()
	if n.static != nil {
		n.static.Stop()
	}
	for _, p := range n.byPID {
		p.Stop()
	}
}
