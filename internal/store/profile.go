package store

import (
	"context"
	"sort"

	"github.com/taskscope/taskscope/internal/wire"
)

// Profiles: a stack profile of a task JVM is asked for (a request: who, of
// which attempt's JVM, on which host, how long) and then taken by the
// node's agent, which sends it in a batch (wire.Profile). A store keeps
// both: the request when it is made (RequestProfile), the profile when its
// batch is stored (Append); what the API shows of one is the request with
// its profile's outcome (ProfileInfo, ProfileOf).

// Profile statuses beside those of wire.Profile (complete, partial,
// failed).
const (
	ProfileRequested = "requested" // asked for; the agent's profile has not come yet
	ProfileExpired   = "expired"   // asked for long ago, and no profile came (no agent took the request)
)

// Why a profile was asked for.
const (
	TriggerRequest   = "request"   // someone asked on the attempt's page (RequestedBy)
	TriggerStraggler = "straggler" // the analysis named the attempt a straggler or an outlier while it ran
	TriggerSibling   = "sibling"   // a healthy sibling of such an attempt, for the same window (its Baseline)
)

// ProfileRequest is a request for a profile of one JVM.
type ProfileRequest struct {
	ID          string `json:"id"` // unique; wire.ValidProfileID
	AttemptID   string `json:"attempt_id"`
	Host        string `json:"host"`
	PID         int32  `json:"pid"`
	Process     Key    `json:"process"` // the JVM's process key
	StartMs     int64  `json:"-"`       // the JVM's start (the agent checks the pid is still it)
	Trigger     string `json:"trigger"` // TriggerRequest, TriggerStraggler, TriggerSibling
	RequestedBy string `json:"requested_by,omitempty"`
	Requested   Time   `json:"requested"`
	// Baseline is, for a straggler's profile, the id of its sibling's
	// taken over the same window (the differential's other side), and
	// BaselineAttempt the sibling.
	Baseline        string `json:"baseline,omitempty"`
	BaselineAttempt string `json:"baseline_attempt,omitempty"`
	WindowMs        int64  `json:"window_ms"`
	IntervalMs      int64  `json:"interval_ms"`
}

// ProfileInfo is a profile as the API lists it: its request, and what came
// of it.
type ProfileInfo struct {
	ProfileRequest
	Status     string  `json:"status"` // ProfileRequested, ProfileExpired, or the profile's
	Error      string  `json:"error,omitempty"`
	Start      Time    `json:"start"`
	End        Time    `json:"end"`
	Dumps      int     `json:"dumps"`
	PausedMs   float64 `json:"paused_ms"`
	MaxPauseMs float64 `json:"max_pause_ms"`
	Stacks     int     `json:"stacks"`
	// Bytes is the size of the stored profile.
	Bytes int `json:"bytes"`
}

// ProfileResult is what a store keeps of a profile an agent sent (beside
// its encoding, wire.MarshalProfile): the fields of ProfileInfo it says.
func ProfileResult(host string, p *wire.Profile, size int) ProfileInfo {
	return ProfileInfo{
		ProfileRequest: ProfileRequest{ID: p.ID, AttemptID: p.AttemptID, Host: host, PID: p.PID, Process: Key(p.Process),
			IntervalMs: p.IntervalMs},
		Status: p.Status, Error: p.Error, Start: Time(p.StartMs), End: Time(p.EndMs), Dumps: int(p.Dumps),
		PausedMs: float64(p.PausedUs) / 1000, MaxPauseMs: float64(p.MaxPauseUs) / 1000, Stacks: len(p.Stacks), Bytes: size,
	}
}

// ProfileOf is the profile the API shows of a request (nil if none was
// stored) and of the result its agent sent (nil while none came): the
// request's who, why and what, and the result's outcome. A request with
// no result is ProfileRequested, or ProfileExpired once expireBefore (unix
// ms) is past its time and window.
func ProfileOf(req *ProfileRequest, res *ProfileInfo, expireBefore int64) ProfileInfo {
	var out ProfileInfo
	switch {
	case res != nil:
		out = *res
		if req != nil {
			host, pid, proc := out.Host, out.PID, out.Process
			out.ProfileRequest = *req
			if host != "" {
				out.Host, out.PID, out.Process = host, pid, proc
			}
			if res.IntervalMs > 0 {
				out.IntervalMs = res.IntervalMs
			}
		}
	case req != nil:
		out.ProfileRequest = *req
		out.Status = ProfileRequested
		if int64(req.Requested)+req.WindowMs < expireBefore {
			out.Status = ProfileExpired
		}
	}
	return out
}

// ProfileExpiry is how long after its window a request whose profile has
// not come is taken for lost (the agent answers every request it gets
// with a profile, failed if it could not take one).
const ProfileExpiry = 3 * 60 * 1000

// MergeProfiles pairs an attempt's requests and results by id and returns
// what ProfileOf makes of each, newest first (by request, else start).
func MergeProfiles(reqs []ProfileRequest, results []ProfileInfo, nowMs int64) []ProfileInfo {
	byID := map[string]*ProfileRequest{}
	for i := range reqs {
		byID[reqs[i].ID] = &reqs[i]
	}
	out := make([]ProfileInfo, 0, len(reqs))
	seen := map[string]bool{}
	for i := range results {
		r := &results[i]
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		out = append(out, ProfileOf(byID[r.ID], r, nowMs-ProfileExpiry))
	}
	for i := range reqs {
		if !seen[reqs[i].ID] {
			seen[reqs[i].ID] = true
			out = append(out, ProfileOf(&reqs[i], nil, nowMs-ProfileExpiry))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := max(out[i].Requested, out[i].Start), max(out[j].Requested, out[j].Start)
		if ti != tj {
			return ti > tj
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// ProfileStore is a store that keeps stack profiles (both stores do; a
// store without it has none). Profiles arrive in batches (Append); the
// requests for them are written here.
type ProfileStore interface {
	// RequestProfile stores a request (its id new).
	RequestProfile(ctx context.Context, r ProfileRequest) error
	// Profiles lists an attempt's profiles, requested and taken, newest
	// first (MergeProfiles).
	Profiles(ctx context.Context, attemptID string) ([]ProfileInfo, error)
	// ProfileData returns one of an attempt's profiles and its encoding
	// (wire.MarshalProfile; nil while it is requested); ErrNotFound if
	// the attempt has no profile of that id.
	ProfileData(ctx context.Context, attemptID, id string) (*ProfileInfo, []byte, error)
	// PendingProfiles lists the requests made at or after sinceMs whose
	// profile has not come, oldest first: what the servers hand to the
	// agents.
	PendingProfiles(ctx context.Context, sinceMs int64) ([]ProfileRequest, error)
}
