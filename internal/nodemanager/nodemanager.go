// Package nodemanager asks a YARN NodeManager which containers and
// applications it still knows, through its REST API (NMWebServices):
//
//	GET http://<yarn.nodemanager.webapp.address>/ws/v1/node/containers
//	  {"containers":{"container":[{"id":"container_...","state":"RUNNING",...}]}}
//	  ({"containers":{}} or {"containers":null} when there is none)
//	GET http://<yarn.nodemanager.webapp.address>/ws/v1/node/apps
//	  {"apps":{"app":[{"id":"application_...","state":"RUNNING","containerids":[...]}]}}
//
// The agent uses it to tell task processes whose container the NodeManager
// has forgotten (it lost track of them, or restarted) from live ones, and
// to learn how a container ended: its exitCode (YARN's ContainerExitStatus,
// -104 for a container killed over its physical memory, ..., or the exit
// code) and diagnostics, listed for a while after it completed (until the
// ResourceManager acknowledges it), and the exit-code file the launch
// script writes (ExitCodeFile). Polls run in their own goroutine (Watcher),
// never in the sampling loop.
//
// On a secure cluster the NodeManager serves HTTPS only
// (yarn.http.policy=HTTPS_ONLY, at yarn.nodemanager.webapp.https.address)
// and demands Kerberos (SPNEGO): ReadEndpoint reads where and how from its
// conf dir, and Client speaks both (client.go, kerberos.go).
package nodemanager

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Container is one container as the NodeManager lists it.
type Container struct {
	ID    string `json:"id"`
	State string `json:"state"`
	User  string `json:"user"`
	// ExitCode is the container's exit status as the NodeManager has it
	// (nil when the answer has none): Invalid while it runs, YARN's
	// ContainerExitStatus once it was killed (-104, -103, -105, ...), or
	// its exit code once it exited.
	ExitCode    *int32 `json:"exitCode"`
	Diagnostics string `json:"diagnostics"`
	// TotalMemoryNeededMB is the memory allocated to the container (its
	// Resource's, in MB), TotalVCoresNeeded its virtual cores.
	TotalMemoryNeededMB int64 `json:"totalMemoryNeededMB"`
	TotalVCoresNeeded   int64 `json:"totalVCoresNeeded"`
}

// Invalid is the exitCode of a container that has not ended
// (ContainerExitStatus.INVALID).
const Invalid = -1000

// Exit is how a container ended, as its NodeManager says.
type Exit struct {
	Code        int32
	Diagnostics string
	State       string
}

// maxDiagnostics bounds the diagnostics kept of a container (a pmem
// kill's dump the container's process tree).
const maxDiagnostics = 4096

// App is one application as the NodeManager lists it.
type App struct {
	ID           string   `json:"id"`
	State        string   `json:"state"`
	ContainerIDs []string `json:"containerids"`
}

// Listing is what one poll of a NodeManager found.
type Listing struct {
	URL        string
	At         time.Time         // when the poll began: containers started after it cannot be in it
	Containers map[string]string // id -> state
	Apps       map[string]string // id -> state; nil if the apps could not be listed
	Polls      uint64            // successful polls so far
	// Exits are the containers listed with an exit status (not Invalid):
	// completed ones, and ones being killed.
	Exits map[string]Exit
	// Memory is the memory allocated to each container listed with one
	// (totalMemoryNeededMB), in MB; VCores its virtual cores
	// (totalVCoresNeeded).
	Memory map[string]int64
	VCores map[string]int64
}

// Watcher polls one NodeManager in the background. Its methods are safe
// for concurrent use.
type Watcher struct {
	every  time.Duration
	client *Client

	mu     sync.Mutex
	ep     Endpoint
	last   *Listing
	prev   *Listing
	polls  uint64
	errs   uint64
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// NewWatcher returns a stopped watcher that polls every interval (10 s
// when 0) with client (nil: a plain one) once Start is called.
func NewWatcher(every time.Duration, client *Client) *Watcher {
	if every <= 0 {
		every = 10 * time.Second
	}
	if client == nil {
		client, _ = NewClient(ClientConfig{})
	}
	return &Watcher{every: every, client: client, wake: make(chan struct{}, 1)}
}

// SetURL points the watcher at the NodeManager at url ("http://host:port").
func (w *Watcher) SetURL(url string) { w.SetEndpoint(Endpoint{URL: url}) }

// SetEndpoint points the watcher at a NodeManager; a new one forgets what
// the old one said and polls at once.
func (w *Watcher) SetEndpoint(ep Endpoint) {
	w.mu.Lock()
	if ep == w.ep {
		w.mu.Unlock()
		return
	}
	if w.ep.URL != "" && w.ep.URL != ep.URL {
		w.client.Forget(w.ep.URL)
	}
	w.ep, w.last, w.prev = ep, nil, nil
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// URL is the NodeManager watched, if any.
func (w *Watcher) URL() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ep.URL
}

// Latest returns the last two successful listings (the newest first); nil
// when there are none yet.
func (w *Watcher) Latest() (last, prev *Listing) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.prev
}

// PollSoon asks for a poll now, beside the regular ones (a container just
// ended: its exit status is listed for a short while).
func (w *Watcher) PollSoon() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start polls until Stop.
func (w *Watcher) Start() { w.StartContext(context.Background()) }

// StartContext polls until ctx is done or Stop.
func (w *Watcher) StartContext(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.every)
		defer t.Stop()
		for {
			w.PollOnce(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-w.wake:
			}
		}
	}()
}

// Done is closed when polling has stopped (its context is done, or Stop);
// nil before Start.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Stop stops polling; the client forgets the NodeManager.
func (w *Watcher) Stop() {
	if w.cancel != nil {
		w.cancel()
		<-w.done
		w.cancel = nil
	}
	w.client.Forget(w.URL())
}

// PollOnce polls now (Start does it in the background).
func (w *Watcher) PollOnce(ctx context.Context) {
	w.mu.Lock()
	ep := w.ep
	w.mu.Unlock()
	if ep.URL == "" {
		return
	}
	l := &Listing{URL: ep.URL, At: time.Now()}
	cs, err := w.client.Containers(ctx, ep)
	if err != nil {
		if ctx.Err() == nil {
			w.countErr()
			w.client.note(ep, err, 0)
		}
		return // unreadable now: keep what it said before, and judge nothing new
	}
	l.Containers = make(map[string]string, len(cs))
	for _, c := range cs {
		l.Containers[c.ID] = c.State
		if c.TotalMemoryNeededMB > 0 {
			if l.Memory == nil {
				l.Memory = map[string]int64{}
			}
			l.Memory[c.ID] = c.TotalMemoryNeededMB
		}
		if c.TotalVCoresNeeded > 0 {
			if l.VCores == nil {
				l.VCores = map[string]int64{}
			}
			l.VCores[c.ID] = c.TotalVCoresNeeded
		}
		if c.ExitCode != nil && *c.ExitCode != Invalid {
			if l.Exits == nil {
				l.Exits = map[string]Exit{}
			}
			d := c.Diagnostics
			if len(d) > maxDiagnostics {
				d = strings.ToValidUTF8(d[:maxDiagnostics], "")
			}
			l.Exits[c.ID] = Exit{Code: *c.ExitCode, Diagnostics: d, State: c.State}
		}
	}
	apps, err := w.client.Apps(ctx, ep)
	if err == nil {
		l.Apps = make(map[string]string, len(apps))
		for _, a := range apps {
			l.Apps[a.ID] = a.State
		}
	} else if ctx.Err() == nil {
		w.countErr()
	}
	if ctx.Err() == nil {
		w.client.note(ep, err, len(cs))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep != ep {
		return
	}
	w.polls++
	l.Polls = w.polls
	w.prev, w.last = w.last, l
}

func (w *Watcher) countErr() {
	w.mu.Lock()
	w.errs++
	w.mu.Unlock()
}

// Errors counts the polls that failed (the NodeManager did not answer, or
// not with a listing), cumulative.
func (w *Watcher) Errors() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

// ExitCodeFile is where a NodeManager's container launch writes a
// container's exit code (ContainerLaunch: the pid file's path with
// ".exitcode"): <local dir>/nmPrivate/<app>/<container>/<container>.pid.exitcode,
// in one of yarn.nodemanager.local-dirs. The NodeManager deletes it (with
// the pid file) once it has read it: it can be read for a moment only.
func ExitCodeFile(localDir, appID, containerID string) string {
	return filepath.Join(localDir, "nmPrivate", appID, containerID, containerID+".pid.exitcode")
}

// LocalDirs are the NodeManager's local dirs as a container's LOCAL_DIRS
// names them (<local dir>/usercache/<user>/appcache/<app>, comma
// separated, absolute); those not of that shape are left out.
func LocalDirs(localDirsEnv string) []string {
	var out []string
	for _, d := range strings.Split(localDirsEnv, ",") {
		d = filepath.Clean(strings.TrimSpace(d))
		if !filepath.IsAbs(d) {
			continue
		}
		app := filepath.Base(d)
		base := filepath.Dir(d)
		if !strings.HasPrefix(app, "application_") || filepath.Base(base) != "appcache" {
			continue
		}
		user := filepath.Dir(base)
		if filepath.Base(filepath.Dir(user)) != "usercache" {
			continue
		}
		out = append(out, filepath.Dir(filepath.Dir(user)))
	}
	return out
}

// ReadExitCode reads an exit-code file: the number the launch script
// wrote ($? of the container's root: its exit code, or 128 + the signal
// that ended it).
func ReadExitCode(path string) (int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return ParseExitCode(b)
}

// ParseExitCode parses what an exit-code file holds: a decimal number and
// a newline.
func ParseExitCode(b []byte) (int32, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("not an exit code: %.32q", s)
	}
	return int32(v), nil
}
