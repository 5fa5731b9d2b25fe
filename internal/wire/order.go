package wire

import "fmt"

// ProfileOrder is a server's request that an agent profile one of its
// node's JVMs, carried in the JSON answer to one of the agent's own
// batches (Answer): the server needs no way into the node, and the agent
// opens no port. An agent answers every order it takes with a Profile in
// a later batch (failed, with the reason, when it will not or cannot
// profile), and takes an order once however often it is sent (by ID).
type ProfileOrder struct {
	ID        string `json:"id"` // the profile's id (ValidProfileID)
	AttemptID string `json:"attempt_id"`
	PID       int32  `json:"pid"`
	// StartMs is the process's start (unix ms, as the agent reported
	// it): a pid that is another process's by now is not profiled.
	StartMs    int64  `json:"start_ms,omitempty"`
	WindowMs   int64  `json:"window_ms"`
	IntervalMs int64  `json:"interval_ms"`
	Trigger    string `json:"trigger"` // "request" (someone asked) or automatic ("straggler", "sibling")
	// Group: orders of one group are profiled together, over the same
	// window (a straggler and the sibling it is compared with, when both
	// are on the node).
	Group string `json:"group,omitempty"`
}

// Automatic reports whether the order was made by the server on its own
// (not asked for by someone).
func (o *ProfileOrder) Automatic() bool { return o.Trigger != "request" }

// Check reports what makes an order unusable.
func (o *ProfileOrder) Check() error {
	switch {
	case !ValidProfileID(o.ID):
		return fmt.Errorf("order id %.40q: a profile id is 1 to %d of [A-Za-z0-9._:-]", o.ID, MaxProfileIDBytes)
	case o.AttemptID == "" || len(o.AttemptID) > 256:
		return fmt.Errorf("order %s: attempt_id is required, at most 256 bytes", o.ID)
	case o.PID <= 0:
		return fmt.Errorf("order %s: pid %d", o.ID, o.PID)
	case o.WindowMs < 0 || o.IntervalMs < 0 || o.StartMs < 0 || o.StartMs > MaxTimeMs:
		return fmt.Errorf("order %s: negative window, interval or start", o.ID)
	case len(o.Group) > MaxProfileIDBytes || len(o.Trigger) > 64:
		return fmt.Errorf("order %s: group or trigger too long", o.ID)
	}
	return nil
}

// MaxOrders bounds the orders of one answer (an agent reads no more).
const MaxOrders = 64

// Answer is the JSON body of the server's answer to a batch
// (docs/wire.md, "The answer"). Fields an agent does not know it ignores.
type Answer struct {
	Status  string `json:"status"` // stored, duplicate, error
	Samples int    `json:"samples,omitempty"`
	// A list's (ListContentType): its batches, and those of them stored
	// before.
	Batches    int    `json:"batches,omitempty"`
	Duplicates int    `json:"duplicates,omitempty"`
	Error      string `json:"error,omitempty"`
	// Profiles are the server's orders for the agent's node.
	Profiles []ProfileOrder `json:"profiles,omitempty"`
}
