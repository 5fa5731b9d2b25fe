package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/taskscope/taskscope/internal/flame"
	"github.com/taskscope/taskscope/internal/profiling"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// WithProfiles serves the attempts' stack profiles, asked for through
// ctl (nil: the server takes none; the profiles the store has are still
// listed).
func (a *API) WithProfiles(ctl *profiling.Control) *API {
	a.profiles = ctl
	return a
}

func (a *API) registerProfiles(route func(string, http.HandlerFunc)) {
	if _, ok := a.st.(store.ProfileStore); !ok {
		return
	}
	route("GET /api/v1/jobs/{job}/attempts/{attempt}/profiles", a.listProfiles)
	route("POST /api/v1/jobs/{job}/attempts/{attempt}/profiles", a.requestProfile)
	route("GET /api/v1/jobs/{job}/attempts/{attempt}/profiles/{id}", a.profile)
}

// ProfileList is an attempt's profiles, and whether the reader may ask for
// one now.
type ProfileList struct {
	Profiles []store.ProfileInfo `json:"profiles"`
	// MayRequest: the reader may ask for a profile of the attempt now (an
	// operator or the job's owner, profiles on demand on for its node,
	// the attempt running); else Why says why not.
	MayRequest bool               `json:"may_request"`
	Why        string             `json:"why,omitempty"`
	Settings   profiling.Settings `json:"settings"`
}

// mayRequest says whether r's reader may ask for a profile of d now ("":
// yes), and the status to answer if not.
func (a *API) mayRequest(r *http.Request, d *store.AttemptDetail) (int, string) {
	id := reader(r)
	switch {
	case a.profiles == nil:
		return http.StatusConflict, "this server takes no profiles"
	case !id.Operator && (id.User == "" || id.User != d.User):
		return http.StatusForbidden, "only operators and the job's owner may ask for a profile"
	case !a.profiles.Settings().OnDemand:
		return http.StatusConflict, "profiles on demand are off on this server"
	case a.profiles.HostOff(d.Host):
		return http.StatusConflict, "profiles are off on node " + d.Host
	case d.State != store.StateRunning:
		return http.StatusConflict, "the attempt is not running"
	}
	return 0, ""
}

func (a *API) listProfiles(w http.ResponseWriter, r *http.Request) {
	d, err := a.attemptOf(r)
	if err != nil {
		fail(w, err)
		return
	}
	ps, err := a.st.(store.ProfileStore).Profiles(r.Context(), d.AttemptID)
	if err != nil {
		fail(w, err)
		return
	}
	l := ProfileList{Profiles: ps}
	if ps == nil {
		l.Profiles = []store.ProfileInfo{}
	}
	if a.profiles != nil {
		l.Settings = a.profiles.Settings()
	}
	_, l.Why = a.mayRequest(r, d)
	l.MayRequest = l.Why == ""
	writeJSON(w, http.StatusOK, l)
}

// ProfileAsk is the body of POST .../profiles (both optional).
type ProfileAsk struct {
	WindowS    float64 `json:"window_s"`
	IntervalMs int64   `json:"interval_ms"`
}

// requestProfile asks the attempt's node for a profile of its JVM. The
// body is JSON (a form cannot post it from another site), and who asked
// is logged and kept with the request.
func (a *API) requestProfile(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, Error{"the body must be JSON (Content-Type: application/json)"})
		return
	}
	var ask ProfileAsk
	body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &ask)
	}
	if err != nil {
		fail(w, bad("cannot read the request: %v", err))
		return
	}
	if ask.WindowS < 0 || ask.WindowS > profiling.MaxWindow.Seconds() || ask.IntervalMs < 0 || ask.IntervalMs > 60_000 {
		fail(w, bad("window_s must be 0 to %.0f, interval_ms 0 to 60000", profiling.MaxWindow.Seconds()))
		return
	}
	d, err := a.attemptOf(r)
	if err != nil {
		fail(w, err)
		return
	}
	if code, why := a.mayRequest(r, d); code != 0 {
		writeJSON(w, code, Error{why})
		return
	}
	who := reader(r).User
	if who == "" {
		who = "anyone (no login)"
	}
	req, err := a.profiles.Request(r.Context(), who, d, time.Duration(ask.WindowS*float64(time.Second)),
		time.Duration(ask.IntervalMs)*time.Millisecond)
	switch {
	case errors.Is(err, profiling.ErrOff), errors.Is(err, profiling.ErrNotRunning), errors.Is(err, profiling.ErrPending):
		writeJSON(w, http.StatusConflict, Error{err.Error()})
	case err != nil:
		fail(w, err)
	default:
		writeJSON(w, http.StatusAccepted, store.ProfileOf(&req, nil, 0))
	}
}

// ProfileView is one profile for the attempt's page: its trees on a CPU
// and waiting, its hottest frames, and, for a straggler's, its baseline
// (the sibling's over the same window) and the differential trees.
type ProfileView struct {
	Profile  store.ProfileInfo        `json:"profile"`
	CPU      *flame.Node              `json:"cpu,omitempty"`
	Wait     *flame.Node              `json:"wait,omitempty"`
	Hottest  map[string][]flame.Frame `json:"hottest,omitempty"`
	Baseline *store.ProfileInfo       `json:"baseline,omitempty"`
	DiffCPU  *flame.Node              `json:"diff_cpu,omitempty"`
	DiffWait *flame.Node              `json:"diff_wait,omitempty"`
	// More are the frames this JVM spent more time in than the baseline's,
	// on a CPU and waiting, most first.
	More map[string][]flame.Frame `json:"more,omitempty"`
}

// hottestFrames is how many of them a view lists.
const hottestFrames = 15

func (a *API) profile(w http.ResponseWriter, r *http.Request) {
	d, err := a.attemptOf(r)
	if err != nil {
		fail(w, err)
		return
	}
	q := r.URL.Query()
	format := q.Get("format")
	if format != "" && format != "json" && format != "pprof" && format != "collapsed" {
		fail(w, bad("format must be json, pprof or collapsed"))
		return
	}
	view, err := flame.ParseView(q.Get("view"))
	if err != nil {
		fail(w, bad("%v", err))
		return
	}
	ps := a.st.(store.ProfileStore)
	info, data, err := ps.ProfileData(r.Context(), d.AttemptID, r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	var p *wire.Profile
	if data != nil {
		if p, err = wire.UnmarshalProfile(data, wire.DefaultLimits); err != nil {
			fail(w, fmt.Errorf("profile %s is stored broken: %w", info.ID, err))
			return
		}
	}
	if format == "pprof" || format == "collapsed" {
		if p == nil || len(p.Stacks) == 0 {
			fail(w, fmt.Errorf("profile %s has no stacks (%s): %w", info.ID, info.Status, store.ErrNotFound))
			return
		}
		name := fmt.Sprintf("%s-%s", d.AttemptID, info.ID)
		if format == "pprof" {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.pb.gz"`)
			flame.WritePProf(w, p)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+"-"+string(view)+`.collapsed"`)
		flame.Collapsed(w, p, view)
		return
	}
	v := ProfileView{Profile: *info}
	if p != nil {
		v.CPU, v.Wait = flame.Tree(p, flame.CPU), flame.Tree(p, flame.Wait)
		v.Hottest = map[string][]flame.Frame{"cpu": flame.Hottest(p, flame.CPU, hottestFrames), "wait": flame.Hottest(p, flame.Wait, hottestFrames)}
	}
	if info.Baseline != "" && info.BaselineAttempt != "" {
		if base, err := a.baseline(r, d, info); err != nil {
			fail(w, err)
			return
		} else if base != nil {
			v.Baseline = &base.info
			if p != nil && base.p != nil {
				v.DiffCPU, v.DiffWait = flame.Diff(p, base.p, flame.CPU), flame.Diff(p, base.p, flame.Wait)
				v.More = map[string][]flame.Frame{"cpu": flame.More(p, base.p, flame.CPU, hottestFrames),
					"wait": flame.More(p, base.p, flame.Wait, hottestFrames)}
			}
		}
	}
	writeJSON(w, http.StatusOK, v)
}

type baselineProfile struct {
	info store.ProfileInfo
	p    *wire.Profile
}

// baseline reads a straggler's baseline: a profile of another attempt of
// the same job (which whoever sees the job sees), nil if it is not there.
func (a *API) baseline(r *http.Request, d *store.AttemptDetail, info *store.ProfileInfo) (*baselineProfile, error) {
	sib, err := a.attemptLife(r.Context(), info.BaselineAttempt)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if sib.JobID != d.JobID {
		return nil, nil
	}
	bi, data, err := a.st.(store.ProfileStore).ProfileData(r.Context(), info.BaselineAttempt, info.Baseline)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := &baselineProfile{info: *bi}
	if data != nil {
		if out.p, err = wire.UnmarshalProfile(data, wire.DefaultLimits); err != nil {
			return nil, fmt.Errorf("profile %s is stored broken: %w", bi.ID, err)
		}
	}
	return out, nil
}
